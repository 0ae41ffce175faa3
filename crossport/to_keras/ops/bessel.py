"""The Bessel functions of torch.special (and ``torch.i0``) with torch's values at the
domain's edges.

keras.ops has only ``i0``; the others are TF's kernels of the same name
(:class:`crossport.layers.special.TFSpecialFunction`: tf.math / tf.math.special, Cephes'
approximations as torch's). Measured against torch 2.13 (tests/ops/test_bessel.py):

- i0, i0e, i1, i1e (and modified_bessel_i0/i1, the same functions): equal within float32
  rounding, NaN/inf positions alike.
- modified_bessel_k0/k1, scaled_modified_bessel_k0/k1: TF gives inf for every x < 0, torch
  NaN (put right; +-0.0 is inf in both).
- bessel_j0/j1/y0/y1: TF gives -inf for y0/y1 at x < 0, torch NaN; TF gives NaN for y1 at
  +-0.0, torch -inf (both put right). In float64 TF's kernels are the accurate ones: torch's
  float64 j0/j1/y0/y1 are up to 9e-7 off the true value near x = 5 (mpmath), TF's 1e-14.
- spherical_bessel_j0: torch's formula (a Taylor series below |x| = 0.5, ``sin(x) / x``
  above, 0 at +-inf) in keras.ops.

TFLite has none of TF's Bessel kernels as a builtin (only i0 and spherical_bessel_j0 export):
the export refuses naming the torch op.
"""

from __future__ import annotations

import keras
import torch

from crossport.layers.special import TFSpecialFunction
from crossport.to_keras.ops.special import _floating, _floats_only, infinity_like, nan_like
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.values import keras_dtype

aten = torch.ops.aten
ops = keras.ops


def _bessel(ctx, function: str, x, negative_nan: bool = False):
    """TF's ``function`` on ``x`` in the result dtype; ``negative_nan``: NaN for x < 0 (the
    K and Y functions, where TF gives +-inf and torch NaN)."""
    x = _floating(ctx, x)
    y = TFSpecialFunction(function, dtype=keras_dtype(ctx.out_dtype), name=ctx.name())(x)
    return ops.where(ops.less(x, 0.0), nan_like(x), y) if negative_nan else y


@register(aten.i0.default, aten.special_modified_bessel_i0.default, policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_i0_default(ctx, self):
    """i0(Tensor self) -> Tensor: keras.ops.i0 (TF's BesselI0, Cephes' as torch's); also
    special_modified_bessel_i0."""
    return ops.cast(ops.i0(_floating(ctx, self)), keras_dtype(ctx.out_dtype))


@register(aten.special_i0e.default, policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_i0e_default(ctx, self):
    """special_i0e(Tensor self) -> Tensor: TF's bessel_i0e (i0e(x) = exp(-|x|) i0(x))."""
    return _bessel(ctx, "bessel_i0e", self)


@register(aten.special_i1.default, aten.special_modified_bessel_i1.default,
          policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_i1_default(ctx, self):
    """special_i1(Tensor self) -> Tensor: TF's bessel_i1 (also modified_bessel_i1)."""
    return _bessel(ctx, "bessel_i1", self)


@register(aten.special_i1e.default, policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_i1e_default(ctx, self):
    """special_i1e(Tensor self) -> Tensor: TF's bessel_i1e (i1e(x) = exp(-|x|) i1(x))."""
    return _bessel(ctx, "bessel_i1e", self)


@register(aten.special_modified_bessel_k0.default, policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_modified_bessel_k0_default(ctx, self):
    """special_modified_bessel_k0(Tensor self) -> Tensor: TF's bessel_k0 (NaN for x < 0, inf at +-0.0)."""
    return _bessel(ctx, "bessel_k0", self, negative_nan=True)


@register(aten.special_modified_bessel_k1.default, policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_modified_bessel_k1_default(ctx, self):
    """special_modified_bessel_k1(Tensor self) -> Tensor: TF's bessel_k1 (NaN for x < 0, inf at +-0.0)."""
    return _bessel(ctx, "bessel_k1", self, negative_nan=True)


@register(aten.special_scaled_modified_bessel_k0.default, policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_scaled_modified_bessel_k0_default(ctx, x):
    """special_scaled_modified_bessel_k0(Tensor x) -> Tensor: TF's bessel_k0e (exp(x) k0(x); NaN for x < 0)."""
    return _bessel(ctx, "bessel_k0e", x, negative_nan=True)


@register(aten.special_scaled_modified_bessel_k1.default, policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_scaled_modified_bessel_k1_default(ctx, x):
    """special_scaled_modified_bessel_k1(Tensor x) -> Tensor: TF's bessel_k1e (exp(x) k1(x); NaN for x < 0)."""
    return _bessel(ctx, "bessel_k1e", x, negative_nan=True)


@register(aten.special_bessel_j0.default, policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_bessel_j0_default(ctx, self):
    """special_bessel_j0(Tensor self) -> Tensor: TF's bessel_j0 (even)."""
    return _bessel(ctx, "bessel_j0", self)


@register(aten.special_bessel_j1.default, policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_bessel_j1_default(ctx, self):
    """special_bessel_j1(Tensor self) -> Tensor: TF's bessel_j1 (odd)."""
    return _bessel(ctx, "bessel_j1", self)


@register(aten.special_bessel_y0.default, policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_bessel_y0_default(ctx, self):
    """special_bessel_y0(Tensor self) -> Tensor: TF's bessel_y0 (NaN for x < 0, -inf at +-0.0)."""
    return _bessel(ctx, "bessel_y0", self, negative_nan=True)


@register(aten.special_bessel_y1.default, policy=Policy.AGNOSTIC, supports=_floats_only,
          dynamic=True)
def aten_special_bessel_y1_default(ctx, self):
    """special_bessel_y1(Tensor self) -> Tensor: TF's bessel_y1; NaN for x < 0 and -inf at
    +-0.0 as torch (TF: -inf and NaN)."""
    y = _bessel(ctx, "bessel_y1", self, negative_nan=True)
    x = _floating(ctx, self)
    return ops.where(ops.equal(x, 0.0), -infinity_like(x), y)


# the Taylor series of sin(x) / x in x^2 that torch uses below |x| = 0.5
_SINC_SERIES = (1.0, -1.0 / 6.0, 1.0 / 120.0, -1.0 / 5040.0, 1.0 / 362880.0,
                -1.0 / 39916800.0, 1.0 / 6227020800.0)


@register(aten.special_spherical_bessel_j0.default, policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_spherical_bessel_j0_default(ctx, x):
    """special_spherical_bessel_j0(Tensor self) -> Tensor: ``sin(x) / x``, torch's series
    below |x| = 0.5 (1 at 0), 0 at +-inf."""
    x = _floating(ctx, x)
    t = ops.square(x)
    series = ops.zeros_like(x) + _SINC_SERIES[-1]
    for c in reversed(_SINC_SERIES[:-1]):
        series = series * t + c
    y = ops.where(ops.less(ops.abs(x), 0.5), series, ops.sin(x) / x)
    return ops.where(ops.equal(ops.abs(x), infinity_like(x)), ops.zeros_like(x), y)
