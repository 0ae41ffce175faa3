"""Division with torch's rounding rules: true division, floor and trunc division,
``remainder`` (the divisor's sign, like Python) and ``fmod`` (the dividend's, like C).

Integer semantics follow torch (pitfalls.md item 15): floor division rounds down, trunc
division rounds toward zero, exactly (never through a float quotient). Float floor division
and fmod follow ATen's algorithms step for step (TF's FloorDiv/FloorMod differ at inf,
-0.0 and tiny values). Python numbers are bound as torch binds them
(:mod:`crossport.to_keras.scalars`): float16 ``div`` in every rounding mode applies the
number as a float32, ``remainder`` and ``fmod`` round it to float16 first; float16 floor
division of two tensors rounds each step to float16, as torch's kernel does.
"""

from __future__ import annotations

import keras
import torch

from crossport.to_keras.int_bounds import fits_int32
from crossport.to_keras.ops.elementwise import keras_multiply
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.scalars import (
    bound,
    dtype_name,
    in_dtype,
    in_float32,
    in_result_dtype,
    integer_result,
    is_number,
    is_tensor,
    promoted,
    promoted_bound,
)
from crossport.to_keras.values import keras_dtype

aten = torch.ops.aten
ops = keras.ops


@register(aten.div.Tensor, aten.div_.Tensor, aten.div.Scalar, policy=Policy.AGNOSTIC, dynamic=True)
def aten_div_tensor(ctx, self, other):
    """div.Tensor(Tensor self, Tensor other) -> Tensor (true division, ints give float)"""
    return _divided(self, other)


def _divided(x, y, rounded=None):
    """``x / y``, then ``rounded`` (trunc); a half tensor by a Python number in float32 with
    the number a float32, rounded once, as torch's kernels (``div`` in every mode)."""
    def divide(a, b):
        quotient = ops.true_divide(a, b)
        return quotient if rounded is None else rounded(quotient)
    return in_float32(x, divide, y) if is_number(y) and is_tensor(x) else divide(x, y)


def fmod_float(a, b):
    """C's ``fmod`` (torch.fmod) of floats, exactly.

    TF's FloorMod of two non-negative floats is C's fmod (its sign fix-up never fires), so
    ``|a| mod |b|`` with the dividend's sign is fmod without rounding. Fixing up a floor
    modulo instead (``r - b``) rounds: fmod(1e-30, -0.5) came out 0.0, and fmod(x, -inf)
    NaN (torch: 1e-30 and x). A zero result keeps the dividend's sign, as fmod(-4., 2.) is
    -0.0 (``a * 0``: exact, and NaN only where the result is NaN anyway).
    """
    m = ops.mod(ops.abs(a), ops.abs(b))
    r = ops.where(ops.less(a, 0), ops.negative(m), m)
    return ops.where(ops.equal(r, 0), keras_multiply(a, 0.0), r)


def floor_divide_float(a, b):
    """torch's float floor division (ATen ``div_floor_floating``), step for step.

    TF's FloorDiv is ``floor(a / b)``: inf // 2 is inf where torch gives NaN (its quotient
    goes through fmod(inf, 2), NaN), and -0.5 // inf is -0.0 where torch (and Python) give
    -1. torch: ``mod = fmod(a, b)``, ``div = (a - mod) / b``, one less where mod's sign
    differs from b's, then floor with a correction for the division's rounding; a zero
    quotient takes the sign of ``a / b``; ``b == 0`` is plain IEEE ``a / b``.
    """
    mod = fmod_float(a, b)
    div = ops.true_divide(ops.subtract(a, mod), b)
    signs_differ = ops.not_equal(ops.less(b, 0), ops.less(mod, 0))
    div = ops.where(ops.logical_and(ops.not_equal(mod, 0), signs_differ), div - 1.0, div)
    floored = ops.floor(div)
    floored = ops.where(ops.greater(div - floored, 0.5), floored + 1.0, floored)
    quotient = ops.true_divide(a, b)
    floored = ops.where(ops.not_equal(div, 0), floored, keras_multiply(quotient, 0.0))
    return ops.where(ops.equal(b, 0), quotient, floored)


