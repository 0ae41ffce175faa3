"""grid_sample (``grid_sampler_2d``): bilinear, nearest and bicubic sampling at the positions
a grid gives, with torch's zeros / border / reflection padding and both align_corners.

torch's CPU kernel for 2-D inputs is ``GridSamplerKernel.cpp`` (vectorised, float32 and
float64); these are its steps:

- unnormalize: ``(g + 1) * (size - 1) / 2`` (align_corners) or ``(g + 1) * size / 2 - 0.5``.
  torch's build contracts the latter into one fused multiply-add, rounded once: a
  nearest sample exactly between two pixels then goes the other way than the two-step
  form (measured: 37 of 120 bilinear cases were 1 ulp off without it). TF has no FMA, so it
  is emulated exactly (Dekker's product and Knuth's sum, :func:`fused_multiply_add`).
- border: clamp to ``[0, size - 1]``, NaN to 0; reflection: reflect about ``[0, size - 1]``
  (align_corners) or ``[-0.5, size - 0.5]`` with ``|x|`` modulo twice the span, NaN and
  +-inf to NaN, then the border clamp (so to 0).
- bilinear: ``floor`` for the north-west corner, weights from the distances; nearest:
  round half to even; bicubic: 4x4 taps around ``floor`` of the unnormalized position
  with A = -0.75, each tap's position through the padding.
- a tap outside the image reads 0 (then times its weight: NaN and inf weights stay NaN);
  its position is compared as a float, which is what torch's int conversion gives (NaN and
  positions past the int range become INT_MIN there: outside).

The input is read channels-last, flattened to ``[N*H*W, C]``, and every tap is one
``take`` (a TFLite GATHER) at ``n*H*W + y*W + x``; the output is channels-last.
"""

from __future__ import annotations

import functools
import operator

import keras
import numpy as np
import torch

from crossport.layout import channels_last
from crossport.to_keras.ops.elementwise import isnan
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.values import keras_dtype

aten = torch.ops.aten
ops = keras.ops

_MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_PADDING = {0: "zeros", 1: "border", 2: "reflection"}
_CUBIC_A = -0.75  # torch's bicubic convolution constant (UpSampleBicubic2d.h)
# Veltkamp's split factor 2^ceil(p/2) + 1 per precision, and a bound below which a * factor
# cannot overflow (past it the emulated FMA falls back to the plain product)
_SPLIT = {"float32": (4097.0, 2.0 ** 100), "float64": (134217729.0, 2.0 ** 900)}


def _grid_sampler_supports(node, input, grid, interpolation_mode, padding_mode,
                           align_corners):
    dtype = node.meta["val"].dtype
    if dtype not in (torch.float32, torch.float64):
        return (f"grid_sample of {dtype} (torch's CPU kernel takes float32 and float64); "
                "sample in float32")
    if interpolation_mode not in _MODES or padding_mode not in _PADDING:
        return (f"interpolation_mode={interpolation_mode}, padding_mode={padding_mode} "
                "(torch knows bilinear/nearest/bicubic and zeros/border/reflection)")
    return None


def _split(v, factor):
    """Veltkamp: ``v == hi + lo`` with each half-width, so products of halves are exact."""
    c = v * factor
    hi = c - (c - v)
    return hi, v - hi


def fused_multiply_add(a, b, c, dtype: str):
    """``a * b + c`` rounded once, as a hardware FMA does, from plain float ops.

    Dekker's two-product gives ``a * b == p + e1`` exactly, Knuth's two-sum
    ``p + c == s + e2``; ``s + (e1 + e2)`` is the correctly rounded result except when the
    small terms' own rounding lands on a tie (not reached by the grid arithmetic here).
    ``b`` and ``c`` may be Python floats or run-time scalars. Past ``|a| > 2**100`` (float32)
    the split would overflow: the plain ``p + c`` is used there, which is what the FMA
    gives once ``c`` is below half an ulp of the product.
    """
    factor, bound = _SPLIT[dtype]
    p = a * b
    a_hi, a_lo = _split(a, factor)
    if isinstance(b, float):
        b_hi, b_lo = (float(v) for v in _split(np.asarray(b, dtype), np.asarray(factor, dtype)))
    else:
        b_hi, b_lo = _split(b, factor)
    e1 = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    s = p + c
    back = s - p
    e2 = (p - (s - back)) + (c - back)
    exact = ops.less(ops.abs(a), np.asarray(bound, dtype))  # False for NaN, +-inf: s itself
    return ops.where(exact, s + (e1 + e2), s)


