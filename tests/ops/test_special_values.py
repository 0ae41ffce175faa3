"""Division, modulo, integer reductions and promotion on the values random inputs miss.

Every row runs a real torch module on inputs holding NaN, +-inf, +-0.0, huge and tiny
values (every special against every special for the binary ops) or integers near their
type's limits, and compares with the converted model: NaN/inf positions, dtypes and
integers exactly (the harness), and the sign of zero results where torch defines it (C's
fmod and torch's floor division give -0.0 by rule). Each row failed before its fix
(a float-quotient integer division, TF's FloorDiv/FloorMod semantics, reductions in the
input's integer type, Keras' own type promotion).

Left out on purpose: quotients past float32's range (``3e38 % 0.5``), where torch's own
result depends on its kernel (NaN from the vectorised loop, C's exact value from the scalar
tail of the same call), and subnormals, which TF's CPU kernels flush to zero
(docs/parity.md).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from crossport.parity.verify import run_keras
from tests.harness import assert_converts
from tests.ops.opcases import ConvThen, Fn, case

NAN, INF = float("nan"), float("inf")
# no pair of these divides past float32's range or into subnormals
SPECIALS = [NAN, INF, -INF, 0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 3.0, -3.0, 4.0, -4.0, 5.5, -7.0,
            1e-30, -1e-30, 100.0, -104.0, 2.0]


def all_pairs():
    """(a, b): every special against every special, as two [n, n] tensors."""
    s = torch.tensor(SPECIALS)
    n = len(SPECIALS)
    return s.repeat_interleave(n).reshape(n, n), s.repeat(n).reshape(n, n)


def with_negative_nan():
    """``all_pairs`` with NaNs whose sign bit is set and the smallest subnormals of both
    signs (torch's signbit reads the bit)."""
    a, b = all_pairs()
    extra = torch.tensor([-NAN, 1e-45, -1e-45, -NAN, NAN])
    return torch.cat([a.flatten(), extra]), torch.cat([b, -b.abs()], 1)


EXPONENTS = [0, 1, -1, 2, 100, 127, 128, 200, 277, 1000, -100, -126, -127, -149, -150, -200,
             -1000, 2**31 + 5, 2**40, -2**40, 2**63 - 1, -2**63]


def with_exponents():
    """Every special (and the extremes of the normal range) against every exponent, int64:
    where the scaled value stays finite, overflows, becomes subnormal or 0, and exponents
    C's int wraps. (No subnormal inputs: TF's CPU kernels read them as 0.)"""
    s = torch.tensor(SPECIALS + [-3e38, 3e38, 1.5e-38, -1.2e-38])
    e = torch.tensor(EXPONENTS)
    return (s.repeat_interleave(len(e)).reshape(len(s), len(e)),
            e.repeat(len(s)).reshape(len(s), len(e)))


def near_limits(dtype, divisor=False):
    """Every value near ``dtype``'s limits and around zero against every other; as a
    divisor, zeros become 1 and ``min / -1`` (undefined in C, SIGFPE) is avoided."""
    info = torch.iinfo(dtype)
    vals = [v for v in (info.min, info.min + 1, -7, -3, -2, -1, 0, 1, 2, 3, 7, 100,
                        info.max - 1, info.max) if info.min <= v <= info.max]
    t = torch.tensor(sorted(set(vals)), dtype=dtype)
    n = len(t)
    a, b = t.repeat_interleave(n).reshape(n, n), t.repeat(n).reshape(n, n)
    if divisor:
        b = torch.where(b == 0, torch.ones_like(b), b)
        if info.min < 0:
            a = torch.where((a == info.min) & (b == -1), a + 1, a)
    return a, b


def by_divisor(fn, dtype):
    """``fn(a, b)`` with the divisor a buffer (fresh random inputs would divide by zero)."""
    a, b = near_limits(dtype, divisor=True)
    return Fn(lambda m, x: fn(x, m.b), b=b), lambda: (a,)


def _floor(a, b):
    return torch.div(a, b, rounding_mode="floor")


def _trunc(a, b):
    return torch.div(a, b, rounding_mode="trunc")


FLOAT_CASES = [
    # TF's FloorDiv is floor(a / b): inf // 2 was inf (torch: NaN), -0.5 // inf was -0.0
    # (torch and Python: -1.0)
    case("floor-divide-floats-special-pairs", Fn(_floor), all_pairs,
         expect_converters=("aten_div_tensor_mode",)),
    case("floor-divide-operator-floats", Fn(lambda a, b: a // b), all_pairs,
         expect_converters=("aten_floor_divide_default",)),
    case("floor-divide-float-by-scalar", Fn(lambda a, b: _floor(a, -2.0) + _floor(b, 3.0)),
         all_pairs, expect_converters=("aten_div_tensor_mode",)),
    # fmod from a fixed-up floor modulo rounded: fmod(1e-30, -0.5) was 0.0, fmod(5.5, -inf) NaN
    case("fmod-floats-special-pairs", Fn(torch.fmod), all_pairs,
         expect_converters=("aten_fmod_tensor",)),
    case("fmod-float-by-scalar", Fn(lambda a, b: torch.fmod(a, -3.0) + torch.fmod(b, 2.0)),
         all_pairs, expect_converters=("aten_fmod_tensor",)),
    case("remainder-floats-special-pairs", Fn(torch.remainder), all_pairs,
         expect_converters=("aten_remainder_tensor",)),
    # converters added with the probe: isinf, and max()/min() over every element, which
    # propagate NaN (here one NaN among the pairs, and a row without it)
    case("isinf-and-all-element-max-min",
         Fn(lambda a, b: (torch.isinf(a), a.max(), b[4:, 3:].min(), (a > 0).long().isinf())),
         all_pairs, expect_converters=("aten_isinf_default", "aten_max_default",
                                       "aten_min_default")),
    # float64: the bound is DBL_MAX (a Python-float bound failed to run in float64) and
    # 1e300 is finite
    case("isinf-float64", Fn(lambda a, b: (torch.isinf(a * 1e290), torch.isinf(b))),
         lambda: tuple(t.double() for t in all_pairs()), expect_converters=("aten_isinf_default",)),
    # C99 float functions that were "no converter": hypot (inf beside NaN is inf, no
    # overflow at 1e30), fmax/fmin (NaN only where both are; + 0.0 leaves the sign of a
    # zero unspecified by torch out of the comparison), copysign (-0.0 and -inf give the
    # sign), log10 (of 0, negatives, inf), cumprod through inf, 0 and NaN
    case("hypot-fmax-fmin-copysign-log10-special-pairs",
         Fn(lambda a, b: (torch.hypot(a, b), torch.fmax(a, b) + 0.0, torch.fmin(a, b) + 0.0,
                          torch.copysign(a, b), torch.copysign(b, -0.0), torch.log10(a))),
         all_pairs, expect_converters=("aten_hypot_default", "aten_fmax_default",
                                       "aten_fmin_default", "aten_copysign_tensor",
                                       "aten_log10_default")),
    # angle of reals (was "no converter"): pi for negatives and -inf, +0 for 0, -0.0 and
    # positives, NaN itself; integers and bools give float32, float64 stays float64
    case("angle-of-reals-special-pairs",
         Fn(lambda a, b: (torch.angle(a), torch.angle(b > 0), torch.angle(a.double()),
                          torch.angle(torch.nan_to_num(b, 0.0, 9.0, -9.0).long()),
                          torch.angle(torch.nan_to_num(a, 0.0, 9.0, -9.0).int()))),
         all_pairs, expect_converters=("aten_angle_default",)),
    case("hypot-without-overflow", Fn(lambda a, b: torch.hypot(a * 1e30, b * 1e30)
                                      + torch.hypot(a * 1e-30, b * 1e-30) * 1e30),
         lambda: (torch.randn(3, 5), torch.randn(3, 5)),
         expect_converters=("aten_hypot_default",)),
    # were "no converter": prod of every element (NaN, inf * 0, signed zeros) and var_mean
    # (NaN and inf in a row; a row without them)
    case("prod-all-var-mean-std-mean-special-pairs",
         Fn(lambda a, b: (a.prod(), b[5:, 5:].prod(), a[3:5, 3:5].prod(), a[:, 5:].prod(),
                          *torch.var_mean(a, 1), *torch.std_mean(b[5:], 0, keepdim=True))),
         all_pairs, expect_converters=("aten_prod_default", "aten_var_mean_correction")),
    case("cumprod-through-special-values", Fn(lambda a, b: (torch.cumprod(b[:, 5:], 1),
                                                            torch.cumprod(a[::3], 0))),
         all_pairs, expect_converters=("aten_cumprod_default",)),
    # was "no converter": the sign bit itself (-0.0, -inf, a NaN with the sign bit set,
    # negative subnormals), also of a channels-last conv output
    case("signbit-special-values-and-negative-nan",
         Fn(lambda a, b: (torch.signbit(a), torch.signbit(b))), with_negative_nan,
         expect_converters=("aten_signbit_default",)),
    case("signbit-float64", Fn(lambda a, b: torch.signbit(a)),
         lambda: tuple(t.double() for t in with_negative_nan()),
         expect_converters=("aten_signbit_default",)),
    case("signbit-after-conv", ConvThen(torch.signbit), lambda: (torch.randn(2, 3, 6, 6),),
         expect_converters=("aten_conv_nd", "aten_signbit_default")),
    # was "no converter": ldexp scales exactly by an integer exponent (0 * 2**200 is 0, not
    # 0 * inf; the exponent wraps to 32 bits as torch's C int), by pow(2, e) for a float one
    case("ldexp-special-values-every-exponent", Fn(lambda a, e: (
        torch.ldexp(a, e), torch.ldexp(a, e.int()), torch.ldexp(a, (e % 7).float() / 2 - 1.5))),
         with_exponents,
         expect_converters=("aten_ldexp_tensor",)),
    case("ldexp-float64", Fn(lambda a, e: (torch.ldexp(a.double(), e),
                                           torch.ldexp(a.double() * 1e300, -e * 5))),
         with_exponents, expect_converters=("aten_ldexp_tensor",)),
    case("ldexp-after-conv", ConvThen(lambda y: torch.ldexp(y, (y * 40).long())),
         lambda: (torch.randn(2, 3, 6, 6),), expect_converters=("aten_conv_nd", "aten_ldexp_tensor")),
]

INT_CASES = [
    # through a float quotient: -2**31 // -7 came out 306783392 (torch 306783378)
    case("div-trunc-int32-near-limits", *by_divisor(_trunc, torch.int32),
         expect_converters=("aten_div_tensor_mode",)),
    case("div-trunc-int64-near-limits", *by_divisor(_trunc, torch.int64),
         expect_converters=("aten_div_tensor_mode",)),
    case("div-trunc-int8-near-limits", *by_divisor(_trunc, torch.int8),
         expect_converters=("aten_div_tensor_mode",)),
    case("div-floor-int32-near-limits", *by_divisor(_floor, torch.int32),
         expect_converters=("aten_div_tensor_mode",)),
    case("fmod-int64-near-limits", *by_divisor(torch.fmod, torch.int64),
         expect_converters=("aten_fmod_tensor",)),
    # torch sums and multiplies integers in int64: an int32 sum past 2**31 wrapped, an int8
    # product wrapped, a uint8 product came out uint32
    case("sum-int32-accumulates-in-int64", Fn(lambda a, b: a.sum(-1) + b.sum(0)),
         lambda: near_limits(torch.int32), expect_converters=("aten_sum_dim_intlist",)),
    case("sum-uint8-accumulates-in-int64", Fn(lambda a, b: a.sum()),
         lambda: near_limits(torch.uint8), expect_converters=("aten_sum_dim_intlist",)),
    case("prod-int8-in-int64", Fn(lambda a, b: a[:, 5:9].prod(-1)),
         lambda: near_limits(torch.int8), expect_converters=("aten_prod_dim_int",)),
    case("prod-uint8-in-int64", Fn(lambda a, b: a[:, -3:].prod(-1)),
         lambda: near_limits(torch.uint8), expect_converters=("aten_prod_dim_int",)),
    # Keras promotes bool + int to int32 (torch: int64); TF has no bool Maximum and no
    # unsigned Neg, so those models failed to run
    case("bool-plus-int-is-int64", Fn(lambda a, b: (a > 0) + 1 - (b > 0) * 2),
         lambda: near_limits(torch.int32),
         expect_converters=("aten_add_tensor", "aten_mul_tensor")),
    case("maximum-minimum-of-bools", Fn(lambda a, b: (torch.maximum(a > 0, b > 0),
                                                      torch.minimum(a > 0, b > 0))),
         lambda: near_limits(torch.int32),
         expect_converters=("aten_maximum_default", "aten_minimum_default")),
    case("neg-uint8-wraps", Fn(lambda a, b: -a), lambda: near_limits(torch.uint8),
         expect_converters=("aten_neg_default",)),
    # TF's integer Pow raises on a negative exponent (the model failed at run time); torch
    # gives 1 for a base of 1, +-1 for -1, else 0
    case("int-pow-negative-exponents", Fn(lambda a, b: (2 ** b, a ** b.clamp(-3, 5))),
         lambda: near_limits(torch.int32), expect_converters=("aten_pow_scalar",
                                                              "aten_pow_tensor_scalar")),
    case("uint8-pow", Fn(lambda a, b: (2 ** a[:, :3], a[:, :3] ** (a[:, :3] % 4))),
         lambda: near_limits(torch.uint8), expect_converters=("aten_pow_scalar",
                                                              "aten_pow_tensor_scalar")),
    # Keras promotes a narrow integer tensor with a Python number to int32
    case("int8-remainder-fmod-floordiv-by-scalar",
         Fn(lambda a, b: (a % -3, torch.fmod(a, -3), a // -3)),
         lambda: near_limits(torch.int8),
         expect_converters=("aten_remainder_tensor", "aten_fmod_tensor",
                            "aten_floor_divide_default")),
    case("where-bool-tensor-int-scalar-is-int64", Fn(lambda a, b: torch.where(a > b, a > 0, 2)),
         lambda: near_limits(torch.int8), expect_converters=("aten_where_self",)),
    case("signbit-int64-int32-int8-near-limits",
         Fn(lambda a, b: (torch.signbit(a), torch.signbit(a.int()), torch.signbit(a.to(torch.int8)))),
         lambda: near_limits(torch.int64), expect_converters=("aten_signbit_default",)),
    case("signbit-uint8-and-bool", Fn(lambda a, b: (torch.signbit(a), torch.signbit(a > 3))),
         lambda: near_limits(torch.uint8), expect_converters=("aten_signbit_default",)),
    case("ldexp-of-integers", Fn(lambda a, b: (torch.ldexp(a, b.clamp(-40, 40)),
                                               torch.ldexp(a.int(), b.clamp(-3, 3).to(torch.int8)))),
         lambda: near_limits(torch.int64), expect_converters=("aten_ldexp_tensor",)),
    case("int8-plus-int64-and-float", Fn(lambda a, b: (a + b.long(), a * 1.5)),
         lambda: near_limits(torch.int8), expect_converters=("aten_add_tensor", "aten_mul_tensor")),
]


def _assert_signed_zeros(module, args, conversion):
    """Where torch returns a zero, Keras returns the zero of the same sign."""
    with torch.no_grad():
        out = module(*args)
    refs = list(out) if isinstance(out, tuple) else [out]
    for ref, got in zip(refs, run_keras(conversion.model, args, False, like=out)):
        ref = ref.numpy()
        if ref.dtype.kind != "f":
            continue
        zeros = ref == 0
        differ = zeros & (np.signbit(ref) != np.signbit(np.asarray(got)))
        assert not differ.any(), (
            f"{int(differ.sum())} zero(s) of the wrong sign, at inputs "
            f"{[tuple(a[differ].tolist()[:4]) for a in args]}")


@pytest.mark.parametrize("module, make_inputs, kwargs", FLOAT_CASES)
def test_float_division_on_special_values(module, make_inputs, kwargs):
    args = make_inputs()
    conversion = assert_converts(module, args, **kwargs)
    _assert_signed_zeros(module.eval(), args, conversion)


@pytest.mark.parametrize("module, make_inputs, kwargs", INT_CASES)
def test_integers_near_their_limits(module, make_inputs, kwargs):
    assert_converts(module, make_inputs(), **kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ldexp_by_integers_is_exact(dtype):
    """Bit for bit where torch's result is a normal number, zero, inf or NaN (a subnormal
    result is flushed to zero by TF's CPU kernels): the normalized comparison above would
    hide an error in a small value beside a huge one."""
    a, e = with_exponents()
    a = a.to(dtype)
    module = Fn(torch.ldexp).eval()
    conversion = assert_converts(module, (a, e), expect_converters=("aten_ldexp_tensor",))
    want = module(a, e).numpy()
    got = np.asarray(run_keras(conversion.model, (a, e), False, like=torch.ldexp(a, e))[0])
    tiny = np.finfo(want.dtype).tiny
    normal = ~((want != 0) & (np.abs(want) < tiny))
    bits = {np.float32: np.int32, np.float64: np.int64}[want.dtype.type]
    assert np.array_equal(got[normal].view(bits), want[normal].view(bits))


# A 0-d constant (a buffer) reaches the bit views as an eager tensor, whose TF TensorShape
# is truthy at rank 0: same_width_view indexed its last dim and raised IndexError (ldexp's
# integer OpInfo samples: -8 scaled by a buffer exponent 6)
ZERO_D_CONSTANT_CASES = [
    case("ldexp-of-an-integer-by-a-0d-buffer-exponent",
         Fn(lambda self, a: torch.ldexp(a, self.e), e=torch.tensor(6)),
         lambda: (torch.tensor(-8),), expect_converters=("aten_ldexp_tensor",)),
    case("ldexp-by-0d-buffer-exponents-int32-and-negative",
         Fn(lambda self, a: (torch.ldexp(a, self.e), torch.ldexp(a, -2 * self.e.int())),
            e=torch.tensor(130)),
         lambda: (torch.tensor([-8.0, 1e-30, 3e38, 0.0]),),
         expect_converters=("aten_ldexp_tensor",)),
]


@pytest.mark.parametrize("module, make_inputs, kwargs", ZERO_D_CONSTANT_CASES)
def test_bit_views_of_0d_constants(module, make_inputs, kwargs):
    assert_converts(module, make_inputs(), **kwargs)