def _floor_divide(ctx, a, b):
    """``a // b`` in torch's result dtype. Half by a number, or by one element (a static
    shape of ones): in float32 with the number a float32, rounded once (torch's scalar
    kernel; by float16's 0.0999755859 ``0.9 // 0.1`` was 9, torch 8); by a tensor: each
    step rounded to half, as torch's kernel does (in float32 it was 1 off past 1024)."""
    if ctx.out_dtype.is_floating_point and is_number(b):
        return in_float32(ops.convert_to_tensor(promoted(ctx, a)[0]),
                          lambda x: floor_divide_float(x, bound(b, dtype_name(x))))
    if ctx.out_dtype == torch.int64 and all(fits_int32(x) for x in ctx.node.args[:2]):
        # sizes prove both fit int32 (index arithmetic): the same integers, and a TFLite
        # builtin (FLOOR_DIV has no int64 kernel)
        a, b = (ops.cast(x, "int32") if is_tensor(x) else x for x in (a, b))
        return in_result_dtype(ctx, ops.floor_divide(a, b))
    a, b = promoted_bound(ctx, a, b)
    if not ctx.out_dtype.is_floating_point:
        return in_result_dtype(ctx, ops.floor_divide(a, b))  # TF's integer FloorDiv is exact
    a = ops.convert_to_tensor(a)
    one_element = all(d == 1 for d in tuple(getattr(b, "shape", ())))
    return in_float32(a, floor_divide_float, b) if one_element else floor_divide_float(a, b)


def _trunc_divide_int(ctx, a, b):
    """Integer division rounding toward zero, exactly: the floor quotient plus one where a
    remainder is left and the signs differ. Through a float32 quotient, as before, int32
    values past 2**24 came out wrong (-2**31 // -7 gave 306783392, torch 306783378), int64
    ones past 2**24 too. Narrower integers run in int32 (exact, and TFLite's FloorDiv and
    Add have int32 kernels, not int8 ones); int64 stays int64, which TFLite cannot run
    (no int64 FloorDiv): its export refuses, as it does for an int64 ``//``."""
    want = keras_dtype(ctx.out_dtype)
    work = "int64" if want == "int64" else "int32"
    a, b = (in_dtype(x, work) for x in promoted_bound(ctx, a, b))  # int8 // 300 is // 44
    quotient = ops.floor_divide(a, b)
    inexact = ops.not_equal(ops.mod(a, b), 0)
    signs_differ = ops.not_equal(ops.less(a, 0), ops.less(b, 0))
    quotient = ops.where(ops.logical_and(inexact, signs_differ), quotient + 1, quotient)
    return quotient if work == want else ops.cast(quotient, want)


@register(aten.div.Tensor_mode, aten.div.Scalar_mode, policy=Policy.AGNOSTIC, dynamic=True)
def aten_div_tensor_mode(ctx, self, other, rounding_mode=None):
    """div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor

    floor: torch's float algorithm (``floor_divide_float``); trunc of integers: exact
    integer arithmetic (``_trunc_divide_int``), never through a float quotient.
    """
    if rounding_mode == "floor":
        return _floor_divide(ctx, self, other)
    if rounding_mode == "trunc" and integer_result(ctx):
        return _trunc_divide_int(ctx, self, other)
    return _divided(self, other, None if rounding_mode is None else ops.trunc)


@register(aten.floor_divide.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_floor_divide_default(ctx, self, other):
    """floor_divide(Tensor self, Tensor other) -> Tensor (div with rounding_mode='floor')"""
    return _floor_divide(ctx, self, other)


@register(aten.remainder.Tensor, aten.remainder.Scalar, policy=Policy.AGNOSTIC, dynamic=True)
def aten_remainder_tensor(ctx, self, other):
    """remainder.Tensor(Tensor self, Tensor other) -> Tensor (sign of the divisor, like Python)"""
    self, other = promoted_bound(ctx, self, other)
    if ctx.out_dtype.is_floating_point:  # half: in float32, the number bound to half first
        return in_float32(self, ops.mod, other)
    return in_result_dtype(ctx, ops.mod(self, other))


@register(aten.fmod.Tensor, aten.fmod.Scalar, policy=Policy.AGNOSTIC, dynamic=True)
def aten_fmod_tensor(ctx, self, other):
    """fmod.Tensor(Tensor self, Tensor other) -> Tensor (sign of the dividend, like C)

    Floats: ``fmod_float`` (exact). Integers: the floor modulo minus the divisor where
    their signs differ, exact in integer arithmetic.
    """
    self, other = promoted_bound(ctx, self, other)
    if ctx.out_dtype.is_floating_point:
        return fmod_float(ops.convert_to_tensor(self), other)
    r = ops.mod(self, other)
    # signs compared with less-than, not Sign: TFLite has no int64 Sign kernel
    signs_differ = ops.not_equal(ops.less(r, 0), ops.less(self, 0))
    return in_result_dtype(ctx, ops.where(ops.logical_and(r != 0, signs_differ), r - other, r))
