"""TensorFlow/Keras convolutions as torch modules (pitfalls 1, 4, 6, 10).

Tensors are channels-first (``[N, C, *spatial]``) and weights torch-shaped inside; what
follows TF is the arithmetic: ``SAME`` padding is computed from each input's size at forward
time and is asymmetric (extra element after), and transposed convolutions produce Keras'
output size (``output_padding`` included) by cropping TF's way.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from crossport.errors import InputError
from crossport.torch_layers.activation import activation_name, keras_activation
from crossport.torch_layers.keras_weights import copy_into, keras_array, load_kernel_and_bias
from crossport.torch_layers.padding import same_paddings
from crossport.weights.rules import (
    conv_transpose_weight_from_keras,
    conv_weight_from_keras,
    depthwise_weight_from_keras,
)

__all__ = [
    "TFConv1d",
    "TFConv1dTranspose",
    "TFConv2d",
    "TFConv2dTranspose",
    "TFConv3d",
    "TFConv3dTranspose",
    "TFDepthwiseConv1d",
    "TFDepthwiseConv2d",
    "TFSeparableConv2d",
]

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _tuple(value: int | Sequence[int], rank: int, name: str) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * rank
    out = tuple(int(v) for v in value)
    if len(out) != rank:
        raise InputError(f"{name} needs {rank} values, got {value!r}")
    return out


def _padding(padding: str, allowed: tuple[str, ...]) -> str:
    mode = padding.lower()
    if mode not in allowed:
        raise InputError(f"padding must be one of {allowed}, got {padding!r}")
    return mode


def _check_data_format(layer) -> None:
    # Weights are layout-free, but the port is channels-first: a Keras channels_first layer
    # is fine too, nothing else to translate.
    fmt = layer.get_config().get("data_format", "channels_last")
    if fmt not in ("channels_last", "channels_first"):
        raise InputError(f"unknown data_format {fmt!r}")


class _TFConvNd(nn.Module):
    _rank = 2

    def __init__(
        self,
        in_channels: int,
        filters: int,
        kernel_size: int | Sequence[int],
        strides: int | Sequence[int] = 1,
        padding: str = "valid",
        dilation_rate: int | Sequence[int] = 1,
        groups: int = 1,
        use_bias: bool = True,
        activation: str | None = None,
    ) -> None:
        super().__init__()
        n = self._rank
        if in_channels % groups or filters % groups:
            raise InputError(
                f"groups={groups} must divide in_channels={in_channels} and filters={filters}"
            )
        self.in_channels, self.filters, self.groups = in_channels, filters, groups
        self.kernel_size = _tuple(kernel_size, n, "kernel_size")
        self.strides = _tuple(strides, n, "strides")
        self.dilation_rate = _tuple(dilation_rate, n, "dilation_rate")
        allowed = ("valid", "same", "causal") if n == 1 else ("valid", "same")
        self.padding = _padding(padding, allowed)
        self.activation = activation_name(activation)
        self._act = keras_activation(self.activation, axis=1)  # Keras' last axis = channels
        self.weight = nn.Parameter(torch.empty(filters, in_channels // groups, *self.kernel_size))
        self.bias = nn.Parameter(torch.zeros(filters)) if use_bias else None
        nn.init.xavier_uniform_(self.weight)  # Keras' glorot_uniform (same fans)

    def _pad(self, x: torch.Tensor) -> torch.Tensor:
        if self.padding == "same":
            return F.pad(
                x, same_paddings(x.shape[2:], self.kernel_size, self.strides, self.dilation_rate)
            )
        if self.padding == "causal":  # Keras Conv1D: all (k-1)*d before
            return F.pad(x, ((self.kernel_size[0] - 1) * self.dilation_rate[0], 0))
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = _CONV[self._rank](
            self._pad(x), self.weight, self.bias, self.strides, 0, self.dilation_rate, self.groups
        )
        return self._act(y)

    @classmethod
    def from_keras(cls, layer):
        """Build from a built ``keras.layers.Conv{1,2,3}D`` (kernel ``[*k, in/g, out]``)."""
        _check_data_format(layer)
        cfg = layer.get_config()
        kernel = keras_array(layer.kernel)
        groups = int(cfg.get("groups", 1))
        module = cls(
            kernel.shape[-2] * groups,
            int(cfg["filters"]),
            cfg["kernel_size"],
            cfg["strides"],
            cfg["padding"],
            cfg["dilation_rate"],
            groups,
            bool(cfg["use_bias"]),
            cfg.get("activation"),
        )
        return load_kernel_and_bias(module, layer, conv_weight_from_keras)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.filters}, kernel_size={self.kernel_size}, "
            f"strides={self.strides}, padding={self.padding!r}, "
            f"dilation_rate={self.dilation_rate}, groups={self.groups}, "
            f"use_bias={self.bias is not None}, activation={self.activation!r}"
        )


class TFConv1d(_TFConvNd):
    """``keras.layers.Conv1D`` on ``[N, C, L]``; padding ``valid``, ``same`` (TF) or ``causal``.

    Args:
        in_channels: input channels.
        filters: output channels.
        kernel_size: window length.
        strides: stride.
        padding: ``"valid"``, ``"same"`` (TF asymmetric rule) or ``"causal"``.
        dilation_rate: dilation.
        groups: grouped convolution (``filters`` and ``in_channels`` divisible).
        use_bias: learn a bias.
        activation: Keras activation name applied to the output.

    Example:
        >>> import torch
        >>> TFConv1d(3, 8, 4, strides=2, padding="same")(torch.randn(1, 3, 9)).shape
        torch.Size([1, 8, 5])
    """

    _rank = 1


class TFConv2d(_TFConvNd):
    """``keras.layers.Conv2D`` on NCHW with TF's asymmetric ``SAME`` padding.

    Same arguments as :class:`TFConv1d` (``padding`` is ``"valid"`` or ``"same"``). Use
    :meth:`from_keras` to copy a trained Keras layer.

    Example:
        >>> import torch
        >>> conv = TFConv2d(3, 8, 3, strides=2, padding="same")
        >>> conv(torch.randn(1, 3, 6, 6)).shape  # TF pads 0 before, 1 after
        torch.Size([1, 8, 3, 3])
    """

    _rank = 2


class TFConv3d(_TFConvNd):
    """``keras.layers.Conv3D`` on NCDHW (see :class:`TFConv2d`).

    Example:
        >>> import torch
        >>> TFConv3d(2, 4, 2, padding="same")(torch.randn(1, 2, 3, 4, 5)).shape
        torch.Size([1, 4, 3, 4, 5])
    """

    _rank = 3


class _TFDepthwiseConvNd(nn.Module):
    _rank = 2

    def __init__(
        self,
        in_channels: int,
        kernel_size: int | Sequence[int],
        strides: int | Sequence[int] = 1,
        padding: str = "valid",
        depth_multiplier: int = 1,
        dilation_rate: int | Sequence[int] = 1,
        use_bias: bool = True,
        activation: str | None = None,
    ) -> None:
        super().__init__()
        n = self._rank
        self.in_channels, self.depth_multiplier = in_channels, depth_multiplier
        self.kernel_size = _tuple(kernel_size, n, "kernel_size")
        self.strides = _tuple(strides, n, "strides")
        self.dilation_rate = _tuple(dilation_rate, n, "dilation_rate")
        self.padding = _padding(padding, ("valid", "same"))
        self.activation = activation_name(activation)
        self._act = keras_activation(self.activation, axis=1)
        # Output channel c*mult + m reads input channel c, as in Keras (pitfall 1).
        out = in_channels * depth_multiplier
        self.weight = nn.Parameter(torch.empty(out, 1, *self.kernel_size))
        self.bias = nn.Parameter(torch.zeros(out)) if use_bias else None
        nn.init.xavier_uniform_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.padding == "same":
            x = F.pad(
                x, same_paddings(x.shape[2:], self.kernel_size, self.strides, self.dilation_rate)
            )
        y = _CONV[self._rank](
            x, self.weight, self.bias, self.strides, 0, self.dilation_rate, self.in_channels
        )
        return self._act(y)

    @classmethod
    def from_keras(cls, layer):
        """Build from a built ``keras.layers.DepthwiseConv{1,2}D`` (kernel ``[*k, in, mult]``)."""
        _check_data_format(layer)
        cfg = layer.get_config()
        kernel = keras_array(layer.kernel)
        module = cls(
            kernel.shape[-2],
            cfg["kernel_size"],
            cfg["strides"],
            cfg["padding"],
            int(cfg["depth_multiplier"]),
            cfg["dilation_rate"],
            bool(cfg["use_bias"]),
            cfg.get("activation"),
        )
        return load_kernel_and_bias(module, layer, depthwise_weight_from_keras)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, kernel_size={self.kernel_size}, strides={self.strides}, "
            f"padding={self.padding!r}, depth_multiplier={self.depth_multiplier}, "
            f"dilation_rate={self.dilation_rate}, activation={self.activation!r}"
        )


class TFDepthwiseConv1d(_TFDepthwiseConvNd):
    """``keras.layers.DepthwiseConv1D`` on ``[N, C, L]`` (see :class:`TFDepthwiseConv2d`).

    Example:
        >>> import torch
        >>> TFDepthwiseConv1d(3, 3, depth_multiplier=2)(torch.randn(1, 3, 8)).shape
        torch.Size([1, 6, 6])
    """

    _rank = 1


class TFDepthwiseConv2d(_TFDepthwiseConvNd):
    """``keras.layers.DepthwiseConv2D`` on NCHW: ``groups == in_channels`` with TF padding.

    Args:
        in_channels: input channels.
        kernel_size: window size.
        strides: stride.
        padding: ``"valid"`` or ``"same"`` (TF asymmetric rule).
        depth_multiplier: output channels per input channel.
        dilation_rate: dilation.
        use_bias: learn a bias.
        activation: Keras activation name.

    Example:
        >>> import torch
        >>> dw = TFDepthwiseConv2d(4, 3, strides=2, padding="same")
        >>> dw(torch.randn(1, 4, 8, 8)).shape
        torch.Size([1, 4, 4, 4])
    """

    _rank = 2


class TFSeparableConv2d(nn.Module):
    """``keras.layers.SeparableConv2D``: depthwise (TF padding, no bias) then 1x1 pointwise.

    Example:
        >>> import torch
        >>> TFSeparableConv2d(3, 8, 3, padding="same")(torch.randn(1, 3, 5, 5)).shape
        torch.Size([1, 8, 5, 5])
    """

    def __init__(
        self,
        in_channels: int,
        filters: int,
        kernel_size: int | Sequence[int],
        strides: int | Sequence[int] = 1,
        padding: str = "valid",
        depth_multiplier: int = 1,
        dilation_rate: int | Sequence[int] = 1,
        use_bias: bool = True,
        activation: str | None = None,
    ) -> None:
        super().__init__()
        self.depthwise = TFDepthwiseConv2d(
            in_channels,
            kernel_size,
            strides,
            padding,
            depth_multiplier,
            dilation_rate,
            use_bias=False,
        )
        self.pointwise = TFConv2d(
            in_channels * depth_multiplier, filters, 1, use_bias=use_bias, activation=activation
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pointwise(self.depthwise(x))

    @classmethod
    def from_keras(cls, layer) -> TFSeparableConv2d:
        """Build from ``keras.layers.SeparableConv2D`` (depthwise and pointwise kernels, bias)."""
        _check_data_format(layer)
        cfg = layer.get_config()
        dw = keras_array(layer.depthwise_kernel)
        module = cls(
            dw.shape[-2],
            int(cfg["filters"]),
            cfg["kernel_size"],
            cfg["strides"],
            cfg["padding"],
            int(cfg["depth_multiplier"]),
            cfg["dilation_rate"],
            bool(cfg["use_bias"]),
            cfg.get("activation"),
        )
        copy_into(module.depthwise.weight, depthwise_weight_from_keras(dw))
        copy_into(module.pointwise.weight, conv_weight_from_keras(keras_array(layer.pointwise_kernel)))
        if module.pointwise.bias is not None:
            copy_into(module.pointwise.bias, keras_array(layer.bias))
        return module


def transpose_output_geometry(
    in_size: int, kernel: int, stride: int, dilation: int, padding: str, output_padding: int | None
) -> tuple[int, int]:
    """Keras' transposed-conv output length and how many leading elements TF crops.

    Keras picks the length (``same``: ``in*s``; ``valid``: ``(in-1)*s + max(k_eff, s)``;
    with ``output_padding``: ``(in-1)*s + k_eff%2 + op`` / ``(in-1)*s + k_eff + op``); TF
    then computes the adjoint of a forward ``SAME``/``VALID`` conv over that length, which
    crops ``total//2`` before (``SAME``) and crops or zero-extends the end.

    Returns:
        ``(length, crop_before)``.
    """
    k_eff = (kernel - 1) * dilation + 1
    if padding == "valid":
        extra = max(k_eff, stride) - k_eff if output_padding is None else output_padding
        return (in_size - 1) * stride + k_eff + extra, 0
    if output_padding is None:
        length = in_size * stride
    else:
        length = (in_size - 1) * stride + k_eff % 2 + output_padding
    return length, max((in_size - 1) * stride + k_eff - length, 0) // 2


class _TFConvNdTranspose(nn.Module):
    _rank = 2

    def __init__(
        self,
        in_channels: int,
        filters: int,
        kernel_size: int | Sequence[int],
        strides: int | Sequence[int] = 1,
        padding: str = "valid",
        output_padding: int | Sequence[int] | None = None,
        dilation_rate: int | Sequence[int] = 1,
        use_bias: bool = True,
        activation: str | None = None,
    ) -> None:
        super().__init__()
        n = self._rank
        self.in_channels, self.filters = in_channels, filters
        self.kernel_size = _tuple(kernel_size, n, "kernel_size")
        self.strides = _tuple(strides, n, "strides")
        self.dilation_rate = _tuple(dilation_rate, n, "dilation_rate")
        self.output_padding = (
            None if output_padding is None else _tuple(output_padding, n, "output_padding")
        )
        self.padding = _padding(padding, ("valid", "same"))
        self.activation = activation_name(activation)
        self._act = keras_activation(self.activation, axis=1)
        # torch layout [in, out, *k] (pitfall 6), no groups in Keras' ConvNDTranspose.
        self.weight = nn.Parameter(torch.empty(in_channels, filters, *self.kernel_size))
        self.bias = nn.Parameter(torch.zeros(filters)) if use_bias else None
        nn.init.xavier_uniform_(self.weight)

    def output_size(self, in_sizes: Sequence[int]) -> list[int]:
        """Spatial output size for spatial input size ``in_sizes`` (Keras' rule)."""
        ops = self.output_padding or (None,) * self._rank
        return [
            transpose_output_geometry(i, k, s, d, self.padding, op)[0]
            for i, k, s, d, op in zip(
                in_sizes, self.kernel_size, self.strides, self.dilation_rate, ops
            )
        ]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Full ("valid", no output padding) result, then TF's crop / zero-extension per dim.
        full = _CONV_T[self._rank](x, self.weight, None, self.strides, dilation=self.dilation_rate)
        ops = self.output_padding or (None,) * self._rank
        pads: list[int] = []
        geometry = zip(
            x.shape[2:], full.shape[2:], self.kernel_size, self.strides, self.dilation_rate, ops
        )
        for i, f, k, s, d, op in reversed(list(geometry)):
            length, before = transpose_output_geometry(i, k, s, d, self.padding, op)
            pads.extend((-before, length + before - f))  # negative pads crop
        y = F.pad(full, pads)
        if self.bias is not None:
            y = y + self.bias.view(1, -1, *([1] * self._rank))
        return self._act(y)

    @classmethod
    def from_keras(cls, layer):
        """Build from ``keras.layers.Conv{1,2,3}DTranspose`` (kernel ``[*k, filters, in]``)."""
        _check_data_format(layer)
        cfg = layer.get_config()
        kernel = keras_array(layer.kernel)
        module = cls(
            kernel.shape[-1],
            int(cfg["filters"]),
            cfg["kernel_size"],
            cfg["strides"],
            cfg["padding"],
            cfg.get("output_padding"),
            cfg["dilation_rate"],
            bool(cfg["use_bias"]),
            cfg.get("activation"),
        )
        return load_kernel_and_bias(module, layer, conv_transpose_weight_from_keras)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.filters}, kernel_size={self.kernel_size}, "
            f"strides={self.strides}, padding={self.padding!r}, "
            f"output_padding={self.output_padding}, "
            f"dilation_rate={self.dilation_rate}, activation={self.activation!r}"
        )


