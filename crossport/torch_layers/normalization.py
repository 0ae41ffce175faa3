"""Keras / TF normalization layers as torch modules (pitfalls 3, 5, 14).

Axes are **torch-layout** dims of the tensor the module receives. A Keras layer that ran on a
channels-last tensor (``[N, H, W, C]``) ported to channels-first (``[N, C, H, W]``) has its
axes translated by ``from_keras(layer, channels_first=True)``: Keras axis ``-1`` (C) becomes
dim 1, Keras axis ``i`` in ``1..rank-2`` becomes ``i + 1``. Pass ``channels_first=False`` when
the layout is unchanged (``[N, T, F]`` sequences, ``[N, F]`` features).

Arithmetic follows Keras: biased batch variance, ``x * inv + (beta - mean * inv)`` with
``inv = rsqrt(var + eps) * gamma``, eps ``1e-3`` (torch: ``1e-5``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from crossport.errors import InputError
from crossport.torch_layers.keras_weights import copy_into, keras_array

__all__ = [
    "KerasBatchNorm",
    "KerasBatchNorm1d",
    "KerasBatchNorm2d",
    "KerasBatchNorm3d",
    "KerasGroupNorm",
    "KerasLayerNorm",
    "TFContribLayerNorm",
    "keras_axis_to_torch",
]


def keras_axis_to_torch(axis: int, rank: int, channels_first: bool = True) -> int:
    """Torch dim of Keras axis ``axis`` of a rank-``rank`` tensor (non-negative result).

    With ``channels_first`` the Keras tensor is channels-last and the torch one its
    channels-first port: ``0 -> 0``, ``rank-1 -> 1``, ``i -> i+1`` otherwise.

    Example:
        >>> keras_axis_to_torch(-1, 4), keras_axis_to_torch(1, 4), keras_axis_to_torch(-1, 3, False)
        (1, 2, 2)
    """
    if not -rank <= axis < rank:
        raise InputError(f"axis {axis} out of range for rank {rank}")
    axis %= rank
    if not channels_first or rank < 3 or axis == 0:
        return axis
    return 1 if axis == rank - 1 else axis + 1


def _build_shape(layer) -> tuple | None:
    shapes = getattr(layer, "_build_shapes_dict", None) or {}
    shape = next(iter(shapes.values()), None)
    return None if shape is None else tuple(shape)


def _layer_rank(layer, rank: int | None) -> int:
    if rank is not None:
        return rank
    shape = _build_shape(layer)
    if shape is None:
        raise InputError(f"{layer.name}: pass input_rank=..., the layer was never built")
    return len(shape)


def _param_sizes(layer, keras_axes: list[int]) -> tuple[int, ...]:
    """Sizes of the normalized Keras axes, from gamma/beta or the build shape."""
    ref = layer.gamma if layer.gamma is not None else layer.beta
    if ref is not None:
        return tuple(keras_array(ref).shape)
    shape = _build_shape(layer)
    if shape is None:
        raise InputError(f"{layer.name}: the layer was never built")
    return tuple(int(shape[a]) for a in keras_axes)


def _port_axis(layer, axis: int, channels_first: bool, rank: int | None) -> int:
    """Torch dim of a single Keras layer axis (rank needed only for inner axes)."""
    if not channels_first:
        return axis
    if axis == -1:
        return 1
    rank = _layer_rank(layer, rank)
    return keras_axis_to_torch(axis, rank, True)


def _keras_norm(x, mean, var, eps, gamma, beta):
    # Keras' exact op order (ops.batch_normalization / layer_normalization).
    inv = torch.rsqrt(var + eps)
    if gamma is not None:
        inv = inv * gamma
    res = -mean * inv
    if beta is not None:
        res = res + beta
    return x * inv + res


class KerasBatchNorm(nn.Module):
    """``keras.layers.BatchNormalization`` over channel dim ``axis`` of any ``[N, C, ...]`` tensor.

    Defaults are Keras': eps ``1e-3`` and momentum ``0.01`` in **torch's convention**
    (``running = (1 - m) * running + m * batch``; Keras writes it ``momentum=0.99``). In training
    mode the running variance is updated with the **biased** batch variance, as Keras does
    (torch uses the unbiased one).

    Args:
        num_features: size of dim ``axis``.
        eps: variance epsilon.
        momentum: torch-convention momentum (``1 - keras_momentum``).
        center: learn ``bias`` (Keras ``beta``).
        scale: learn ``weight`` (Keras ``gamma``).
        axis: torch dim of the features.
        frozen: a Keras layer with ``trainable=False``, which normalizes with its moving
            statistics (and leaves them) in training mode too.

    Example:
        >>> import torch
        >>> bn = KerasBatchNorm(3).eval()
        >>> bn(torch.randn(2, 3, 4, 4)).shape
        torch.Size([2, 3, 4, 4])
    """

    frozen = False  # (a class default: modules pickled before the flag existed load)

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-3,
        momentum: float = 0.01,
        center: bool = True,
        scale: bool = True,
        axis: int = 1,
        frozen: bool = False,
    ) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum, self.axis = num_features, eps, momentum, axis
        self.frozen = frozen
        self.weight = nn.Parameter(torch.ones(num_features)) if scale else None
        self.bias = nn.Parameter(torch.zeros(num_features)) if center else None
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        axis = self.axis % x.ndim
        shape = [1] * x.ndim
        shape[axis] = self.num_features
        if self.training and not self.frozen:
            dims = [d for d in range(x.ndim) if d != axis]
            mean = x.mean(dims, keepdim=True)
            var = (x - mean).square().mean(dims, keepdim=True)  # biased, like tf.nn.moments
            with torch.no_grad():
                m = self.momentum
                self.running_mean.mul_(1 - m).add_(mean.flatten() * m)
                self.running_var.mul_(1 - m).add_(var.flatten() * m)
        else:
            mean, var = self.running_mean.view(shape), self.running_var.view(shape)
        gamma = None if self.weight is None else self.weight.view(shape)
        beta = None if self.bias is None else self.bias.view(shape)
        return _keras_norm(x, mean, var, self.eps, gamma, beta)

    @classmethod
    def from_keras(
        cls, layer, channels_first: bool = True, input_rank: int | None = None
    ) -> KerasBatchNorm:
        """Copy ``gamma``/``beta``/moving stats and eps/momentum/axis from a built Keras layer."""
        cfg = layer.get_config()
        if cfg.get("renorm"):
            raise InputError(f"{layer.name}: batch renormalization is not supported")
        axis = cfg["axis"]
        if isinstance(axis, (list, tuple)):
            if len(axis) != 1:
                raise InputError(
                    f"{layer.name}: multi-axis BatchNormalization {axis} is not supported"
                )
            axis = axis[0]
        torch_axis = _port_axis(layer, axis, channels_first, input_rank)
        mean = keras_array(layer.moving_mean)
        module = cls(
            mean.shape[0],
            float(cfg["epsilon"]),
            1.0 - float(cfg["momentum"]),
            bool(cfg["center"]),
            bool(cfg["scale"]),
            torch_axis,
            not layer.trainable,
        )
        if module.weight is not None:
            copy_into(module.weight, keras_array(layer.gamma))
        if module.bias is not None:
            copy_into(module.bias, keras_array(layer.beta))
        with torch.no_grad():
            module.running_mean.copy_(torch.from_numpy(mean))
            module.running_var.copy_(torch.from_numpy(keras_array(layer.moving_variance)))
        return module

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, axis={self.axis}"


def _sorted_axes(axis: int | Sequence[int]) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, int) else tuple(int(a) for a in axis)
    if len(set(axes)) != len(axes) or (any(a < 0 for a in axes) and any(a >= 0 for a in axes)):
        raise InputError(f"axes {axes} must be distinct and all negative or all non-negative")
    return tuple(sorted(axes))


class KerasLayerNorm(nn.Module):
    """``keras.layers.LayerNormalization`` over torch dims ``axis`` (eps ``1e-3``).

    ``gamma``/``beta`` (here ``weight``/``bias``) have the sizes of the normalized dims in
    ascending dim order and broadcast elementwise. Torch's ``nn.LayerNorm(shape)`` is the
    special case ``axis = last len(shape) dims``, ``eps=1e-5``.

    Args:
        normalized_shape: sizes of the dims in ``axis`` (ascending dim order).
        axis: torch dims to normalize over (all negative or all non-negative). Default ``-1``
            (Keras' default on a tensor whose layout the port keeps); a channels-first port of
            Keras' default on an NHWC tensor is ``axis=1``.
        eps: variance epsilon.
        center: learn ``bias``.
        scale: learn ``weight``.
        rms_scaling: Keras' deprecated ``rms_scaling=True`` (``x * rsqrt(var + eps) * gamma``).

    Example:
        >>> import torch
        >>> ln = KerasLayerNorm(8, axis=1)  # channels of an NCHW tensor
        >>> ln(torch.randn(2, 8, 3, 3)).shape
        torch.Size([2, 8, 3, 3])
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        axis: int | Sequence[int] = -1,
        eps: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        rms_scaling: bool = False,
    ) -> None:
        super().__init__()
        self.axis = _sorted_axes(axis)
        shape = (
            (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        )
        if len(shape) != len(self.axis):
            raise InputError(f"normalized_shape {shape} needs one size per axis {self.axis}")
        self.normalized_shape, self.eps, self.rms_scaling = shape, eps, rms_scaling
        self.weight = nn.Parameter(torch.ones(shape)) if scale or rms_scaling else None
        self.bias = nn.Parameter(torch.zeros(shape)) if center and not rms_scaling else None

    def _broadcast(self, p: torch.Tensor | None, ndim: int, dims: list[int]) -> torch.Tensor | None:
        if p is None:
            return None
        shape = [1] * ndim
        for d, size in zip(dims, self.normalized_shape):
            shape[d] = size
        return p.reshape(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dims = sorted(a % x.ndim for a in self.axis)
        if len(dims) == 1 and not self.rms_scaling:
            # torch's fused kernel on the dim moved last (a view): the same function with
            # float32 rounding of its own, ~2x faster than the moments written out
            d = dims[0]
            y = F.layer_norm(x.movedim(d, -1), self.normalized_shape, self.weight, self.bias,
                             self.eps)
            return y.movedim(-1, d)
        mean = x.mean(dims, keepdim=True)
        var = (x - mean).square().mean(dims, keepdim=True)
        gamma = self._broadcast(self.weight, x.ndim, dims)
        if self.rms_scaling:
            return x * torch.rsqrt(var + self.eps) * gamma
        return _keras_norm(x, mean, var, self.eps, gamma, self._broadcast(self.bias, x.ndim, dims))

    @classmethod
    def from_keras(
        cls, layer, channels_first: bool = True, input_rank: int | None = None
    ) -> KerasLayerNorm:
        """Copy a built Keras ``LayerNormalization``, translating its axes to torch dims.

        Args:
            layer: the Keras layer (built).
            channels_first: the torch tensor is the NC* port of the Keras N*C tensor.
            input_rank: rank of the layer's input; read from the layer when omitted.
        """
        cfg = layer.get_config()
        axes = cfg["axis"] if isinstance(cfg["axis"], (list, tuple)) else [cfg["axis"]]
        rank = _layer_rank(layer, input_rank)
        keras_axes = sorted(a % rank for a in axes)
        torch_axes = [keras_axis_to_torch(a, rank, channels_first) for a in keras_axes]
        order = np.argsort(torch_axes)  # Keras params follow sorted Keras axes: reorder
        sizes = _param_sizes(layer, keras_axes)
        shape = tuple(sizes[i] for i in order)
        module = cls(
            shape,
            sorted(torch_axes),
            float(cfg["epsilon"]),
            bool(cfg["center"]),
            bool(cfg["scale"]),
            bool(cfg.get("rms_scaling", False)),
        )
        if module.weight is not None:
            copy_into(module.weight, np.transpose(keras_array(layer.gamma), order))
        if module.bias is not None:
            copy_into(module.bias, np.transpose(keras_array(layer.beta), order))
        return module

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, axis={self.axis}, eps={self.eps}"


class KerasGroupNorm(nn.Module):
    """``keras.layers.GroupNormalization`` on channel dim ``axis`` (eps ``1e-3``, torch ``1e-5``).

    Channel ``c`` is in group ``c // (C / groups)`` in both frameworks; ``groups=-1`` is
    instance normalization.

    Args:
        groups: number of groups (``-1``: one per channel).
        num_channels: size of dim ``axis``.
        eps: variance epsilon.
        center: learn ``bias``.
        scale: learn ``weight``.
        axis: torch dim of the channels.

    Example:
        >>> import torch
        >>> KerasGroupNorm(2, 4)(torch.randn(2, 4, 3, 3)).shape
        torch.Size([2, 4, 3, 3])
    """

    def __init__(
        self,
        groups: int,
        num_channels: int,
        eps: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        axis: int = 1,
    ) -> None:
        super().__init__()
        groups = num_channels if groups == -1 else groups
        if num_channels % groups:
            raise InputError(f"groups={groups} must divide num_channels={num_channels}")
        self.groups, self.num_channels, self.eps, self.axis = groups, num_channels, eps, axis
        self.weight = nn.Parameter(torch.ones(num_channels)) if scale else None
        self.bias = nn.Parameter(torch.zeros(num_channels)) if center else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        axis = self.axis % x.ndim
        xg = x.movedim(axis, 1)
        moved = xg.shape
        xg = xg.reshape(moved[0], self.groups, moved[1] // self.groups, *moved[2:])
        dims = list(range(2, xg.ndim))
        mean = xg.mean(dims, keepdim=True)
        var = (xg - mean).square().mean(dims, keepdim=True)
        shape = [1, self.groups, moved[1] // self.groups] + [1] * (xg.ndim - 3)
        gamma = None if self.weight is None else self.weight.view(shape)
        beta = None if self.bias is None else self.bias.view(shape)
        y = _keras_norm(xg, mean, var, self.eps, gamma, beta)
        return y.reshape(moved).movedim(1, axis)

    @classmethod
    def from_keras(
        cls, layer, channels_first: bool = True, input_rank: int | None = None
    ) -> KerasGroupNorm:
        """Copy a built ``keras.layers.GroupNormalization`` (axis translated like LayerNorm)."""
        cfg = layer.get_config()
        torch_axis = _port_axis(layer, cfg["axis"], channels_first, input_rank)
        module = cls(
            int(cfg["groups"]),
            _param_sizes(layer, [int(cfg["axis"])])[0],
            float(cfg["epsilon"]),
            bool(cfg["center"]),
            bool(cfg["scale"]),
            torch_axis,
        )
        if module.weight is not None:
            copy_into(module.weight, keras_array(layer.gamma))
        if module.bias is not None:
            copy_into(module.bias, keras_array(layer.beta))
        return module

    def extra_repr(self) -> str:
        return f"{self.groups}, {self.num_channels}, eps={self.eps}, axis={self.axis}"


class TFContribLayerNorm(nn.Module):
    """TF1 ``tf.contrib.layers.layer_norm`` / ``tf_slim.layers.layer_norm`` (eps ``1e-12``).

    Normalizes over TF dims ``>= begin_norm_axis`` but has affine parameters over TF dims
    ``>= begin_params_axis`` only (default: the last dim). The axes are those of the **TF**
    tensor; with ``channels_first=True`` the module receives the channels-first port
    (``[N, C, H, W]`` of TF's ``[N, H, W, C]``) and parameters keep the TF checkpoint's shape.
    The default configuration on an image is torch's ``GroupNorm(1, C, eps=1e-12)``.

    Args:
        params_shape: shape of ``gamma``/``beta``: TF input shape from ``begin_params_axis``.
        begin_norm_axis: first TF dim normalized over (negative counts from the end).
        begin_params_axis: first TF dim of the parameters (negative counts from the end).
        center: learn ``beta`` (``bias``).
        scale: learn ``gamma`` (``weight``).
        eps: ``1e-12`` as in TF (``1e-3`` for float16 there).
        channels_first: the input is the channels-first port of the TF tensor.

    Example:
        >>> import torch
        >>> ln = TFContribLayerNorm([8])  # TF [N, H, W, 8], ported to [N, 8, H, W]
        >>> ln(torch.randn(2, 8, 4, 4)).shape
        torch.Size([2, 8, 4, 4])
    """

    def __init__(
        self,
        params_shape: int | Sequence[int],
        begin_norm_axis: int = 1,
        begin_params_axis: int = -1,
        center: bool = True,
        scale: bool = True,
        eps: float = 1e-12,
        channels_first: bool = True,
    ) -> None:
        super().__init__()
        shape = (params_shape,) if isinstance(params_shape, int) else tuple(params_shape)
        self.params_shape, self.eps, self.channels_first = shape, eps, channels_first
        self.begin_norm_axis, self.begin_params_axis = begin_norm_axis, begin_params_axis
        self.weight = nn.Parameter(torch.ones(shape)) if scale else None
        self.bias = nn.Parameter(torch.zeros(shape)) if center else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        move = self.channels_first and x.ndim >= 3
        if move:  # compute in TF's layout: the axes and parameter shapes are TF's
            x = x.movedim(1, -1)
        begin = self.begin_norm_axis % x.ndim
        if tuple(x.shape[self.begin_params_axis % x.ndim :]) != self.params_shape:
            raise InputError(
                f"TF input shape {tuple(x.shape)} does not end with params {self.params_shape}"
            )
        dims = list(range(begin, x.ndim))
        mean = x.mean(dims, keepdim=True)
        var = (x - mean).square().mean(dims, keepdim=True)
        y = _keras_norm(x, mean, var, self.eps, self.weight, self.bias)  # tf.nn.batch_normalization
        return y.movedim(-1, 1) if move else y

    def extra_repr(self) -> str:
        return (
            f"{self.params_shape}, begin_norm_axis={self.begin_norm_axis}, "
            f"begin_params_axis={self.begin_params_axis}, eps={self.eps}, "
            f"channels_first={self.channels_first}"
        )


class _KerasMovingStatistics:
    """Training-mode update of Keras' moving statistics on top of torch's BatchNorm.

    Normalisation is torch's own (batch mean and biased batch variance, like Keras); only the
    running-variance update differs: Keras folds in the **biased** batch variance
    (``moving = moving * m + var * (1 - m)``), torch the unbiased one. ``frozen=True`` is a
    Keras layer with ``trainable=False``: it normalizes with the moving statistics (and leaves
    them) in training mode too, as Keras does.
    """

    frozen = False  # (a class default: modules pickled before the flag existed load)

    def __init__(self, *args, frozen: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.frozen = frozen

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.frozen and self.training:
            self._check_input_dim(x)
            return nn.functional.batch_norm(x, self.running_mean, self.running_var,
                                            self.weight, self.bias, False, 0.0, self.eps)
        if not self.training or not self.track_running_stats:
            return super().forward(x)
        self._check_input_dim(x)
        dims = [d for d in range(x.ndim) if d != 1]
        with torch.no_grad():
            var, mean = torch.var_mean(x, dims, correction=0)
            m = self.momentum
            self.running_mean.mul_(1 - m).add_(mean.to(self.running_mean.dtype), alpha=m)
            self.running_var.mul_(1 - m).add_(var.to(self.running_var.dtype), alpha=m)
            self.num_batches_tracked.add_(1)
        return nn.functional.batch_norm(x, None, None, self.weight, self.bias, True, 0.0,
                                        self.eps)


class KerasBatchNorm1d(_KerasMovingStatistics, nn.BatchNorm1d):
    """``nn.BatchNorm1d`` whose training-mode running variance follows Keras (biased).

    Same parameters, buffers and inference as ``nn.BatchNorm1d`` (a drop-in for
    ``load_state_dict``); give ``momentum=1 - keras_momentum`` and Keras' ``eps``.

    Example:
        >>> import torch
        >>> bn = KerasBatchNorm1d(2, eps=1e-3, momentum=1.0).train()
        >>> _ = bn(torch.tensor([[0.0, 1.0], [2.0, 3.0]]))
        >>> bn.running_var  # biased batch variance; nn.BatchNorm1d would hold 2.0
        tensor([1., 1.])
    """


class KerasBatchNorm2d(_KerasMovingStatistics, nn.BatchNorm2d):
    """``nn.BatchNorm2d`` whose training-mode running variance follows Keras (biased).

    Example:
        >>> import torch
        >>> KerasBatchNorm2d(3, eps=1e-3, momentum=0.01).eval()(torch.ones(1, 3, 2, 2)).shape
        torch.Size([1, 3, 2, 2])
    """


class KerasBatchNorm3d(_KerasMovingStatistics, nn.BatchNorm3d):
    """``nn.BatchNorm3d`` whose training-mode running variance follows Keras (biased).

    Example:
        >>> import torch
        >>> KerasBatchNorm3d(3).eval()(torch.ones(1, 3, 2, 2, 2)).shape
        torch.Size([1, 3, 2, 2, 2])
    """
