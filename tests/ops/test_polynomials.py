"""torch.special's orthogonal polynomials (were "no converter") on what random inputs
miss: the degree as ATen reads it (negative, 0, 1, non-integer, NaN, +-inf, past int64,
past Hermite's limit, past the Chebyshev closed-form bounds), x at the interval's ends,
+-0.0, NaN, +-inf, overflow in the recurrence (where the FMA ATen's compiler makes gives
+-inf and a plain multiply-subtract NaN), Python-number operands, integer and float64
inputs; and the Chebyshev closed forms' accuracy against float64 next to torch's.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import crossport
from crossport.layers.polynomial import KINDS
from crossport.parity.verify import run_keras
from tests.harness import assert_converts
from tests.ops.opcases import Fn, case

NAN, INF = float("nan"), float("inf")
S = torch.special
FUNCTIONS = {kind: (getattr(S, kind), f"aten_special_{kind}_default") for kind in KINDS}
# recurrences only (no closed form): ATen's values bit for bit
EXACT = ("hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
         "legendre_polynomial_p")
X_EDGES = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.0000001, -1.0000001,
           0.99999994, 2.0, -2.0, 1e-30, 3.0, -7.5, 1e30, 0.25, 0.75, 0.7500001]
N_EDGES = [NAN, INF, -INF, -1.0, -0.5, 0.0, 0.7, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0,
           9.0, 10.0, 20.0, 50.0, 127.0, 128.0, 129.0, 200.0, 511.0, 513.0, 1e20, 9.3e18]


def _scaled(kind, x):
    """Random x where each polynomial is interesting: [0, 1] for the shifted Chebyshev,
    [-1.2, 1.2] for the others, [-3, 8] for Laguerre, [-4, 4] for Hermite."""
    if kind.startswith("shifted"):
        return torch.sigmoid(x * 2)
    if kind.startswith("laguerre"):
        return x * 3 + 2
    return x * 3 if kind.startswith("hermite") else torch.tanh(x) * 1.2


CASES = [
    case(f"{kind}-random", Fn(lambda x, n, f=f, kind=kind: f(_scaled(kind, x), n)),
         lambda: (torch.randn(6, 40), torch.randint(-2, 14, (6, 40)).float()),
         expect_converters=(converter,))
    for kind, (f, converter) in FUNCTIONS.items()
] + [
    case("polynomials-scalars-integers-float64-broadcast", Fn(lambda x, n: (
        S.chebyshev_polynomial_t(x, 3), S.legendre_polynomial_p(x, 12.7),
        S.hermite_polynomial_h(0.5, n), S.laguerre_polynomial_l(x.double(), n),
        S.chebyshev_polynomial_u(x[:, :1], n), S.shifted_chebyshev_polynomial_w(n, n),
        S.hermite_polynomial_he(x, n.double()), S.chebyshev_polynomial_v(x, 30))),
         lambda: (torch.rand(4, 8) * 2 - 1, torch.arange(-1, 7)),
         expect_converters=("aten_special_chebyshev_polynomial_t_default",
                            "aten_special_legendre_polynomial_p_default",
                            "aten_special_hermite_polynomial_h_default",
                            "aten_special_shifted_chebyshev_polynomial_w_default")),
    case("legendre-expansion", Fn(lambda x, c: sum(
        c[..., k:k + 1] * S.legendre_polynomial_p(x, k) for k in range(6))),
         lambda: (torch.rand(3, 20) * 2 - 1, torch.randn(3, 6)),
         expect_converters=("aten_special_legendre_polynomial_p_default",)),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_polynomials_match_torch(module, shapes, kwargs):
    assert_converts(module, shapes(), **kwargs)


def _keras_and_torch(kind, x, n):
    """The model's and torch's values; the harness' own comparison at 1e-5 normalized error
    for the recurrences, 3e-4 where a Chebyshev closed form (degrees to 513) amplifies the
    trigonometric kernels' rounding (test_closed_form_accuracy_against_float64_is_torchs:
    torch float32's own error is as large)."""
    f, converter = FUNCTIONS[kind]
    atol = 1e-5 if kind in EXACT else 3e-4
    conversion = assert_converts(Fn(f), (x, n), atol=atol, expect_converters=(converter,))
    got = np.asarray(run_keras(conversion.model, (x, n), False, like=f(x, n))[0])
    return got, f(x, n).numpy()


