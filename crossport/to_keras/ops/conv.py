"""Convolutions (pitfalls.md items 1, 4, 6, 10)."""

from __future__ import annotations

import math

import keras
import numpy as np
import torch

from crossport.layers.functional_conv import FunctionalConv
from crossport.layers.grouped_conv import GroupedConv1D, GroupedConv2D
from crossport.to_keras.dynamic_dims import static_dims
from crossport.to_keras.initial import call_with_weights
from crossport.to_keras.ops.pool import input_reason
from crossport.to_keras.registry import Policy, bind_arguments, register
from crossport.weights import conv_weight_to_keras, depthwise_weight_to_keras

aten = torch.ops.aten

_CONV = {1: keras.layers.Conv1D, 2: keras.layers.Conv2D, 3: keras.layers.Conv3D}
# Grouped: TF's own grouped conv instead of Keras' XLA call (crossport.layers.grouped_conv)
_GROUPED_CONV = {1: GroupedConv1D, 2: GroupedConv2D, 3: keras.layers.Conv3D}
_DEPTHWISE = {1: keras.layers.DepthwiseConv1D, 2: keras.layers.DepthwiseConv2D}
_ZERO_PAD = {1: keras.layers.ZeroPadding1D, 2: keras.layers.ZeroPadding2D,
             3: keras.layers.ZeroPadding3D}


def _expand(value, n: int) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * n
    value = tuple(int(v) for v in value)
    return value * n if len(value) == 1 else value


