"""keras.ops.image operations (functional graphs, traced calls) -> torch: crop_images,
pad_images, rgb_to_grayscale, rgb_to_hsv, hsv_to_rgb, extract_patches, gaussian_blur.

Crops, pads and the colour conversions work on the tensor as it is held (the axes named by
``data_format`` found in its layout), in TF's order of operations; extract_patches and
gaussian_blur are the convolutions Keras' TF backend runs (an identity kernel, a Gaussian
depthwise kernel), through kops_nn's conv helpers. ``resize`` is in shape.py.
"""

from __future__ import annotations

import operator

import keras
import numpy as np
import torch
import torch.nn.functional as F

from crossport.layout import normalize_dim, physical_axis
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.ops.kops_nn import (
    convolve,
    held_like_images,
    images_first,
    per_dim,
    torch_weight,
)
from crossport.to_torch.registry import channels_first_layer, register_op


def _spatial_axes(op, rank: int) -> tuple[int, int]:
    """The Keras axes of height and width (a batch of images or one image)."""
    return (rank - 2, rank - 1) if channels_first_layer(op) else (rank - 3, rank - 2)


def _channel_axis(op, rank: int) -> int:
    return normalize_dim(-3 if channels_first_layer(op) else -1, rank)


def _input_specs(op) -> list[tuple[tuple, str]]:
    """(shape, dtype) of the images of each call of ``op`` in the graph."""
    return [(tuple(node.input_tensors[0].shape), str(node.input_tensors[0].dtype))
            for node in op._inbound_nodes]


# -- crop and pad -------------------------------------------------------------------------
def _kept(size: int | None, before, after, target) -> slice:
    """The rows TF's crop keeps along one axis, from two of ``before``, ``after`` and
    ``target`` (Keras' rule); a size known only at run time is counted from the end."""
    if before is not None and target is not None:
        return slice(before, before + target)
    if before is not None:
        return slice(before, size - after if size is not None else -after or None)
    if size is not None:
        return slice(size - target - after, size - after)
    if target + after == 0:
        return slice(0, 0)
    return slice(-(target + after), -after or None)


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def CropImages(ctx: Context, op, images: Held) -> Held:
    """keras.ops.image.crop_images(images, top_cropping, left_cropping, bottom_cropping,
    right_cropping, target_height, target_width, data_format): a slice of the held height
    and width axes, as Keras' ops.slice of them."""
    x = ctx.plain(images)
    h, w = _spatial_axes(op, x.rank)
    index = [slice(None)] * x.rank
    index[physical_axis(x.layout, h)] = _kept(x.shape[h], op.top_cropping,
                                              op.bottom_cropping, op.target_height)
    index[physical_axis(x.layout, w)] = _kept(x.shape[w], op.left_cropping,
                                              op.right_cropping, op.target_width)
    node = ctx.call_function(operator.getitem, x.node, tuple(index))
    return Held(node, x.layout, ctx.output_shapes[0])


def _pad_pair(ctx: Context, x: Held, axis: int, before, after, target) -> tuple:
    """``(before, after)`` of one axis from two of ``before``, ``after`` and ``target``
    (Keras' rule); from ``x.size`` at run time for a size Keras does not know."""
    if before is not None and after is not None:
        return before, after
    size = x.shape[axis]
    known = before if before is not None else after
    if size is None:
        size = ctx.call_method("size", x.node, physical_axis(x.layout, axis))
        rest = ctx.call_function(operator.sub, target - known, size)
    else:
        rest = target - known - size
    return (rest, after) if before is None else (before, rest)


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def PadImages(ctx: Context, op, images: Held) -> Held:
    """keras.ops.image.pad_images(images, top_padding, left_padding, bottom_padding,
    right_padding, target_height, target_width, data_format): zeros around the held height
    and width axes (``F.pad``), as Keras' numpy.pad."""
    x = ctx.plain(images)
    h, w = _spatial_axes(op, x.rank)
    pairs = [(0, 0)] * x.rank
    pairs[physical_axis(x.layout, h)] = _pad_pair(ctx, x, h, op.top_padding,
                                                  op.bottom_padding, op.target_height)
    pairs[physical_axis(x.layout, w)] = _pad_pair(ctx, x, w, op.left_padding,
                                                  op.right_padding, op.target_width)
    widths = [v for before, after in reversed(pairs) for v in (before, after)]
    return Held(ctx.call_function(F.pad, x.node, widths), x.layout, ctx.output_shapes[0])


