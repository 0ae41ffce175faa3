"""torch.i0 and torch.special's Bessel functions (were "no converter") on the values
random inputs miss: +-0.0, tiny and negative arguments (NaN for K and Y, -inf for y1 at
+-0.0), +-inf, NaN, where the float32 result overflows (i0, i1) or nears underflow (K);
and their accuracy against float64 next to torch's.

Left out on purpose: results in float32's subnormal range (k0 past ~87), which TF's kernels
flush to zero (docs/parity.md).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from crossport.parity.verify import run_keras
from tests.harness import assert_converts
from tests.ops.opcases import Fn, case

NAN, INF = float("nan"), float("inf")
S = torch.special
# name: (function, converter, values past the shared ones)
FUNCTIONS = {
    "i0": (torch.i0, "aten_i0_default", (88.0, 100.0)),
    "modified_bessel_i0": (S.modified_bessel_i0, "aten_i0_default", (88.0, 100.0)),
    "i0e": (S.i0e, "aten_special_i0e_default", (88.0, 3e38)),
    "i1": (S.i1, "aten_special_i1_default", (88.0, -100.0)),
    "modified_bessel_i1": (S.modified_bessel_i1, "aten_special_i1_default", (88.0, 100.0)),
    "i1e": (S.i1e, "aten_special_i1e_default", (-88.0, 3e38)),
    "modified_bessel_k0": (S.modified_bessel_k0, "aten_special_modified_bessel_k0_default",
                           (85.0, -3e38)),
    "modified_bessel_k1": (S.modified_bessel_k1, "aten_special_modified_bessel_k1_default",
                           (85.0, -3e38)),
    "scaled_modified_bessel_k0": (S.scaled_modified_bessel_k0,
                                  "aten_special_scaled_modified_bessel_k0_default",
                                  (100.0, 3e38)),
    "scaled_modified_bessel_k1": (S.scaled_modified_bessel_k1,
                                  "aten_special_scaled_modified_bessel_k1_default",
                                  (100.0, -3e38)),
    "bessel_j0": (S.bessel_j0, "aten_special_bessel_j0_default", (100.0, -1000.0)),
    "bessel_j1": (S.bessel_j1, "aten_special_bessel_j1_default", (100.0, -1000.0)),
    "bessel_y0": (S.bessel_y0, "aten_special_bessel_y0_default", (100.0, -1000.0)),
    "bessel_y1": (S.bessel_y1, "aten_special_bessel_y1_default", (100.0, -1000.0)),
    "spherical_bessel_j0": (S.spherical_bessel_j0,
                            "aten_special_spherical_bessel_j0_default", (100.0, -1000.0)),
}
SHARED = [NAN, INF, -INF, 0.0, -0.0, 1e-30, -1e-30, 1e-6, -1e-6, 0.4999999, 0.5, -0.5, 1.0,
          -1.0, 2.0, -2.0, 5.0, 7.75, 8.0, 8.01, -8.0, 20.0, -20.0, 50.0]
# K and Y are defined for x >= 0 only (NaN below, in torch)
POSITIVE = ("modified_bessel_k", "scaled_modified_bessel_k", "bessel_y")


def _domain(name, x):
    return x.abs() * 8 if name.startswith(POSITIVE) else x * 8


CASES = [
    case(f"{name}-random", Fn(lambda x, f=f, name=name: f(_domain(name, x))), (6, 40),
         expect_converters=(converter,))
    for name, (f, converter, _) in FUNCTIONS.items()
] + [
    case("bessel-float64-and-integers", Fn(lambda x, n: (
        torch.i0(x.double() * 8), S.i1e(x.double() * 8),
        S.modified_bessel_k1(x.double().abs() * 8), S.bessel_y0(x.double().abs() * 8),
        S.spherical_bessel_j0(x.double() * 8), torch.i0(n), S.i1(n), S.bessel_j1(n),
        S.modified_bessel_k0(n), S.bessel_y1(n), S.spherical_bessel_j0(n))),
         lambda: (torch.randn(4, 30), torch.arange(-3, 5).reshape(2, 4)),
         expect_converters=("aten_i0_default", "aten_special_i1e_default",
                            "aten_special_bessel_y1_default")),
    case("kaiser-window-and-von-mises", Fn(lambda x, kappa: (
        torch.i0(8.0 * torch.sqrt(1 - x.clamp(-1, 1) ** 2)) / torch.i0(torch.tensor(8.0)),
        kappa * torch.cos(x) - torch.log(2 * torch.pi * S.i0e(kappa)) - kappa)),
         lambda: (torch.rand(3, 17) * 2 - 1, torch.rand(3, 17) * 20),
         expect_converters=("aten_i0_default", "aten_special_i0e_default")),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_bessel_functions_match_torch(module, shapes, kwargs):
    args = shapes() if callable(shapes) else (torch.randn(shapes),)
    assert_converts(module, args, **kwargs)


def _keras_and_torch(name, values, dtype):
    f, converter, _ = FUNCTIONS[name]
    x = torch.tensor(values, dtype=dtype)
    conversion = assert_converts(Fn(f), (x,), expect_converters=(converter,))
    got = np.asarray(run_keras(conversion.model, (x,), False, like=f(x))[0])
    return got, f(x).numpy()


@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_special_values_match_torch(name, dtype):
    """NaN/inf positions and signs exactly (K, Y: NaN below 0; K: inf at +-0.0; y0, y1:
    -inf at +-0.0; i0, i1 overflow to inf), finite values within the kernels' rounding
    (relative 4e-6, absolute 1e-6: test_accuracy_against_float64_is_torchs measures it)."""
    got, want = _keras_and_torch(name, SHARED + list(FUNCTIONS[name][2]), dtype)
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(got), test(want))
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=4e-6, atol=1e-6)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_accuracy_against_float64_is_torchs(name):
    """On 100000 points of [-30, 60] ([0, 60] for K and Y), the Keras model is within 4x
    torch float32's own distance from float64 (relative, floored at 1e-3: J and Y cross 0)."""
    f, converter, _ = FUNCTIONS[name]
    low = 0.0 if name.startswith(POSITIVE) else -30.0
    x = torch.linspace(low, 60.0, 100001)[1:]
    conversion = assert_converts(Fn(f), (x,), expect_converters=(converter,))
    truth = f(x.double()).numpy()
    got = np.asarray(run_keras(conversion.model, (x,), False, like=f(x))[0], np.float64)
    scale = np.maximum(np.abs(truth), 1e-3)
    torch_distance = np.max(np.abs(f(x).double().numpy() - truth) / scale)
    keras_distance = np.max(np.abs(got - truth) / scale)
    assert keras_distance <= 4 * torch_distance, (keras_distance, torch_distance)
