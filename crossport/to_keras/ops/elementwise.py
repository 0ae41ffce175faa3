"""Elementwise arithmetic, comparisons and math with torch broadcasting.

All AGNOSTIC: the emitter hands every tensor and constant argument over in one layout
(torch broadcasting pads leading dims, so constants are expanded before permuting).
Division, ``remainder`` and ``fmod`` (pitfalls.md item 15) are in ``division.py``; Python
numbers are bound to the computation dtype by ``crossport/to_keras/scalars.py``.
"""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.to_keras.registry import Policy, register
from crossport.to_keras.scalars import (
    bound,
    bound_operands,
    dtype_name,
    float_operand,
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


def keras_add(x, y):
    """``x + y`` with numpy broadcasting, safe from Keras' TF ``bias_add`` shortcut.

    ``keras.ops.add`` on TensorFlow becomes ``tf.nn.bias_add`` whenever ``y`` squeezes to a
    vector as long as ``x``'s dim 1 or last dim, without checking which axis ``y`` runs along
    or that ``x`` is not itself broadcast (Keras 3.15): ``[1, 4, 4, 1] + [1, 1, 1, 4]`` returns
    ``[1, 4, 4, 1]``. ``x - (-y)`` is exactly ``x + y`` in IEEE arithmetic and has no shortcut.
    """
    if isinstance(x, (int, float)) or isinstance(y, (int, float)):
        return ops.add(x, y)
    nonunit = [d for d in tuple(getattr(y, "shape", ())) if d is None or d > 1]
    if len(nonunit) == 1 and len(tuple(getattr(x, "shape", ()))) > 1:
        return ops.subtract(x, negated(y))
    return ops.add(x, y)


def negated(x):
    """``-x``; of floats ``x * -1``: LiteRT's (XNNPACK's) ``NEG`` computes ``0 - x``, so
    ``-(0.0)`` came out +0.0 in a .tflite file (``neg``, ``copysign(0.0, -1.0)``); its ``MUL``
    keeps the sign of zero, and costs the same."""
    if isinstance(x, (int, float, np.ndarray)):
        return -x
    if keras.backend.is_float_dtype(x.dtype):
        return ops.multiply(x, -1.0)
    return ops.negative(x)


def nan_kept(x, y):
    """``y``, made NaN where ``x`` is NaN, for ops whose LiteRT kernel loses a NaN input:
    ``min(|x|, 0)`` is 0 for every other ``x`` (inf too) and NaN at NaN, so adding it keeps
    every other value of ``y`` (a zero becomes +0.0). Builtin ops XNNPACK runs in the same
    partition (ABS, MINIMUM with a scalar, ADD), unlike an ``isnan``/``where`` (a
    comparison and SELECT_V2, which XNNPACK does not take)."""
    return ops.add(y, ops.minimum(ops.abs(x), 0.0))


def exp(x):
    """``e^x``, NaN at NaN in a .tflite file too: XNNPACK's ``EXP`` maps NaN to 0, so
    ``exp``, ``expm1``, ``elu`` and ``softplus`` of NaN came out 0, -1, -alpha and 0."""
    return nan_kept(x, ops.exp(x))


def keras_multiply(x, y):
    """``keras.ops.multiply``, its result marked dense.

    Keras 3.15 counts a Python or numpy operand as sparse, so ``x * 2`` comes out flagged
    sparse, and a layer later traced on a sparse placeholder fails (``Pad``: "Failed to
    convert elements of SparseTensor"). The flag is metadata only; the values are dense.
    """
    out = ops.multiply(x, y)
    if isinstance(out, keras.KerasTensor) and out.sparse and not any(
            isinstance(v, keras.KerasTensor) and v.sparse for v in (x, y)):
        out = ops.convert_to_tensor(out, sparse=False)
    return out


def _scaled(other, alpha, dtype: str):
    """``alpha * other``; of a Python number, the product bound to ``dtype`` (Keras made
    ``0.7 * 0.3`` a float32 and ``100 * 3`` an int32 tensor: int8 results came out int32)."""
    if alpha == 1:
        return other
    return bound(other * alpha, dtype) if is_number(other) else keras_multiply(other, alpha)






@register(aten.add.Tensor, aten.add_.Tensor, aten.add.Scalar, policy=Policy.AGNOSTIC, dynamic=True)
def aten_add_tensor(ctx, self, other, alpha=1):
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor

    Keras' TF add may silently become bias_add on the wrong axis: keras_add avoids it.
    bool + bool is a logical or in torch; TF has no bool add.
    """
    if ctx.out_dtype == torch.bool:
        return ops.logical_or(self, other) if alpha else ops.cast(self, "bool")
    self, other = promoted(ctx, self, other)
    if alpha != 1 and _is_half(ctx):
        return _half_scaled_sum(self, other, alpha)
    return keras_add(self, _scaled(other, alpha, keras_dtype(ctx.out_dtype)))


def _is_half(ctx) -> bool:
    return ctx.out_dtype in (torch.float16, torch.bfloat16)


def _half_scaled_sum(x, y, alpha):
    """``x + alpha * y`` of half-precision operands as torch's CPU kernel computes it (sub
    and rsub are that kernel with ``-alpha``): in float32, ``alpha`` and a number rounded to
    the half type first, the sum rounded once (Keras rounded ``alpha * y`` to float16)."""
    dtype = dtype_name(y if is_number(x) else x)
    x, y, scale = bound(x, dtype), bound(y, dtype), np.float32(bound(alpha, dtype))
    return in_float32(x, lambda x32, y32: keras_add(x32, keras_multiply(y32, scale)), y)


@register(aten.sub.Tensor, aten.sub_.Tensor, aten.sub.Scalar, policy=Policy.AGNOSTIC, dynamic=True)
def aten_sub_tensor(ctx, self, other, alpha=1):
    """sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    self, other = promoted(ctx, self, other)
    if alpha != 1 and _is_half(ctx):
        return _half_scaled_sum(self, other, -alpha)
    return ops.subtract(self, _scaled(other, alpha, keras_dtype(ctx.out_dtype)))


