"""keras.ops.nn operations (functional graphs, traced calls) -> torch: convolutions, pools,
batch_normalization, depth_to_space / space_to_depth, multi_hot, sparsemax.

The convolutions take Keras' kernel layout (``[*k, in, out]``; a transposed conv's
``[*k, out, in]``): a numpy constant becomes a buffer permuted once into torch's weight, a
tensor computed in the graph is permuted at run time. They run ``F.conv{n}d`` on the tensor
held N, C, spatial... with TF's ``SAME`` pads, worked out per dim as TF does (the odd extra
pad after) from the static size, or from ``x.size(d)`` for a size known only at run time.
The pools reuse the pooling layers' converters (pool.py). ``keras.ops.polar`` makes complex
numbers, which the torch module does not hold: refused by name.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import keras
import numpy as np
import torch
import torch.nn.functional as F

from crossport.errors import UnsupportedLayerError
from crossport.layout import (
    canonical,
    channels_first,
    normalize_dim,
    physical_array,
    physical_axis,
    torch_kernel,
)
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.ops import pool as layer_pools
from crossport.to_torch.registry import channels_first_layer, register_op
from crossport.torch_layers import same_padding, transpose_output_geometry

F_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
F_CONV_TRANSPOSE = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def per_dim(value, n: int) -> tuple[int, ...]:
    """An int or a sequence of ints (Keras' ``strides``, ``pool_size`` ...) as one int per
    spatial dim."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    return tuple(int(v) for v in value)


# -- convolutions -------------------------------------------------------------------------
def _strided_and_dilated(op) -> str | None:
    """TF's convolution (and so Keras) fails on strides > 1 with dilation > 1; Keras' depthwise
    and separable convs decompose that case, and compute it."""
    strides = np.atleast_1d(op.strides)
    dilation = np.atleast_1d(op.dilation_rate)
    if (strides > 1).any() and (dilation > 1).any():
        return (f"keras.ops.{_OP_NAMES[type(op).__name__]} with strides {op.strides} and "
                f"dilation_rate {op.dilation_rate}: Keras' TF backend fails on strides > 1 "
                "with dilation > 1 (tf.nn.convolution)")
    return None


_OP_NAMES = {"Conv": "conv", "ConvTranspose": "conv_transpose"}


def _kernel_shape(ctx: Context, kernel) -> tuple[int, ...]:
    shape = tuple(kernel.shape) if isinstance(kernel, Held) else tuple(np.shape(kernel))
    if any(s is None for s in shape):
        raise UnsupportedLayerError(
            f"keras.ops op {ctx.path!r}: a kernel of shape {shape} with sizes known only at "
            "run time; not converted", [(ctx.path, type(ctx.layer).__name__, "kernel size")])
    return tuple(int(s) for s in shape)


def torch_weight(ctx: Context, kernel, depthwise: bool = False) -> torch.fx.Node:
    """Keras' kernel as torch's conv weight: a numpy constant permuted once into a buffer, a
    tensor of the graph (or a variable a traced call reads) permuted at run time
    (``torch_kernel``).

    A depthwise kernel ``[*k, in, mult]`` is first read as ``[*k, 1, in * mult]``: output
    channel ``c * mult + m`` reads input channel ``c`` in both frameworks."""
    shape = _kernel_shape(ctx, kernel)
    rank = len(shape)
    if depthwise:
        shape = (*shape[:-2], 1, shape[-2] * shape[-1])
    if not isinstance(kernel, Held):
        array = np.asarray(kernel, dtype=ctx.output_dtypes[0]).reshape(shape)
        return ctx.constant(physical_array(array, torch_kernel(rank))).node
    if depthwise:
        kernel = ctx.canonical(kernel)
        kernel = Held(ctx.call_method("reshape", kernel.node, *shape), canonical(rank), shape)
    return ctx.to_layout(kernel, torch_kernel(rank)).node


def image_axes(op, rank: int) -> tuple[int, list[int]]:
    """The Keras channel axis and spatial axes of an op's images (its ``data_format``);
    held N, C, spatial... (``images_first``) they are held in this order."""
    if channels_first_layer(op):
        return 1, list(range(2, rank))
    return rank - 1, list(range(1, rank - 1))


def images_first(ctx: Context, op, x: Held) -> Held:
    """``x`` held N, C, spatial...: a channels_last op's tensor moved there (no op when a
    conv before holds it so), a channels_first op's in Keras' own order."""
    x = ctx.plain(x)
    return ctx.to_layout(x, canonical(x.rank) if channels_first_layer(op)
                         else channels_first(x.rank))


def held_like_images(ctx: Context, op, node) -> Held:
    """The op's output ``node`` (N, C, spatial...) as Keras holds it."""
    rank = len(ctx.output_shapes[0])
    layout = canonical(rank) if channels_first_layer(op) else channels_first(rank)
    return Held(node, layout, ctx.output_shapes[0])


def same_pad(ctx: Context, x: Held, dim: int, kernel: int, stride: int, dilation: int) -> tuple:
    """TF's ``SAME`` ``(before, after)`` pad of Keras dim ``dim`` of ``x``: the odd extra
    element after. Ints for a static size (or a stride of 1, where it does not matter), else
    fx nodes computing TF's rule from the size the held tensor has at run time."""
    effective = (kernel - 1) * dilation + 1
    size = x.shape[dim]
    if stride == 1:
        return (effective - 1) // 2, effective - 1 - (effective - 1) // 2
    if size is not None:
        return same_padding(size, kernel, stride, dilation)
    size = ctx.call_method("size", x.node, physical_axis(x.layout, dim))
    # total = (ceil(n/s) - 1) * s + effective - n == effective - 1 - (n - 1) % s
    rest = ctx.call_function(operator.mod, ctx.call_function(operator.sub, size, 1), stride)
    total = ctx.call_function(operator.sub, effective - 1, rest)
    if effective < stride:  # (it can go negative only then: TF pads nothing)
        total = ctx.call_function(torch.sym_max, total, 0)
    before = ctx.call_function(operator.floordiv, total, 2)
    return before, ctx.call_function(operator.sub, total, before)


def padded(ctx: Context, x, pads: Sequence[tuple]) -> tuple[object, list[int]]:
    """``x`` (N, C, spatial...) and the conv's symmetric ``padding``: TF's pads as torch's
    ``padding`` where they are equal ints, else an ``F.pad`` first (last dim first)."""
    if all(isinstance(b, int) and b == a for b, a in pads):
        return x, [b for b, _ in pads]
    widths = [w for before, after in reversed(pads) for w in (before, after)]
    return ctx.call_function(F.pad, x, widths), [0] * len(pads)


def convolve(ctx: Context, op, x: Held, weight, kernel_size, strides, padding: str, dilation,
             groups: int = 1) -> torch.fx.Node:
    """``F.conv{n}d`` of ``x`` (the op's images held N, C, spatial...) with TF's ``valid`` /
    ``same`` padding."""
    n = len(kernel_size)
    if padding == "same":
        _, spatial = image_axes(op, x.rank)
        pads = [same_pad(ctx, x, dim, k, s, d)
                for dim, k, s, d in zip(spatial, kernel_size, strides, dilation)]
    else:
        pads = [(0, 0)] * n
    node, symmetric = padded(ctx, x.node, pads)
    return ctx.call_function(F_CONV[n], node, weight, None, list(strides), symmetric,
                             list(dilation), groups)


def _conv_geometry(op, n: int) -> tuple[tuple, tuple]:
    return per_dim(op.strides, n), per_dim(op.dilation_rate, n)


@register_op(policy=Policy.CUSTOM, supports=_strided_and_dilated)
def Conv(ctx: Context, op, inputs: Held, kernel) -> Held:
    """keras.ops.conv(inputs, kernel, strides, padding, data_format, dilation_rate) ->
    ``F.conv{1,2,3}d`` on the tensor held N, C, spatial..., TF's SAME pads as ``padding``
    or an ``F.pad`` where they differ; the kernel ``[*k, in, out]`` as torch's weight."""
    x = images_first(ctx, op, inputs)
    shape = _kernel_shape(ctx, kernel)
    strides, dilation = _conv_geometry(op, x.rank - 2)
    channels = x.shape[image_axes(op, x.rank)[0]]  # (TF groups them by the kernel's inputs)
    groups = 1 if channels is None else channels // shape[-2]
    node = convolve(ctx, op, x, torch_weight(ctx, kernel), shape[:-2], strides, op.padding,
                    dilation, groups)
    return held_like_images(ctx, op, node)


def _depthwise(ctx: Context, op, x: Held, kernel) -> torch.fx.Node:
    shape = _kernel_shape(ctx, kernel)
    strides, dilation = _conv_geometry(op, x.rank - 2)
    return convolve(ctx, op, x, torch_weight(ctx, kernel, depthwise=True), shape[:-2], strides,
                    op.padding, dilation, groups=shape[-2])


@register_op(policy=Policy.CUSTOM)
def DepthwiseConv(ctx: Context, op, inputs: Held, kernel) -> Held:
    """keras.ops.depthwise_conv(inputs, kernel [*k, in, mult], ...) -> ``F.conv{1,2}d`` with
    ``groups=in``, output channel ``c * mult + m`` from input channel ``c`` as in TF; strides
    with dilation, which Keras computes as a dilated conv subsampled after TF's SAME pad of
    the strided conv, are one strided dilated conv on the same pads."""
    node = _depthwise(ctx, op, images_first(ctx, op, inputs), kernel)
    return held_like_images(ctx, op, node)


@register_op(policy=Policy.CUSTOM)
def SeparableConv(ctx: Context, op, inputs: Held, depthwise_kernel, pointwise_kernel) -> Held:
    """keras.ops.separable_conv(inputs, depthwise_kernel, pointwise_kernel, ...) -> the
    depthwise conv (see DepthwiseConv) then a 1x1 ``F.conv{1,2}d``, as TF's
    separable_conv2d."""
    x = images_first(ctx, op, inputs)
    y = _depthwise(ctx, op, x, depthwise_kernel)
    node = ctx.call_function(F_CONV[x.rank - 2], y, torch_weight(ctx, pointwise_kernel))
    return held_like_images(ctx, op, node)


def _conv_transpose_crops(op, kernel_size, n: int) -> list[int]:
    """``F.pad`` widths (last dim first; negative crops) taking torch's full transposed conv
    to Keras' output: TF crops ``before`` and keeps Keras' length, which differ from the
    full length by amounts that do not depend on the input size (computed at size 1)."""
    strides, dilation = per_dim(op.strides, n), per_dim(op.dilation_rate, n)
    output_padding = (None,) * n if op.output_padding is None else \
        per_dim(op.output_padding, n)
    widths: list[int] = []
    for k, s, d, extra in reversed(list(zip(kernel_size, strides, dilation, output_padding))):
        length, before = transpose_output_geometry(1, k, s, d, op.padding, extra)
        full = (k - 1) * d + 1
        widths.extend((-before, length + before - full))
    return widths


@register_op(policy=Policy.CUSTOM, supports=_strided_and_dilated)
def ConvTranspose(ctx: Context, op, inputs: Held, kernel) -> Held:
    """keras.ops.conv_transpose(inputs, kernel [*k, out, in], strides, padding,
    output_padding, ...) -> the full ``F.conv_transpose{1,2,3}d``, then TF's crop (or zero
    extension) to Keras' output size as an ``F.pad`` (as torch_layers' TFConvNdTranspose)."""
    x = images_first(ctx, op, inputs)
    n = x.rank - 2
    shape = _kernel_shape(ctx, kernel)
    strides, dilation = _conv_geometry(op, n)
    node = ctx.call_function(F_CONV_TRANSPOSE[n], x.node, torch_weight(ctx, kernel), None,
                             list(strides), 0, 0, 1, list(dilation))
    widths = _conv_transpose_crops(op, shape[:-2], n)
    if any(widths):
        node = ctx.call_function(F.pad, node, widths)
    return held_like_images(ctx, op, node)


# -- pools --------------------------------------------------------------------------------
def _pool_config(ctx: Context, op) -> dict:
    n = len(ctx.input_shape) - 2
    size = per_dim(op.pool_size, n)
    strides = size if op.strides is None else per_dim(op.strides, n)
    return {"pool_size": size, "strides": strides, "padding": op.padding}


@register_op(policy=Policy.CHANNELS_FIRST)
def MaxPool(ctx: Context, op, inputs):
    """keras.ops.max_pool(inputs, pool_size, strides, padding, data_format) -> nn.MaxPoolNd
    (TFMaxPoolNd for TF's asymmetric SAME), as the MaxPooling layers: NaN skipped and a
    window of NaN / -inf alone the lowest finite value, as TF's kernel; int tensors pool
    as they are (TF pads them with the dtype's lowest value)."""
    cfg = _pool_config(ctx, op)
    size, strides, padding = layer_pools._geometry(ctx, cfg)
    n = len(size)
    if "float" not in ctx.input_dtype:
        return _int_max_pool(ctx, inputs, cfg, padding)
    if padding is None:
        pool = layer_pools._TF_MAX[n](size, strides, cfg["padding"])
    else:
        pool = layer_pools._MAX[n](size, strides, padding)
    return layer_pools._skipping_nan(ctx, pool, inputs)


def _int_max_pool(ctx: Context, x, cfg: dict, padding):
    """An integer max pool: TF's SAME pads with the dtype's lowest value (torch's max pools
    take no ints: computed in float64, exact for int8 to int32; int64 is refused)."""
    if ctx.input_dtype not in ("int8", "uint8", "int16", "int32"):
        raise UnsupportedLayerError(
            f"keras.ops.max_pool {ctx.path!r} of {ctx.input_dtype} values: not converted "
            "(cast to int32 or float first)", [(ctx.path, "MaxPool", ctx.input_dtype)])
    n = len(cfg["pool_size"])
    node = ctx.call_method("to", x, torch.float64)
    if padding is None:
        pool = layer_pools._TF_MAX[n](cfg["pool_size"], cfg["strides"], cfg["padding"])
    else:
        pool = layer_pools._MAX[n](cfg["pool_size"], cfg["strides"], padding)
    return ctx.call_method("to", ctx.call_module(pool, node), ctx.output_dtype())


@register_op(policy=Policy.CHANNELS_FIRST)
def AveragePool(ctx: Context, op, inputs):
    """keras.ops.average_pool(inputs, pool_size, strides, padding, data_format) ->
    nn.AvgPoolNd(count_include_pad=False) (TFAvgPoolNd for TF's asymmetric SAME), as the
    AveragePooling layers: TF's SAME divides by the real elements only."""
    cfg = _pool_config(ctx, op)
    size, strides, padding = layer_pools._geometry(ctx, cfg)
    if padding is None:
        module = layer_pools._TF_AVG[len(size)](size, strides, cfg["padding"])
    else:
        module = layer_pools._AVG[len(size)](size, strides, padding, count_include_pad=False)
    return ctx.call_module(module, inputs)


def _adaptive_supported(op) -> str | None:
    """As the adaptive max pooling layers: TF's kernel crashes the process on an output or
    input size of 1 (SIGFPE), so there is no Keras result to match."""
    if type(op).__name__ != "AdaptiveMaxPool":
        return None
    for node in op._inbound_nodes:
        shape = tuple(node.input_tensors[0].shape)
        n = len(shape) - 2
        spatial = shape[2:] if op.data_format == "channels_first" else shape[1:-1]
        if 1 in per_dim(op.output_size, n) or 1 in spatial:
            return (f"keras.ops.adaptive_max_pool(output_size={op.output_size}) of a tensor "
                    f"of shape {shape}: Keras' TF kernel crashes the process on an output "
                    "or input size of 1; use a larger size or ops.max over the axes")
    return None


@register_op("AdaptiveAveragePool", "AdaptiveMaxPool", policy=Policy.CUSTOM,
             supports=_adaptive_supported)
def AdaptivePool(ctx: Context, op, inputs: Held) -> Held:
    """keras.ops.adaptive_average_pool / adaptive_max_pool(inputs, output_size, data_format)
    -> nn.Adaptive{Avg,Max}PoolNd over the windows TF's two-pool gather takes, as the
    adaptive pooling layers (the max skips NaN as TF's MaxPool).

    For channels_last data Keras declares a wrong shape (its compute_output_spec keeps the
    first spatial dim, ``(N, H, h, w, C)`` for ``(N, H, W, C)``); the result is held with the
    shape TF computes, ``(N, h, w, C)``."""
    x = images_first(ctx, op, inputs)
    size = per_dim(op.output_size, x.rank - 2)
    if type(op).__name__ == "AdaptiveAveragePool":
        node = ctx.call_module(layer_pools._ADAPTIVE_AVG[len(size)](size), x.node)
    else:
        node = layer_pools._skipping_nan(ctx, layer_pools._ADAPTIVE_MAX[len(size)](size),
                                         x.node)
    shape = (x.shape[0], x.shape[1], *size) if channels_first_layer(op) else \
        (x.shape[0], *size, x.shape[-1])
    return Held(node, x.layout, shape)


# -- normalization ------------------------------------------------------------------------
def _vector(ctx: Context, value, shape: list[int]):
    """A per-channel vector (a graph tensor or a numpy constant, in the output's dtype)
    shaped to broadcast along the held channel axis."""
    if value is None:
        return None
    if isinstance(value, Held):
        node = ctx.canonical(value).node
    else:
        node = ctx.constant(np.asarray(value, dtype=ctx.output_dtypes[0])).node
    return ctx.call_method("reshape", node, *shape)


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def BatchNorm(ctx: Context, op, x: Held, mean, variance, offset=None, scale=None) -> Held:
    """keras.ops.batch_normalization(x, mean, variance, axis, offset, scale, epsilon) on the
    tensor as held, the vectors along the held axis of ``axis``, in TF's order of operations
    (tf.nn.batch_normalization): ``inv = rsqrt(variance + epsilon) * scale``, then
    ``x * inv + (offset - mean * inv)``."""
    x = ctx.plain(x)
    shape = [1] * x.rank
    shape[physical_axis(x.layout, int(op.axis))] = -1
    mean, variance, offset, scale = (_vector(ctx, v, shape)
                                     for v in (mean, variance, offset, scale))
    inv = ctx.call_function(torch.rsqrt, ctx.call_function(operator.add, variance,
                                                           float(op.epsilon)))
    if scale is not None:
        inv = ctx.call_function(operator.mul, inv, scale)
    shift = ctx.call_function(operator.mul, ctx.call_function(operator.neg, mean), inv) \
        if offset is None else ctx.call_function(
            operator.sub, offset, ctx.call_function(operator.mul, mean, inv))
    node = ctx.call_function(operator.add, ctx.call_function(operator.mul, x.node, inv), shift)
    return Held(node, x.layout, ctx.output_shapes[0])


# -- rearrangements -----------------------------------------------------------------------
@register_op(policy=Policy.CHANNELS_FIRST)
def DepthToSpace(ctx: Context, op, x):
    """keras.ops.depth_to_space(x, block_size, data_format) on the tensor held NCHW: TF's
    channel ``(i * b + j) * C' + c`` goes to pixel ``(h * b + i, w * b + j)``, channel ``c``
    (torch's pixel_shuffle reads the channels the other way round): an unflatten of the
    channels into ``(b, b, C')``, a permute and two flattens."""
    b = int(op.block_size)
    blocks = ctx.call_method("unflatten", x, 1, (b, b, -1))   # N, bi, bj, C', H, W
    moved = ctx.call_method("permute", blocks, 0, 3, 4, 1, 5, 2)  # N, C', H, bi, W, bj
    return ctx.call_method("flatten", ctx.call_method("flatten", moved, 4, 5), 2, 3)


@register_op(policy=Policy.CHANNELS_FIRST)
def SpaceToDepth(ctx: Context, op, x):
    """keras.ops.space_to_depth(x, block_size, data_format) on the tensor held NCHW: pixel
    ``(h * b + i, w * b + j)``, channel ``c`` goes to channel ``(i * b + j) * C + c`` (TF's
    order; torch's pixel_unshuffle differs): two unflattens, a permute, a flatten."""
    b = int(op.block_size)
    x = ctx.call_method("unflatten", ctx.call_method("unflatten", x, 3, (-1, b)), 2, (-1, b))
    moved = ctx.call_method("permute", x, 0, 3, 5, 1, 2, 4)  # N, bi, bj, C, H, W
    return ctx.call_method("flatten", moved, 1, 3)


# -- encodings and activations ------------------------------------------------------------
def _multi_hot_supported(op) -> str | None:
    return "sparse multi_hot is not converted" if op.sparse else None


@register_op(policy=Policy.CANONICAL, supports=_multi_hot_supported)
def MultiHot(ctx: Context, op, x):
    """keras.ops.multi_hot(x, num_classes, axis, dtype): TF's one_hot (an index outside
    ``[0, num_classes)`` hits no class) reduced by max over axis 1 (axis 0 for a vector), in
    the op's dtype (Keras declares the input's dtype; TF computes the op's)."""
    rank = len(ctx.input_shape) + 1
    axis = normalize_dim(int(op.axis), rank)
    shape = [1] * rank
    shape[axis] = -1
    device = ctx.call_function(getattr, x, "device")
    classes = ctx.call_function(torch.arange, int(op.num_classes), device=device)
    classes = ctx.call_method("reshape", classes, *shape)
    hot = ctx.call_function(operator.eq, ctx.call_method("unsqueeze", x, axis), classes)
    hit = ctx.call_function(torch.any, hot, 1 if rank > 2 else 0)
    return ctx.call_method("to", hit, getattr(torch, keras.backend.standardize_dtype(op.dtype)))


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def Sparsemax(ctx: Context, op, x: Held) -> Held:
    """keras.ops.sparsemax(x, axis) on the held axis, step for step as Keras' TF backend:
    sort descending, cumsum, the support ``sorted - (cumsum - 1) / r > 0``, ``tau`` and
    ``max(x - tau, 0)`` (±inf as TF). A row holding NaN is NaN: TF's own result for it is
    what its sort kernel leaves (NaN compares false both ways), not reproduced."""
    x = ctx.plain(x)
    dim = physical_axis(x.layout, int(op.axis))
    ordered = ctx.call_function(torch.sort, x.node, dim, descending=True)
    ordered = ctx.call_function(operator.getitem, ordered, 0)
    cumsum = ctx.call_function(torch.cumsum, ordered, dim)
    r = ctx.call_function(torch.cumsum, ctx.call_function(torch.ones_like, ordered), dim)
    bound = ctx.call_function(operator.truediv, ctx.call_function(operator.sub, cumsum, 1.0), r)
    support = ctx.call_function(operator.gt, ctx.call_function(operator.sub, ordered, bound), 0)
    kept = ctx.call_function(torch.where, support, cumsum, 0.0)
    k = ctx.call_function(torch.sum, support, dim, keepdim=True)  # (an exact count)
    total = ctx.call_function(torch.sum, kept, dim, keepdim=True)
    tau = ctx.call_function(operator.truediv, ctx.call_function(operator.sub, total, 1.0), k)
    out = ctx.call_function(torch.clamp_min, ctx.call_function(operator.sub, x.node, tau), 0.0)
    has_nan = ctx.call_function(torch.any, ctx.call_function(torch.isnan, x.node), dim,
                                keepdim=True)
    node = ctx.call_function(torch.where, has_nan, math.nan, out)
    return Held(node, x.layout, x.shape)


def _polar_supported(op) -> str | None:
    return ("keras.ops.polar makes complex numbers (Keras declares float32 and TF computes "
            "complex64); the converted module holds no complex tensors")


@register_op(policy=Policy.CANONICAL, supports=_polar_supported)
def Polar(ctx: Context, op, abs_, angle):
    """keras.ops.polar(abs_, angle): refused by name (a complex result)."""
    raise UnsupportedLayerError(_polar_supported(op), [(ctx.path, "Polar", "complex")])