def _assert_positions(got, want):
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(got), test(want))
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_special_values_match_torch(kind, dtype):
    """Every pair of X_EDGES and N_EDGES (degrees to 513: the recurrence's loop runs up to
    512 steps; overflow to +-inf and NaN as torch): NaN/inf positions and the sign of zeros
    exactly; values bit-equal for the pure recurrences; the Chebyshev closed forms within
    the trigonometric kernels' rounding times the degree (test_closed_form_accuracy)."""
    pairs = list(itertools.product(X_EDGES, N_EDGES))
    x = torch.tensor([p[0] for p in pairs], dtype=dtype)
    n = torch.tensor([p[1] for p in pairs], dtype=dtype)
    got, want = _keras_and_torch(kind, x, n)
    _assert_positions(got, want)
    finite = np.isfinite(want)
    if kind in EXACT:
        np.testing.assert_array_equal(got[finite], want[finite])
        return
    eps = np.finfo(want.dtype).eps
    degree = np.abs(np.nan_to_num(n.numpy(), posinf=0.0, neginf=0.0))[finite]
    allowed = 8 * eps * (degree + 1.0) ** 2 * np.maximum(np.abs(want[finite]), 1.0)
    assert np.all(np.abs(got[finite] - want[finite]) <= allowed)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_random_inputs_recurrences_bit_equal(kind, dtype):
    """Seeded random x over each polynomial's range and degrees -2..40: the recurrences
    (ATen's FMA rounding included) bit-equal; the Chebyshev closed forms as above."""
    generator = torch.Generator().manual_seed(7)
    x = _scaled(kind, torch.randn(4000, generator=generator, dtype=dtype))
    n = torch.randint(-2, 41, (4000,), generator=generator).to(dtype)
    got, want = _keras_and_torch(kind, x, n)
    _assert_positions(got, want)
    recurrence = np.ones_like(want, bool)
    if kind not in EXACT:  # the closed form: |y| < 1 past the degree bound
        y = (2 * x - 1 if kind.startswith("shifted") else x).abs().numpy()
        recurrence = (y >= 1) | (n.numpy() <= 4)
    np.testing.assert_array_equal(got[recurrence], want[recurrence])


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in EXACT])
def test_closed_form_accuracy_against_float64_is_torchs(kind):
    """On 100000 points of |y| < 1 with degrees 7..60, the Keras model is within 3x torch
    float32's own distance from float64 (relative, floored at 1): TF's sin/cos/atan2 and
    the C library's differ by an ulp or so, which the degree amplifies in both."""
    generator = torch.Generator().manual_seed(3)
    x = torch.rand(100000, generator=generator) * 2 - 1
    if kind.startswith("shifted"):
        x = (x + 1) / 2
    n = torch.randint(7, 61, (100000,), generator=generator).float()
    f, converter = FUNCTIONS[kind]
    conversion = assert_converts(Fn(f), (x, n), atol=3e-4, expect_converters=(converter,))
    got = np.asarray(run_keras(conversion.model, (x, n), False, like=f(x, n))[0], np.float64)
    truth = f(x.double(), n.double()).numpy()
    scale = np.maximum(np.abs(truth), 1.0)
    torch_distance = np.max(np.abs(f(x, n).double().numpy() - truth) / scale)
    keras_distance = np.max(np.abs(got - truth) / scale)
    assert keras_distance <= 3 * torch_distance, (keras_distance, torch_distance)


def test_polynomials_export_to_tflite_with_builtin_ops(tmp_path):
    """The recurrence's WHILE loop, the int64 step count, ATAN2 for acos and the FMA's
    float32 emulation are TFLite builtins: the file re-checks against torch (crossport's
    finite re-check, and the special-values run on NaN/+-inf/-0.0 inputs)."""
    module = Fn(lambda x, n: (S.legendre_polynomial_p(x, n), S.hermite_polynomial_h(x * 4, n),
                              S.chebyshev_polynomial_t(x, n + 4), S.laguerre_polynomial_l(x, 9),
                              S.shifted_chebyshev_polynomial_w(x.abs(), n))).eval()
    args = (torch.rand(3, 16) * 2 - 1, torch.randint(-1, 12, (3, 16)).float())
    conversion = crossport.convert_with_report(module, args)
    result = crossport.export(conversion, tmp_path / "polynomials.tflite")
    assert result.max_error <= 1e-5, result
