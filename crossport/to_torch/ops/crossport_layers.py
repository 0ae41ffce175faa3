"""crossport.layers (Keras layers with PyTorch semantics) back to the torch modules they mirror.

These appear in Keras models made by ``crossport.convert``; converting such a model back
(the torch -> Keras -> torch round trip) gives the original torch layer with its arguments.
"""

from __future__ import annotations

from torch import nn

from crossport.layout import channels_first
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.ops.kops_nn import F_CONV, F_CONV_TRANSPOSE, padded, torch_weight
from crossport.to_torch.registry import register_layer

_MAX = {"MaxPool1d": nn.MaxPool1d, "MaxPool2d": nn.MaxPool2d, "MaxPool3d": nn.MaxPool3d}
_AVG = {"AvgPool1d": nn.AvgPool1d, "AvgPool2d": nn.AvgPool2d, "AvgPool3d": nn.AvgPool3d}


def _channels_last(layer) -> str | None:
    if layer.get_config().get("data_format", "channels_last") != "channels_last":
        return "data_format='channels_first' layers are not converted yet"
    return None


@register_layer(*_MAX, policy=Policy.CHANNELS_FIRST, supports=_channels_last)
def MaxPoolNd(ctx: Context, layer, inputs):
    """crossport.layers.MaxPool{1,2,3}d -> nn.MaxPool{1,2,3}d with the same arguments."""
    cfg = layer.get_config()
    module = _MAX[type(layer).__name__](cfg["kernel_size"], cfg["stride"], cfg["padding"],
                                        cfg["dilation"], ceil_mode=cfg["ceil_mode"])
    return ctx.call_module(module, inputs)


def _avg_supported(layer) -> str | None:
    if type(layer).__name__ == "AvgPool1d" and layer.get_config()["divisor_override"]:
        return "AvgPool1d with divisor_override has no torch layer"
    return _channels_last(layer)


@register_layer(*_AVG, policy=Policy.CHANNELS_FIRST, supports=_avg_supported)
def AvgPoolNd(ctx: Context, layer, inputs):
    """crossport.layers.AvgPool{1,2,3}d -> nn.AvgPool{1,2,3}d with the same arguments."""
    cfg = layer.get_config()
    kind = type(layer).__name__
    kwargs = {"ceil_mode": cfg["ceil_mode"], "count_include_pad": cfg["count_include_pad"]}
    if kind != "AvgPool1d":  # torch's AvgPool1d has no divisor_override
        kwargs["divisor_override"] = cfg["divisor_override"]
    module = _AVG[kind](cfg["kernel_size"], cfg["stride"], cfg["padding"], **kwargs)
    return ctx.call_module(module, inputs)


@register_layer(policy=Policy.AGNOSTIC)
def Erf(ctx: Context, layer, inputs):
    """crossport.layers.Erf (the converter's builtin-op erf) -> torch.erf."""
    import torch

    return ctx.call_function(torch.erf, inputs)


@register_layer(policy=Policy.AGNOSTIC)
def GELU(ctx: Context, layer, inputs):
    """crossport.layers.GELU -> nn.GELU with the same ``approximate``."""
    return ctx.call_module(nn.GELU(approximate=layer.get_config()["approximate"]), inputs)


def _functional_conv(ctx: Context, x: Held, kernel: Held, bias, call) -> Held:
    """``call(x, weight, bias)`` with ``x`` held channels-first and the run-time Keras
    kernel as torch's weight (kops_nn's ``torch_weight``); the result is channels-first."""
    rank = x.rank
    x_node = ctx.to_layout(x, channels_first(rank)).node
    bias_node = ctx.canonical(bias).node if isinstance(bias, Held) else None
    node = call(x_node, torch_weight(ctx, kernel), bias_node)
    return Held(node, channels_first(rank), tuple(ctx.output_shapes[0]))


@register_layer(policy=Policy.CUSTOM)
def FunctionalConv(ctx: Context, layer, x, kernel, bias=None):
    """crossport.layers.FunctionalConv (a kernel computed at run time) ->
    ``F.conv{n}d(x, weight, bias, stride, padding, dilation, groups)``; pads that differ
    before and after (torch's ``'same'`` with an even kernel) as an ``F.pad`` first."""
    n = x.rank - 2
    groups = int(ctx.tensor_shapes[0][-1]) // int(ctx.tensor_shapes[1][-2])

    def call(x_node, weight, bias_node):
        x_node, padding = padded(ctx, x_node, layer.pads)
        return ctx.call_function(F_CONV[n], x_node, weight, bias_node, list(layer.stride),
                                 padding, list(layer.dilation), groups)

    return _functional_conv(ctx, x, kernel, bias, call)


@register_layer(policy=Policy.CUSTOM)
def FunctionalConvTranspose(ctx: Context, layer, x, kernel, bias=None):
    """crossport.layers.FunctionalConvTranspose -> ``F.conv_transpose{n}d`` with the same
    arguments (the layer computes torch's transposed conv)."""
    n = x.rank - 2

    def call(x_node, weight, bias_node):
        return ctx.call_function(F_CONV_TRANSPOSE[n], x_node, weight, bias_node,
                                 list(layer.stride), list(layer.padding),
                                 list(layer.output_padding), layer.groups, list(layer.dilation))

    return _functional_conv(ctx, x, kernel, bias, call)
