"""lgamma, digamma, erfinv, ndtri, erfcx, igamma/igammac, zeta, nextafter and frexp with
torch's values at the poles, the domain's edges, +-inf, NaN and -0.0.

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

Keras has none of ndtri, erfcx, igamma, igammac or zeta, and its nextafter steps in float64
(undoing a float32 step): these are TF's kernels (:class:`crossport.layers.special.
TFSpecialFunction`) or, for erfcx, keras.ops in float64. TF's Ndtri and NextAfter agree with
torch everywhere; Igamma/Igammac and Zeta run in float64 (their float32 kernels are up to
0.3% off) under torch's early returns, which TF does not share (a = 0, x = 0, +-inf, the
zeta poles; tests/ops/test_special_functions.py). None has a TFLite builtin. frexp reads
the float's bits (builtin ops only: it exports).
"""

from __future__ import annotations

import math

import keras
import torch

from crossport.layers.ordering import same_width_view
from crossport.layers.special import Digamma, LogGamma, TFSpecialFunction
from crossport.to_keras.ops.float_math import sign_bit
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.scalars import float_operand
from crossport.to_keras.values import keras_dtype

aten = torch.ops.aten
ops = keras.ops

# calc_erfinv's coefficients (ATen's Math.h, after Pavlis' erfinv.m)
_CENTRAL = ((0.886226899, -1.645349621, 0.914624893, -0.140543331),
            (-2.118377725, 1.442710462, -0.329097515, 0.012229801))
_TAIL = ((-1.970840454, -1.624906493, 3.429567803, 1.641345311), (3.543889200, 1.637067800))


def _floating(ctx, self):
    """A tensor in the op's float result dtype (torch promotes integers)."""
    return float_operand(self, keras_dtype(ctx.out_dtype))


def _floats_only(node):
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
    return _floats_only(node)


@register(aten.polygamma.default, policy=Policy.AGNOSTIC, supports=_polygamma_supports,
          dynamic=True)
def aten_polygamma_default(ctx, n, self):
    """polygamma(int n, Tensor self) -> Tensor: order 0 is digamma (torch's kernel calls it)."""
    return _digamma(ctx, self)


def infinity_like(x):
    """+inf in ``x``'s shape and dtype, computed (no infinite constant: TFLite's converter
    rewrites those to FLT_MAX)."""
    return ops.divide(ops.ones_like(x), ops.zeros_like(x))


def nan_like(x):
    """NaN in ``x``'s shape and dtype, computed as ``inf - inf``."""
    infinity = infinity_like(x)
    return infinity - infinity


def _digamma(ctx, self):
    x = _floating(ctx, self)
    psi = Digamma(dtype=keras_dtype(ctx.out_dtype), name=ctx.name())(x)
    infinity = infinity_like(x)
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
    infinity = infinity_like(y)
    edge = ops.where(sign_bit(y), -infinity, infinity)
    x = ops.where(ops.equal(y_abs, 1.0), edge, x)
    return ops.where(ops.greater(y_abs, 1.0), infinity - infinity, x)  # NaN past the domain


@register(aten.erfinv.default, policy=Policy.AGNOSTIC, supports=_floats_only, dynamic=True)
def aten_erfinv_default(ctx, self):
    """erfinv(Tensor self) -> Tensor: torch's algorithm in float64, rounded once."""
    want = keras_dtype(ctx.out_dtype)
    x = _floating(ctx, self)
    return ops.cast(erfinv(ops.cast(x, "float64")), want)



def _cascade(default, *rules):
    """``default`` where no rule holds, else the value of the first rule that does (the
    order of the early returns in torch's kernel)."""
    y = default
    for condition, value in reversed(rules):
        y = ops.where(condition, value, y)
    return y


def _tf_special(ctx, function: str, *operands, dtype: str | None = None):
    """TF's kernel ``function`` on the operands, in ``dtype`` (default: the op's result)."""
    dtype = dtype or keras_dtype(ctx.out_dtype)
    operands = [ops.cast(x, dtype) for x in operands]
    layer = TFSpecialFunction(function, dtype=dtype, name=ctx.name())
    return layer(operands if len(operands) > 1 else operands[0])


