"""Torch-exact convolutions: ``Conv{1,2,3}d`` and ``ConvTranspose{1,2,3}d`` (pitfalls 1, 4, 6).

Padding is always explicit (torch's integer padding is symmetric, TF's SAME is not), and the
conv itself runs ``valid`` on channels-last data; ``'same'`` is passed to Keras only where it
is provably identical to torch (stride 1, zeros padding, the pads TF would pick). Weights are
stored in Keras' layout and converted by :mod:`crossport.weights` in ``from_torch``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from crossport.errors import InputError
from crossport.layers.base import (
    SpatialLayer,
    dilate_kernel,
    ntuple,
    slice_axis,
    torch_same_padding,
)
from crossport.layers.grouped_conv import conv
from crossport.layers.padding import pad_axes
from crossport.weights import (
    conv_transpose_weight_to_keras,
    conv_weight_to_keras,
    depthwise_weight_to_keras,
)

PADDING_MODES = {"zeros": "constant", "reflect": "reflect", "replicate": "replicate",
                 "circular": "circular"}


def _uniform(fan_in: int) -> keras.initializers.Initializer:
    """Torch's default conv init (kaiming_uniform with a=sqrt(5)): U(-1/sqrt(fan_in), ...)."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return keras.initializers.RandomUniform(-bound, bound)


def conv_channels_last(x: Any, kernel: Any, bias: Any, stride: Sequence[int],
                       pads: Sequence[tuple[int, int]], dilation: Sequence[int],
                       padding_mode: str = "zeros", depthwise: bool = False) -> Any:
    """Torch's convolution of channels-last ``x`` with a Keras-layout ``kernel``
    (``[*k, in/groups, out]``, or ``[*k, in, multiplier]`` when ``depthwise``); the groups
    follow from the kernel's input channels. ``pads``: (before, after) per spatial dim.

    The kernel may be a weight or a tensor computed at run time.
    """
    padding = "valid"
    kernel_size = tuple(int(k) for k in kernel.shape[:-2])
    # TF's SAME at stride 1 pads as torch's 'same' (the odd extra after)
    tf_same = torch_same_padding(kernel_size, dilation)
    if (padding_mode == "zeros" and all(s == 1 for s in stride)
            and list(pads) == tf_same and any(a or b for a, b in pads)):
        padding = "same"  # identical to torch here, and saves a pad op
    elif any(a or b for a, b in pads):
        x = pad_axes(x, [(0, 0), *pads, (0, 0)], PADDING_MODES[padding_mode])
    dilation, stride = tuple(dilation), list(stride)
    for axis, (k, d, s) in enumerate(zip(kernel_size, dilation, stride), start=1):
        size, extent = x.shape[axis], d * (k - 1) + 1
        if padding == "valid" and s > 1 and size is not None and size - extent < s:
            # One output along this axis: the stride is moot. oneDNN (TF and torch's float32
            # CPU conv alike) returns garbage for a strided last axis of output length 1
            # with a single input channel, so crop and use stride 1 (exact).
            x = slice_axis(x, axis, 0, extent)
            stride[axis - 1] = 1
    stride = tuple(stride)
    if depthwise:
        y = ops.depthwise_conv(x, kernel, stride, padding, dilation_rate=dilation)
    else:
        if any(s > 1 for s in stride) and any(d > 1 for d in dilation):
            # TF has no strided dilated conv: dilate the kernel instead (exact zeros)
            kernel, dilation = dilate_kernel(kernel, dilation), 1
        y = conv(x, kernel, stride, padding, dilation_rate=dilation)
    return y if bias is None else y + bias


