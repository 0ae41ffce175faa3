"""Inverse trigonometric and hyperbolic functions (asin, acos, sinh, cosh, asinh, acosh,
atanh) and erfc, with torch's values at NaN, +-inf, +-0.0 and the domain edges.

TF's Asin/Acos/Sinh/Cosh/Asinh/Acosh/Atanh have no TFLite builtin (Flex only), so each is
composed from builtin ops (ATAN2, EXP, LOG, SQRT, DIV, SELECT) in a form that neither
overflows before the function does nor cancels near zero; odd functions take the sign bit
of their input, so -0.0 maps to -0.0. No infinite constant is used (the TFLite converter
saturates one to the largest finite float). erfc is TF's Erfc (accurate in the tail, where
``1 - erf`` is 0); it has no TFLite builtin and is refused at export.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import torch

from crossport.to_keras.ops.elementwise import exp, isnan
from crossport.to_keras.ops.float_math import sign_bit
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.scalars import float_operand
from crossport.to_keras.values import keras_dtype

aten = torch.ops.aten
ops = keras.ops
_LN2 = math.log(2.0)


def _finfo(x):
    return np.finfo(keras.backend.standardize_dtype(x.dtype))


def _odd(x, magnitude_fn):
    """``f(|x|)`` with ``x``'s sign bit: an odd function, -0.0 to -0.0, NaN to NaN."""
    y = magnitude_fn(ops.abs(x))
    return ops.where(sign_bit(x), y * -1.0, y)  # LiteRT: NEG(0.0) is 0.0, not -0.0


def _sqrt_one_minus_square(x):
    """``sqrt(1 - x²)`` as ``sqrt((1 - x)(1 + x))`` (no cancellation near |x| = 1); NaN
    past |x| = 1 and at +-inf."""
    return ops.sqrt(ops.multiply(1.0 - x, 1.0 + x))


def asin(x):
    """``atan2(x, sqrt(1 - x²))``: +-pi/2 at +-1, NaN past them, the sign of a zero kept."""
    return ops.arctan2(x, _sqrt_one_minus_square(x))


def acos(x):
    """``atan2(sqrt(1 - x²), x)``: 0 at 1, pi at -1, NaN past them."""
    return ops.arctan2(_sqrt_one_minus_square(x), x)


def _exp_halves(a):
    """``e^a / 2`` as ``h * (h / 2)`` with ``h = e^(a/2)``: finite where e^a overflows."""
    h = ops.exp(a * 0.5)
    return ops.multiply(h, h * 0.5)


def _exp_limit(x):
    """Below ``log(max)`` by 1: LiteRT's EXP overflows a little before ``log(max)`` (88.5
    gave inf in float32)."""
    return float(np.log(_finfo(x).max)) - 1.0