# -- colour spaces ------------------------------------------------------------------------
_GRAY = (0.2989, 0.5870, 0.1140)


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def RGBToGrayscale(ctx: Context, op, images: Held) -> Held:
    """keras.ops.image.rgb_to_grayscale(images, data_format): Keras' TF backend computes in
    ``result_type(dtype, float)`` (float32 for ints), contracts the channel axis with
    ``(0.2989, 0.5870, 0.1140)`` (a matmul, as tf.tensordot), keeps it as a size-1 axis and
    casts back (ints truncate); one channel is returned as it is."""
    x = ctx.plain(images)
    axis = _channel_axis(op, x.rank)
    if x.shape[axis] == 1:
        return x
    compute = keras.backend.result_type(ctx.input_dtype, float)
    node = x.node if compute == ctx.input_dtype else \
        ctx.call_method("to", x.node, getattr(torch, compute))
    held_axis = physical_axis(x.layout, axis)
    if held_axis != x.rank - 1:
        node = ctx.call_function(torch.movedim, node, held_axis, -1)
    weights = ctx.constant(np.array(_GRAY, dtype=compute)).node
    gray = ctx.call_method("unsqueeze", ctx.call_function(torch.matmul, node, weights),
                           held_axis)
    if compute != ctx.input_dtype:
        gray = ctx.call_method("to", gray, ctx.output_dtype())
    return Held(gray, x.layout, ctx.output_shapes[0])


def _channels(ctx: Context, op, x: Held) -> tuple[int, list]:
    """The held channel axis of ``x`` and its three channels (fx nodes)."""
    axis = physical_axis(x.layout, _channel_axis(op, x.rank))
    parts = ctx.call_function(torch.unbind, x.node, axis)
    return axis, [ctx.call_function(operator.getitem, parts, i) for i in range(3)]


def _select(ctx: Context, condition, a, b):
    return ctx.call_function(torch.where, condition, a, b)


def _eigen_fold(ctx: Context, compare, values):
    """Eigen's max (``compare=gt``) or min (``lt``) reduction over the 3 channels, left to
    right, keeping ``a`` only where ``compare(a, b)``: a NaN is dropped unless it is last."""
    result = values[0]
    for value in values[1:]:
        result = _select(ctx, ctx.call_function(compare, result, value), result, value)
    return result


def _f32(value: float) -> float:
    """A constant as TF's kernel holds it, ``T(1) / T(6)`` in float32."""
    return float(np.float32(value))


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def RGBToHSV(ctx: Context, op, images: Held) -> Held:
    """keras.ops.image.rgb_to_hsv(images, data_format): TF's RGBToHSV kernel step for step
    on the held channel axis (V and the range from Eigen's left-to-right max / min, so NaN
    channels land where TF's do; ``norm = 1 / range * (1/6)``; hue wrapped into [0, 1))."""
    x = ctx.plain(images)
    axis, (r, g, b) = _channels(ctx, op, x)
    call = ctx.call_function
    v = _eigen_fold(ctx, operator.gt, [r, g, b])
    spread = call(operator.sub, v, _eigen_fold(ctx, operator.lt, [r, g, b]))
    s = _select(ctx, call(operator.gt, v, 0.0), call(operator.truediv, spread, v), 0.0)
    norm = call(operator.mul, call(torch.reciprocal, spread), _f32(np.float32(1) / 6))
    red = call(operator.mul, norm, call(operator.sub, g, b))
    green = call(operator.add, call(operator.mul, norm, call(operator.sub, b, r)),
                 _f32(np.float32(2) / 6))
    blue = call(operator.add, call(operator.mul, norm, call(operator.sub, r, g)),
                _f32(np.float32(4) / 6))
    h = _select(ctx, call(operator.eq, r, v), red,
                _select(ctx, call(operator.eq, g, v), green, blue))
    h = _select(ctx, call(operator.gt, spread, 0.0), h, 0.0)
    h = _select(ctx, call(operator.lt, h, 0.0), call(operator.add, h, 1.0), h)
    return Held(call(torch.stack, [h, s, v], axis), x.layout, ctx.output_shapes[0])


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def HSVToRGB(ctx: Context, op, images: Held) -> Held:
    """keras.ops.image.hsv_to_rgb(images, data_format): TF's HSVToRGB kernel step for step
    on the held channel axis: ``(1 - s + s * clamp(ramp(6h), 0, 1)) * v`` per channel (NaN
    kept by the clamps, as Eigen's)."""
    x = ctx.plain(images)
    axis, (h, s, v) = _channels(ctx, op, x)
    call = ctx.call_function
    dh = call(operator.mul, h, 6.0)

    def ramp(centre: float, rising: bool):
        distance = call(torch.abs, call(operator.sub, dh, centre))
        level = call(operator.sub, distance, 1.0) if rising else \
            call(operator.add, call(operator.neg, distance), 2.0)
        return call(torch.clamp, level, 0.0, 1.0)

    one_s = call(operator.add, call(operator.neg, s), 1.0)
    rgb = [call(operator.mul, call(operator.add, one_s, call(operator.mul, s, part)), v)
           for part in (ramp(3.0, True), ramp(2.0, False), ramp(4.0, False))]
    return Held(call(torch.stack, rgb, axis), x.layout, ctx.output_shapes[0])


