"""Float functions with C99 special-value rules: hypot, fmax/fmin, copysign, and the
angle of a real number.

Each is built from real builtin ops (TFLite runs them without Flex) and avoids an infinite
constant, which the TFLite converter saturates to the largest finite float
(docs/parity.md, "What the check cannot see").
"""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.layers.ordering import same_width_view
from crossport.to_keras.ops.elementwise import (
    is_infinite,
    isnan,
    keras_add,
    keras_multiply,
    negated,
)
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.scalars import float_operand, in_dtype, promoted
from crossport.to_keras.values import keras_dtype

aten = torch.ops.aten
ops = keras.ops

# float dtype -> the integer of its width: the sign bit is the integer's
_SAME_WIDTH_INT = {"float16": "int16", "float32": "int32", "float64": "int64"}


def hypot(a, b):
    """torch.hypot, as C99: ``sqrt(a² + b²)`` scaled by the larger magnitude, so it neither
    overflows above ~1.8e19 nor flushes below ~1e-19 in float32; NaN beside a finite value
    is NaN, an infinite operand gives inf even beside NaN.

    Example:
        >>> import numpy as np
        >>> a = np.array([3e30, 1e-30, np.inf, np.nan, 0.0], "float32")
        >>> b = np.array([4e30, 1e-30, np.nan, 1.0, 0.0], "float32")
        >>> np.asarray(hypot(a, b)).tolist()[2:]
        [inf, nan, 0.0]
    """
    a, b = ops.abs(a), ops.abs(b)
    big, small = ops.maximum(a, b), ops.minimum(a, b)
    safe = ops.where(ops.greater(big, 0), big, ops.ones_like(big))  # 0/0 at (0, 0)
    out = ops.multiply(big, ops.sqrt(keras_add(ops.square(ops.divide(small, safe)), 1.0)))
    out = ops.where(ops.logical_or(isnan(a), isnan(b)), keras_add(a, b), out)  # NaN there
    return ops.where(is_infinite(a), a, ops.where(is_infinite(b), b, out))


def sign_bit(x):
    """Whether ``x``'s sign bit is set: -0.0 and a negative NaN count as negative."""
    if isinstance(x, (int, float)):
        return bool(np.signbit(x))
    dtype = keras.backend.standardize_dtype(x.dtype)
    if dtype not in _SAME_WIDTH_INT:  # integers (bfloat16 is refused at conversion)
        return ops.less(x, 0)
    return ops.less(same_width_view(x, _SAME_WIDTH_INT[dtype]), 0)


