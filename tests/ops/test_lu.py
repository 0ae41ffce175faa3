"""linalg.lu_factor / lu_factor_ex / linalg.lu / torch.lu, lu_unpack and linalg.lu_solve /
lu_solve against torch: batched, float64, tall and wide, and on matrices with NaN, inf,
exactly zero columns, repeated rows, ties in the pivot column and small integers (where
ties and exactly singular steps are common): LAPACK's pivots, info and NaN positions.

All were "no converter" in the OpInfo sweep (docs/parity.md).
"""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch

import crossport
from crossport.errors import DynamicDimError
from crossport.parity.compare import compare_outputs
from crossport.parity.verify import run_keras
from tests.harness import assert_converts, assert_matches_at_sizes
from tests.ops.opcases import Fn, case, inputs

FACTOR = ("aten_linalg_lu_factor_ex_default",)
CHECKED = FACTOR + ("aten__linalg_check_errors_default",)
LU = ("aten_linalg_lu_default",)
UNPACK = ("aten_lu_unpack_default",)
SOLVE = ("aten_linalg_lu_solve_default",)
NAN, INF = float("nan"), float("inf")


def _old_lu(a, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.lu(a, **kwargs)


def _old_lu_solve(b, lu, pivots):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.lu_solve(b, lu, pivots)


def _solves(a, b):
    lu, pivots = torch.linalg.lu_factor(a)
    return tuple(torch.linalg.lu_solve(lu, pivots, b if left else b.mT, left=left,
                                       adjoint=adjoint)
                 for left in (True, False) for adjoint in (False, True)) + (
        _old_lu_solve(b, lu, pivots),)


CASES = [
    case("lu-factor-batched", Fn(lambda a: tuple(torch.linalg.lu_factor(a))),
         [(3, 5, 5)], expect_converters=CHECKED),
    case("lu-factor-ex-tall-wide-float64", Fn(lambda a, w: (
        *torch.linalg.lu_factor_ex(a.double()), *torch.linalg.lu_factor_ex(a),
        *torch.linalg.lu_factor_ex(w))),
         [(2, 6, 4), (2, 3, 5)], expect_converters=FACTOR),
    case("linalg-lu-shapes", Fn(lambda a, w: (
        *torch.linalg.lu(a), *torch.linalg.lu(w), *torch.linalg.lu(a[0, :4].double()))),
         [(2, 6, 4), (3, 5)], expect_converters=LU),
    case("torch-lu-infos", Fn(lambda a: (*_old_lu(a), *_old_lu(a, get_infos=True))),
         [(2, 4, 4)], expect_converters=FACTOR),
    case("lu-unpack", Fn(lambda a: (
        *torch.lu_unpack(*torch.linalg.lu_factor_ex(a)[:2]),
        torch.lu_unpack(*torch.linalg.lu_factor_ex(a.mT)[:2], unpack_data=False)[0],
        torch.lu_unpack(*torch.linalg.lu_factor_ex(a)[:2], unpack_pivots=False)[1])),
         [(2, 5, 3)], expect_converters=FACTOR + UNPACK),
    case("lu-solve-left-adjoint", Fn(_solves), [(2, 4, 4), (2, 4, 3)],
         expect_converters=CHECKED + SOLVE),
    case("lu-solve-broadcast-float64", Fn(lambda a, b: torch.linalg.lu_solve(
        *torch.linalg.lu_factor(a.double()[:, None]), b.double()[None])),
         [(2, 3, 3), (4, 3, 2)], expect_converters=CHECKED + SOLVE),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_lu_factorizations_and_solves(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), max_transposes=None, **kwargs)


def _run_both(fn, example, special):
    """torch and the Keras model on ``special`` (the conversion checked on ``example``)."""
    model = crossport.convert(Fn(fn).eval(), (example,), check=False)
    with torch.no_grad():
        want = fn(special)
    got = run_keras(model, (special,), False, like=list(want))
    return list(want), got


def _special_matrices(m: int, n: int, dtype) -> torch.Tensor:
    """NaN on and below the first pivot, in the last entry and at (1, 1), a whole NaN
    column, infs, an exactly zero column (with a NaN or an inf next to it), a repeated
    column and a repeated row (singular), ±1 ties in the first column, all zeros, all
    ones and small integers (ties and exact cancellations at every step)."""
    torch.manual_seed(5)
    r, c = min(1, m - 1), min(1, n - 1)
    a = torch.randn(20, m, n, dtype=dtype)
    a[0, 0, 0] = NAN
    a[1, m // 2, 0] = NAN
    a[2, m - 1, n - 1] = NAN
    a[3, r, c] = NAN
    a[4, :, 0] = NAN
    a[5, m // 2, 0] = INF
    a[6, 0, c] = INF
    a[7, m // 2, c], a[7, r, 0] = -INF, INF
    a[8, :, 0] = 0.0
    # doubled column of powers of two: the multipliers are exact, so the column below the
    # first pivot cancels to exact zeros on every CPU (with random values it is rounding
    # noise, whose largest entry depends on the BLAS kernel: ties are judged below)
    a[9, :, 0] = torch.tensor([0.5, -2.0, 1.0, -0.25] * m, dtype=dtype)[:m]
    a[9, :, c] = 2 * a[9, :, 0]
    a[10, :, n - 1], a[10, m - 1, n - 1] = 0.0, NAN
    a[11, :, 0], a[11, 0, n - 1] = 0.0, INF
    a[12] = 0.0
    a[13] = 1.0
    a[14, :, 0] = torch.tensor([1.0, -1.0] * m, dtype=dtype)[:m]
    a[15, -1] = a[15, 0]
    a[16:] = torch.randint(-2, 3, (4, m, n)).to(dtype)
    return a


def _assert_same(want, got):
    for w, g in zip(want, got, strict=True):
        w, g = w.numpy(), np.asarray(g)
        if w.dtype.kind != "f":
            np.testing.assert_array_equal(g, w)
            continue
        for test in (np.isnan, np.isposinf, np.isneginf):
            np.testing.assert_array_equal(test(g), test(w))
    comparison = compare_outputs(want, got)
    assert not comparison.mismatches, comparison.mismatches


@pytest.mark.parametrize("m, n", [(4, 4), (5, 3), (3, 5), (1, 4), (16, 16), (16, 9)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_lu_of_special_matrices_matches_torch(m, n, dtype):
    """Pivots (idamax: the first largest |a|, NaN skipped unless on the diagonal), info
    (the first exactly-zero pivot) and NaN/±inf positions are torch's, the values within
    rounding (MKL rounds the update once: so does the Keras model)."""
    def fn(a):
        return (*torch.linalg.lu_factor_ex(a), *torch.linalg.lu(a))
    a = _special_matrices(m, n, dtype)
    want, got = _run_both(fn, torch.randn(2, m, n, dtype=dtype), a)
    assert want[2][[8, 12]].tolist() == [1, 1] and (want[2][16:] >= 0).all()
    _assert_same(want, got)


def test_lu_of_many_integer_matrices_pivots_as_torch():
    """Small-integer matrices tie and cancel exactly at many steps: 400 of them, pivots and
    info torch's except where rounding broke an exact tie (a rounding twice instead of once
    changed 1 to 3% of them; which noise wins a tie depends on the CPU's BLAS kernel, so
    such a matrix is judged in exact arithmetic, and its values are not compared)."""
    torch.manual_seed(11)
    a = torch.randint(-2, 3, (400, 8, 8)).float()

    def fn(x):
        return tuple(torch.linalg.lu_factor_ex(x)) + tuple(torch.linalg.lu_factor_ex(x.double()))
    want, got = _run_both(fn, torch.randn(2, 8, 8), a)
    keep = np.ones(len(a), dtype=bool)
    for pivots, info in ((1, 2), (4, 5)):
        w_piv, g_piv = want[pivots].numpy(), np.asarray(got[pivots])
        w_info, g_info = want[info].numpy(), np.asarray(got[info])
        for i in np.flatnonzero((w_piv != g_piv).any(axis=1) | (w_info != g_info)):
            assert _rounding_broke_a_tie(a[i].numpy(), w_piv[i], g_piv[i]), (i, w_piv[i],
                                                                                g_piv[i])
            keep[i] = False
    assert keep.mean() > 0.95  # ties broken by rounding are rare
    kept = torch.from_numpy(keep)
    _assert_same([w[kept] for w in want], [np.asarray(g)[keep] for g in got])


def _rounding_broke_a_tie(a: np.ndarray, pivots: np.ndarray, others: np.ndarray) -> bool:
    """Whether two pivot choices for ``a`` (1-based, LAPACK's row swaps) are both right in
    exact arithmetic: they agree until a step where both rows hold the column's largest
    magnitude, or the elimination meets an exactly zero pivot (info then depends on whether
    rounding left a tiny nonzero there)."""
    rows = [[Fraction(float(v)) for v in row] for row in a]
    m, n = len(rows), len(rows[0])
    for k in range(min(m, n)):
        p, q = int(pivots[k]) - 1, int(others[k]) - 1
        top = max(abs(rows[i][k]) for i in range(k, m))
        if p != q:
            return abs(rows[p][k]) == top and abs(rows[q][k]) == top
        rows[k], rows[p] = rows[p], rows[k]
        if rows[k][k] == 0:
            return top == 0
        for i in range(k + 1, m):
            factor = rows[i][k] / rows[k][k]
            rows[i] = [x - factor * y for x, y in zip(rows[i], rows[k])]
    return False


def test_lu_solve_of_singular_and_nan_factors_matches_torch():
    """A zero pivot gives the same inf/NaN in both; a NaN spreads alike. (A right side
    in the column space of a singular matrix is left out: the division by the zero pivot
    then meets a rounding-sized numerator, ±inf in one, 0/0 = NaN in the other.)"""
    def fn(a):
        lu, pivots, _ = torch.linalg.lu_factor_ex(a)
        b = torch.linspace(-1.0, 2.0, 6).reshape(3, 2)
        return (torch.linalg.lu_solve(lu, pivots, b),
                torch.linalg.lu_solve(lu, pivots, b, adjoint=True),
                torch.linalg.lu_solve(lu, pivots, b.mT, left=False))
    a = torch.randn(4, 3, 3) + 3 * torch.eye(3)
    a[0, :, 1] = 0.0
    a[1, 2, 2] = NAN
    want, got = _run_both(fn, torch.randn(4, 3, 3), a)
    _assert_same(want, got)


def test_lu_factor_of_a_singular_matrix_raises_in_both():
    conversion = crossport.convert(Fn(torch.linalg.lu_factor).eval(), (torch.randn(2, 3, 3),),
                                   check=False)
    singular = torch.randn(2, 3, 3)
    singular[1, :, 2] = 0.0
    with pytest.raises(RuntimeError, match="is zero"):
        torch.linalg.lu_factor(singular)
    with pytest.raises(Exception, match="not invertible"):
        conversion(singular.numpy())
    conversion(torch.randn(2, 3, 3).numpy())  # an invertible batch runs


@pytest.mark.parametrize("fn, shape, match", [
    (torch.linalg.lu_factor, (17, 17), "17x17 matrices.*up to 16x16"),
    (torch.linalg.lu, (3, 20), "3x20 matrices"),
    (lambda a: torch.linalg.lu(a, pivot=False), (3, 3), "pivot=False.*CUDA only"),
    (lambda a: torch.lu_unpack(*torch.linalg.lu_factor(a), unpack_data=False)[1], (3, 3),
     "unpack_data=False"),
], ids=["factor-17", "lu-3x20", "no-pivot", "unpacked-l"])
def test_lu_refusals(fn, shape, match):
    with pytest.raises(crossport.UnsupportedOpError, match=match):
        crossport.convert(Fn(fn).eval(), (torch.randn(*shape),))


def test_run_time_batch_sizes():
    module = Fn(lambda a, b: (*torch.linalg.lu(a), torch.linalg.lu_solve(
        *torch.linalg.lu_factor(a), b)))
    example = (torch.randn(2, 4, 4), torch.randn(2, 4, 3))
    conversion = crossport.convert_with_report(module.eval(), example, dynamic_batch=True)
    assert_matches_at_sizes(module, conversion, [((3, 4, 4), (3, 4, 3)), ((1, 4, 4), (1, 4, 3))],
                            atol=1e-5, seed=3)


def test_a_run_time_order_is_refused():
    with pytest.raises(DynamicDimError, match="LU's column-by-column elimination"):
        crossport.convert(Fn(torch.linalg.lu_factor_ex).eval(), (torch.randn(2, 4, 4),),
                          dynamic_dims={0: {1: "n", 2: "n"}})