def _tensor_operands(ctx, *operands):
    """Python numbers as tensors shaped like the tensor operand, all in the result dtype."""
    want = keras_dtype(ctx.out_dtype)
    # not scalars.bound_operands: TF's special kernels want tensors of one shape, not scalars
    like = next(x for x in operands if not isinstance(x, (int, float)))
    return [ops.full_like(like, x, dtype=want) if isinstance(x, (int, float))
            else float_operand(x, want) for x in operands]


@register(aten.special_ndtri.default, policy=Policy.AGNOSTIC, supports=_floats_only,
          dynamic=True)
def aten_special_ndtri_default(ctx, self):
    """special_ndtri(Tensor self) -> Tensor: TF's Ndtri (Cephes' as torch's): -inf at 0,
    +inf at 1, NaN outside [0, 1]."""
    return _tf_special(ctx, "ndtri", _floating(ctx, self))


_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)


def erfcx(x):
    """``exp(x^2) erfc(x)`` on a float64 tensor: directly below 25 (erfc(25) ~ 1e-273 is
    still a normal double; relative error < 6e-14), torch's asymptotic fraction from 25 and
    ``1 / (sqrt(pi) x)`` past 5e7 (where ``x^4`` would overflow); inf below -26.6."""
    x2 = x * x
    direct = ops.exp(x2) * ops.erfc(x)
    fraction = _INV_SQRT_PI * (x2 * (x2 + 4.5) + 2.0) / (x * (x2 * (x2 + 5.0) + 3.75))
    far = _INV_SQRT_PI / x
    return ops.where(ops.less(x, 25.0), direct, ops.where(ops.greater(x, 5e7), far, fraction))


@register(aten.special_erfcx.default, policy=Policy.AGNOSTIC, supports=_floats_only,
          dynamic=True)
def aten_special_erfcx_default(ctx, self):
    """special_erfcx(Tensor self) -> Tensor: ``exp(x^2) erfc(x)`` in float64, rounded once
    (keras/TF have no erfcx; torch's float32 kernel is within 4e-6 relative of it)."""
    x = ops.cast(_floating(ctx, self), "float64")
    return ops.cast(erfcx(x), keras_dtype(ctx.out_dtype))


def _incomplete_gamma(ctx, self, other, lower: bool):
    """torch's calc_igamma / calc_igammac: its edge rules over TF's Igamma / Igammac, run in
    float64 (TF's float32 kernel is 6e-4 off at a = x = 1e4 and 1.5e-4 relative for a, x in
    [0, 20]; torch's is within 1e-5) and rounded once."""
    a, x = (ops.cast(v, "float64") for v in _tensor_operands(ctx, self, other))
    y = _tf_special(ctx, "igamma" if lower else "igammac", a, x, dtype="float64")
    y = ops.where(ops.less(y, 0.0), ops.zeros_like(y), y)  # 1 - igamma's cancellation
    one, zero = ops.ones_like(y), ops.zeros_like(y)
    full, empty = (one, zero) if lower else (zero, one)
    nan, a_inf = nan_like(y), ops.isinf(a)
    y = _cascade(y,
                 (ops.logical_or(ops.less(x, 0.0), ops.less(a, 0.0)), nan),
                 (ops.equal(a, 0.0), ops.where(ops.greater(x, 0.0), full, nan)),
                 (ops.equal(x, 0.0), empty),
                 (a_inf, ops.where(ops.isinf(x), nan, empty)),
                 (ops.isinf(x), full))
    return ops.cast(y, keras_dtype(ctx.out_dtype))


@register(aten.igamma.default, policy=Policy.AGNOSTIC, supports=_floats_only, dynamic=True)
def aten_igamma_default(ctx, self, other):
    """igamma(Tensor self, Tensor other) -> Tensor: the regularized lower incomplete gamma
    P(a, x); 1 at a = 0 < x, 0 at x = 0, NaN for a or x < 0."""
    return _incomplete_gamma(ctx, self, other, lower=True)


@register(aten.igammac.default, policy=Policy.AGNOSTIC, supports=_floats_only, dynamic=True)
def aten_igammac_default(ctx, self, other):
    """igammac(Tensor self, Tensor other) -> Tensor: the regularized upper incomplete gamma
    Q(a, x) = 1 - P(a, x), with P's edges mirrored."""
    return _incomplete_gamma(ctx, self, other, lower=False)