def conv_transpose_channels_last(x: Any, kernel: Any, bias: Any, stride: Sequence[int],
                                 padding: Sequence[int], output_padding: Sequence[int],
                                 dilation: Sequence[int], groups: int) -> Any:
    """Torch's transposed convolution of channels-last ``x`` with a Keras-layout ``kernel``
    (``[*k, out/groups, in]``), a weight or a tensor computed at run time."""
    kernel_size = tuple(int(k) for k in kernel.shape[:-2])
    # Dilation via a zero-dilated kernel: TF's CPU kernels reject some dilated
    # transposed convs at run time, and the inserted taps are exact zeros.
    kernel = dilate_kernel(kernel, dilation)
    if groups == 1:
        y = ops.conv_transpose(x, kernel, stride, padding="valid")
    else:  # Keras has no grouped transposed conv: one per group, outputs group-major
        xs = ops.split(x, groups, axis=-1)
        ks = ops.split(kernel, groups, axis=-1)
        y = ops.concatenate(
            [ops.conv_transpose(xi, ki, stride, padding="valid") for xi, ki in zip(xs, ks)],
            axis=-1)
    # Keras' valid result is the full transposed conv, (L-1)*s + K, extended by zeros to
    # L*s when K < s. Torch: crop `padding` at both ends, append `output_padding` (zeros
    # before the bias where past the full result).
    for axis, (k, s, d, p, op) in enumerate(
        zip(kernel_size, stride, dilation, padding, output_padding), start=1,
    ):
        extent = d * (k - 1) + 1
        size = x.shape[axis]
        full = None if size is None else (size - 1) * s + extent
        got = y.shape[axis]
        # end of torch's window relative to the end of y (independent of the input size)
        delta = (full + op - p - got) if (full is not None and got is not None) else (
            min(extent - s, 0) + op - p)
        if delta > 0:
            widths = [(0, 0)] * len(y.shape)
            widths[axis] = (0, delta)
            y = ops.pad(y, widths)
        y = slice_axis(y, axis, p or None, delta if delta < 0 else None)
    return y if bias is None else y + bias


