"""Convolutions: Keras ConvND / DepthwiseConvND / SeparableConvND / ConvNDTranspose -> torch.

Plain ``nn.ConvNd`` whenever its symmetric padding is exactly TF's (``valid``; ``same`` when
every dim pads ``(k-1)*d`` evenly at stride 1, independent of the input size); otherwise the
``crossport.torch_layers`` twin that pads TF's asymmetric way at run time (pitfall 4).
Transposed convolutions use ``nn.ConvTransposeNd`` when the input size is static and TF's crop
is torch's ``padding``/``output_padding`` (pitfall 6). Kernels move through ``crossport.weights``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from crossport.layout.policy import Policy
from crossport.to_torch.context import Context
from crossport.to_torch.ops.activation import (
    activation_unsupported,
    apply_activation,
    layer_activation,
)
from crossport.to_torch.registry import channels_first_layer, register_layer
from crossport.torch_layers import (
    TFConv1d,
    TFConv1dTranspose,
    TFConv2d,
    TFConv2dTranspose,
    TFConv3d,
    TFConv3dTranspose,
    TFDepthwiseConv1d,
    TFDepthwiseConv2d,
    transpose_output_geometry,
)
from crossport.weights import (
    conv_transpose_weight_from_keras,
    conv_weight_from_keras,
    depthwise_weight_from_keras,
)

_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
_CONV_T = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}
_TF_CONV = {1: TFConv1d, 2: TFConv2d, 3: TFConv3d}
_TF_CONV_T = {1: TFConv1dTranspose, 2: TFConv2dTranspose, 3: TFConv3dTranspose}
_TF_DEPTHWISE = {1: TFDepthwiseConv1d, 2: TFDepthwiseConv2d}


def conv_supported(layer) -> str | None:
    """Shared ``supports``: a convertible fused activation (either data_format converts: a
    channels_first layer's tensors are already torch's N, C, spatial...)."""
    return activation_unsupported(layer.get_config().get("activation"))


def symmetric_padding(cfg: dict) -> tuple[int, ...] | None:
    """torch's symmetric ``padding`` equal to TF's for every input size, or None."""
    kernel, strides, dilation = cfg["kernel_size"], cfg["strides"], cfg["dilation_rate"]
    if cfg["padding"] == "valid":
        return (0,) * len(kernel)
    if cfg["padding"] != "same" or any(s != 1 for s in strides):
        return None
    totals = [(k - 1) * d for k, d in zip(kernel, dilation)]
    return None if any(t % 2 for t in totals) else tuple(t // 2 for t in totals)


def _arr(variable) -> np.ndarray:
    return np.asarray(variable.numpy())


def load(module: nn.Module, weight: np.ndarray, bias=None) -> nn.Module:
    """Copy a torch-layout weight (and bias) into a fresh plain module."""
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(np.ascontiguousarray(weight)))
        if bias is not None:
            module.bias.copy_(torch.from_numpy(_arr(bias)))
    return module


@register_layer("Conv1D", "Conv2D", "Conv3D", "GroupedConv1D", "GroupedConv2D",
                policy=Policy.CHANNELS_FIRST, supports=conv_supported)
def ConvND(ctx: Context, layer, inputs):
    """keras.layers.Conv{1,2,3}D (crossport's GroupedConv{1,2}D alike) -> nn.Conv{1,2,3}d
    (groups too), TFConvNd for asymmetric SAME.

    TF SAME puts the odd extra pad after (pitfall 4); Conv1D ``causal`` pads (k-1)*d before.
    """
    cfg = layer.get_config()
    rank = len(cfg["kernel_size"])
    weight = conv_weight_from_keras(_arr(layer.kernel))
    padding = symmetric_padding(cfg)
    if padding is None:
        module = _TF_CONV[rank].from_keras(layer)
        return ctx.call_module(module, inputs)  # fused activation included
    module = _CONV[rank](weight.shape[1] * cfg["groups"], cfg["filters"], cfg["kernel_size"],
                         cfg["strides"], padding, cfg["dilation_rate"], cfg["groups"],
                         bias=cfg["use_bias"])
    y = ctx.call_module(load(module, weight, layer.bias if cfg["use_bias"] else None), inputs)
    return apply_activation(ctx, layer_activation(layer), y, dim=1)


@register_layer("DepthwiseConv1D", "DepthwiseConv2D", policy=Policy.CHANNELS_FIRST,
                supports=conv_supported)
def DepthwiseConvND(ctx: Context, layer, inputs):
    """keras.layers.DepthwiseConv{1,2}D -> nn.Conv{1,2}d(groups=in, out=in*depth_multiplier).

    Output channel ``c*mult + m`` reads input channel ``c`` in both (pitfall 1).
    """
    cfg = layer.get_config()
    rank = len(cfg["kernel_size"])
    padding = symmetric_padding(cfg)
    if padding is None:
        return ctx.call_module(_TF_DEPTHWISE[rank].from_keras(layer), inputs)
    weight = depthwise_weight_from_keras(_arr(layer.kernel))
    channels = layer.kernel.shape[-2]
    module = _CONV[rank](channels, weight.shape[0], cfg["kernel_size"], cfg["strides"], padding,
                         cfg["dilation_rate"], channels, bias=cfg["use_bias"])
    y = ctx.call_module(load(module, weight, layer.bias if cfg["use_bias"] else None), inputs)
    return apply_activation(ctx, layer_activation(layer), y, dim=1)


@register_layer("SeparableConv1D", "SeparableConv2D", policy=Policy.CHANNELS_FIRST,
                supports=conv_supported)
def SeparableConvND(ctx: Context, layer, inputs):
    """keras.layers.SeparableConv{1,2}D -> depthwise nn.ConvNd then pointwise 1x1 nn.ConvNd.

    Two submodules ``<layer>_depthwise`` and ``<layer>_pointwise`` (the bias is pointwise's).
    """
    cfg = layer.get_config()
    rank = len(cfg["kernel_size"])
    dw_weight = depthwise_weight_from_keras(_arr(layer.depthwise_kernel))
    channels = layer.depthwise_kernel.shape[-2]
    padding = symmetric_padding(cfg)
    if padding is None:
        depthwise = _TF_DEPTHWISE[rank](channels, cfg["kernel_size"], cfg["strides"],
                                        cfg["padding"], cfg["depth_multiplier"],
                                        cfg["dilation_rate"], use_bias=False)
    else:
        depthwise = _CONV[rank](channels, dw_weight.shape[0], cfg["kernel_size"], cfg["strides"],
                                padding, cfg["dilation_rate"], channels, bias=False)
    y = ctx.call_module(load(depthwise, dw_weight), inputs, suffix="_depthwise")
    pw_weight = conv_weight_from_keras(_arr(layer.pointwise_kernel))
    pointwise = _CONV[rank](pw_weight.shape[1], pw_weight.shape[0], 1, bias=cfg["use_bias"])
    y = ctx.call_module(load(pointwise, pw_weight, layer.bias if cfg["use_bias"] else None), y,
                        suffix="_pointwise")
    return apply_activation(ctx, layer_activation(layer), y, dim=1)


def _plain_transpose_padding(cfg: dict, in_sizes) -> tuple[tuple, tuple] | None:
    """torch ``(padding, output_padding)`` reproducing TF's output for static inputs, or None."""
    if any(s is None for s in in_sizes):
        return None
    pads, extras = [], []
    output_padding = cfg.get("output_padding") or (None,) * len(in_sizes)
    for i, k, s, d, op in zip(in_sizes, cfg["kernel_size"], cfg["strides"],
                              cfg["dilation_rate"], output_padding):
        length, before = transpose_output_geometry(i, k, s, d, cfg["padding"], op)
        full = (i - 1) * s + d * (k - 1) + 1
        extra = length - full + 2 * before
        if before < 0 or not 0 <= extra < max(s, d):
            return None
        pads.append(before)
        extras.append(extra)
    return tuple(pads), tuple(extras)


@register_layer("Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose",
                policy=Policy.CHANNELS_FIRST, supports=conv_supported)
def ConvNDTranspose(ctx: Context, layer, inputs):
    """keras.layers.Conv{1,2,3}DTranspose -> nn.ConvTranspose{1,2,3}d (static sizes).

    TF crops ``before`` at the start and keeps Keras' length (``output_padding`` at the end):
    torch ``padding=before`` plus ``output_padding`` when that is in torch's range, else
    TFConvNdTranspose (pitfall 6).
    """
    cfg = layer.get_config()
    rank = len(cfg["kernel_size"])
    in_sizes = tuple(ctx.input_shape[2:] if channels_first_layer(layer) else
                     ctx.input_shape[1:-1])
    plain = _plain_transpose_padding(cfg, in_sizes)
    if plain is None:
        return ctx.call_module(_TF_CONV_T[rank].from_keras(layer), inputs)
    weight = conv_transpose_weight_from_keras(_arr(layer.kernel))
    module = _CONV_T[rank](weight.shape[0], weight.shape[1], cfg["kernel_size"], cfg["strides"],
                           plain[0], plain[1], bias=cfg["use_bias"],
                           dilation=cfg["dilation_rate"])
    y = ctx.call_module(load(module, weight, layer.bias if cfg["use_bias"] else None), inputs)
    return apply_activation(ctx, layer_activation(layer), y, dim=1)