@register(aten.rsub.Scalar, aten.rsub.Tensor, policy=Policy.AGNOSTIC, dynamic=True)
def aten_rsub_scalar(ctx, self, other, alpha=1):
    """rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor = other - alpha*self"""
    self, other = promoted(ctx, self, other)
    if alpha != 1 and _is_half(ctx):
        return _half_scaled_sum(other, self, -alpha)
    return ops.subtract(other, _scaled(self, alpha, keras_dtype(ctx.out_dtype)))


@register(aten.mul.Tensor, aten.mul_.Tensor, aten.mul.Scalar, policy=Policy.AGNOSTIC, dynamic=True)
def aten_mul_tensor(ctx, self, other):
    """mul.Tensor(Tensor self, Tensor other) -> Tensor

    bool * bool is a logical and in torch; TF has no bool multiply.
    """
    if ctx.out_dtype == torch.bool:
        return ops.logical_and(self, other)
    self, other = promoted(ctx, self, other)
    if is_number(other) or is_number(self):  # a half tensor times a number: in float32
        tensor, number = (other, self) if is_number(self) else (self, other)
        return in_float32(tensor, lambda t: keras_multiply(t, number))
    return keras_multiply(self, other)


@register(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, policy=Policy.AGNOSTIC, dynamic=True)
def aten_pow_tensor_scalar(ctx, self, exponent):
    """pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor"""
    if isinstance(exponent, (int, float)) and exponent in _POWERS and is_tensor(self) and (
            ctx.out_dtype.is_floating_point):
        return _POWERS[exponent](self)
    if integer_result(ctx) and is_tensor(exponent):
        return _int_power(ctx, *promoted(ctx, self, exponent))
    if integer_result(ctx):  # bool ** 2 is int64 in torch (Keras: int32); Keras computes int8 in int32
        self, exponent = promoted_bound(ctx, self, exponent)
        return in_result_dtype(ctx, ops.power(self, exponent))
    if (isinstance(exponent, (int, float)) and float(exponent).is_integer() and exponent > 1
            and is_tensor(self) and ctx.out_dtype.is_floating_point):
        return unsaturated(ops.power(self, exponent))
    return ops.power(self, exponent)