class _ConvBase(SpatialLayer):
    """Arguments and weights shared by forward and transposed convolutions."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int],
        dilation: int | Sequence[int],
        groups: int,
        bias: bool,
        padding_mode: str,
        data_format: str | None,
        **kwargs: Any,
    ):
        super().__init__(data_format=data_format, **kwargs)
        n = self.n_spatial
        self.in_channels = int(in_channels)
        self.out_channels = int(out_channels)
        self.kernel_size = ntuple(kernel_size, n, "kernel_size")
        self.stride = ntuple(stride, n, "stride")
        self.dilation = ntuple(dilation, n, "dilation")
        self.groups = int(groups)
        self.use_bias = bool(bias)
        self.padding_mode = padding_mode
        name = type(self).__name__
        if self.groups < 1 or self.in_channels % self.groups or self.out_channels % self.groups:
            raise InputError(
                f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) must "
                f"be divisible by groups ({groups})."
            )
        if padding_mode not in PADDING_MODES:
            raise InputError(f"{name}: padding_mode must be one of {tuple(PADDING_MODES)}, "
                             f"got {padding_mode!r}.")
        if min(self.kernel_size + self.stride + self.dilation) < 1:
            raise InputError(f"{name}: kernel_size, stride and dilation must be positive.")

    def _input_channels(self, input_shape: Sequence[int | None]) -> None:
        channels = self.channels_last_shape(input_shape)[-1]
        if channels is not None and channels != self.in_channels:
            raise InputError(
                f"{type(self).__name__}: expected {self.in_channels} input channels "
                f"({self.data_format}), got input shape {tuple(input_shape)}."
            )

    def _add_weights(self, kernel_shape: tuple[int, ...], fan_in: int) -> None:
        init = _uniform(fan_in)
        self.kernel = self.add_weight(name="kernel", shape=kernel_shape, initializer=init)
        self.bias = (
            self.add_weight(name="bias", shape=(self.out_channels,), initializer=init)
            if self.use_bias
            else None
        )

    def _set_torch_weights(self, module: Any, kernel: Any) -> None:
        shape = [None] * (self.n_spatial + 2)
        shape[-1 if self.data_format == "channels_last" else 1] = self.in_channels
        self.build(tuple(shape))
        weights = [kernel]
        if self.use_bias:
            weights.append(module.bias.detach().cpu().numpy())
        self.set_weights(weights)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            in_channels=self.in_channels,
            out_channels=self.out_channels,
            kernel_size=list(self.kernel_size),
            stride=list(self.stride),
            dilation=list(self.dilation),
            groups=self.groups,
            bias=self.use_bias,
            padding_mode=self.padding_mode,
        )
        return config


class _ConvNd(_ConvBase):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: str | int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        data_format: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(in_channels, out_channels, kernel_size, stride, dilation, groups, bias,
                         padding_mode, data_format, **kwargs)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise InputError(f"{type(self).__name__}: padding must be 'same', 'valid' or "
                                 f"ints, got {padding!r}.")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise InputError(f"{type(self).__name__}: padding='same' needs stride 1 "
                                 "(torch raises too).")
            self.padding: str | tuple[int, ...] = padding
            same = torch_same_padding(self.kernel_size, self.dilation)
            self.pads = same if padding == "same" else [(0, 0)] * self.n_spatial
        else:
            self.padding = ntuple(padding, self.n_spatial, "padding")
            self.pads = [(p, p) for p in self.padding]
        # Depthwise runs the faster DepthwiseConv kernel (Keras has it in 1D and 2D only).
        self.depthwise = self.groups == self.in_channels > 1 and self.n_spatial in (1, 2)

    def build(self, input_shape: Sequence[int | None]) -> None:
        self._input_channels(input_shape)
        k = self.kernel_size
        if self.depthwise:
            shape = (*k, self.in_channels, self.out_channels // self.in_channels)
        else:
            shape = (*k, self.in_channels // self.groups, self.out_channels)
        self._add_weights(shape, self.in_channels // self.groups * math.prod(k))

    def forward_channels_last(self, x: Any, training: bool | None = None) -> Any:
        return conv_channels_last(x, self.kernel, self.bias, self.stride, self.pads,
                                  self.dilation, self.padding_mode, self.depthwise)

    def get_config(self) -> dict:
        config = super().get_config()
        config["padding"] = self.padding if isinstance(self.padding, str) else list(self.padding)
        return config

    @classmethod
    def from_torch(cls, module: Any, data_format: str | None = None) -> _ConvNd:
        """The layer computing what ``module`` (an ``nn.Conv{n}d``) computes, weights copied."""
        layer = cls(
            module.in_channels, module.out_channels, module.kernel_size, module.stride,
            module.padding, module.dilation, module.groups, module.bias is not None,
            module.padding_mode, data_format=data_format,
        )
        weight = module.weight.detach().cpu().numpy()
        kernel = (depthwise_weight_to_keras(weight, module.in_channels) if layer.depthwise
                  else conv_weight_to_keras(weight))
        layer._set_torch_weights(module, kernel)
        return layer


class _ConvTransposeNd(_ConvBase):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_padding: int | Sequence[int] = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: int | Sequence[int] = 1,
        padding_mode: str = "zeros",
        data_format: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(in_channels, out_channels, kernel_size, stride, dilation, groups, bias,
                         padding_mode, data_format, **kwargs)
        name = type(self).__name__
        if padding_mode != "zeros":
            raise InputError(f"{name}: only padding_mode='zeros' exists (torch raises too).")
        self.padding = ntuple(padding, self.n_spatial, "padding")
        self.output_padding = ntuple(output_padding, self.n_spatial, "output_padding")
        for op, s, d in zip(self.output_padding, self.stride, self.dilation):
            if op >= max(s, d):
                raise InputError(f"{name}: output_padding {self.output_padding} must be smaller "
                                 "than stride or dilation (torch raises too).")

    def build(self, input_shape: Sequence[int | None]) -> None:
        self._input_channels(input_shape)
        # torch's fan_in for a transposed conv reads weight.size(1) = out/groups
        per_group = self.out_channels // self.groups
        self._add_weights((*self.kernel_size, per_group, self.in_channels),
                          per_group * math.prod(self.kernel_size))

    def forward_channels_last(self, x: Any, training: bool | None = None) -> Any:
        return conv_transpose_channels_last(x, self.kernel, self.bias, self.stride,
                                            self.padding, self.output_padding, self.dilation,
                                            self.groups)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(padding=list(self.padding), output_padding=list(self.output_padding))
        return config

    @classmethod
    def from_torch(cls, module: Any, data_format: str | None = None) -> _ConvTransposeNd:
        """The layer computing what ``module`` (``nn.ConvTranspose{n}d``) computes."""
        layer = cls(
            module.in_channels, module.out_channels, module.kernel_size, module.stride,
            module.padding, module.output_padding, module.groups, module.bias is not None,
            module.dilation, module.padding_mode, data_format=data_format,
        )
        weight = module.weight.detach().cpu().numpy()
        layer._set_torch_weights(module, conv_transpose_weight_to_keras(weight))
        return layer


_CONV_DOC = """``torch.nn.Conv{n}d`` with torch's arguments and defaults.

    ``padding`` is an int, a tuple, ``'same'`` (odd extra on the right, as torch) or
    ``'valid'``; ``padding_mode`` is ``'zeros'``, ``'reflect'``, ``'replicate'`` or
    ``'circular'``. ``groups == in_channels`` runs a depthwise kernel{dw}. The kernel weight is
    ``{kshape}`` (``from_torch`` converts torch's ``[out, in/groups, *k]``).

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size={xshape}).astype("float32")  # channels-last
        >>> Conv{n}d(4, 8, 3, stride=2, padding=1)(x).shape
        TensorShape({yshape})
