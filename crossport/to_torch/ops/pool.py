"""Pooling: Max/AveragePooling{1,2,3}D and the global pools -> torch.

``valid`` and size-independent symmetric ``same`` (stride 1, odd window) are plain
``nn.MaxPoolNd`` / ``nn.AvgPoolNd(count_include_pad=False)`` (TF averages only the real
elements, pitfall 11); other ``same`` pools are the torch_layers twins that pad TF's way, and
so is a ``valid`` pool over a run-time size: shorter than the window, TF's result is empty
where torch's pools raise.
``data_format='channels_first'`` layers take their tensors as Keras holds them.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from crossport.layout.policy import Policy
from crossport.to_torch.context import Context
from crossport.to_torch.ops.conv import symmetric_padding
from crossport.to_torch.registry import channels_first_layer, register_layer
from crossport.torch_layers import (
    TFAvgPool1d,
    TFAvgPool2d,
    TFAvgPool3d,
    TFMaxPool1d,
    TFMaxPool2d,
    TFMaxPool3d,
)

_MAX = {1: nn.MaxPool1d, 2: nn.MaxPool2d, 3: nn.MaxPool3d}
_AVG = {1: nn.AvgPool1d, 2: nn.AvgPool2d, 3: nn.AvgPool3d}
_TF_MAX = {1: TFMaxPool1d, 2: TFMaxPool2d, 3: TFMaxPool3d}
_TF_AVG = {1: TFAvgPool1d, 2: TFAvgPool2d, 3: TFAvgPool3d}


def _geometry(ctx: Context, cfg: dict) -> tuple[tuple, tuple, tuple | None]:
    """Window, strides and torch's symmetric padding (None: the TF twin pools)."""
    size = tuple(cfg["pool_size"])
    strides = tuple(cfg["strides"] or size)
    if cfg["padding"] == "valid" and None in ctx.input_shape[1:]:
        return size, strides, None  # a run-time size may be shorter than the window
    padding = symmetric_padding({"kernel_size": size, "strides": strides,
                                 "dilation_rate": (1,) * len(size), "padding": cfg["padding"]})
    return size, strides, padding


@register_layer("MaxPooling1D", "MaxPooling2D", "MaxPooling3D", policy=Policy.CHANNELS_FIRST)
def MaxPoolingND(ctx: Context, layer, inputs):
    """keras.layers.MaxPooling{1,2,3}D -> nn.MaxPoolNd (TF SAME pads -inf after: TFMaxPoolNd).

    TF's kernel starts each window at the lowest finite value and takes a value only where
    greater: NaN is skipped, and a window of NaN / -inf alone is -FLT_MAX (torch's pools
    propagate NaN): NaN read as -inf before the pool, the result clamped below after.
    """
    cfg = layer.get_config()
    size, strides, padding = _geometry(ctx, cfg)
    if padding is None:
        return _skipping_nan(ctx, _TF_MAX[len(size)](size, strides, cfg["padding"]),
                             inputs)
    return _skipping_nan(ctx, _MAX[len(size)](size, strides, padding), inputs)


def _skipping_nan(ctx: Context, pool: nn.Module, inputs):
    """``pool`` (a torch max pool) as TF's MaxPool: NaN read as -inf before it, and -inf
    after it the lowest finite value of the tensor's dtype at run time (TF's start value;
    nan_to_num's default for -inf, so a module moved to float16 / float64 follows)."""
    inputs = ctx.call_function(torch.nan_to_num, inputs, nan=-math.inf, posinf=math.inf,
                               neginf=-math.inf)
    return ctx.call_function(torch.nan_to_num, ctx.call_module(pool, inputs),
                             posinf=math.inf)


@register_layer("AveragePooling1D", "AveragePooling2D", "AveragePooling3D",
                policy=Policy.CHANNELS_FIRST)
def AveragePoolingND(ctx: Context, layer, inputs):
    """keras.layers.AveragePooling{1,2,3}D -> nn.AvgPoolNd(count_include_pad=False).

    TF's SAME average divides by the real elements only (pitfall 11).
    """
    cfg = layer.get_config()
    size, strides, padding = _geometry(ctx, cfg)
    if padding is None:
        return ctx.call_module(_TF_AVG[len(size)](size, strides, cfg["padding"]), inputs)
    return ctx.call_module(_AVG[len(size)](size, strides, padding, count_include_pad=False),
                           inputs)


