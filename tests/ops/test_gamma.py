"""lgamma, digamma and erfinv (were "no converter") on the values random inputs miss: the
poles (0, -0.0, the negative integers), negative non-integers near them, +-inf, NaN, the
domain's edges (erfinv at +-1 and one ulp inside and past), tiny and huge values; and their
accuracy against float64 next to torch's.

Left out on purpose: subnormal inputs, which TF's kernels flush to zero (docs/parity.md).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import crossport
from crossport.parity.verify import run_keras
from tests.harness import assert_converts
from tests.ops.opcases import Fn, case

NAN, INF = float("nan"), float("inf")
SPECIALS = {
    "lgamma": [NAN, INF, -INF, 0.0, -0.0, 1.0, 2.0, -1.0, -2.0, -100.0, -0.5, -2.5,
               -0.99999994, -1.0000001, 1e-30, -1e-30, 0.5, 1.4616321, 35.0, 1e6, 1e10,
               4e36, 3e38, -3e38, -4194304.5, -8388608.0],
    "digamma": [NAN, INF, -INF, 0.0, -0.0, 1.0, 2.0, -1.0, -2.0, -100.0, -0.5, -2.5,
                -0.99999994, -1.0000001, 1e-30, -1e-30, 0.5, 1.4616321, 35.0, 1e6, 1e10,
                4e36, 3e38, -3e38, -4194304.5, -8388608.0],
    "erfinv": [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.99999994, -0.99999994, 1.0000001,
               -1.0000001, 0.7, -0.7, 0.70000005, 0.5, -0.5, 1e-7, -1e-7, 1e-30, -1e-30,
               0.9999, -0.999999, 2.0, -3e38, 0.25, 0.1],
}
FUNCTIONS = {"lgamma": torch.lgamma, "digamma": torch.digamma, "erfinv": torch.erfinv}


def _domain(name, x):
    """Random values where the function is defined and not tiny (erfinv: (-1, 1))."""
    return torch.tanh(x) if name == "erfinv" else x * 8


CASES = [
    case(f"{name}-random", Fn(lambda x, f=f, name=name: f(_domain(name, x))), (6, 40),
         expect_converters=(f"aten_{name}_default",))
    for name, f in FUNCTIONS.items()
] + [
    case("gamma-family-float64-and-integers", Fn(lambda x, n: (
        torch.lgamma(x.double() * 8), torch.digamma(x.double() * 8),
        torch.erfinv(torch.tanh(x.double())), torch.lgamma(n), torch.digamma(n),
        torch.erfinv(n))), lambda: (torch.randn(4, 30), torch.arange(-3, 5).reshape(2, 4)),
         expect_converters=tuple(f"aten_{name}_default" for name in FUNCTIONS)),
    case("polygamma-order-0", Fn(lambda x: (torch.polygamma(0, x * 8),
                                            torch.special.polygamma(0, x.double()))), (5, 9),
         expect_converters=("aten_polygamma_default",)),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_gamma_family_matches_torch(module, shapes, kwargs):
    args = shapes() if callable(shapes) else (torch.randn(shapes),)
    assert_converts(module, args, **kwargs)


@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_special_values_match_torch(name, dtype):
    """NaN/inf positions and signs exactly (digamma: -inf at 0.0, +inf at -0.0; erfinv:
    +-inf at +-1, NaN past, -0.0 kept), finite values within float32 rounding."""
    f = FUNCTIONS[name]
    args = (torch.tensor(SPECIALS[name], dtype=dtype).reshape(2, 13),)
    conversion = assert_converts(Fn(f), args, expect_converters=(f"aten_{name}_default",))
    want = f(args[0]).numpy()
    got = np.asarray(run_keras(conversion.model, args, False, like=f(args[0]))[0])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=4e-7, atol=4e-8)


@pytest.mark.parametrize("name, low, high", [("lgamma", -30.0, 60.0),
                                             ("digamma", -30.0, 60.0),
                                             ("erfinv", -1.0, 1.0)])
def test_accuracy_against_float64_is_torchs(name, low, high):
    """On 200000 points across the domain (negative non-integers included), the Keras
    model is within 4x torch float32's own distance from float64 (relative, floored at 1)."""
    f = FUNCTIONS[name]
    x = torch.linspace(low, high, 200001)[1:]
    x = x[x.abs() < 1] if name == "erfinv" else x[x != x.round()]  # poles: checked above
    conversion = assert_converts(Fn(f), (x,), expect_converters=(f"aten_{name}_default",))
    truth = f(x.double()).numpy()
    got = np.asarray(run_keras(conversion.model, (x,), False, like=f(x))[0], np.float64)
    scale = np.maximum(np.abs(truth), 1.0)
    torch_distance = np.max(np.abs(f(x).double().numpy() - truth) / scale)
    keras_distance = np.max(np.abs(got - truth) / scale)
    assert keras_distance <= 4 * torch_distance, (keras_distance, torch_distance)


def test_polygamma_of_a_higher_order_is_refused():
    with pytest.raises(crossport.UnsupportedOpError, match="polygamma of order 1"):
        crossport.convert(Fn(lambda x: torch.polygamma(1, x)).eval(), (torch.rand(2, 3),))