"""

_CONVT_DOC = """``torch.nn.ConvTranspose{n}d`` with torch's arguments and defaults.

    Output length ``(L-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1``;
    ``groups`` and ``dilation`` are supported. Kernel weight ``[*k, out/groups, in]``
    (``from_torch`` converts torch's ``[in, out/groups, *k]``).

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size={xshape}).astype("float32")  # channels-last
        >>> ConvTranspose{n}d(4, 8, 3, stride=2, padding=1, output_padding=1)(x).shape
        TensorShape({yshape})
"""


@keras.saving.register_keras_serializable(package="crossport")
class Conv1d(_ConvNd):
    n_spatial = 1
    __doc__ = _CONV_DOC.format(n=1, dw=" (``DepthwiseConv1D``'s)", kshape="[k, in/groups, out]",
                               xshape=(2, 9, 4), yshape=[2, 5, 8])


@keras.saving.register_keras_serializable(package="crossport")
class Conv2d(_ConvNd):
    n_spatial = 2
    __doc__ = _CONV_DOC.format(n=2, dw=" (``DepthwiseConv2D``'s)",
                               kshape="[kh, kw, in/groups, out]", xshape=(2, 9, 9, 4),
                               yshape=[2, 5, 5, 8])


@keras.saving.register_keras_serializable(package="crossport")
class Conv3d(_ConvNd):
    n_spatial = 3
    __doc__ = _CONV_DOC.format(n=3, dw=" (as a grouped conv: Keras has no 3D depthwise)",
                               kshape="[kd, kh, kw, in/groups, out]", xshape=(1, 5, 5, 5, 4),
                               yshape=[1, 3, 3, 3, 8])


@keras.saving.register_keras_serializable(package="crossport")
class ConvTranspose1d(_ConvTransposeNd):
    n_spatial = 1
    __doc__ = _CONVT_DOC.format(n=1, xshape=(2, 5, 4), yshape=[2, 10, 8])


@keras.saving.register_keras_serializable(package="crossport")
class ConvTranspose2d(_ConvTransposeNd):
    n_spatial = 2
    __doc__ = _CONVT_DOC.format(n=2, xshape=(2, 5, 5, 4), yshape=[2, 10, 10, 8])


@keras.saving.register_keras_serializable(package="crossport")
class ConvTranspose3d(_ConvTransposeNd):
    n_spatial = 3
    __doc__ = _CONVT_DOC.format(n=3, xshape=(1, 3, 3, 3, 4), yshape=[1, 6, 6, 6, 8])
