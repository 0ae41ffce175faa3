"""Bitwise and, or, xor, not and shifts: two's complement integers, logical ops on bools.

torch computes in the promoted dtype (``int8 << int64`` is int64, ``bool & 3`` int64),
wrapping as C does. A shift count outside ``[0, bits)`` is defined in torch (ATen's
``lshift``/``rshift`` kernels): a left shift gives 0, a right shift the sign fill (-1 for
a negative signed value, else 0); TF's LeftShift/RightShift clamp the count into range
instead (a right shift by -1 returned the value unchanged), so the converters select
torch's result there. TFLite: ``BITWISE_XOR`` and ``RIGHT_SHIFT`` are builtins (xor, not
and right shifts of integers up to 32 bits export); TF's BitwiseAnd/BitwiseOr/LeftShift
have none, and their export is refused as a Flex op naming the torch source.
"""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.to_keras.registry import Policy, register
from crossport.to_keras.scalars import promoted_bound
from crossport.to_keras.values import keras_dtype

aten = torch.ops.aten
ops = keras.ops


# Both operands go through promoted_bound: torch's result dtype, a Python number a numpy
# scalar of it wrapped as torch casts it (``int8 & 300`` is ``& 44``; Keras would make it an
# int32 tensor and promote an int8 operand to int32, and numpy refused 300 as an int8).


def _logical_or_bitwise(logical, bitwise):
    def fn(ctx, self, other):
        if ctx.out_dtype == torch.bool:
            return logical(self, other)
        return bitwise(*promoted_bound(ctx, self, other))
    return fn


_and = _logical_or_bitwise(ops.logical_and, ops.bitwise_and)
_or = _logical_or_bitwise(ops.logical_or, ops.bitwise_or)
_xor = _logical_or_bitwise(ops.logical_xor, ops.bitwise_xor)


@register(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar, aten.bitwise_and.Scalar_Tensor,
          aten.__and__.Tensor, aten.__and__.Scalar, policy=Policy.AGNOSTIC, dynamic=True)
def aten_bitwise_and_Tensor(ctx, self, other):
    """bitwise_and.Tensor(Tensor self, Tensor other) -> Tensor (of bools: logical and)"""
    return _and(ctx, self, other)


@register(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar, aten.bitwise_or.Scalar_Tensor,
          aten.__or__.Tensor, aten.__or__.Scalar, policy=Policy.AGNOSTIC, dynamic=True)
def aten_bitwise_or_Tensor(ctx, self, other):
    """bitwise_or.Tensor(Tensor self, Tensor other) -> Tensor (of bools: logical or)"""
    return _or(ctx, self, other)


@register(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar, aten.bitwise_xor.Scalar_Tensor,
          aten.__xor__.Tensor, aten.__xor__.Scalar, policy=Policy.AGNOSTIC, dynamic=True)
def aten_bitwise_xor_tensor(ctx, self, other):
    """bitwise_xor.Tensor(Tensor self, Tensor other) -> Tensor (of bools: logical xor)"""
    return _xor(ctx, self, other)


@register(aten.bitwise_not.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_bitwise_not_default(ctx, self):
    """bitwise_not(Tensor self) -> Tensor: of bools the logical not; of integers ``x ^ ~0``
    (every bit set), which TFLite runs as its BITWISE_XOR builtin (TF's Invert has none)."""
    if ctx.out_dtype == torch.bool:
        return ops.logical_not(self)
    dtype = keras_dtype(ctx.out_dtype)
    return ops.bitwise_xor(self, np.asarray(np.iinfo(dtype).max if dtype.startswith("uint")
                                            else -1, dtype=dtype))


def _bits(dtype: str) -> int:
    return np.iinfo(dtype).bits


def _shift(ctx, self, other, left: bool):
    """``self << other`` / ``self >> other`` with torch's rule for a count outside
    ``[0, bits)``: 0 for a left shift, the sign fill for a right shift."""
    dtype = keras_dtype(ctx.out_dtype)
    if not dtype.startswith(("int", "uint")):
        raise ctx.unsupported(f"shifts of {ctx.out_dtype} (torch shifts integers only)")
    self, other = promoted_bound(ctx, self, other)
    bits = _bits(dtype)
    shift = ops.left_shift if left else ops.right_shift
    signed = not dtype.startswith("uint")

    def out_of_range(x):
        if left:
            return ops.zeros_like(x)
        return shift(x, np.asarray(bits - 1, dtype)) if signed else ops.zeros_like(x)

    if isinstance(other, (np.ndarray, np.generic)) and np.ndim(other) == 0:  # constant count
        if 0 <= int(other) < bits:
            return shift(self, other)
        if isinstance(self, (np.ndarray, np.generic)):
            return self << other if left else self >> other
        return out_of_range(self)
    valid = ops.logical_and(ops.greater_equal(other, 0), ops.less(other, bits))
    count = ops.where(valid, other, ops.zeros_like(other))
    return ops.where(valid, shift(self, count), out_of_range(self))


@register(aten.__lshift__.Tensor, aten.__lshift__.Scalar, aten.bitwise_left_shift.Tensor,
          aten.bitwise_left_shift.Tensor_Scalar, aten.bitwise_left_shift.Scalar_Tensor,
          policy=Policy.AGNOSTIC, dynamic=True)
def aten___lshift___tensor(ctx, self, other):
    """__lshift__.Tensor(Tensor self, Tensor other) -> Tensor: wraps in the result dtype; a
    count below 0 or of the width or more gives 0, as torch's kernel does."""
    return _shift(ctx, self, other, left=True)


@register(aten.__rshift__.Tensor, aten.__rshift__.Scalar, aten.bitwise_right_shift.Tensor,
          aten.bitwise_right_shift.Tensor_Scalar, aten.bitwise_right_shift.Scalar_Tensor,
          policy=Policy.AGNOSTIC, dynamic=True)
def aten___rshift___tensor(ctx, self, other):
    """__rshift__.Tensor(Tensor self, Tensor other) -> Tensor: arithmetic on signed types; a
    count below 0 or of the width or more gives the sign fill (-1 or 0), as torch's does."""
    return _shift(ctx, self, other, left=False)
