"""round(x, decimals=n) against torch ("no converter" before): ATen's steps in float32,
so halves round to even after the scaling's own rounding, ``x * 10**n`` overflows to inf
where torch's does, and zeros keep their sign."""

from __future__ import annotations

import pytest
import torch

import crossport
from tests.harness import assert_converts
from tests.ops.opcases import Fn, case
from tests.ops.test_special_values import SPECIALS, _assert_signed_zeros

_VALUES = SPECIALS + [2.5, 0.125, 1.005, 0.015, 25.0, 35.0, 3e38, -3e38, 1e30, -1.5e-8,
                      123456.789, -0.05, 0.45, 1e-7]


def values():
    x = torch.tensor(_VALUES)
    return (torch.stack([x, x * 7.3, -x / 3.1]),)


def _rounded(x):
    return tuple(torch.round(x, decimals=d) for d in (0, 1, 2, 3, -1, -2, 5, 8, 38, -38))


CASES = [
    case("round-decimals-special-and-halfway-values", Fn(_rounded), values,
         expect_converters=("aten_round_decimals",)),
    case("round-decimals-float64", Fn(lambda x: (torch.round(x.double(), decimals=3),
                                                 torch.round(x.double(), decimals=-300))),
         values, expect_converters=("aten_round_decimals",)),
]


@pytest.mark.parametrize("module, make_inputs, kwargs", CASES)
def test_round_decimals_matches_torch(module, make_inputs, kwargs):
    args = make_inputs()
    conversion = assert_converts(module, args, **kwargs)
    _assert_signed_zeros(module.eval(), args, conversion)


def test_round_to_decimals_past_the_float_range_is_refused():
    """torch returns NaN everywhere once 10**n overflows float32."""
    with pytest.raises(crossport.UnsupportedOpError, match=r"10\*\*39 overflows float32"):
        crossport.convert(Fn(lambda x: torch.round(x, decimals=39)).eval(), (torch.randn(3),))
