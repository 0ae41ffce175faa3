"""Integer arithmetic and casts with torch semantics (pitfalls.md item 15).

Inputs include negatives so floor vs trunc division and the sign of remainders show;
integer outputs compare exactly.
"""

from __future__ import annotations

import pytest
import torch

from tests.harness import assert_converts
from tests.ops.opcases import ConvThen, Fn, case


def ints(shape, low=-9, high=10, seed=0, dtype=torch.int64):
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed),
                         dtype=dtype)


def randn(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def nonzero(shape, seed=1):
    """A divisor buffer with both signs and no zeros (fresh inputs could hold zeros)."""
    x = ints(shape, -5, 5, seed)
    return torch.where(x == 0, torch.full_like(x, 3), x)


def by_divisor(fn):
    return Fn(lambda m, a: fn(a, m.b), b=nonzero((3, 5)))


def fibonacci(n):
    """F(1)..F(n): consecutive ones are Euclid's slowest inputs (Lamé)."""
    f = [1, 1]
    while len(f) < n:
        f.append(f[-1] + f[-2])
    return f[:n]


def number_theory_pairs(dtype):
    """Every value near ``dtype``'s limits, zeros, signs, shared factors and the two largest
    Fibonacci numbers of the type, against every other."""
    info = torch.iinfo(dtype)
    fib = [f for f in fibonacci(93) if f <= info.max][-2:]
    vals = [info.min, info.min + 1, info.max, info.max - 1, 0, 1, -1, 6, -6, 12, -18, 35,
            2 ** (info.bits - 2), -(2 ** (info.bits - 3)) * 3, *fib, *(-f for f in fib)]
    t = torch.tensor(sorted({v for v in vals if info.min <= v <= info.max}), dtype=dtype)
    n = len(t)
    a, b = t.repeat_interleave(n).reshape(n, n), t.repeat(n).reshape(n, n)
    # torch's lcm divides the minimum by a gcd of -1 there: SIGFPE (int32/int64)
    traps = (a == info.min) & (torch.gcd(a, b) == -1)
    return torch.where(traps, a + 1, a), b


def gcd_lcm(a, b):
    return torch.gcd(a, b), torch.lcm(a, b)


GCD = ("aten_gcd_default", "aten_lcm_default")


CASES = [
    case("pitfall15-floor-divide-negatives", Fn(lambda a: a // 4), lambda: (ints((3, 5)),), expect_converters=("aten_floor_divide_default",)),
    # sort indices are below the row length: the division runs in int32 (a TFLite builtin)
    case("floor-divide-of-sort-indices-in-int32", Fn(lambda x: torch.sort(x).indices // 3),
         lambda: (torch.randn(3, 7),), expect_converters=("aten_floor_divide_default", "aten_sort_default")),
    case("pitfall15-floor-divide-tensor", by_divisor(lambda a, b: a // b),
         lambda: (ints((3, 5)),), expect_converters=("aten_floor_divide_default",)),
    case("pitfall15-div-trunc", by_divisor(lambda a, b: torch.div(a, b, rounding_mode="trunc")),
         lambda: (ints((3, 5)),), expect_converters=("aten_div_tensor_mode",)),
    case("pitfall15-div-floor-mode", by_divisor(lambda a, b: torch.div(a, b, rounding_mode="floor")),
         lambda: (ints((3, 5)),),
         expect_converters=("aten_div_tensor_mode",)),
    case("div-true-ints-give-float", by_divisor(lambda a, b: a / b),
         lambda: (ints((3, 5)),), expect_converters=("aten_div_tensor",)),
    case("pitfall15-remainder-negatives", Fn(lambda a: a % 4), lambda: (ints((3, 5)),), expect_converters=("aten_remainder_tensor",)),
    case("pitfall15-remainder-negative-divisor", by_divisor(lambda a, b: torch.remainder(a, b)),
         lambda: (ints((3, 5)),), expect_converters=("aten_remainder_tensor",)),
    case("pitfall15-fmod-sign-of-dividend", by_divisor(lambda a, b: torch.fmod(a, b)),
         lambda: (ints((3, 5)),),
         expect_converters=("aten_fmod_tensor",)),
    case("int-add-mul-sub", Fn(lambda a, b: a * 3 - b + 1), lambda: (ints((2, 4)), ints((2, 4), seed=2)), expect_converters=("aten_add_tensor", "aten_mul_tensor", "aten_sub_tensor")),
    case("int32-input", Fn(lambda a: a * 2 + 1), lambda: (ints((2, 4), dtype=torch.int32),), expect_converters=("aten_add_tensor", "aten_mul_tensor")),
    case("int16-input", Fn(lambda a: a * 2 + 1),
         lambda: (ints((2, 4), dtype=torch.int16),), expect_converters=("aten_add_tensor", "aten_mul_tensor")),
    case("uint8-input", Fn(lambda a: a.float() / 255),
         lambda: (ints((2, 4), 0, 255, dtype=torch.uint8),), expect_converters=("aten_div_tensor", "aten_to_copy_default")),
    case("cast-float-to-int8", Fn(lambda x: (x * 30).to(torch.int8)), lambda: (randn(3, 4),), expect_converters=("aten_mul_tensor", "aten_to_copy_default")),
    case("cast-float-to-uint8", Fn(lambda x: (x * 30).abs().to(torch.uint8)),
         lambda: (randn(3, 4),), expect_converters=("aten_abs_default", "aten_mul_tensor", "aten_to_copy_default")),
    case("cast-float-to-int16", Fn(lambda x: (x * 300).to(torch.int16)), lambda: (randn(3, 4),), expect_converters=("aten_mul_tensor", "aten_to_copy_default")),
    case("int-math-promotes-to-float", Fn(
        lambda a: 1 / (a.abs() + 1) + torch.sqrt(a.abs()) + torch.exp(a.clamp(-3, 3))
        + torch.atan2(a, a.abs() + 1)), lambda: (ints((3, 5)),), expect_converters=("aten_abs_default", "aten_add_tensor", "aten_atan2_default", "aten_clamp_default", "aten_exp_default", "aten_mul_tensor", "aten_reciprocal_default", "aten_sqrt_default")),
    case("forward-writes-to-its-input", Fn(lambda a: a.add_(1) * 2), lambda: (ints((2, 4)),), expect_converters=("aten_add_tensor", "aten_mul_tensor")),
    case("cast-int-to-float", Fn(lambda a: a.float() * 0.5), lambda: (ints((2, 4)),), expect_converters=("aten_mul_tensor", "aten_to_copy_default")),
    case("cast-float-to-int-truncates", Fn(lambda x: (x * 3).long()),
         lambda: (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),),
         expect_converters=("aten_assert_tensor_metadata_default", "aten_to_copy_default")),
    case("cast-bool-to-int-sum", Fn(lambda a: (a > 0).long().sum(-1)), lambda: (ints((3, 5)),), expect_converters=("aten_gt_Scalar", "aten_sum_dim_intlist", "aten_to_copy_default")),
    case("int-comparisons", Fn(lambda a, b: (a >= b) | (a == 0)),
         lambda: (ints((3, 5)), ints((3, 5), seed=3)),
         expect_converters=("aten_eq_Scalar", "aten_ge_Tensor")),
    case("sigmoid-tanh-of-int64-promote-to-float", Fn(lambda a: torch.sigmoid(a) + torch.tanh(a)),
         lambda: (ints((3, 5)),), expect_converters=("aten_add_tensor", "aten_sigmoid_default",
                                                      "aten_tanh_default")),
    case("int-sum-to-int64", Fn(lambda a: a.sum(1)), lambda: (ints((3, 5), dtype=torch.int32),),
         expect_converters=("aten_sum_dim_intlist",)),
    case("int-max-min-clamp", Fn(lambda a, b: torch.maximum(a, b).clamp(-3, 4)),
         lambda: (ints((3, 5)), ints((3, 5), seed=4)),
         expect_converters=("aten_maximum_default",)),
    # torch rounds integers to themselves in their dtype; Keras' floor/ceil gave float32
    case("int-floor-ceil-trunc-keep-dtype", Fn(lambda a: (torch.floor(a), torch.ceil(a),
                                                          torch.trunc(a.int()))),
         lambda: (ints((3, 5)),), expect_converters=("aten_floor_default", "aten_ceil_default",
                                                      "aten_trunc_default")),
    case("int-abs-neg", Fn(lambda a: -a.abs()), lambda: (ints((3, 5)),),
         expect_converters=("aten_abs_default", "aten_neg_default")),
    case("pitfall15-floor-div-float", Fn(lambda x: x // 0.3),
         lambda: (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),),
         expect_converters=("aten_floor_divide_default",)),
    case("pitfall15-remainder-float-negative", Fn(lambda x: x % 0.7),
         lambda: (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),),
         expect_converters=("aten_remainder_tensor",)),
    # gcd/lcm (were "no converter"): torch's C semantics, abs of the minimum included
    # (gcd(-2**63, 6) is -2), lcm wrapping, Euclid's slowest inputs (consecutive Fibonacci)
    *(case(f"gcd-lcm-{str(dtype)[6:]}-near-limits", Fn(gcd_lcm),
           (lambda dtype=dtype: number_theory_pairs(dtype)), expect_converters=GCD)
      for dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)),
    case("gcd-lcm-small-random", Fn(gcd_lcm), lambda: (ints((4, 6)), ints((4, 6), seed=2)),
         expect_converters=GCD),
    case("gcd-lcm-mixed-dtypes", Fn(lambda a, b: (torch.gcd(a.int(), b), torch.lcm(a.to(torch.int8), b.int()))),
         lambda: (ints((4, 6)), ints((4, 6), seed=2)), expect_converters=GCD),
    case("gcd-lcm-after-conv", ConvThen(lambda y: gcd_lcm((y * 60).long(), (y.flip(1) * 40).long())),
         lambda: (randn(1, 3, 6, 6),), expect_converters=("aten_conv_nd", *GCD)),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_integer(module, shapes, kwargs):
    assert_converts(module, shapes(), **kwargs)


# torch casts a fill value into the tensor's dtype (toward zero; nonzero is True for bool)
FILL_CASES = [
    case("masked-fill-float-into-int64-truncates", Fn(lambda a: a.masked_fill(a > 0, 2.5)),
         lambda: (ints((3, 5)),), expect_converters=("aten_gt_Scalar", "aten_masked_fill_scalar")),
    case("masked-fill-negative-float-into-int64", Fn(lambda a: a.masked_fill(a > 0, -2.7)),
         lambda: (ints((3, 5)),), expect_converters=("aten_gt_Scalar", "aten_masked_fill_scalar")),
    case("masked-fill-float-into-int32", Fn(lambda a: a.int().masked_fill(a > 0, 3.9)),
         lambda: (ints((3, 5)),), expect_converters=("aten_gt_Scalar", "aten_masked_fill_scalar", "aten_to_copy_default")),
    case("masked-fill-float-into-bool", Fn(lambda a: (a > 0).masked_fill(a > 2, 0.5)),
         lambda: (ints((3, 5)),), expect_converters=("aten_gt_Scalar", "aten_masked_fill_scalar")),
    case("masked-fill-tensor-into-int64",
         Fn(lambda a: a.masked_fill(a > 0, torch.tensor(2.5))), lambda: (ints((3, 5)),), expect_converters=("aten_gt_Scalar", "aten_masked_fill_scalar")),
    case("where-int-tensor-float-scalar-promotes", Fn(lambda a: torch.where(a > 0, a, 2.5)),
         lambda: (ints((3, 5)),), expect_converters=("aten_gt_Scalar", "aten_where_self")),
    case("full-like-float-into-int64", Fn(lambda a: torch.full_like(a, -2.5) + a),
         lambda: (ints((3, 5)),), expect_converters=("aten_add_tensor", "aten_full_like_default")),
]


@pytest.mark.parametrize("module, shapes, kwargs", FILL_CASES)
def test_fill_value_follows_torch_type_promotion(module, shapes, kwargs):
    conversion = assert_converts(module, shapes(), **kwargs)
    assert conversion.model.outputs[0].dtype == str(module(*shapes()).dtype).split(".")[-1]
