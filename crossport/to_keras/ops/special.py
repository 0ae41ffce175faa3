"""lgamma, digamma and erfinv with torch's values at the poles, the domain's edges, +-inf,
NaN and -0.0.

lgamma is TF's Lgamma, the C library's lgammaf as torch's kernel (measured equal but for a
last-ulp difference at a few points, inf at 0 and the negative integers alike). digamma is
TF's Digamma, whose series agrees with torch's within float32 rounding, but which is NaN at
+-0.0, where torch follows C's limits: -inf at 0.0 and +inf at -0.0 (put right). erfinv is
torch's own algorithm (``calc_erfinv``: a rational first guess, two Newton steps on erf)
run in float64 and rounded once: TF's Erfinv was 19% off at 1e-7, 0 below ~1e-30, inf at
``1 - 2**-24`` (torch 3.83) and past 1 (torch NaN), and dropped -0.0's sign; torch's float32
result is within one ulp of that double computation (measured on 240000 points: 99.4%
equal). TFLite has none of TF's Lgamma, Digamma or Erf (the Newton step's) as a builtin:
the export refuses naming the torch op.
"""

from __future__ import annotations

import math

import keras
import torch

from crossport.layers.special import Digamma, LogGamma
from crossport.to_keras.ops.elementwise import _float_operand
from crossport.to_keras.ops.float_math import sign_bit
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.values import keras_dtype

aten = torch.ops.aten
ops = keras.ops

# calc_erfinv's coefficients (ATen's Math.h, after Pavlis' erfinv.m)
_CENTRAL = ((0.886226899, -1.645349621, 0.914624893, -0.140543331),
            (-2.118377725, 1.442710462, -0.329097515, 0.012229801))
_TAIL = ((-1.970840454, -1.624906493, 3.429567803, 1.641345311), (3.543889200, 1.637067800))


def _floating(ctx, self):
    """A tensor in the op's float result dtype (torch promotes integers)."""
    return _float_operand(self, keras_dtype(ctx.out_dtype))


def _floats_only(node, self):
    dtype = node.meta["val"].dtype
    if dtype not in (torch.float32, torch.float64):
        return f"{node.target.__name__.split('.')[0]} of {dtype}: compute it in float32"
    return None


@register(aten.lgamma.default, policy=Policy.AGNOSTIC, supports=_floats_only, dynamic=True)
def aten_lgamma_default(ctx, self):
    """lgamma(Tensor self) -> Tensor: log|Gamma(x)|, inf at the poles, inf at +-inf."""
    return LogGamma(dtype=keras_dtype(ctx.out_dtype), name=ctx.name())(_floating(ctx, self))


@register(aten.digamma.default, policy=Policy.AGNOSTIC, supports=_floats_only, dynamic=True)
def aten_digamma_default(ctx, self):
    """digamma(Tensor self) -> Tensor: NaN at the negative integers and -inf; at 0.0 -inf
    and at -0.0 +inf, as torch (``copysign(inf, -x)``; TF gives NaN there)."""
    return _digamma(ctx, self)


def _polygamma_supports(node, n, self):
    if n != 0:
        return (f"polygamma of order {n} (torch's Hurwitz zeta series); only order 0, "
                "digamma, converts")
    return _floats_only(node, self)


@register(aten.polygamma.default, policy=Policy.AGNOSTIC, supports=_polygamma_supports,
          dynamic=True)
def aten_polygamma_default(ctx, n, self):
    """polygamma(int n, Tensor self) -> Tensor: order 0 is digamma (torch's kernel calls it)."""
    return _digamma(ctx, self)


def _digamma(ctx, self):
    x = _floating(ctx, self)
    psi = Digamma(dtype=keras_dtype(ctx.out_dtype), name=ctx.name())(x)
    infinity = ops.divide(ops.ones_like(x), ops.zeros_like(x))  # no infinite constant
    pole = ops.where(sign_bit(x), infinity, -infinity)
    return ops.where(ops.equal(x, 0.0), pole, psi)


def _polynomial(z, coefficients):
    """``c0 + c1 z + c2 z^2 + ...`` by Horner's rule, as ATen writes it."""
    acc = z * coefficients[-1]
    for c in reversed(coefficients[1:-1]):
        acc = (acc + c) * z
    return acc + coefficients[0]


def erfinv(y):
    """torch's ``calc_erfinv`` on a float64 tensor: |y| > 1 NaN, +-1 +-inf, -0.0 kept."""
    y_abs = ops.abs(y)
    z = y * y
    central = y * _polynomial(z, _CENTRAL[0]) / (_polynomial(z, _CENTRAL[1]) * z + 1.0)
    t = ops.sqrt(-ops.log((1.0 - ops.minimum(y_abs, 1.0)) / 2.0))
    tail_num = _polynomial(t, _TAIL[0])
    tail = ops.where(sign_bit(y), -ops.abs(tail_num), ops.abs(tail_num)) / (
        _polynomial(t, _TAIL[1]) * t + 1.0)
    x = ops.where(ops.less_equal(y_abs, 0.7), central, tail)
    two_over_sqrt_pi = 2.0 / math.sqrt(math.pi)
    for _ in range(2):  # Newton's method on erf(x) = y
        x = x - (ops.erf(x) - y) / (two_over_sqrt_pi * ops.exp(-x * x))
    infinity = ops.divide(ops.ones_like(y), ops.zeros_like(y))
    edge = ops.where(sign_bit(y), -infinity, infinity)
    x = ops.where(ops.equal(y_abs, 1.0), edge, x)
    return ops.where(ops.greater(y_abs, 1.0), infinity - infinity, x)  # NaN past the domain


@register(aten.erfinv.default, policy=Policy.AGNOSTIC, supports=_floats_only, dynamic=True)
def aten_erfinv_default(ctx, self):
    """erfinv(Tensor self) -> Tensor: torch's algorithm in float64, rounded once."""
    want = keras_dtype(ctx.out_dtype)
    x = _floating(ctx, self)
    return ops.cast(erfinv(ops.cast(x, "float64")), want)

