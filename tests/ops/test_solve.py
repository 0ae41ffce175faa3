"""linalg.inv / inverse, linalg.solve (matrix and vector right-hand sides, left=False, batch
broadcasting), det, slogdet and logdet against torch: batched, float64, after layers, on
matrices holding NaN/+-inf and on singular ones (torch and the Keras model both raise for
inv and solve).

All were "no converter" (inv and solve also for the ``with_effects`` token of their
singular-matrix check).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import torch

import crossport
from crossport.parity.compare import compare_outputs
from crossport.parity.verify import run_keras
from tests.harness import assert_converts
from tests.ops.opcases import Fn, case, inputs

INV = ("aten_linalg_inv_ex_default", "aten__linalg_check_errors_default")
SOLVE = ("aten__linalg_solve_ex_default", "aten__linalg_check_errors_default")
DET = ("aten__linalg_det_default",)
SLOGDET = ("aten__linalg_slogdet_default",)
NAN, INF = float("nan"), float("inf")


def _conditioned(a):
    """A random matrix made well-conditioned (its diagonal raised), so the float32 result is
    within the harness' 1e-5 of torch's."""
    return a + 4 * torch.eye(a.shape[-1], dtype=a.dtype)


def _every_op(a, b):
    a = _conditioned(a)
    return (torch.linalg.inv(a), torch.linalg.solve(a, b), torch.linalg.det(a),
            *torch.linalg.slogdet(a), torch.logdet(a @ a.mT), torch.inverse(a[0]),
            torch.linalg.inv_ex(a).inverse)


class Whitening(torch.nn.Module):
    """Features decorrelated by the inverse of a covariance computed in forward, then a
    linear layer, with the covariance's log-determinant (a Gaussian log-likelihood)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(5, 4)

    def forward(self, x):
        h = self.proj(x)
        h = h - h.mean(1, keepdim=True)
        cov = h.mT @ h / h.shape[1] + 0.5 * torch.eye(4)
        return torch.linalg.solve(cov, h.mT).mT, torch.logdet(cov), torch.linalg.inv(cov)


CASES = [
    case("inv-solve-det-slogdet-batched", Fn(_every_op), [(3, 5, 5), (3, 5, 2)],
         expect_converters=INV + SOLVE + DET + SLOGDET),
    # raw random matrices (condition numbers up to ~100 at this seed)
    case("inv-solve-det-unconditioned", Fn(lambda a, b: (
        torch.linalg.inv(a), torch.linalg.solve(a, b), torch.linalg.det(a))),
         [(4, 3, 3), (4, 3, 1)], expect_converters=INV + SOLVE + DET),
    # a vector right-hand side (1-D, and A's shape without its last dim), left=False, and
    # batch dims broadcast both ways
    case("solve-vectors-left-false-broadcast", Fn(lambda a, b, c: (
        torch.linalg.solve(_conditioned(a), c[0, 0]),
        torch.linalg.solve(_conditioned(a), c[:, 0]),
        torch.linalg.solve(_conditioned(a), b.mT, left=False),
        torch.linalg.solve(_conditioned(a[:1]), b),
        torch.linalg.solve(_conditioned(a[:, None]), b[None]))),
         [(2, 4, 4), (2, 4, 3), (2, 3, 4)], expect_converters=SOLVE),
    case("inv-det-slogdet-float64", Fn(lambda a, b: tuple(
        f(_conditioned(a.double())) for f in (torch.linalg.inv, torch.linalg.det,
                                              lambda m: torch.linalg.slogdet(m)[1]))
        + (torch.linalg.solve(_conditioned(a.double()), b.double()),)),
         [(2, 6, 6), (2, 6, 2)], expect_converters=INV + SOLVE + DET + SLOGDET),
    # info: 0 for every matrix of the batch (broadcast for solve_ex), int32 as in torch
    case("inv-ex-solve-ex-info", Fn(lambda a, b: (
        *torch.linalg.inv_ex(_conditioned(a)), *torch.linalg.solve_ex(_conditioned(a), b),
        torch.linalg.solve_ex(_conditioned(a[:, None]), b[None], left=False).info)),
         [(2, 3, 3), (2, 3, 3)], expect_converters=INV[:1] + SOLVE[:1]),
    case("whitening-after-linear", Whitening(), (2, 7, 5),
         expect_converters=("aten_linear_default",) + SOLVE + INV + SLOGDET),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_inverse_solve_and_determinants(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), max_transposes=None, **kwargs)


