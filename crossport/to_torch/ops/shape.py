"""Shape layers: Flatten, Reshape, Permute, ZeroPadding, Cropping, UpSampling.

Flatten of a channels-first block is ``torch.flatten`` in C-major order and marks the result
flat-permuted, so a following Dense permutes its weight instead (pitfall 9); anything else
reading it gets Keras' H, W, C order back. Permute only relabels the layout (no op).
"""

from __future__ import annotations

import operator

import numpy as np
import torch
from torch import nn

from crossport.errors import UnsupportedLayerError
from crossport.layout import FlatOrder, Layout, after_permute, canonical, channels_first
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held, static
from crossport.to_torch.registry import channels_first_layer, register_layer, register_op
from crossport.torch_layers import METHODS, KerasUpSampling2D, TFResize


@register_layer(policy=Policy.CUSTOM)
def Flatten(ctx: Context, layer, inputs: Held) -> Held:
    """keras.layers.Flatten: a flat-permuted [N, F] when the block is held permuted.

    ``data_format='channels_first'`` Flatten moves the channels last before flattening (Keras'
    rule): a relabelling of the held layout, then the same flatten.
    """
    if channels_first_layer(layer) and inputs.rank > 2:
        inputs = relabel(ctx.plain(inputs), (0, *range(2, inputs.rank), 1))
    if inputs.rank <= 2:  # (a flat-permuted value is rank 2: it stays as it is)
        return inputs
    return flatten_held(ctx, inputs)


def flatten_held(ctx: Context, inputs: Held) -> Held:
    """``[N, *block] -> [N, F]`` of a held block: C-major, marked flat-permuted (pitfall 9)."""
    block = static(inputs.shape)
    size = int(np.prod(block))
    node = ctx.call_method("flatten", inputs.node, 1)
    real = [d for d in inputs.layout.perm if inputs.shape[d] != 1]
    if real == sorted(real):  # only size-1 dims are out of Keras order: the same features
        return Held(node, canonical(2), (inputs.shape[0], size))
    block_perm = tuple(p - 1 for p in inputs.layout.perm[1:])
    return Held(node, Layout((0, 1), FlatOrder(block, block_perm)), (inputs.shape[0], size))


@register_layer(policy=Policy.CUSTOM)
def Reshape(ctx: Context, layer, inputs: Held) -> Held:
    """keras.layers.Reshape(target_shape).

    A reshape that only inserts or drops size-1 dims runs on the held tensor as it is when
    the real dims keep their held order (squeeze-excite's ``[N, C] -> [N, 1, 1, C]`` becomes
    ``[N, C, 1, 1]``, channels-first, no permute); others run on the Keras-ordered tensor.
    """
    # a None target size is Keras' -1: inferred from the others (Reshape.call)
    target = tuple(-1 if s is None else int(s) for s in layer.get_config()["target_shape"])
    out_shape = (inputs.shape[0], *target)
    held = unit_reshape(ctx, inputs, out_shape)
    if held is not None:
        return held
    inputs = ctx.canonical(inputs)
    batch = -1 if -1 not in target else ctx.call_method("size", inputs.node, 0)
    node = ctx.call_method("reshape", inputs.node, batch, *target)
    return Held(node, canonical(len(out_shape)), out_shape)


def unit_reshape(ctx: Context, inputs: Held, out_shape: tuple) -> Held | None:
    if inputs.layout.flat is not None or -1 in out_shape[1:] or None in inputs.shape[1:]:
        return None
    if inputs.shape[0] is None and out_shape[0] not in (None, -1):
        return None
    real_in = [d for d, s in enumerate(inputs.shape) if s != 1]
    real_out = [d for d, s in enumerate(out_shape) if s != 1]
    if [inputs.shape[d] for d in real_in] != [out_shape[d] for d in real_out]:
        return None
    held_in = [real_in.index(d) for d in inputs.layout.perm if d in real_in]
    for layout in (channels_first(len(out_shape)), canonical(len(out_shape))):
        if [real_out.index(d) for d in layout.perm if d in real_out] == held_in:
            sizes = [-1 if p == 0 else out_shape[p] for p in layout.perm]
            node = ctx.call_method("reshape", inputs.node, *sizes)
            return Held(node, layout, out_shape)
    return None