def torch_padding_pairs(padding, kernel, dilation) -> list[tuple[int, int]]:
    """(before, after) per spatial dim for torch's int/tuple/'same'/'valid' padding.

    torch's 'same' puts the odd extra element after, like TF; an int pads symmetrically.
    """
    if padding == "valid":
        return [(0, 0)] * len(kernel)
    if padding == "same":
        totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return [(t // 2, t - t // 2) for t in totals]
    return [(p, p) for p in _expand(padding, len(kernel))]


def keras_padding_mode(pairs, kernel, stride, dilation) -> str | None:
    """'same' or 'valid' when Keras computes exactly ``pairs``, else None (pad explicitly).

    TF SAME pads ``total//2`` before and the rest after (pitfalls.md item 4); with stride 1
    its total is ``d*(k-1)``, so it equals torch's padding only in that case.
    """
    if all(p == (0, 0) for p in pairs):
        return "valid"
    same = all(
        s == 1 and (b, a) == (d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2)
        for (b, a), k, s, d in zip(pairs, kernel, stride, dilation)
    )
    return "same" if same else None


def _conv_supports(node: torch.fx.Node) -> str | None:
    return input_reason(node, len(node.args[1].meta["val"].shape) - 2, floating=True)


def _dilated_weight(weight, dilation):
    """``weight`` [out, in/g, k...] with ``d-1`` zeros between taps of each spatial dim."""
    shape = list(weight.shape[:2]) + [(k - 1) * d + 1 for k, d in zip(weight.shape[2:], dilation)]
    dilated = np.zeros(shape, dtype=weight.dtype)
    dilated[(slice(None), slice(None), *(slice(None, None, d) for d in dilation))] = weight
    return dilated


def emit_conv(ctx, input, weight, bias, stride, padding, dilation, groups):
    """A torch convolution as explicit zero padding + a Keras Conv/DepthwiseConv layer."""
    if not isinstance(weight, np.ndarray):
        return runtime_conv(ctx, input, weight, bias, stride, padding, dilation)
    n = weight.ndim - 2
    kernel = weight.shape[2:]
    stride, dilation = _expand(stride, n), _expand(dilation, n)
    pairs = torch_padding_pairs(padding, kernel, dilation)
    mode = keras_padding_mode(pairs, kernel, stride, dilation)
    if any(s > 1 for s in stride) and any(d > 1 for d in dilation):
        # TF convolutions take strides or dilations, not both: the same taps as an undilated
        # kernel with d-1 exact zeros between them.
        weight, dilation = _dilated_weight(weight, dilation), (1,) * n
        kernel = weight.shape[2:]
    x = input
    if mode is None:
        x = _ZERO_PAD[n](padding=tuple(pairs) if n > 1 else pairs[0], name=ctx.name("pad"))(x)
        mode = "valid"
    in_channels = weight.shape[1] * groups
    out_channels = weight.shape[0]
    depthwise = groups > 1 and groups == in_channels and n in _DEPTHWISE
    stride, subsample = _depthwise_strides(stride) if depthwise else (stride, None)
    common = dict(kernel_size=kernel, strides=stride, padding=mode, dilation_rate=dilation,
                  use_bias=bias is not None, name=ctx.name())
    if depthwise:
        layer = _DEPTHWISE[n](depth_multiplier=out_channels // in_channels, **common)
        arrays = {"depthwise_initializer": depthwise_weight_to_keras(weight, in_channels)}
    else:
        layer = (_GROUPED_CONV if groups > 1 else _CONV)[n](filters=out_channels, groups=groups,
                                                           **common)
        arrays = {"kernel_initializer": conv_weight_to_keras(weight)}
    if bias is not None:
        arrays["bias_initializer"] = bias
    y = call_with_weights(layer, x, **arrays)
    if subsample is not None:
        y = y[(slice(None), *(slice(None, None, s) for s in subsample), slice(None))]
    return y


def _depthwise_strides(stride: tuple[int, ...]):
    """TF's depthwise kernel (without oneDNN) needs equal strides: stride g = gcd of them,
    then keep every (s/g)-th output (the same taps, exactly). Returns (strides, subsample)."""
    if len(set(stride)) == 1:
        return stride, None
    common = math.gcd(*stride)
    return (common,) * len(stride), tuple(s // common for s in stride)


def runtime_conv(ctx, input, weight, bias, stride, padding, dilation):
    """A convolution whose weight is computed in the graph (modulated convolutions,
    dynamic/conditional kernels): :class:`crossport.layers.FunctionalConv` takes the
    kernel as an input; grouped ones (StyleGAN's per-sample ``groups=batch``) follow from
    the kernel's input channels."""
    n = len(weight.shape) - 2  # held as Keras' kernel [*k, in/groups, out] (keras_kernel)
    kernel_size = tuple(int(k) for k in weight.shape[:-2])
    stride, dilation = _expand(stride, n), _expand(dilation, n)
    pairs = torch_padding_pairs(padding, kernel_size, dilation)
    layer = FunctionalConv(stride, pairs, dilation, name=ctx.name())
    return layer(input, weight, runtime_bias(ctx, bias))


def runtime_bias(ctx, bias):
    """A bias beside a run-time kernel: a tensor, a held constant or None."""
    return ctx.constant(bias, "bias") if isinstance(bias, np.ndarray) else bias


def static_kernel(node: torch.fx.Node) -> str | None:
    """A weight computed in the graph needs static sizes (they are the kernel's), and so
    does ``groups`` (StyleGAN's ``groups=batch`` with a dynamic batch)."""
    weight_rank = len(node.args[1].meta["val"].shape)
    reason = static_dims("weight", lambda _node: range(weight_rank),
                         "a convolution weight computed in the graph")(node)
    groups = bind_arguments(node).get("groups", 1)
    if reason is None and isinstance(groups, torch.fx.Node):
        reason = (f"groups computed from a run-time size ({groups.meta.get('val')}) needs "
                  "it static")
    return reason


# The weight fixes the channel count; a size expression torch could not prove equal to it
# (a space-to-depth view, tresnet) would build a Keras conv with unknown channels.
_STATIC_INPUT_CHANNELS = static_dims("input", lambda _node: [1], "a convolution's input channels")


def _static_sizes(node: torch.fx.Node) -> str | None:
    return _STATIC_INPUT_CHANNELS(node) or static_kernel(node)


@register(aten.conv1d.default, aten.conv2d.default, aten.conv3d.default,
          aten.conv1d.padding, aten.conv2d.padding, aten.conv3d.padding,
          policy=Policy.CHANNELS_LAST, supports=_conv_supports, dynamic=_static_sizes)
def aten_conv_nd(ctx, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """conv{1,2,3}d(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, padding, dilation, SymInt groups)

    torch pads symmetrically; TF SAME pads the odd extra after: explicit ZeroPadding.
    groups == in_channels -> DepthwiseConv (kernel [k, in, mult], pitfalls.md item 1).
    """
    return emit_conv(ctx, input, weight, bias, stride, padding, dilation, groups)


def _convolution_supports(node):
    if bind_arguments(node)["transposed"]:
        return "transposed convolution through aten.convolution (use conv_transposeNd)"
    return _conv_supports(node)


@register(aten.convolution.default, policy=Policy.CHANNELS_LAST, supports=_convolution_supports,
          dynamic=_static_sizes)
def aten_convolution_default(ctx, input, weight, bias, stride, padding, dilation, transposed,
                             output_padding, groups):
    """convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups)"""
    return emit_conv(ctx, input, weight, bias, stride, padding, dilation, groups)