def _special_matrices() -> torch.Tensor:
    """NaN and +-inf entries, a zero matrix and a rank-1 one (det/slogdet only)."""
    eye = torch.eye(3)
    nan_entry, inf_entry, neg_inf_diag = eye.clone(), eye.clone(), eye.clone()
    nan_entry[0, 1], inf_entry[0, 0], neg_inf_diag[2, 2] = NAN, INF, -INF
    return torch.stack([nan_entry, inf_entry, neg_inf_diag, torch.zeros(3, 3),
                        torch.ones(3, 3), torch.tensor([[0.0, 2, 0], [1, 0, 0], [0, 0, 3]])])


def test_special_values_match_torch():
    """NaN spreads alike, inf pivots alike, singular matrices give det 0 and slogdet
    (0, -inf); slogdet's sign of a NaN matrix is torch's 0 (TF says NaN: put right)."""
    module = Fn(lambda a: (torch.linalg.det(a), *torch.linalg.slogdet(a),
                           torch.linalg.inv(a[:3]), torch.linalg.solve(a[:3], a[:3, :, :1])))
    args = (_special_matrices(),)
    conversion = assert_converts(module, (torch.randn(6, 3, 3),), max_transposes=None,
                                 expect_converters=INV + SOLVE + DET + SLOGDET)
    with torch.no_grad():
        want = module(*args)
    got = run_keras(conversion.model, args, False, like=want)
    comparison = compare_outputs(list(want), got)
    assert not comparison.mismatches, comparison.mismatches
    np.testing.assert_array_equal(np.asarray(got[1]), want[1].numpy())  # the signs


@pytest.mark.parametrize("fn", [torch.linalg.inv, lambda a: torch.linalg.solve(a, a[..., :1])],
                         ids=["inv", "solve"])
def test_a_singular_matrix_raises_in_both(fn):
    """torch's singular-matrix check (dropped from the graph) raises; so does the Keras
    model, whose MatrixInverse/MatrixSolve refuse a zero pivot."""
    conversion = crossport.convert(Fn(fn).eval(), (torch.randn(2, 3, 3),))
    singular = torch.tensor([[1.0, 2, 3], [2, 4, 6], [0, 1, 1]])[None].repeat(2, 1, 1)
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        fn(singular)
    with pytest.raises(tf.errors.InvalidArgumentError, match="not invertible"):
        conversion(singular.numpy())


@pytest.mark.parametrize("fn", [lambda a: torch.linalg.inv_ex(a),
                                lambda a: torch.linalg.solve_ex(a, a[..., :1]),
                                lambda a: torch.linalg.inv_ex(a).info,
                                lambda a: torch.linalg.solve_ex(a, a[..., :1]).info],
                         ids=["inv-ex", "solve-ex", "inv-ex-info-alone", "solve-ex-info-alone"])
def test_a_singular_matrix_raises_in_the_ex_variants(fn):
    """Where torch's info says singular (a zero pivot), the Keras model raises: TF's LU
    kernels have no mode that returns; info is 0 wherever it returns (parity.md). With
    info the only output read, the kernel still runs (a 0 that did not need it would
    report a singular matrix as fine)."""
    model = crossport.convert(Fn(fn).eval(), (_conditioned(torch.randn(2, 3, 3)),))
    singular = torch.tensor([[1.0, 2, 3], [2, 4, 6], [0, 1, 1]])[None].repeat(2, 1, 1)
    info = fn(singular)
    assert (info if isinstance(info, torch.Tensor) else info.info).tolist() == [3, 3]
    with pytest.raises(tf.errors.InvalidArgumentError, match="not invertible"):
        model(singular.numpy())


@pytest.mark.parametrize("fn, output", [
    (lambda a: torch.ops.aten._linalg_solve_ex(a, a)[1], "LU"),
    (lambda a: torch.ops.aten._linalg_solve_ex(a, a)[2], "pivots"),
], ids=["solve-ex-lu", "solve-ex-pivots"])
def test_lapack_outputs_are_refused(fn, output):
    """(torch.linalg.lu_factor converts since session 17: tests/ops/test_lu.py.)"""
    with pytest.raises(crossport.UnsupportedOpError) as info:
        crossport.convert(Fn(fn).eval(), (torch.randn(2, 3, 3),))
    message = str(info.value)
    assert f"its {output} output" in message and "LAPACK" in message, message
    assert "torch.linalg.lu_factor" in message, message