@register_layer(policy=Policy.CUSTOM)
def Permute(ctx: Context, layer, inputs: Held) -> Held:
    """keras.layers.Permute(dims): no op, only the layout label changes.

    With ``held == x.permute(p)`` and ``y = x.permute(d)``: ``held == y.permute(q)``,
    ``q[i] = inverse(d)[p[i]]``.
    """
    return relabel(ctx.plain(inputs), (0, *(int(d) for d in layer.get_config()["dims"])))


def relabel(inputs: Held, dims: tuple) -> Held:
    """``inputs`` as the Keras tensor ``x.permute(dims)``: the same held node, a new layout."""
    shape = tuple(inputs.shape[d] for d in dims)
    return Held(inputs.node, after_permute(inputs.layout, dims), shape)


def _pairs(cfg_value, rank: int) -> list[tuple[int, int]]:
    """ZeroPadding/Cropping config as one (before, after) pair per spatial dim."""
    if isinstance(cfg_value, int):
        return [(cfg_value, cfg_value)] * rank
    if rank == 1 and len(cfg_value) == 2 and all(isinstance(v, int) for v in cfg_value):
        return [(int(cfg_value[0]), int(cfg_value[1]))]  # 1D: one (before, after) pair
    out = []
    for v in cfg_value:
        out.append((v, v) if isinstance(v, int) else (int(v[0]), int(v[1])))
    return out


@register_layer("ZeroPadding1D", "ZeroPadding2D", "ZeroPadding3D",
                policy=Policy.CHANNELS_FIRST)
def ZeroPaddingND(ctx: Context, layer, inputs):
    """keras.layers.ZeroPadding{1,2,3}D -> nn.ZeroPad{1,2,3}d (F.pad order: last dim first)."""
    rank = len(ctx.input_shape) - 2
    pairs = _pairs(layer.get_config()["padding"], rank)
    flat = tuple(v for pair in reversed(pairs) for v in pair)  # pitfall 7
    pad = {1: nn.ZeroPad1d, 2: nn.ZeroPad2d, 3: nn.ZeroPad3d}[rank]
    return ctx.call_module(pad(flat), inputs)


@register_layer("Cropping1D", "Cropping2D", "Cropping3D", policy=Policy.CHANNELS_FIRST)
def CroppingND(ctx: Context, layer, inputs):
    """keras.layers.Cropping{1,2,3}D: a slice of each spatial dim."""
    rank = len(ctx.input_shape) - 2
    pairs = _pairs(layer.get_config()["cropping"], rank)
    index = (slice(None), slice(None)) + tuple(
        slice(before, -after if after else None) for before, after in pairs)
    return ctx.call_function(operator.getitem, inputs, index)


@register_layer(policy=Policy.CHANNELS_FIRST)
def UpSampling1D(ctx: Context, layer, inputs):
    """keras.layers.UpSampling1D(size): each step repeated ``size`` times."""
    return ctx.call_function(torch.repeat_interleave, inputs, int(layer.get_config()["size"]),
                             dim=2)


@register_layer(policy=Policy.CHANNELS_FIRST)
def UpSampling3D(ctx: Context, layer, inputs):
    """keras.layers.UpSampling3D(size): each voxel repeated ``size`` times per spatial axis."""
    for dim, size in zip((2, 3, 4), layer.get_config()["size"]):
        if int(size) != 1:
            inputs = ctx.call_function(torch.repeat_interleave, inputs, int(size), dim=dim)
    return inputs


def _center_crop_supported(layer) -> str | None:
    try:
        shape = tuple(layer.input.shape)
    except (AttributeError, ValueError):  # a layer called several times: every call checked
        shapes = [tuple(node.input_tensors[0].shape) for node in layer._inbound_nodes]
    else:
        shapes = [shape]
    first = channels_first_layer(layer)
    for shape in shapes:
        sizes = shape[2:4] if first else shape[1:3]
        if len(shape) != 4 or None in sizes:
            return f"CenterCrop of a tensor of shape {shape}: needs a batch of static H, W"
        if sizes[0] < layer.height or sizes[1] < layer.width:
            return (f"CenterCrop to ({layer.height}, {layer.width}) of a smaller image "
                    f"{sizes} resizes it (smart_resize); not converted")
    return None


