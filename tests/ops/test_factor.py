"""linalg.cholesky / cholesky_ex / cholesky, linalg.solve_triangular / triangular_solve,
linalg.eigvalsh, linalg.pinv / pinverse, matrix_exp, linalg.qr and linalg.householder_product
against torch: batched, float64, on matrices whose unread triangle holds other values, NaN,
and matrices that are not positive-definite (cholesky_ex's info) or singular.

All were "no converter" in the OpInfo sweep (docs/parity.md).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import crossport
from crossport.errors import DynamicDimError
from crossport.parity.compare import compare_outputs
from crossport.parity.verify import run_keras
from tests.harness import assert_converts, assert_matches_at_sizes
from tests.ops.opcases import Fn, case, inputs

CHOLESKY = ("aten_linalg_cholesky_ex_default",)
CHECKED = CHOLESKY + ("aten__linalg_check_errors_default",)
OLD_CHOLESKY = ("aten_cholesky_default",)
SOLVE_TRIANGULAR = ("aten_linalg_solve_triangular_default",)
TRIANGULAR_SOLVE = ("aten_triangular_solve_default",)
EIGH = ("aten__linalg_eigh_default",)
PINV = ("aten_linalg_pinv_atol_rtol_tensor",)
MATRIX_EXP = ("aten_linalg_matrix_exp_default",)
QR = ("aten_linalg_qr_default",)
HOUSEHOLDER = ("aten_linalg_householder_product_default",)
NAN = float("nan")


def _positive_definite(a):
    """``a a^T + n I`` in its lower triangle, noise in the upper one (which no Cholesky
    reads): a wrong triangle read shows."""
    n = a.shape[-1]
    spd = a @ a.mT + n * torch.eye(n, dtype=a.dtype)
    return torch.tril(spd) + torch.triu(a, 1)


def _positive_definite_upper(a):
    """The same with the noise in the lower triangle (``upper=True`` reads the upper)."""
    return _positive_definite(a).mT


def _triangular(a):
    """A diagonal far from 0 (a well-conditioned triangle); the other triangle random."""
    return a + 4 * torch.eye(a.shape[-1], dtype=a.dtype)


CASES = [
    case("cholesky-lower-upper-batched", Fn(lambda a: (
        torch.linalg.cholesky(_positive_definite(a)),
        torch.linalg.cholesky(_positive_definite_upper(a), upper=True),
        torch.cholesky(_positive_definite(a[0])),
        torch.cholesky(_positive_definite_upper(a[0]), upper=True))),
         [(3, 5, 5)], expect_converters=CHECKED + OLD_CHOLESKY),
    case("cholesky-ex-info-float64", Fn(lambda a: tuple(
        torch.linalg.cholesky_ex(_positive_definite(a.double()))) + tuple(
        torch.linalg.cholesky_ex(_positive_definite_upper(a.double()), upper=True))),
         [(2, 3, 4, 4)], expect_converters=CHOLESKY),
    case("solve-triangular-flags", Fn(lambda a, b: tuple(
        torch.linalg.solve_triangular(_triangular(a), b if left else b.mT, upper=upper,
                                      left=left, unitriangular=unit)
        for upper in (True, False) for left in (True, False) for unit in (True, False))),
         [(2, 4, 4), (2, 4, 3)], expect_converters=SOLVE_TRIANGULAR),
    case("solve-triangular-broadcast-float64", Fn(lambda a, b: (
        torch.linalg.solve_triangular(_triangular(a.double())[:, None], b.double()[None],
                                      upper=False))),
         [(2, 3, 3), (4, 3, 2)], expect_converters=SOLVE_TRIANGULAR),
    case("triangular-solve-flags", Fn(lambda a, b: tuple(
        item for upper in (True, False) for transpose in (True, False)
        for unit in (True, False) for item in torch.triangular_solve(
            b, _triangular(a), upper=upper, transpose=transpose, unitriangular=unit))),
         [(2, 4, 4), (2, 4, 3)], expect_converters=TRIANGULAR_SOLVE),
    case("eigvalsh-uplo-batched", Fn(lambda a: (
        torch.linalg.eigvalsh(a), torch.linalg.eigvalsh(a, UPLO="U"),
        torch.linalg.eigvalsh(a.double()))),
         [(3, 5, 5)], expect_converters=EIGH),
    case("pinv-tall-wide-hermitian", Fn(lambda a, h: (
        torch.linalg.pinv(a), torch.linalg.pinv(a.mT), torch.linalg.pinv(a.double()),
        torch.linalg.pinv(_positive_definite(h), hermitian=True),
        torch.linalg.pinv(_positive_definite(h) - 6 * torch.eye(4), hermitian=True))),
         [(2, 5, 3), (2, 4, 4)], expect_converters=PINV),
    # a rank-2 matrix: the cut-off drops its zero singular values (torch's default rtol;
    # pinverse's default rcond 1e-15 would keep float32's ~1e-7 rounding of them: pinverse
    # of the full-rank factor instead)
    case("pinv-rank-deficient-tolerances", Fn(lambda a, b: (
        torch.linalg.pinv(a @ b), torch.linalg.pinv(a @ b, atol=0.5),
        torch.linalg.pinv(a @ b, rtol=0.3), torch.linalg.pinv(a @ b, atol=0.1, rtol=0.2),
        torch.pinverse(a), torch.pinverse(a @ b, rcond=0.3))),
         [(2, 5, 2), (2, 2, 4)], expect_converters=PINV),
    case("matrix-exp-batched-float64", Fn(lambda a: (
        torch.matrix_exp(a), torch.linalg.matrix_exp(0.1 * a), torch.matrix_exp(3 * a),
        torch.matrix_exp(a.double()))),
         [(3, 4, 4)], expect_converters=MATRIX_EXP),
    # torch's signs, not only a valid factorization: tall, wide, square, every mode
    case("qr-modes-shapes", Fn(lambda a, w: (
        *torch.linalg.qr(a), *torch.linalg.qr(a, mode="complete"),
        torch.linalg.qr(a, mode="r").R, *torch.linalg.qr(w), *torch.linalg.qr(w[0, :3, :3]),
        *torch.linalg.qr(a.double()))),
         [(2, 6, 4), (2, 3, 5)], expect_converters=QR),
    # orthogonal reflectors (tau = 2 / |v|^2) and random ones, fewer reflectors than columns
    case("householder-product-shapes", Fn(lambda a, t: (
        torch.linalg.householder_product(a, 2 / (1 + torch.tril(a, -1).square().sum(-2))),
        torch.linalg.householder_product(a, t), torch.linalg.householder_product(a, t[:, :2]),
        torch.linalg.householder_product(a.double(), t.double()))),
         [(2, 6, 4), (2, 4)], expect_converters=HOUSEHOLDER),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_factorizations_solves_and_functions(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), max_transposes=None, **kwargs)


def _run_both(fn, example, special):
    """torch and the Keras model on ``special``; the conversion's own check is left out:
    its fresh random inputs are not positive-definite (torch's factor is then partial)."""
    model = crossport.convert(Fn(fn).eval(), (example,), check=False)
    with torch.no_grad():
        want = fn(special)
    got = run_keras(model, (special,), False, like=list(want))
    return list(want), got


def _failing_matrices() -> torch.Tensor:
    """Not positive-definite at order 1, 3 and 4, a NaN that reaches order 3, a NaN in the
    unread upper triangle (info 0), and one inf off the diagonal (fails at order 2)."""
    eye = 4 * torch.eye(4)
    cases = [eye.clone() for _ in range(7)]
    cases[0][0, 0] = -1.0
    cases[1][2, 2] = 0.0
    cases[2][3, 0] = cases[2][0, 3] = 5.0  # order-4 minor has determinant < 0
    cases[3][2, 1] = NAN
    cases[4][0, 3] = NAN
    cases[5][1, 0] = float("inf")
    return torch.stack(cases)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cholesky_ex_of_failing_matrices_matches_torch(dtype):
    """``info`` is LAPACK's order of the first failing pivot (NaN included) and the factor
    is torch's partial one: factored columns, the failing pivot on the diagonal, the
    input's lower triangle after it (also with upper=True, and at order 40)."""
    def fn(a):
        return (*torch.linalg.cholesky_ex(a), *torch.linalg.cholesky_ex(a.mT, upper=True))
    special = _failing_matrices().to(dtype)
    want, got = _run_both(fn, special, special)
    assert want[1].tolist() == [1, 3, 4, 3, 0, 2, 0]
    for w, g in zip(want, got):
        np.testing.assert_array_equal(np.isnan(np.asarray(g)), np.isnan(w.numpy()))
    assert not compare_outputs(want, got).mismatches
    torch.manual_seed(0)
    big = torch.randn(3, 40, 40, dtype=dtype)
    big = big @ big.mT / 40 - 0.2 * torch.eye(40, dtype=dtype)  # fails at some order
    want, got = _run_both(fn, big, big)
    assert (want[1] > 0).all()
    assert not compare_outputs(want, got).mismatches


def test_cholesky_ex_of_large_matrices_is_refused():
    with pytest.raises(crossport.UnsupportedOpError, match="up to order 128"):
        crossport.convert(Fn(torch.linalg.cholesky_ex).eval(), (torch.randn(129, 129),))


def test_cholesky_of_a_matrix_not_positive_definite_raises_in_both():
    fn = torch.linalg.cholesky
    conversion = crossport.convert(Fn(fn).eval(), (_positive_definite(torch.randn(2, 3, 3)),),
                                   check=False)
    bad = -torch.eye(3)[None].repeat(2, 1, 1)
    with pytest.raises(torch.linalg.LinAlgError, match="positive-definite"):
        fn(bad)
    with pytest.raises(ValueError, match="Cholesky decomposition failed"):
        conversion(bad.numpy())


def test_zero_diagonal_and_nan_in_triangular_solves():
    """A zero pivot gives the same inf/NaN in both; NaN spreads alike; eigvalsh ignores a
    NaN in the triangle it does not read."""
    def fn(a):
        return (torch.linalg.solve_triangular(a, a[..., :2], upper=True),
                torch.linalg.solve_triangular(a, a[..., :2], upper=False, left=True),
                torch.linalg.eigvalsh(a[2:], UPLO="U"))
    special = torch.stack([torch.eye(3), torch.eye(3), torch.eye(3)])
    special[0, 1, 1] = 0.0
    special[1, 0, 2] = NAN
    special[2, 2, 0] = NAN
    want, got = _run_both(fn, _triangular(torch.randn(3, 3, 3)), special)
    comparison = compare_outputs(want, got)
    assert not comparison.mismatches, comparison.mismatches


def test_matrix_exp_of_nan_and_inf_matrices_stays_in_its_matrix():
    """A NaN or inf makes its matrix's exponential all NaN in both; the other matrices of
    the batch keep their values (tf.linalg.expm alone turned the whole batch NaN)."""
    x = torch.randn(4, 3, 3)
    x[0, 1, 1], x[1, 0, 2], x[3] = NAN, float("inf"), 0.0
    want, got = _run_both(lambda m: (torch.matrix_exp(m),), torch.randn(4, 3, 3), x)
    assert torch.isnan(want[0][:2]).all() and torch.isfinite(want[0][2:]).all()
    assert not compare_outputs(want, got).mismatches


def _qr_of_nan_matrices(m: int, n: int, dtype=torch.float32) -> torch.Tensor:
    """NaN in each column (first, middle, last, the last row's), two NaN columns, a NaN
    only at ``a[0, 0]`` (torch keeps R[0, 0] finite), and one clean matrix."""
    a = torch.randn(8, m, n, dtype=dtype)
    a[0, m - 1, 0] = NAN
    a[1, 0, n // 2] = NAN
    a[2, m // 2, n - 1] = NAN
    a[3, 0, min(m, n) - 1] = NAN
    a[4, 1, 1], a[4, 0, n - 1] = NAN, NAN
    a[5, 0, 0] = NAN
    a[6, :, min(n - 1, 2)] = NAN
    return a


@pytest.mark.parametrize("m, n, dtype", [(5, 4, torch.float32), (4, 4, torch.float32),
                                         (3, 6, torch.float32), (6, 2, torch.float64),
                                         (32, 32, torch.float32), (40, 24, torch.float64)],
                         ids=["tall", "square", "wide", "tall-f64", "32", "40x24-f64"])
def test_qr_of_nan_matrices_is_nan_where_torchs_is(m, n, dtype):
    """torch's Q keeps the columns before the first NaN column finite and R the rows
    above it (LAPACK's reflector j reads columns <= j); TF's QR alone made Q NaN
    throughout. All modes, batched."""
    def fn(a):
        return (*torch.linalg.qr(a), *torch.linalg.qr(a, mode="complete"),
                torch.linalg.qr(a, mode="r").R)
    a = _qr_of_nan_matrices(m, n, dtype)
    want, got = _run_both(fn, torch.randn(8, m, n, dtype=dtype), a)
    assert torch.isfinite(want[0][1][:, 0]).all() and torch.isnan(want[0][0]).all()
    comparison = compare_outputs(want, got)
    assert not comparison.mismatches, comparison.mismatches


def test_qr_r_of_large_nan_matrices_is_nan_where_torchs_is():
    """R's pattern holds past MKL's blocked size too (Q's is refused there)."""
    a = _qr_of_nan_matrices(70, 64)
    want, got = _run_both(lambda m: (torch.linalg.qr(m, mode="r").R,), torch.randn(8, 70, 64), a)
    comparison = compare_outputs(want, got)
    assert not comparison.mismatches, comparison.mismatches


def _householder_specials(m: int, n: int, dtype):
    """NaN/inf below the diagonal (the reflectors), NaN above it (unread), a NaN tau, a
    zero tau with a NaN or inf reflector (LAPACK skips it), zero reflector tails, an
    exactly zero last row and an exactly zero last column of Q with an inf reflector
    (LAPACK's reflection stops at its last non-zero row and column)."""
    torch.manual_seed(7)
    a, tau = torch.randn(13, m, n, dtype=dtype), torch.rand(13, n, dtype=dtype) + 0.5
    a[1, m - 1, 0] = NAN
    a[2, m // 2, n - 1] = NAN
    tau[3, 0], a[3, 2, 0] = 0.0, NAN
    tau[4, n - 1] = NAN
    a[5, m - 1, 0] = float("inf")
    a[6, 1:, 0] = 0.0
    a[7, 0, n - 1] = NAN
    tau[8] = 0.0
    a[9, :, 0] = NAN
    a[10, m - 1, :], a[10, m - 1, 0] = 0.0, float("inf")
    tau[11, 0], a[11, 1:, 0] = 0.0, float("inf")
    tau[12, n - 1], a[12, n:, n - 1], a[12, m - 1, 0] = 1.0, 0.0, float("inf")
    return a, tau


@pytest.mark.parametrize("m, n, dtype", [(4, 4, torch.float32), (5, 3, torch.float64),
                                         (8, 8, torch.float32), (20, 10, torch.float64),
                                         (32, 32, torch.float64)])
def test_householder_product_of_special_reflectors_matches_torch(m, n, dtype):
    """LAPACK org2r's NaN/±inf positions (MKL's orgqr up to 32 columns, measured)."""
    a, tau = _householder_specials(m, n, dtype)
    module = Fn(torch.linalg.householder_product).eval()
    model = crossport.convert(module, (torch.randn(2, m, n, dtype=dtype),
                                       torch.rand(2, n, dtype=dtype)), check=False)
    want = [torch.linalg.householder_product(a, tau)]
    got = run_keras(model, (a, tau), False, like=want)
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(np.asarray(got[0])), test(want[0].numpy()))
    comparison = compare_outputs(want, got)
    assert not comparison.mismatches, comparison.mismatches


def test_householder_product_past_32_columns_is_refused():
    with pytest.raises(crossport.UnsupportedOpError, match="40x33 matrices.*32 columns"):
        crossport.convert(Fn(torch.linalg.householder_product).eval(),
                          (torch.randn(40, 33), torch.rand(33)))


def test_qr_q_past_32_reflectors_is_refused():
    with pytest.raises(crossport.UnsupportedOpError, match="33x40 matrices.*mode='r'"):
        crossport.convert(Fn(lambda a: torch.linalg.qr(a).Q).eval(), (torch.randn(2, 33, 40),))


def test_qr_mode_r_q_is_refused():
    with pytest.raises(crossport.UnsupportedOpError, match="mode='r'"):
        crossport.convert(Fn(lambda a: torch.linalg.qr(a, mode="r")).eval(),
                          (torch.randn(2, 3, 3),))


@pytest.mark.parametrize("fn", [
    lambda a: torch.linalg.eigh(a).eigenvectors,
    lambda a: torch.linalg.eigh(a, UPLO="U"),
], ids=["eigenvectors", "eigh-both"])
def test_eigenvectors_are_refused(fn):
    with pytest.raises(crossport.UnsupportedOpError, match="eigenvectors are used.*eigvalsh"):
        crossport.convert(Fn(fn).eval(), (torch.randn(2, 3, 3),))


def _every_dynamic_op(x):
    spd = _positive_definite(x)
    return (torch.linalg.cholesky(spd), torch.linalg.cholesky(spd.mT, upper=True),
            torch.linalg.solve_triangular(_triangular(x), x[..., :2], upper=True,
                                          unitriangular=True),
            torch.triangular_solve(x[..., :2], _triangular(x), transpose=True)[0],
            torch.linalg.eigvalsh(spd), torch.matrix_exp(0.5 * x))


@pytest.mark.parametrize("module, shape, dims, others", [
    pytest.param(Fn(_every_dynamic_op), (2, 4, 4), {0: {1: "n", 2: "n"}},
                 [(3, 6, 6), (1, 2, 2)], id="batch-and-order"),
    pytest.param(Fn(lambda x: (*torch.linalg.cholesky_ex(x), *torch.linalg.qr(x),
                               torch.linalg.householder_product(
                                   x, 2 / (1 + torch.tril(x, -1).square().sum(-2))))),
                 (2, 4, 4), {}, [(3, 4, 4), (1, 4, 4)], id="cholesky-ex-qr-householder-batch"),
])
def test_run_time_sizes(module, shape, dims, others):
    """Dynamic batch dims everywhere, a dynamic order where the kernel takes any."""
    example = (_positive_definite(torch.randn(shape)),)
    conversion = crossport.convert_with_report(module.eval(), example, dynamic_dims=dims,
                                               dynamic_batch=True)
    assert_matches_at_sizes(module, conversion, others, atol=1e-5, seed=3)


@pytest.mark.parametrize("fn, name", [(torch.linalg.cholesky_ex, "cholesky_ex"),
                                      (torch.linalg.qr, "keras.ops.qr")],
                         ids=["cholesky-ex", "qr"])
def test_a_run_time_order_is_refused(fn, name):
    with pytest.raises(DynamicDimError, match=name):
        crossport.convert(Fn(fn).eval(), (torch.randn(2, 4, 4),),
                          dynamic_dims={0: {1: "n", 2: "n"}})