def unsaturated(y):
    """``y`` with +-the largest float made +-inf: LiteRT's POW with a constant integer
    exponent above 1 saturates an overflow there (``x ** 4`` of 1e20 or inf came out
    3.4e38; other exponents, and tensor exponents, give inf). ``y * (1 + |y - clip(y)| *
    2**127)`` with the clip one ulp inside the range: ``y`` itself (NaN and -0.0 kept)
    everywhere else; MINIMUM/MAXIMUM/SUB/ABS/MUL/ADD, which XNNPACK keeps in its partition
    (a comparison and SELECT would split it). A power whose true value rounds to the
    largest float itself (a band of one ulp) comes out inf too."""
    dtype = dtype_name(y)
    info = np.finfo(dtype)
    below = np.nextafter(info.max, np.asarray(0, dtype)).astype(dtype)
    excess = ops.abs(y - ops.minimum(ops.maximum(y, -below), below))
    return y * (1.0 + excess * np.asarray(2.0 ** (info.maxexp - 1), dtype))


# The exponents torch's CPU kernel computes without std::pow (ATen's PowKernel.cpp), done
# the same way: TFLite's POW also saturates an overflow to the largest float (inf ** 3 came
# out 3.4e38 in a .tflite file).
_POWERS = {
    2: lambda x: ops.square(x), 3: lambda x: x * x * x, 0.5: lambda x: ops.sqrt(x),
    -0.5: lambda x: _rsqrt(x), -1: lambda x: ops.divide(1.0, x),
    -2: lambda x: ops.divide(1.0, x * x),
}


@register(aten.pow.Scalar, policy=Policy.AGNOSTIC, dynamic=True)
def aten_pow_scalar(ctx, self, exponent):
    """pow.Scalar(Scalar self, Tensor exponent) -> Tensor"""
    if integer_result(ctx):
        return _int_power(ctx, *promoted(ctx, self, exponent))
    return ops.power(self, exponent)


def _int_power(ctx, base, exponent):
    """Integer ``base ** exponent`` as torch computes it for a negative exponent: 1 for a
    base of 1, +-1 for -1 by the exponent's parity, else 0 (``2 ** -1`` is 0). TF's integer
    Pow raises on a negative exponent, so the converted model failed at run time; it is
    given 0 there instead (its results for exponents >= 0 wrap like torch's: a product of
    integers modulo 2**bits does not depend on the order of the multiplications). Keras
    computes uint8 powers in int32: the result is cast back, which wraps as torch does."""
    want = keras_dtype(ctx.out_dtype)
    if is_tensor(exponent) and dtype_name(exponent).startswith("uint"):
        # never negative (and TF has no unsigned Neg); always cast: Keras' symbolic dtype of
        # a uint8 power says uint8 while TF's kernel returns int32
        return ops.cast(ops.power(base, exponent), want)
    negative = ops.less(exponent, 0)
    power = ops.power(base, ops.where(negative, ops.zeros_like(exponent), exponent))
    power = ops.cast(power, want)
    odd = ops.not_equal(ops.mod(exponent, 2), 0)
    one, zero = ops.ones_like(power), ops.zeros_like(power)
    of_minus_one = ops.where(odd, ops.negative(one), one)
    small = ops.where(ops.equal(base, 1), one, ops.where(ops.equal(base, -1), of_minus_one, zero))
    return ops.where(negative, small, power)