@register(aten.hypot.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_hypot_default(ctx, self, other):
    """hypot(Tensor self, Tensor other) -> Tensor"""
    return hypot(*promoted(ctx, self, other))


def _nan_ignoring(extreme):
    def fn(a, b):
        y = extreme(a, b)
        return ops.where(isnan(a), b, ops.where(isnan(b), a, y))
    return fn


_fmax, _fmin = _nan_ignoring(ops.maximum), _nan_ignoring(ops.minimum)


@register(aten.fmax.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_fmax_default(ctx, self, other):
    """fmax(Tensor self, Tensor other) -> Tensor: the maximum, NaN only where both are
    (of bools: or; TF has no bool Maximum)."""
    if ctx.out_dtype == torch.bool:
        return ops.logical_or(self, other)
    return _fmax(*promoted(ctx, self, other))


@register(aten.fmin.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_fmin_default(ctx, self, other):
    """fmin(Tensor self, Tensor other) -> Tensor: the minimum, NaN only where both are
    (of bools: and)."""
    if ctx.out_dtype == torch.bool:
        return ops.logical_and(self, other)
    return _fmin(*promoted(ctx, self, other))


@register(aten.copysign.Tensor, aten.copysign.Scalar, policy=Policy.AGNOSTIC, dynamic=True)
def aten_copysign_tensor(ctx, self, other):
    """copysign(Tensor self, Tensor other) -> Tensor: ``|self|`` with ``other``'s sign bit
    (-0.0 and -NaN are negative, as in C); integers compute in torch's float result."""
    want = keras_dtype(ctx.out_dtype)
    self = float_operand(self, want)
    if not isinstance(other, (int, float)):
        other = float_operand(other, want)
    magnitude = ops.abs(self)
    return ops.where(sign_bit(other), negated(magnitude), magnitude)



@register(aten.angle.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_angle_default(ctx, self):
    """angle(Tensor self) -> Tensor of a real tensor, as ATen's ``angle_impl``: NaN stays
    itself, ``pi`` where ``x < 0`` (-inf too), else +0 (-0.0 is not negative); integers and
    bools give torch's float result."""
    want = keras_dtype(ctx.out_dtype)
    x = in_dtype(self, want)
    half_turn = ops.where(ops.less(x, 0), np.asarray(np.pi, want), np.asarray(0, want))
    return ops.where(isnan(x), x, half_turn)


@register(aten.signbit.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_signbit_default(ctx, self):
    """signbit(Tensor self) -> Tensor: the sign bit of floats read as an integer of their
    width (-0.0, -inf and a NaN with its sign bit set are True, as torch reads them; a
    BITCAST in LiteRT); integers ``x < 0``; bools are never negative."""
    if keras.backend.standardize_dtype(self.dtype) == "bool":
        return ops.zeros_like(self, dtype="bool")
    return sign_bit(self)


# float dtype -> (exponent bias, mantissa bits, largest part, clip): 2**n built from its
# bits; an exponent is clipped where every result is already 0 or inf, then applied in
# same-signed parts that stay normal numbers
_POWERS_OF_TWO = {"float32": (127, 23, 100, 300), "float64": (1023, 52, 1000, 2200)}


def _ldexp_supports(node, self, other) -> str | None:
    dtype = node.meta["val"].dtype
    if keras_dtype(dtype) not in _POWERS_OF_TWO:
        return f"ldexp with a {dtype} result (converted for float32 and float64)"
    return None


def _power_of_two(n, dtype: str):
    """``2.0 ** n`` exactly, for integer ``n`` in the dtype's normal range: its bits."""
    bias, mantissa, _part, _clip = _POWERS_OF_TWO[dtype]
    bits = _SAME_WIDTH_INT[dtype]
    biased = ops.cast(keras_add(n, bias), bits)
    return same_width_view(ops.multiply(biased, np.array(2 ** mantissa, bits)), dtype)


def scale_by_power_of_two(x, n, dtype: str):
    """``x * 2**n`` rounded once, as C's ldexp (``n`` an int32 tensor): exact multiplies
    by powers of two in normal range; only a subnormal result may round twice (TF's CPU
    kernels flush those to zero anyway, docs/parity.md)."""
    _bias, _mantissa, part, clip = _POWERS_OF_TWO[dtype]
    rest = ops.clip(n, -clip, clip)
    while clip > 0:
        step = ops.clip(rest, -part, part)
        x = keras_multiply(x, _power_of_two(step, dtype))
        rest, clip = rest - step, clip - part
    return x


@register(aten.ldexp.Tensor, policy=Policy.AGNOSTIC, supports=_ldexp_supports, dynamic=True)
def aten_ldexp_tensor(ctx, self, other):
    """ldexp.Tensor(Tensor self, Tensor other) -> Tensor: ``self * 2**other`` as torch: an
    integer exponent (read as a C int: int64 wraps to 32 bits) scales exactly, so
    ``0 * 2**200`` is 0 and ``1e-30 * 2**200`` finite; a floating exponent multiplies by
    ``pow(2, other)`` (``1e-30 * 2**200.0`` is inf, as torch's)."""
    want = keras_dtype(ctx.out_dtype)
    x = in_dtype(self, want)  # an integer self rounds to the float first, as in torch
    if keras.backend.is_float_dtype(keras.backend.standardize_dtype(other.dtype)):
        return keras_multiply(x, ops.power(2.0, in_dtype(other, want)))
    return scale_by_power_of_two(x, ops.cast(other, "int32"), want)