class _Axis:
    """One spatial axis: its size (an int, or a run-time scalar) and torch's location rules."""

    def __init__(self, size, dtype: str, align_corners: bool, padding: str):
        self.size, self.dtype = size, dtype
        self.align_corners, self.padding = align_corners, padding
        self.fsize = float(size) if isinstance(size, int) else ops.cast(size, dtype)

    def unnormalize(self, g):
        """ComputeLocationBase::unnormalize, the FMA included."""
        one_more = g + 1.0
        if self.align_corners:
            return one_more * ((self.fsize - 1.0) / 2.0)
        return fused_multiply_add(one_more, self.fsize / 2.0, -0.5, self.dtype)

    def clip(self, x):
        """Clamp to ``[0, size - 1]``; NaN to 0 (torch's operand order in max_ps)."""
        x = ops.where(isnan(x), ops.zeros_like(x), ops.maximum(x, 0.0))
        return ops.minimum(x, self.fsize - 1.0)

    def reflect(self, x):
        """ComputeLocationBase::reflect_coordinates: ``|x - low|`` modulo twice the span,
        folded back; NaN for NaN and +-inf (``inf - inf``)."""
        if self.align_corners:
            twice_span, low = (self.fsize - 1.0) * 2.0, 0.0
        else:
            twice_span, low = self.fsize * 2.0, -0.5
        distance = ops.abs(x - low)
        flips = ops.floor(distance / twice_span)  # trunc of a non-negative value
        extra = distance - flips * twice_span
        folded = ops.minimum(extra, twice_span - extra) + low  # NaN: both operands NaN
        if not self.align_corners:
            return folded
        if isinstance(self.size, int):  # a span of one pixel reflects everything to 0
            return ops.zeros_like(x) if self.size <= 1 else folded
        return ops.where(ops.less_equal(self.size, 1), ops.zeros_like(x), folded)

    def pad(self, x):
        """compute_coordinates: the padding rule applied to a position."""
        if self.padding == "border":
            return self.clip(x)
        if self.padding == "reflection":
            return self.clip(self.reflect(x))
        return x

    def inside(self, i):
        """Whether integer-valued position ``i`` is a pixel (``-1 < i < size``)."""
        return ops.logical_and(ops.greater(i, -1.0), ops.less(i, self.fsize))


class _Image:
    """The input held ``[N*D*H*W, C]`` (any number of spatial dims) and the flat index of
    each batch's first pixel."""

    def __init__(self, ctx, value):
        n, channels, *spatial = value.shape
        held = ctx.to_layout(value, channels_last(value.rank))  # [N, spatial..., C]
        pixels = functools.reduce(operator.mul, spatial)
        self.flat = ctx.reshape(held, [n * pixels, channels])
        self.sizes = [ctx.size(s) for s in spatial]  # torch order: (D,) H, W
        pixels = ctx.size(pixels)
        if isinstance(pixels, int) and not ctx.is_dynamic(n):
            first = np.arange(int(n), dtype=np.int32) * pixels
        else:
            from crossport.layers.dynamic import DynamicRange

            count = ctx.size(n)
            batches = (np.arange(int(n), dtype=np.int32) if isinstance(count, int)
                       else DynamicRange(dtype_name="int32", name=ctx.name("batch"))(count))
            first = ops.multiply(batches, ops.cast(pixels, "int32"))
        # broadcast over the grid's spatial dims
        self.first = ops.reshape(first, (-1,) + (1,) * len(spatial))

    def tap(self, coords, axes):
        """The pixel at integer-valued positions ``coords`` (x first: the last spatial dim;
        each ``[N, out spatial...]``) of every channel, 0 outside the image:
        ``[N, out spatial..., C]``."""
        inside = functools.reduce(ops.logical_and,
                                  [axis.inside(c) for c, axis in zip(coords, axes)])
        zero = ops.zeros_like(coords[0])
        index = None
        for coord, size in zip(reversed(coords), self.sizes):  # row-major: z, y, x
            position = ops.cast(ops.where(inside, coord, zero), "int32")
            index = position if index is None else index * ops.cast(size, "int32") + position
        values = ops.take(self.flat, self.first + index, axis=0)
        return ops.where(ops.expand_dims(inside, -1), values, ops.zeros_like(values))