@register(aten.maximum.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_maximum_default(ctx, self, other):
    """maximum(Tensor self, Tensor other) -> Tensor (of bools: or; TF has no bool Maximum)"""
    return _max(ctx, self, other)


@register(aten.minimum.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_minimum_default(ctx, self, other):
    """minimum(Tensor self, Tensor other) -> Tensor (of bools: and)"""
    return _min(ctx, self, other)


def _max(ctx, x, y):
    """``maximum`` in torch's result dtype; of bools ``or`` (TF has no bool Maximum)."""
    if ctx.out_dtype == torch.bool:
        return ops.logical_or(x, y)
    return _nan_propagating(ops.maximum, *promoted(ctx, x, y))


def _nan_propagating(extreme, x, y):
    """``extreme(x, y)``, NaN where either is NaN as in torch and TF, in a .tflite file too:
    XNNPACK's two-tensor ``MAXIMUM``/``MINIMUM`` return the second operand where the first
    is NaN (a constant tensor is put second; a Python scalar is not a tensor and keeps the
    NaN), so ``maximum(nan, 1)`` was 1 and ``clamp(x, lo_tensor, hi_tensor)`` lost NaN."""
    out = extreme(x, y)
    if isinstance(y, (int, float)) or isinstance(x, (int, float)):
        return out
    first = x if isinstance(x, keras.KerasTensor) else y
    if isinstance(first, keras.KerasTensor) and keras.backend.is_float_dtype(first.dtype):
        return nan_kept(first, out)
    return out


def _min(ctx, x, y):
    """``minimum`` in torch's result dtype; of bools ``and`` (TF has no bool Minimum)."""
    if ctx.out_dtype == torch.bool:
        return ops.logical_and(x, y)
    return _nan_propagating(ops.minimum, *promoted(ctx, x, y))


@register(aten.clamp.default, aten.clamp.Tensor, aten.clamp_.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_clamp_default(ctx, self, min=None, max=None):
    """clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor (min wins if min > max)"""
    x = self
    if min is not None:
        x = _max(ctx, x, min)
    if max is not None:
        x = _min(ctx, x, max)
    return x


@register(aten.clamp_min.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_clamp_min_default(ctx, self, min):
    """clamp_min(Tensor self, Scalar min) -> Tensor"""
    return _max(ctx, self, min)


@register(aten.clamp_max.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_clamp_max_default(ctx, self, max):
    """clamp_max(Tensor self, Scalar max) -> Tensor"""
    return _min(ctx, self, max)


@register(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, policy=Policy.AGNOSTIC, dynamic=True)
def aten_where_self(ctx, condition, self, other):
    """where.self(Tensor condition, Tensor self, Tensor other) -> Tensor (in torch's
    promoted dtype: where(c, bool_tensor, 2) is int64, Keras made it int32)"""
    self, other = promoted_bound(ctx, self, other)
    return in_result_dtype(ctx, ops.where(condition, self, other))


def _tan(x):
    """sin / cos: TF's Tan and Atan have no TFLite builtin (the Flex delegate only)."""
    return ops.divide(ops.sin(x), ops.cos(x))


def _atan(x):
    """atan2(x, 1), TFLite's ATAN2 builtin (exact: atan2(y, 1) is atan(y))."""
    return ops.arctan2(x, ops.ones_like(x))


def isnan(x):
    """``x != x``: NaN is the one value unequal to itself. ``keras.ops.isnan`` is TF's IsNan,
    which the TFLite converter lowers to a bit test (``BitwiseAnd`` on the float's bits), a
    TF op without a TFLite builtin: every model using torch.sign, isnan, argmax/argmin or
    max/min(dim) failed its TFLite export with a Flex-op error."""
    if not keras.backend.is_float_dtype(x.dtype):
        return ops.zeros_like(x, dtype="bool")
    return ops.not_equal(x, x)


def is_infinite(x):
    """``|x| > the largest finite value`` of a float tensor: not ``x == inf``, which is False
    at inf in a .tflite file (the converter saturates an infinite constant to that value)."""
    dtype = dtype_name(x)  # the bound in x's dtype: DBL_MAX as a Python float made the
    return ops.greater(ops.abs(x), np.asarray(np.finfo(dtype).max, dtype))  # float64 fail


def _sign(x):
    """torch.sign(nan) is 0; TF's Sign gives NaN."""
    if not keras.backend.is_float_dtype(x.dtype):
        return ops.sign(x)
    return ops.where(isnan(x), ops.zeros_like(x), ops.sign(x))


def _negative(x):
    """``-x``; of unsigned integers ``0 - x``, which wraps as torch's does (TF has no
    unsigned Neg kernel: the converted model failed to run)."""
    if dtype_name(x).startswith("uint"):
        return ops.subtract(ops.zeros_like(x), x)
    return negated(x)


def _rsqrt(x):
    """``1 / sqrt(x)``, as torch's CPU kernel computes it: LiteRT's (XNNPACK's) ``RSQRT``
    gives NaN at 0 and -0.0 (torch: inf, -inf). A reciprocal, not ``1.0 / sqrt(x)``, which
    the TFLite converter fuses back into ``RSQRT``."""
    return ops.reciprocal(ops.sqrt(x))


_UNARY = {
    aten.neg.default: _negative, aten.abs.default: ops.abs, aten.exp.default: exp,
    aten.log.default: ops.log, aten.log1p.default: ops.log1p,
    aten.sqrt.default: ops.sqrt, aten.rsqrt.default: _rsqrt, aten.sin.default: ops.sin,
    aten.cos.default: ops.cos, aten.floor.default: ops.floor, aten.ceil.default: ops.ceil,
    aten.sign.default: _sign, aten.reciprocal.default: ops.reciprocal,
    aten.logical_not.default: ops.logical_not, aten.exp2.default: lambda x: ops.power(2.0, x),
    aten.log2.default: ops.log2, aten.log10.default: ops.log10, aten.tan.default: _tan,
    aten.atan.default: _atan,
    aten.square.default: ops.square, aten.trunc.default: ops.trunc,
}
_BINARY = {
    aten.eq.Tensor: ops.equal, aten.eq.Scalar: ops.equal, aten.ne.Tensor: ops.not_equal,
    aten.ne.Scalar: ops.not_equal, aten.lt.Tensor: ops.less, aten.lt.Scalar: ops.less,
    aten.le.Tensor: ops.less_equal, aten.le.Scalar: ops.less_equal,
    aten.gt.Tensor: ops.greater, aten.gt.Scalar: ops.greater,
    aten.ge.Tensor: ops.greater_equal, aten.ge.Scalar: ops.greater_equal,
    aten.logical_and.default: ops.logical_and, aten.logical_or.default: ops.logical_or,
    aten.logical_xor.default: ops.logical_xor, aten.atan2.default: ops.arctan2,
}



# torch rounds an integer tensor to itself, in its dtype; keras.ops.floor/ceil/trunc return
# float32 for integers (ceil of an int64 tensor came out float32)
_INTEGER_IDENTITY = (aten.floor.default, aten.ceil.default, aten.trunc.default)
# TF's Less/Greater(Equal) have no bool kernel (False < True in torch): bools compare as ints
_BOOL_IDENTITY = (aten.sign.default,)  # sign of a bool is the bool (TF has no bool Sign)
_ORDERING = (aten.lt.Tensor, aten.lt.Scalar, aten.le.Tensor, aten.le.Scalar,
             aten.gt.Tensor, aten.gt.Scalar, aten.ge.Tensor, aten.ge.Scalar)


def _bool_as_int(x):
    return in_dtype(x, "int32") if is_tensor(x) and dtype_name(x) == "bool" else x


def _register_table(table: dict, arity: int, supports=None) -> None:
    for op, fn in table.items():
        def convert(ctx, self, other=None, _fn=fn, _op=op):
            if arity == 2:  # a number in torch's computation dtype (x < 0.1 of float64)
                self, other = bound_operands(self, other)
            if _op in _INTEGER_IDENTITY and not ctx.out_dtype.is_floating_point:
                return self
            if _op in _ORDERING:
                self, other = _bool_as_int(self), _bool_as_int(other)
            if ctx.out_dtype == torch.bool and _op in _BOOL_IDENTITY:
                return self
            if arity == 1 and integer_result(ctx):  # square of bools is int64 in torch
                self = in_dtype(self, keras_dtype(ctx.out_dtype))
            if ctx.out_dtype.is_floating_point:  # sqrt/exp/reciprocal/atan2 of integers
                want = keras_dtype(ctx.out_dtype)
                self, other = float_operand(self, want), float_operand(other, want)
            return _fn(self) if arity == 1 else _fn(self, other)

        convert.__name__ = f"aten_{op.__name__.replace('.', '_')}"
        convert.__doc__ = str(op._schema)
        register(op, policy=Policy.AGNOSTIC, supports=supports, dynamic=True)(convert)


_register_table(_UNARY, 1)
_register_table(_BINARY, 2)  # bitwise ops: ops/bitwise.py


@register(aten.round.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_round_default(ctx, self):
    """round(Tensor self) -> Tensor (half to even in both frameworks)"""
    return ops.round(self)


@register(aten.isnan.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_isnan_default(ctx, self):
    """isnan(Tensor self) -> Tensor"""
    return isnan(self)


@register(aten.isinf.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_isinf_default(ctx, self):
    """isinf(Tensor self) -> Tensor: ``|x| > the largest finite value`` (False for integers
    and bools, which hold no infinity).

    Not ``|x| == inf`` and not TF's IsInf: the TFLite converter saturates an infinite
    constant to the largest finite float, so ``x == inf`` is False at inf in a .tflite file
    (measured); a finite bound survives the conversion, and Abs/Greater are builtins.
    """
    if not keras.backend.is_float_dtype(self.dtype):
        return ops.zeros_like(self, dtype="bool")
    return is_infinite(self)
