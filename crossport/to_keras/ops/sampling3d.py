"""grid_sample of a 5-D input (``grid_sampler_3d``): bilinear (trilinear) and nearest, every
padding and align_corners, with the steps of torch's scalar CPU kernel.

torch's 3-D kernel (``grid_sampler_3d_cpu_impl``) is not the vectorised 2-D one, and differs
from it on special values (measured):

- unnormalize: ``((g + 1) * size - 1) / 2`` rounded twice (no fused multiply-add here: on
  600000 nearest samples at half-pixel positions the two-rounding form matches torch
  exactly, the fused one misses 2063), or ``((g + 1) / 2) * (size - 1)``;
- clip: ``min(size - 1, max(x, 0))`` with C++'s operand order, so NaN clips to the last
  pixel (the 2-D kernel gives the first);
- reflection: ``fmod`` of ``|x - low|`` by the span, flipped where ``floor(|x - low| /
  span)`` is odd as an int (a quotient past the int range is INT_MIN: even);
- every position then leaves the int range safely: NaN, +-inf and values past +-2**31
  become -100, outside the image, so zeros padding gives 0 for them (2-D: NaN);
- bilinear weights are products of the distances to the far corner, left to right, and a
  tap outside the image is skipped (weights here are always finite); nearest rounds half to
  even.

The taps are the 2-D converter's (:class:`crossport.to_keras.ops.sampling._Image`): the
input read channels-last as ``[N*D*H*W, C]`` and one GATHER per tap. Every size may be
dynamic; TFLite builtins only (FLOOR, ROUND, FLOOR_MOD, GATHER, SELECT ...).
"""

from __future__ import annotations

import itertools

import keras
import torch

from crossport.layout import channels_last
from crossport.to_keras.ops.division import fmod_float
from crossport.to_keras.ops.elementwise import isnan
from crossport.to_keras.ops.sampling import _MODES, _PADDING, _Axis, _Image
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.values import keras_dtype

aten = torch.ops.aten
ops = keras.ops

_INT_RANGE = 2.0 ** 31  # INT_MAX - 1 and INT_MIN, as the float comparisons see them


class _ScalarAxis(_Axis):
    """One spatial axis with the scalar kernel's location rules (GridSampler.h)."""

    def unnormalize(self, g):
        if self.align_corners:
            return (g + 1.0) / 2.0 * (self.fsize - 1.0)
        return ((g + 1.0) * self.fsize - 1.0) / 2.0

    def clip(self, x):
        """``std::min(size - 1, std::max(x, 0))``: NaN fails both comparisons and gives the
        first operand of min, the last pixel."""
        last = self.fsize - 1.0
        clipped = ops.minimum(ops.maximum(x, 0.0), last)
        return ops.where(isnan(x), ops.zeros_like(x) + last, clipped)

    def reflect(self, x):
        """reflect_coordinates: ``fmod`` of the distance from the low edge by the span,
        folded back where the int quotient is odd; NaN and +-inf give NaN."""
        if self.align_corners:
            low, span = 0.0, self.fsize - 1.0
        else:
            low, span = -0.5, self.fsize
        distance = ops.abs(x - low)
        extra = fmod_float(distance, span)
        flips = ops.floor(distance / span)
        half = ops.floor(flips / 2.0)  # flips / 2 is exact: parity without an int cast
        even = ops.logical_or(ops.equal(half * 2.0, flips),
                              ops.logical_not(ops.less(flips, _INT_RANGE)))  # INT_MIN
        folded = ops.where(even, extra + low, span - extra + low)
        if not self.align_corners:
            return folded
        if isinstance(self.size, int):  # twice_low == twice_high: everything to 0
            return ops.zeros_like(x) if self.size <= 1 else folded
        return ops.where(ops.less_equal(self.size, 1), ops.zeros_like(x), folded)

    def pad(self, x):
        """compute_coordinates, then safe_downgrade_to_int_range: NaN, +-inf and positions
        past the int range become -100 (outside)."""
        x = super().pad(x)
        safe = ops.logical_and(ops.greater_equal(x, -_INT_RANGE), ops.less_equal(x, _INT_RANGE))
        return ops.where(safe, x, ops.zeros_like(x) - 100.0)  # False for NaN


def _trilinear(image, coords, axes):
    """The eight corners of ``floor``, weights ``(x-distance * y-distance) * z-distance`` to
    the opposite corner, summed in torch's order (tnw, tne, tsw, tse, bnw, bne, bsw, bse)."""
    positions = [axis.pad(axis.unnormalize(g)) for g, axis in zip(coords, axes)]
    low = [ops.floor(p) for p in positions]
    # per axis: (the low corner and its weight, the high corner and its weight)
    sides = [((lo, (lo + 1.0) - p), (lo + 1.0, p - lo)) for lo, p in zip(low, positions)]
    out = None
    for z_side, y_side, x_side in itertools.product((0, 1), repeat=3):
        (cx, wx), (cy, wy), (cz, wz) = (sides[0][x_side], sides[1][y_side],
                                        sides[2][z_side])
        weight = ops.expand_dims(wx * wy * wz, -1)
        term = image.tap((cx, cy, cz), axes) * weight
        out = term if out is None else out + term
    return out


def _nearest(image, coords, axes):
    positions = [axis.pad(axis.unnormalize(g)) for g, axis in zip(coords, axes)]
    return image.tap([ops.round(p) for p in positions], axes)


def _supports(node, input, grid, interpolation_mode, padding_mode, align_corners):
    dtype = node.meta["val"].dtype
    if dtype not in (torch.float32, torch.float64):
        return (f"grid_sample of {dtype} (torch's CPU kernel takes float32 and float64); "
                "sample in float32")
    if _MODES.get(interpolation_mode) not in ("bilinear", "nearest") or (
            padding_mode not in _PADDING):
        return (f"interpolation_mode={interpolation_mode}, padding_mode={padding_mode} "
                "(torch's 5-D grid_sample takes bilinear/nearest and zeros/border/reflection)")
    return None


@register(aten.grid_sampler_3d.default, policy=Policy.CUSTOM, supports=_supports,
          dynamic=True)
def aten_grid_sampler_3d_default(ctx, input, grid, interpolation_mode, padding_mode,
                                 align_corners):
    """grid_sampler_3d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor

    F.grid_sample of a 5-D input with the steps of torch's scalar kernel (module
    docstring). Every size may be dynamic.
    """
    value = as_value(ctx, input)
    dtype = keras_dtype(value.dtype)
    g = ctx.canonical(as_value(ctx, grid))  # [N, Do, Ho, Wo, 3]: x (width) first
    image = _Image(ctx, value)
    padding = _PADDING[padding_mode]
    axes = [_ScalarAxis(ctx.size(value.shape[d]), dtype, bool(align_corners), padding)
            for d in (4, 3, 2)]
    ctx.out_layout = channels_last(5)
    coords = [g[..., k] for k in range(3)]
    if _MODES[interpolation_mode] == "nearest":
        return _nearest(image, coords, axes)
    return _trilinear(image, coords, axes)

