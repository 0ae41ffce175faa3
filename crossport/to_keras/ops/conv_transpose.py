"""Transposed convolutions (pitfalls.md items 6 and 10).

Torch's output length is ``(L-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1``:
``padding`` crops both ends of the full result, ``output_padding`` extends the end only.
Keras' ``ConvNDTranspose`` with ``padding='valid'`` computes the full result exactly when
nothing is cropped or appended, there is one group, no dilation and ``k >= stride``
(with ``k < stride`` Keras zero-extends to ``L*stride``); everything else becomes
``crossport.layers.ConvTranspose{n}d`` (torch semantics, grouped and dilated included).
"""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport import layers as torch_semantics
from crossport.layers.functional_conv import FunctionalConvTranspose
from crossport.to_keras.dynamic_dims import is_dynamic_size
from crossport.to_keras.ops.conv import runtime_bias, static_kernel
from crossport.to_keras.ops.pool import input_reason
from crossport.to_keras.registry import Policy, register
from crossport.weights import conv_transpose_weight_to_keras

aten = torch.ops.aten

_KERAS = {1: keras.layers.Conv1DTranspose, 2: keras.layers.Conv2DTranspose,
          3: keras.layers.Conv3DTranspose}


def _expand(value, n: int) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * n
    value = tuple(int(v) for v in value)
    return value * n if len(value) == 1 else value


def _conv_transpose_supports(node: torch.fx.Node) -> str | None:
    return input_reason(node, len(node.args[1].meta["val"].shape) - 2, floating=True)


def _conv_transpose_dynamic(node: torch.fx.Node, output_padding, **_arguments) -> str | None:
    """Every input size is computed at run time, but ``output_padding`` is built into the
    layer: one computed from a run-time size (``ConvTranspose2d(...)(y, output_size=
    x.shape[-2:])``, a decoder matching its encoder's odd sizes) stayed the example's."""
    values = output_padding if isinstance(output_padding, (list, tuple)) else [output_padding]
    values = [v.meta.get("val") if isinstance(v, torch.fx.Node) else v for v in values]
    dynamic = [str(v) for v in values if is_dynamic_size(v)]
    if not dynamic:
        return static_kernel(node)
    return (f"output_padding computed from a run-time size ({', '.join(dynamic)}, as "
            "output_size= does) needs it static")


def _keras_exact(kernel, stride, padding, output_padding, dilation, groups) -> bool:
    return (groups == 1 and not any(padding) and not any(output_padding)
            and all(d == 1 for d in dilation) and all(k >= s for k, s in zip(kernel, stride)))


@register(aten.conv_transpose1d.default, aten.conv_transpose2d.input,
          aten.conv_transpose3d.input, policy=Policy.CHANNELS_LAST,
          supports=_conv_transpose_supports, dynamic=_conv_transpose_dynamic)
def aten_conv_transpose2d_input(ctx, input, weight, bias=None, stride=1, padding=0,
                                output_padding=0, groups=1, dilation=1):
    """conv_transpose2d.input(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=[1, 1], SymInt[2] padding=[0, 0], SymInt[2] output_padding=[0, 0], SymInt groups=1, SymInt[2] dilation=[1, 1]) -> Tensor

    Torch weight [in, out/groups, k...] -> Keras [k..., out/groups, in] (pitfall 10).
    padding crops both ends, output_padding extends the end: crossport.layers.ConvTransposeNd
    unless Keras' valid transposed conv is exactly torch's (pitfall 6).
    """
    n = len(weight.shape) - 2
    stride, padding = _expand(stride, n), _expand(padding, n)
    output_padding, dilation = _expand(output_padding, n), _expand(dilation, n)
    if not isinstance(weight, np.ndarray):  # computed in the graph (StyleGAN's upsampling)
        layer = FunctionalConvTranspose(stride, padding, output_padding, dilation, groups,
                                        name=ctx.name())
        return layer(input, weight, runtime_bias(ctx, bias))  # weight held as Keras' kernel
    kernel = tuple(int(k) for k in weight.shape[2:])
    in_channels, out_channels = int(weight.shape[0]), int(weight.shape[1]) * groups
    kernel_value = conv_transpose_weight_to_keras(np.asarray(weight, dtype=np.float32))
    weights = [kernel_value] + ([np.asarray(bias, dtype=np.float32)] if bias is not None else [])
    if _keras_exact(kernel, stride, padding, output_padding, dilation, groups):
        layer = _KERAS[n](filters=out_channels, kernel_size=kernel, strides=stride,
                          padding="valid", use_bias=bias is not None, name=ctx.name())
    else:
        layer = getattr(torch_semantics, f"ConvTranspose{n}d")(
            in_channels, out_channels, kernel, stride, padding, output_padding, groups,
            bias is not None, dilation, data_format="channels_last", name=ctx.name())
    y = layer(input)
    layer.set_weights(weights)
    return y
