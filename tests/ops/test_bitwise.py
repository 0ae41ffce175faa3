"""Bitwise and/or/xor/not and shifts against torch at integer extremes and odd counts.

Integers were refused ("bitwise ops on integers", or "no converter" for xor and the
shifts). Every row runs values near each type's limits against every other (and shift
counts from below 0 to past the type's width, where torch defines the result: 0 for a left
shift, the sign fill for a right shift, while TF's kernels clamp the count).
"""

from __future__ import annotations

import pytest
import torch

from tests.harness import assert_converts
from tests.ops.opcases import Fn, case
from tests.ops.test_special_values import near_limits

AND_OR_XOR = ("aten_bitwise_and_Tensor", "aten_bitwise_or_Tensor", "aten_bitwise_xor_tensor")


def _bitwise_all(a, b):
    return a & b, a | b, a ^ b, ~a, ~b


def with_counts(dtype, low=-3, high=None):
    """(values near ``dtype``'s limits, counts from ``low`` to past the width) as [n, m]."""
    info = torch.iinfo(dtype)
    values = near_limits(dtype)[0][:, 0]
    counts = torch.arange(max(low, info.min), min((high or info.bits + 4), info.max + 1),
                          dtype=dtype)
    n, m = len(values), len(counts)
    return values.repeat_interleave(m).reshape(n, m), counts.repeat(n).reshape(n, m)


def _shifts(a, b):
    return a << b, a >> b, torch.bitwise_left_shift(a, b), torch.bitwise_right_shift(a, b)


CASES = [
    *[case(f"and-or-xor-not-{str(dt)[6:]}-near-limits", Fn(_bitwise_all),
           lambda dt=dt: near_limits(dt),
           expect_converters=(*AND_OR_XOR, "aten_bitwise_not_default"))
      for dt in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)],
    case("bitwise-with-scalars-int8", Fn(lambda a, b: (a & 3, 5 | a, a ^ -2, b & -128)),
         lambda: near_limits(torch.int8), expect_converters=AND_OR_XOR),
    case("bitwise-mixed-widths-promote", Fn(lambda a, b: (a.to(torch.int8) & b, b ^ (a > 0),
                                                          (a > 0) | 6)),
         lambda: near_limits(torch.int32), expect_converters=AND_OR_XOR),
    case("bitwise-of-bools-is-logical", Fn(lambda a, b: (
        (a > 0) & (b < 0), (a > 0) | (b > 1), (a > 0) ^ (b > 0), ~(a > b))),
        lambda: near_limits(torch.int32),
        expect_converters=(*AND_OR_XOR, "aten_bitwise_not_default")),
    *[case(f"shifts-{str(dt)[6:]}-counts-out-of-range", Fn(_shifts),
           lambda dt=dt: with_counts(dt),
           expect_converters=("aten___lshift___tensor", "aten___rshift___tensor"))
      for dt in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)],
    case("shifts-by-constants-in-and-out-of-range", Fn(lambda a, b: (
        a << 3, a >> 2, a << 7, a >> 7, a << 8, a >> 9, a >> -1, a << -2,
        b.long() << 40, b.long() >> 63, b.long() << 64)),
        lambda: with_counts(torch.int8),
        expect_converters=("aten___lshift___tensor", "aten___rshift___tensor")),
    case("shift-promotes-int8-by-int64-count", Fn(lambda a, b: (a << b.long(), a >> b.long())),
         lambda: with_counts(torch.int8, high=20),
         expect_converters=("aten___lshift___tensor", "aten___rshift___tensor")),
    case("shift-of-a-scalar-by-a-tensor", Fn(lambda a, b: (
        torch.bitwise_left_shift(3, b), torch.bitwise_right_shift(-100, b))),
        lambda: with_counts(torch.int64),
        expect_converters=("aten___lshift___tensor", "aten___rshift___tensor")),
]


@pytest.mark.parametrize("module, make_inputs, kwargs", CASES)
def test_bitwise_matches_torch_at_the_extremes(module, make_inputs, kwargs):
    assert_converts(module, make_inputs(), **kwargs)