class TFConv1dTranspose(_TFConvNdTranspose):
    """``keras.layers.Conv1DTranspose`` on ``[N, C, L]`` (see :class:`TFConv2dTranspose`).

    Example:
        >>> import torch
        >>> TFConv1dTranspose(3, 2, 3, strides=2, padding="same")(torch.randn(1, 3, 5)).shape
        torch.Size([1, 2, 10])
    """

    _rank = 1


class TFConv2dTranspose(_TFConvNdTranspose):
    """``keras.layers.Conv2DTranspose`` on NCHW, with Keras' output size and TF's cropping.

    ``same`` gives ``in*stride`` (torch has no single ``padding=`` for this when
    ``k_eff - stride`` is odd: TF crops the odd element at the end); ``output_padding``
    follows Keras' formula, not torch's.

    Args:
        in_channels: input channels.
        filters: output channels.
        kernel_size: window size.
        strides: stride.
        padding: ``"valid"`` or ``"same"``.
        output_padding: ``None`` (Keras default lengths) or extra length per dim.
        dilation_rate: dilation.
        use_bias: learn a bias.
        activation: Keras activation name.

    Example:
        >>> import torch
        >>> up = TFConv2dTranspose(4, 2, 4, strides=2, padding="same")
        >>> up(torch.randn(1, 4, 5, 5)).shape
        torch.Size([1, 2, 10, 10])
    """

    _rank = 2


class TFConv3dTranspose(_TFConvNdTranspose):
    """``keras.layers.Conv3DTranspose`` on NCDHW (see :class:`TFConv2dTranspose`).

    Example:
        >>> import torch
        >>> TFConv3dTranspose(2, 2, 2, strides=2)(torch.randn(1, 2, 2, 3, 3)).shape
        torch.Size([1, 2, 4, 6, 6])
    """

    _rank = 3
