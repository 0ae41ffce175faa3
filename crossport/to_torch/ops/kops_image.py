"""keras.ops.image operations (functional graphs, traced calls) -> torch: crop_images,
pad_images, rgb_to_grayscale, rgb_to_hsv, hsv_to_rgb, extract_patches, gaussian_blur,
affine_transform.

Crops, pads and the colour conversions work on the tensor as it is held (the axes named by
``data_format`` found in its layout), in TF's order of operations; extract_patches and
gaussian_blur are the convolutions Keras' TF backend runs (an identity kernel, a Gaussian
depthwise kernel), through kops_nn's conv helpers; affine_transform is TF's projective
kernel written out in torch ops. ``resize`` is in shape.py.
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
    image_axes,
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


def _check_run_time_size(ctx: Context, x: Held, axis: int, compare, bound: int,
                         message: str) -> None:
    """Where Keras raises at run time (a crop or pad that does not fit an image whose size
    it did not know), the module raises too, instead of cropping or padding short."""
    if x.shape[axis] is not None:
        return  # Keras checked it when the model was built
    size = ctx.call_method("size", x.node, physical_axis(x.layout, axis))
    ctx.call_function(torch._assert, ctx.call_function(compare, size, bound), message)


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def CropImages(ctx: Context, op, images: Held) -> Held:
    """keras.ops.image.crop_images(images, top_cropping, left_cropping, bottom_cropping,
    right_cropping, target_height, target_width, data_format): a slice of the held height
    and width axes, as Keras' ops.slice of them."""
    x = ctx.plain(images)
    h, w = _spatial_axes(op, x.rank)
    for axis, parts in ((h, (op.top_cropping, op.bottom_cropping, op.target_height)),
                        (w, (op.left_cropping, op.right_cropping, op.target_width))):
        need = sum(part for part in parts if part is not None)
        _check_run_time_size(ctx, x, axis, operator.ge, need,
                             f"keras.ops.image.crop_images {ctx.path!r}: the image is smaller "
                             f"than the {need} rows or columns cropped and kept")
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
        _check_run_time_size(ctx, x, axis, operator.le, target - known,
                             f"keras.ops.image.pad_images {ctx.path!r}: the image is larger "
                             f"than the target less the {known} rows or columns given")
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
    channels = x.shape[image_axes(op, x.rank)[0]]
    features = int(np.prod(size)) * channels
    kernel = np.eye(features, dtype=ctx.input_dtype).reshape(*size, channels, features)
    strides = per_dim(op.strides or size, n)
    node = convolve(ctx, op, x, torch_weight(ctx, kernel), size, strides, op.padding.lower(),
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
    channels = x.shape[image_axes(op, x.rank)[0]]
    kernel = gaussian_kernel(op.kernel_size, op.sigma, ctx.input_dtype)
    depthwise = np.tile(kernel[:, :, None, None], (1, 1, channels, 1))
    node = convolve(ctx, op, x, torch_weight(ctx, depthwise, depthwise=True), kernel.shape,
                    (1, 1), "same", (1, 1), groups=channels)
    return held_like_images(ctx, op, node)


# -- projective transforms ----------------------------------------------------------------
_INTERPOLATIONS = ("nearest", "bilinear")
_FILL_MODES = ("constant", "nearest", "wrap", "reflect")


def _affine_supported(op) -> str | None:
    if op.interpolation not in _INTERPOLATIONS or op.fill_mode not in _FILL_MODES:
        return (f"affine_transform interpolation={op.interpolation!r}, fill_mode="
                f"{op.fill_mode!r} (Keras' TF backend takes {'/'.join(_INTERPOLATIONS)} and "
                f"{'/'.join(_FILL_MODES)})")
    for shape, _ in _input_specs(op):
        if len(shape) != 4:
            return f"affine_transform of an unbatched image {shape}: not converted"
        spatial = shape[2:] if channels_first_layer(op) else shape[1:3]
        if None in spatial:
            return (f"affine_transform of images of shape {shape}: height and width known "
                    "only at run time are not converted")
    return None


class _Projection:
    """TF's ImageProjectiveTransformV3 kernel as fx nodes, on images held NCHW: for each
    output pixel the input point of the transform row, mapped by the fill mode, read (the
    fill value outside the image) by nearest or bilinear interpolation, in float32."""

    def __init__(self, ctx: Context, op, x: Held) -> None:
        self.ctx, self.call, self.x = ctx, ctx.call_function, x
        self.height, self.width = (x.shape[dim] for dim in _spatial_axes(op, x.rank))
        self.dtype = ctx.output_dtype()
        self.fill = np.asarray(op.fill_value).astype(ctx.output_dtypes[0]).item()  # T(fill)
        self.pixels = ctx.call_method("flatten", x.node, 2)  # N, C, H * W: gathered from
        self.expand = [ctx.call_method("size", x.node, 0), ctx.call_method("size", x.node, 1),
                       -1]

    def points(self, transform) -> tuple:
        """The input points ``(y, x)`` of every output pixel and the projection ``k``,
        ``[rows, H, W]`` each, computed in TF's order."""
        call, ctx = self.call, self.ctx
        device = call(getattr, self.x.node, "device")
        across = ctx.call_method("view", call(torch.arange, self.width, dtype=torch.float32,
                                              device=device), 1, 1, -1)
        down = ctx.call_method("view", call(torch.arange, self.height, dtype=torch.float32,
                                            device=device), 1, -1, 1)

        def column(k: int):
            return ctx.call_method("view", call(operator.getitem, transform,
                                                (slice(None), k)), -1, 1, 1)

        def line(a: int, b: int, c):
            return call(operator.add, call(operator.add, call(operator.mul, column(a), across),
                                           call(operator.mul, column(b), down)), c)

        k = line(6, 7, 1.0)
        x = call(operator.truediv, line(0, 1, column(2)), k)
        y = call(operator.truediv, line(3, 4, column(5)), k)
        return y, x, k

    def mapped(self, coordinate, length: int, mode: str):
        """TF's MapCoordinate for ``mode`` (reflect and wrap with its own arithmetic)."""
        call = self.call
        if mode == "constant":
            return coordinate
        if mode != "nearest" and length > 1:
            coordinate = (self._reflected if mode == "reflect" else self._wrapped)(
                coordinate, length)
        return call(torch.clamp, coordinate, 0.0, float(length - 1))

    def _reflected(self, c, length: int):
        call, size2 = self.call, float(2 * length)
        below = call(operator.add, call(operator.mul, size2, call(
            torch.trunc, call(operator.truediv, call(operator.neg, c), size2))), c)
        below = call(torch.where, call(operator.lt, below, float(-length)),
                     call(operator.add, below, size2),
                     call(operator.sub, call(operator.neg, below), 1.0))
        above = call(operator.sub, c, call(operator.mul, size2, call(
            torch.trunc, call(operator.truediv, c, size2))))
        above = call(torch.where, call(operator.ge, above, float(length)),
                     call(operator.sub, call(operator.sub, size2, above), 1.0), above)
        return self._by_side(c, length, below, above)

    def _wrapped(self, c, length: int):
        call, span = self.call, float(length - 1)  # (TF divides by len - 1, steps by len)
        below = call(operator.add, c, call(operator.mul, float(length), call(
            operator.add, call(torch.trunc, call(operator.truediv, call(operator.neg, c), span)),
            1.0)))
        above = call(operator.sub, c, call(operator.mul, float(length), call(
            torch.trunc, call(operator.truediv, c, span))))
        return self._by_side(c, length, below, above)

    def _by_side(self, c, length: int, below, above):
        call = self.call
        inside = call(torch.where, call(operator.gt, c, float(length - 1)), above, c)
        return call(torch.where, call(operator.lt, c, 0.0), below, inside)

    def read(self, y, x):
        """The image at integral points ``(y, x)``, the fill value outside it."""
        call, ctx = self.call, self.ctx
        valid = call(operator.and_, call(operator.and_, call(operator.ge, y, 0.0),
                                         call(operator.lt, y, float(self.height))),
                     call(operator.and_, call(operator.ge, x, 0.0),
                          call(operator.lt, x, float(self.width))))
        # (a point outside, NaN or ±inf when k == 0 included, reads pixel 0, then the fill)
        row, col = (call(torch.where, valid, c, 0.0) for c in (y, x))
        index = call(operator.add, call(operator.mul, row, float(self.width)), col)
        index = ctx.call_method("flatten", ctx.call_method("to", index, torch.int64), 1)
        index = ctx.call_method("expand", ctx.call_method("unsqueeze", index, 1), *self.expand)
        values = ctx.call_method("view_as", call(torch.gather, self.pixels, 2, index), self.x.node)
        return call(torch.where, ctx.call_method("unsqueeze", valid, 1), values, self.fill)

    def nearest(self, y, x):
        """``std::round`` (half away from zero) of each coordinate, then a read."""
        return self.read(self._rounded(y), self._rounded(x))

    def _rounded(self, c):
        call = self.call
        whole = call(torch.trunc, c)
        half = call(operator.ge, call(torch.abs, call(operator.sub, c, whole)), 0.5)
        return call(torch.where, half, call(operator.add, whole, call(torch.sign, c)), whole)

    def bilinear(self, y, x):
        """The four neighbours (each read as float32) weighted as TF's kernel does."""
        call, ctx = self.call, self.ctx
        y0, x0 = call(torch.floor, y), call(torch.floor, x)
        y1, x1 = call(operator.add, y0, 1.0), call(operator.add, x0, 1.0)

        def weight(a, b):
            return ctx.call_method("unsqueeze", call(operator.sub, a, b), 1)

        def read(row, col):
            value = self.read(row, col)
            return value if self.dtype == torch.float32 else \
                ctx.call_method("to", value, torch.float32)

        def blend(row):
            return call(operator.add, call(operator.mul, weight(x1, x), read(row, x0)),
                        call(operator.mul, weight(x, x0), read(row, x1)))

        out = call(operator.add, call(operator.mul, weight(y1, y), blend(y0)),
                   call(operator.mul, weight(y, y0), blend(y1)))
        return out if self.dtype == torch.float32 else ctx.call_method("to", out, self.dtype)


@register_op(policy=Policy.CUSTOM, supports=_affine_supported)
def AffineTransform(ctx: Context, op, images: Held, transform) -> Held:
    """keras.ops.image.affine_transform(images, transform, interpolation, fill_mode,
    fill_value, data_format): TF's ImageProjectiveTransformV3 kernel step for step on the
    images held NCHW (see ``_Projection``): ``(a0 x + a1 y + a2) / k`` etc. per output
    pixel in float32 (one transform row, or one per image), ``k == 0`` the fill value,
    ``std::round`` for nearest, four float32 reads for bilinear; a constant or graph
    transform alike."""
    x = images_first(ctx, op, images)
    if isinstance(transform, Held):
        rows = ctx.call_method("to", ctx.canonical(transform).node, torch.float32)
    else:
        rows = ctx.constant(np.asarray(transform, dtype="float32")).node
    if len(np.shape(transform) if not isinstance(transform, Held) else transform.shape) == 1:
        rows = ctx.call_method("unsqueeze", rows, 0)  # (one row for every image)
    projection = _Projection(ctx, op, x)
    y, x_in, k = projection.points(rows)
    y = projection.mapped(y, projection.height, op.fill_mode)
    x_in = projection.mapped(x_in, projection.width, op.fill_mode)
    values = getattr(projection, op.interpolation)(y, x_in)
    at_infinity = ctx.call_method("unsqueeze", ctx.call_function(operator.eq, k, 0.0), 1)
    node = ctx.call_function(torch.where, at_infinity, projection.fill, values)
    return held_like_images(ctx, op, node)