@register_layer(policy=Policy.CHANNELS_FIRST, supports=_center_crop_supported)
def CenterCrop(ctx: Context, layer, inputs):
    """keras.layers.CenterCrop(height, width) of a larger image: the slice Keras takes
    (offsets ``(H - height) // 2``, ``(W - width) // 2``), in float32 as Keras casts."""
    first = channels_first_layer(layer)
    h, w = ctx.input_shape[2:4] if first else ctx.input_shape[1:3]
    top, left = (h - layer.height) // 2, (w - layer.width) // 2
    index = (slice(None), slice(None), slice(top, top + layer.height),
             slice(left, left + layer.width))
    return ctx.call_function(operator.getitem, inputs, index)


def _upsampling_supported(layer) -> str | None:
    if layer.get_config()["interpolation"] not in ("nearest", "bilinear"):
        return (f"UpSampling2D interpolation {layer.get_config()['interpolation']!r}: "
                "use nearest or bilinear")
    return None


@register_layer(policy=Policy.CHANNELS_FIRST, supports=_upsampling_supported)
def UpSampling2D(ctx: Context, layer, inputs):
    """keras.layers.UpSampling2D -> nn.Upsample (nearest repeats; bilinear is TF half-pixel).

    Integer-factor nearest is a pure repeat in both; TF's half-pixel bilinear upsampling is
    torch's ``align_corners=False`` (pitfall 12). Other modes: torch_layers.KerasUpSampling2D.
    """
    cfg = layer.get_config()
    size = tuple(int(s) for s in cfg["size"])
    if cfg["interpolation"] == "nearest":
        return ctx.call_module(nn.Upsample(scale_factor=size, mode="nearest"), inputs)
    if cfg["interpolation"] == "bilinear":
        return ctx.call_module(
            nn.Upsample(scale_factor=size, mode="bilinear", align_corners=False), inputs)
    return ctx.call_module(KerasUpSampling2D.from_keras(layer), inputs)


def _resizing_supported(layer) -> str | None:
    cfg = layer.get_config()
    if cfg.get("fill_mode", "constant") != "constant":
        return f"Resizing fill_mode={cfg['fill_mode']!r} (Keras' TF backend refuses it too)"
    if cfg["interpolation"] not in METHODS:
        return f"Resizing interpolation {cfg['interpolation']!r}: supported {sorted(METHODS)}"
    return None


@register_layer(policy=Policy.CHANNELS_FIRST, supports=_resizing_supported)
def Resizing(ctx: Context, layer, inputs):
    """keras.layers.Resizing -> torch_layers.TFResize (tf.image.resize's kernels, pitfall 12;
    crop/pad_to_aspect_ratio with Keras' own box arithmetic)."""
    return ctx.call_module(TFResize.from_keras(layer), inputs)


def _resize_op_supported(op) -> str | None:
    if op.fill_mode != "constant":
        return f"image.resize fill_mode={op.fill_mode!r} (Keras' TF backend refuses it too)"
    if op.interpolation not in METHODS:
        return f"image.resize interpolation {op.interpolation!r}: supported {sorted(METHODS)}"
    return None


@register_op(policy=Policy.CHANNELS_FIRST, supports=_resize_op_supported)
def Resize(ctx: Context, op, images, *_args, **_kwargs):
    """keras.ops.image.resize(images, size, ...) -> torch_layers.TFResize, as the Resizing
    layer (batched images; an unbatched [H, W, C] image is refused by name)."""
    if len(ctx.input_shape) != 4:
        raise UnsupportedLayerError(
            f"keras.ops.image.resize {ctx.path!r} of an unbatched image "
            f"{tuple(ctx.input_shape)}; not converted (add a batch dim)",
            [(ctx.path, "Resize", "an unbatched image")])
    module = TFResize(op.size, op.interpolation, bool(op.antialias),
                      bool(op.crop_to_aspect_ratio), bool(op.pad_to_aspect_ratio),
                      float(op.fill_value))
    return ctx.call_module(module, images)


@register_layer(policy=Policy.CANONICAL)
def RepeatVector(ctx: Context, layer, inputs):
    """keras.layers.RepeatVector(n): ``[N, F] -> [N, n, F]`` (a copy, like Keras)."""
    n = int(layer.get_config()["n"])
    return ctx.call_method("repeat", ctx.call_method("unsqueeze", inputs, 1), 1, n, 1)