def _bilinear(image, x, y, axis_x, axis_y):
    """GridSamplerKernel's bilinear forward: corner weights from the distances to the
    north-west corner, the four products summed in torch's order."""
    x, y = axis_x.pad(axis_x.unnormalize(x)), axis_y.pad(axis_y.unnormalize(y))
    west, north = ops.floor(x), ops.floor(y)
    w = x - west
    e = 1.0 - w
    n = y - north
    s = 1.0 - n
    east, south = west + 1.0, north + 1.0
    corners = [(west, north, s * e), (east, north, s * w), (west, south, n * e),
               (east, south, n * w)]
    out = None
    for cx, cy, weight in corners:
        term = image.tap((cx, cy), (axis_x, axis_y)) * ops.expand_dims(weight, -1)
        out = term if out is None else out + term
    return out


def _nearest(image, x, y, axis_x, axis_y):
    """The pixel at the position rounded half to even (``_mm256_round_ps``)."""
    x, y = axis_x.pad(axis_x.unnormalize(x)), axis_y.pad(axis_y.unnormalize(y))
    return image.tap((ops.round(x), ops.round(y)), (axis_x, axis_y))


def _cubic_weights(t):
    """get_cubic_coefficients: the four convolution weights at fraction ``t``."""
    a = _CUBIC_A

    def outer(d):  # 1 < d < 2
        return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a

    def inner(d):  # d <= 1
        return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
    return [outer(t + 1.0), inner(t), inner(1.0 - t), outer(2.0 - t)]


def _bicubic(image, x, y, axis_x, axis_y):
    """4x4 taps around ``floor`` of the unnormalized position (padding applies to each tap,
    not to the position), rows interpolated along x first, then along y."""
    x, y = axis_x.unnormalize(x), axis_y.unnormalize(y)
    x0, y0 = ops.floor(x), ops.floor(y)
    wx, wy = _cubic_weights(x - x0), _cubic_weights(y - y0)
    columns = [axis_x.pad(x0 + float(k)) for k in (-1, 0, 1, 2)]
    out = None
    for k, weight_y in zip((-1, 0, 1, 2), wy):
        row = axis_y.pad(y0 + float(k))
        line = None
        for column, weight_x in zip(columns, wx):
            term = ops.expand_dims(weight_x, -1) * image.tap((column, row), (axis_x, axis_y))
            line = term if line is None else line + term
        term = ops.expand_dims(weight_y, -1) * line
        out = term if out is None else out + term
    return out


_SAMPLERS = {"bilinear": _bilinear, "nearest": _nearest, "bicubic": _bicubic}


@register(aten.grid_sampler_2d.default, policy=Policy.CUSTOM,
          supports=_grid_sampler_supports, dynamic=True)
def aten_grid_sampler_2d_default(ctx, input, grid, interpolation_mode, padding_mode,
                                 align_corners):
    """grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor

    F.grid_sample of a 4-D input: every mode, padding and align_corners, with the steps of
    torch's CPU kernel (module docstring). Every size may be dynamic.
    """
    value = as_value(ctx, input)
    grid_value = as_value(ctx, grid)
    dtype = keras_dtype(value.dtype)
    g = ctx.canonical(grid_value)  # [N, Ho, Wo, 2]: x (width) first
    image = _Image(ctx, value)
    padding = _PADDING[padding_mode]
    axis_x = _Axis(ctx.size(value.shape[3]), dtype, bool(align_corners), padding)
    axis_y = _Axis(ctx.size(value.shape[2]), dtype, bool(align_corners), padding)
    ctx.out_layout = channels_last(4)
    sample = _SAMPLERS[_MODES[interpolation_mode]]
    return sample(image, g[..., 0], g[..., 1], axis_x, axis_y)