@register(aten.special_zeta.default, aten.special_zeta.self_scalar,
          aten.special_zeta.other_scalar, policy=Policy.AGNOSTIC, supports=_floats_only,
          dynamic=True)
def aten_special_zeta_default(ctx, self, other):
    """special_zeta(Tensor self, Tensor other) -> Tensor: Hurwitz' zeta(x, q), TF's Zeta in
    float64, rounded once (its float32 kernel is 0.3% off at zeta(7, -2.5)), under torch's
    early returns: inf at x = 1 and at the poles q = 0, -1, ... (x NaN
    included), NaN for x < 1 and for a non-integer x at q < 0; NaN where its series meets
    inf * 0 (q = +inf, or x = +inf with q > 1), where TF gives 0."""
    x, q = (ops.cast(v, "float64") for v in _tensor_operands(ctx, self, other))
    y = _tf_special(ctx, "zeta", x, q, dtype="float64")
    nan, infinity = nan_like(y), infinity_like(y)
    q_not_positive = ops.less_equal(q, 0.0)
    y = _cascade(y,
                 (ops.equal(x, 1.0), infinity),
                 (ops.less(x, 1.0), nan),
                 (ops.logical_and(q_not_positive, ops.equal(q, ops.floor(q))), infinity),
                 (ops.logical_and(q_not_positive, ops.not_equal(x, ops.floor(x))), nan),
                 (ops.logical_or(ops.equal(q, infinity), ops.logical_and(
                     ops.equal(x, infinity), ops.greater(q, 1.0))), nan))
    return ops.cast(y, keras_dtype(ctx.out_dtype))


@register(aten.nextafter.default, policy=Policy.AGNOSTIC, supports=_floats_only,
          dynamic=True)
def aten_nextafter_default(ctx, self, other):
    """nextafter(Tensor self, Tensor other) -> Tensor: TF's NextAfter in the tensors' own
    dtype (keras.ops.nextafter steps in float64 and rounds back, which undoes a float32
    step)."""
    return _tf_special(ctx, "nextafter", *_tensor_operands(ctx, self, other))


# frexp's bit layout per float dtype: the integer of its width, the mantissa's bits and the
# biased exponent of [0.5, 1)
_FREXP_BITS = {"float32": ("int32", 23, 126), "float64": ("int64", 52, 1022)}


def _frexp_supports(node):
    dtype = node.meta["val"][0].dtype
    if dtype not in (torch.float32, torch.float64):
        return f"frexp of {dtype}: compute it in float32"
    return None


@register(aten.frexp.Tensor, policy=Policy.CUSTOM, supports=_frexp_supports, dynamic=True)
def aten_frexp_tensor(ctx, self):
    """frexp.Tensor(Tensor self) -> (Tensor mantissa, Tensor exponent): ``x = m * 2**e``
    with ``0.5 <= |m| < 1`` and an int32 ``e``, read from ``|x|``'s bits (C's frexp, as
    torch's kernel): +-0.0, +-inf and NaN are their own mantissa with exponent 0. A right
    shift, multiplies and adds, no bitwise and/or: the float32 file exports to TFLite."""
    value = as_value(ctx, self)
    ctx.out_layout = (value.layout, value.layout)  # elementwise: both keep self's layout
    x = value.tensor
    dtype = keras.backend.standardize_dtype(x.dtype)
    integer, width, half = _FREXP_BITS[dtype]
    bits = same_width_view(ops.abs(x), integer)  # no sign bit: the shift needs no mask
    biased = ops.right_shift(bits, ops.full_like(bits, width))
    scale = ops.full_like(bits, 1 << width)
    magnitude = same_width_view(bits - biased * scale + half * scale, dtype)  # exponent -> half
    mantissa = ops.where(ops.less(x, 0.0), -magnitude, magnitude)
    special = ops.logical_or(ops.equal(x, 0.0), ops.logical_not(ops.isfinite(x)))
    mantissa = ops.where(special, x, mantissa)
    exponent = ops.where(special, ops.zeros_like(biased), biased - half)
    return mantissa, ops.cast(exponent, "int32")