# -- convolutions -------------------------------------------------------------------------
def _batched_float(op) -> str | None:
    """Batched float images only: an unbatched one is refused (add a batch dim); Keras'
    TF backend convolves no integer images."""
    name = type(op).__name__
    for shape, dtype in _input_specs(op):
        spatial = 3 if getattr(op, "is_3d", False) else 2
        if len(shape) != spatial + 2:
            return f"{name} of an unbatched image {shape}: not converted (add a batch dim)"
        if not keras.backend.is_float_dtype(dtype):
            return f"{name} of {dtype} images (Keras' TF backend fails on them)"
    return None


def _patches_supported(op) -> str | None:
    strides, dilation = np.atleast_1d(op.strides), np.atleast_1d(op.dilation_rate)
    if (strides > 1).any() and (dilation > 1).any():
        return ("extract_patches with strides and dilation_rate > 1 (Keras' TF backend fails "
                "on them: tf.nn.convolution)")
    return _batched_float(op)


@register_op(policy=Policy.CUSTOM, supports=_patches_supported)
def ExtractPatches(ctx: Context, op, images: Held) -> Held:
    """keras.ops.image.extract_patches(images, size, strides, dilation_rate, padding,
    data_format) (2D and 3D): Keras' TF backend convolves with an identity kernel
    ``eye(prod(size) * C)`` shaped ``[*size, C, out]`` (feature ``(i * w + j) * C + c``), and
    so does the module (a product with 0 and 1, so NaN and ±inf spread as in TF)."""
    x = images_first(ctx, op, images)
    n = x.rank - 2
    size = per_dim(op.size, n)
    channels = x.shape[x.layout.perm[1]]
    features = int(np.prod(size)) * channels
    kernel = np.eye(features, dtype=ctx.input_dtype).reshape(*size, channels, features)
    strides = per_dim(op.strides or size, n)
    node = convolve(ctx, x, torch_weight(ctx, kernel), size, strides, op.padding.lower(),
                    per_dim(op.dilation_rate, n))
    return held_like_images(ctx, op, node)


def _gaussian_1d(size: int, sigma: float, dtype) -> np.ndarray:
    """TF's 1-D kernel: ``exp(-0.5 * (x / sigma)^2)`` at ``x = i - (size - 1) / 2``,
    normalized, in ``dtype``."""
    size_t, sigma_t = dtype(size), dtype(sigma)
    x = np.arange(size, dtype=dtype) - (size_t - dtype(1)) / dtype(2)
    kernel = np.exp(dtype(-0.5) * (x / sigma_t) ** 2)
    return kernel / kernel.sum(dtype=dtype)


def gaussian_kernel(kernel_size, sigma, dtype) -> np.ndarray:
    """Keras' TF backend's 2-D kernel: the outer product of the height kernel (from
    ``kernel_size[1]``, ``sigma[1]``) and the width kernel (``[0]``), reshaped row-major
    to ``kernel_size`` (a non-square kernel is re-read, as TF does)."""
    kernel_size = per_dim(kernel_size, 2)
    sigma = [float(s) for s in np.broadcast_to(np.asarray(sigma, dtype=float), (2,))]
    dtype = np.dtype(dtype).type
    across = _gaussian_1d(kernel_size[0], sigma[0], dtype)
    down = _gaussian_1d(kernel_size[1], sigma[1], dtype)
    return np.outer(down, across).astype(dtype).reshape(kernel_size)


@register_op(policy=Policy.CUSTOM, supports=_batched_float)
def GaussianBlur(ctx: Context, op, images: Held) -> Held:
    """keras.ops.image.gaussian_blur(images, kernel_size, sigma, data_format): TF's
    depthwise conv with its Gaussian kernel (computed as TF does, in the images' dtype),
    stride 1, SAME (the odd pad of an even kernel after)."""
    x = images_first(ctx, op, images)
    channels = x.shape[x.layout.perm[1]]
    kernel = gaussian_kernel(op.kernel_size, op.sigma, ctx.input_dtype)
    depthwise = np.tile(kernel[:, :, None, None], (1, 1, channels, 1))
    node = convolve(ctx, x, torch_weight(ctx, depthwise, depthwise=True), kernel.shape,
                    (1, 1), "same", (1, 1), groups=channels)
    return held_like_images(ctx, op, node)