@register_layer("GlobalAveragePooling2D", "GlobalAveragePooling3D", "GlobalMaxPooling1D",
                "GlobalMaxPooling2D", "GlobalMaxPooling3D", policy=Policy.CHANNELS_FIRST)
@register_layer("GlobalAveragePooling1D", policy=Policy.CHANNELS_FIRST, masks=True)
def GlobalPoolingND(ctx: Context, layer, inputs, mask=None):
    """keras.layers.Global{Average,Max}Pooling{1,2,3}D: mean/amax over the spatial dims.

    ``keepdims=True`` keeps ``[N, C, 1, ...]`` (Keras ``[N, 1, ..., C]``) as the held
    channels-first layout; without it the result is ``[N, C]`` (pitfall 2).
    """
    cfg = layer.get_config()
    rank = len(ctx.input_shape)
    dims = tuple(range(2, rank))
    if mask is not None:  # GlobalAveragePooling1D: the mean over the unmasked steps (Keras)
        keep = ctx.call_method("unsqueeze", mask, 1)  # [N, T] -> [N, 1, T] on [N, C, T]
        total = ctx.call_function(torch.sum, ctx.call_function(torch.where, keep, inputs, 0.0),
                                  dim=dims, keepdim=bool(cfg["keepdims"]))
        count = ctx.call_function(torch.sum, ctx.call_method("to", keep, torch.float32),
                                  dim=dims, keepdim=bool(cfg["keepdims"]))
        return ctx.call_function(torch.div, total, count)
    reduce = torch.mean if "Average" in type(layer).__name__ else torch.amax
    return ctx.call_function(reduce, inputs, dim=dims, keepdim=bool(cfg["keepdims"]))


_ADAPTIVE_MAX = {1: nn.AdaptiveMaxPool1d, 2: nn.AdaptiveMaxPool2d, 3: nn.AdaptiveMaxPool3d}
_ADAPTIVE_AVG = {1: nn.AdaptiveAvgPool1d, 2: nn.AdaptiveAvgPool2d, 3: nn.AdaptiveAvgPool3d}


def _adaptive_supported(layer) -> str | None:
    """Keras' TF max kernel also pools windows of ``ceil(L/o) + 1``: longer than an axis of
    length 1 or with output size 1, where TF's MaxPool dies of SIGFPE (the process, not an
    exception), so such a model has no Keras result to match."""
    if "Max" not in type(layer).__name__:
        return None
    shapes = [tuple(node.input_tensors[0].shape) for node in layer._inbound_nodes]
    first = channels_first_layer(layer)
    for shape in shapes:
        spatial = shape[2:] if first else shape[1:-1]
        if 1 in layer.output_size or 1 in spatial:
            return (f"{type(layer).__name__}(output_size={tuple(layer.output_size)}) of a "
                    f"tensor of shape {shape}: Keras' TF kernel crashes the process on an "
                    "output or input size of 1; use GlobalMaxPooling or a larger size")
    return None


@register_layer("AdaptiveAveragePooling1D", "AdaptiveAveragePooling2D",
                "AdaptiveAveragePooling3D", "AdaptiveMaxPooling1D", "AdaptiveMaxPooling2D",
                "AdaptiveMaxPooling3D", policy=Policy.CHANNELS_FIRST,
                supports=_adaptive_supported)
def AdaptivePoolingND(ctx: Context, layer, inputs):
    """keras.layers.Adaptive{Average,Max}Pooling{1,2,3}D -> nn.Adaptive{Avg,Max}PoolNd.

    Keras' TF kernel pools window ``i`` of an axis of length L over
    ``[floor(i*L/o), ceil((i+1)*L/o))`` (windows of ``ceil(L/o)`` or one more, gathered from
    two stride-1 pools), torch's adaptive pools over the same windows, per axis; the max
    pools skip NaN as TF's MaxPool does (:func:`_skipping_nan`).
    """
    size = tuple(int(s) for s in layer.output_size)
    if "Average" in type(layer).__name__:
        return ctx.call_module(_ADAPTIVE_AVG[len(size)](size), inputs)
    return _skipping_nan(ctx, _ADAPTIVE_MAX[len(size)](size), inputs)