def _poly(z, coefficients):
    """``sum(c_k z^k)`` by Horner's rule"""
    acc = ops.full_like(z, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        acc = acc * z + c
    return acc


def _series(x, coefficients):
    """``x * sum(c_k x^2k)``: the small-argument branch, exact
    where LiteRT's EXP/LOG are not (their error is ~1e-7 absolute near 1: asinh(1e-4) came
    out 1.0012e-4 through log(1 + x))."""
    return _poly(ops.square(x), coefficients) * x


# Taylor coefficients of sinh(a)/a, asinh(a)/a, atanh(a)/a in a², acosh(1+t)/sqrt(2t) in t
_SINH = [1.0 / math.factorial(2 * k + 1) for k in range(7)]  # to a^13 for a < 1
_ASINH = [(-1) ** k * math.comb(2 * k, k) / (4 ** k * (2 * k + 1)) for k in range(9)]
_ATANH = [1.0 / (2 * k + 1) for k in range(9)]
_EXPM1 = [1.0 / math.factorial(k + 1) for k in range(8)]  # expm1(a)/a in a, to a^7/8!
_ACOSH = [(-1) ** k * math.comb(2 * k, k) / (8 ** k * (2 * k + 1)) for k in range(9)]
_SMALL = 0.125  # the series' last terms are below float32's eps there

def _log1p(a):
    """``log(1 + a)`` for ``a >= 0`` (NaN below -1) from LOG (Goldberg: ``log(u) a / (u - 1)``
    with ``u = 1 + a``, exact where u rounds to 1; inf at inf). The TFLite converter lowers
    Log1p to ``log(1 + a)``, which loses ``a`` below one ulp of 1 (1e-30 came out 0)."""
    u = 1.0 + a
    um1 = u - 1.0
    same = ops.equal(um1, 0.0)
    y = ops.log(u) * a / ops.where(same, ops.ones_like(um1), um1)
    return ops.where(same, a, ops.where(ops.logical_and(ops.equal(u * 2.0, u), u > 0.0), u, y))  # +inf


def _log_large(a):
    """``log(a)``, scaled by 2^-64 first past 2^64: LiteRT's LOG gave inf at 3e38."""
    scaled = ops.log(a * 2.0 ** -64) + 64 * _LN2
    return ops.where(a > 2.0 ** 64, scaled, ops.log(a))


def _keep_nan(x, y):
    """NaN where ``x`` is NaN: LiteRT's EXP maps NaN to 0."""
    return ops.where(isnan(x), x, y)


def expm1(x):
    """``e^x - 1``: its Taylor series below |x| = 1/8 (exact near 0, -0.0 kept; the TFLite
    converter lowers TF's Expm1 to ``exp(x) - 1``, which gave 0 at 1e-30 and +0.0 at -0.0),
    else ``exp(x) - 1`` with NaN kept (LiteRT's EXP maps NaN to 0: expm1(nan) was -1)."""
    if keras.backend.standardize_dtype(x.dtype) == "float64":
        return ops.expm1(x)  # the series is float32-accurate; TFLite files are float32
    near = ops.clip(x, -_SMALL, _SMALL)
    series = _poly(near, _EXPM1) * near
    return ops.where(ops.less(ops.abs(x), _SMALL), series, exp(x) - 1.0)


def sinh(x):
    """Past ``log(max)`` (88.72 in float32) torch's vectorised kernel gives inf where its
    scalar one (and C, and float64) gives the finite value up to ~89.4; this is the latter.
    ``(e^a - e^-a) / 2`` for ``a = |x|`` as ``(t + t / (t + 1)) / 2`` with
    ``t = e^a - 1`` from a = 1 on, its Taylor series below (no cancellation), and ``e^(a/2) * e^(a/2) / 2`` near and past e^a's overflow."""
    big = _exp_limit(x)

    def magnitude(a):
        t = ops.exp(ops.clip(a, 1.0, big)) - 1.0  # no cancellation from a = 1 on
        mid = (t + t / (t + 1.0)) * 0.5
        y = ops.where(a < big, mid, _exp_halves(a))
        return ops.where(a < 1.0, _series(ops.minimum(a, 1.0), _SINH), y)
    return _keep_nan(x, _odd(x, magnitude))


def cosh(x):
    """``(e^a + e^-a) / 2`` for ``a = |x|``, and ``e^(a/2) * e^(a/2) / 2`` near and past
    e^a's overflow (the same band as sinh)."""
    big = _exp_limit(x)
    a = ops.abs(x)
    e = ops.exp(ops.minimum(a, big))
    return _keep_nan(x, ops.where(a < big, (e + 1.0 / e) * 0.5, _exp_halves(a)))


def asinh(x):
    """``log1p(a + a² / (1 + sqrt(1 + a²)))`` for ``a = |x|`` (exact near 0), and
    ``log(a) + ln 2`` once ``a² + 1`` rounds to ``a²`` (before a² overflows)."""
    big = float(1.0 / np.sqrt(_finfo(x).eps))

    def magnitude(a):
        s = ops.square(ops.minimum(a, big))
        near = _log1p(a + s / (1.0 + ops.sqrt(s + 1.0)))
        y = ops.where(a > big, _log_large(a) + _LN2, near)
        return ops.where(a < _SMALL, _series(ops.minimum(a, _SMALL), _ASINH), y)
    return _odd(x, magnitude)


def acosh(x):
    """``log1p(t + sqrt(t) sqrt(t + 2))`` for ``t = x - 1`` (exact near 1, no overflow),
    ``log(x) + ln 2`` for large x; NaN below 1 (``sqrt(t)`` of a negative t)."""
    big = float(1.0 / np.sqrt(_finfo(x).eps))
    t = x - 1.0
    near = _log1p(t + ops.multiply(ops.sqrt(t), ops.sqrt(t + 2.0)))
    y = ops.where(x > big, _log_large(x) + _LN2, near)
    near_one = ops.clip(t, 0.0, _SMALL)
    series = ops.sqrt(near_one * 2.0) * _poly(near_one, _ACOSH)
    return ops.where(ops.logical_and(t >= 0.0, t < _SMALL), series, y)


def atanh(x):
    """``log1p(2a / (1 - a)) / 2`` for ``a = |x|`` (2a after the division: 2a overflows at
    3e38): inf at 1, NaN past it."""
    def magnitude(a):
        y = _log1p(a / (1.0 - a) * 2.0) * 0.5
        return ops.where(a < _SMALL, _series(ops.minimum(a, _SMALL), _ATANH), y)
    return _odd(x, magnitude)


_FUNCTIONS = {
    aten.asin.default: asin, aten.acos.default: acos, aten.sinh.default: sinh,
    aten.cosh.default: cosh, aten.asinh.default: asinh, aten.acosh.default: acosh,
    aten.atanh.default: atanh, aten.erfc.default: ops.erfc, aten.expm1.default: expm1,
}


def _register(op, fn):
    name = op.__name__.replace(".", "_")

    def convert(ctx, self):
        return fn(float_operand(self, keras_dtype(ctx.out_dtype)))  # integers: torch's float
    convert.__name__ = f"aten_{name}"
    convert.__doc__ = f"{op._schema}\n\n{fn.__doc__}"
    register(op, policy=Policy.AGNOSTIC, dynamic=True)(convert)


for _op, _fn in _FUNCTIONS.items():
    _register(_op, _fn)
