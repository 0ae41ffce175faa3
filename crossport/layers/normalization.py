"""Torch-exact normalisation layers (pitfalls.md items 3, 5 and 14).

Statistics are computed as torch does: the mean, then the mean of squared deviations (biased
variance) for normalising; running variances are updated with the unbiased variance. Weights
keep torch's names and shapes (``weight``, ``bias``, ``running_mean``, ``running_var``), so
``from_torch`` copies them unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from crossport.errors import InputError
from crossport.layers.base import SpatialLayer, dynamic_shape, resolve_perm
from crossport.layers.reduction import stable_mean


def normalize_moments(x: Any, axes: Sequence[int], eps: float) -> tuple[Any, Any, Any]:
    """``(x - mean) / sqrt(var + eps)`` over ``axes``, with the mean and biased variance."""
    mean = stable_mean(x, axis=tuple(axes), keepdims=True)  # sums as accurate as torch's
    centered = x - mean
    var = stable_mean(ops.square(centered), axis=tuple(axes), keepdims=True)
    return centered * ops.rsqrt(var + eps), mean, var



def _torch_tensor(module: Any, name: str) -> np.ndarray:
    return getattr(module, name).detach().cpu().numpy()


@keras.saving.register_keras_serializable(package="crossport")
class LayerNorm(keras.layers.Layer):
    """``torch.nn.LayerNorm``: normalise over the last ``len(normalized_shape)`` *torch* dims.

    The affine ``weight``/``bias`` have exactly ``normalized_shape`` (elementwise, stored in
    torch's order). Unlike the image layers, the default layout is torch's own: the Keras
    tensor is the torch tensor (a ``[N, T, D]`` sequence stays ``[N, T, D]``). For a Keras
    tensor holding a permuted torch tensor, give ``perm`` (``keras = torch.permute(perm)``) or
    ``data_format="channels_last"`` (Keras ``N, *s, C`` for torch ``N, C, *s``): a
    ``LayerNorm([C, H, W])`` then covers Keras axes H, W, C.

    Args:
        normalized_shape: int or shape of the trailing torch dims.
        eps: added to the variance (torch 1e-5; Keras' LayerNormalization uses 1e-3).
        elementwise_affine: learn ``weight`` (and ``bias``).
        bias: learn ``bias`` (when ``elementwise_affine``).
        perm: Keras-from-torch permutation of the input dims.
        data_format: ``"channels_last"`` or ``"channels_first"`` (= identity), if no ``perm``.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
        >>> LayerNorm(8)(x).shape
        TensorShape([2, 5, 8])
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        perm: Sequence[int] | None = None,
        data_format: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        self.eps = float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        self.use_bias = bool(bias)
        self.perm = None if perm is None else tuple(int(p) for p in perm)
        resolve_perm(0, None, data_format)  # validates
        self.data_format = data_format

    def _resolved_perm(self, rank: int) -> tuple[int, ...]:
        if self.perm is None and self.data_format is None:
            return tuple(range(rank))
        return resolve_perm(rank, self.perm, self.data_format)

    def _layout(self, rank: int) -> tuple[list[int], list[int], list[int]]:
        """Keras axes normalised, the weight transpose, and the weight broadcast shape."""
        m = len(self.normalized_shape)
        if m > rank:
            raise InputError(f"LayerNorm{self.normalized_shape}: input rank {rank} too small.")
        perm = self._resolved_perm(rank)
        first = rank - m
        axes = [i for i in range(rank) if perm[i] >= first]
        order = [perm[i] - first for i in axes]  # normalised torch dims in Keras order
        broadcast = [1] * rank
        for axis in axes:
            broadcast[axis] = self.normalized_shape[perm[axis] - first]
        return axes, order, broadcast

    def build(self, input_shape: Sequence[int | None]) -> None:
        _, _, broadcast = self._layout(len(input_shape))
        for size, expected in zip(input_shape, broadcast):
            if size is not None and expected != 1 and size != expected:
                raise InputError(
                    f"LayerNorm{self.normalized_shape}: input shape {tuple(input_shape)} does "
                    f"not end with the normalised shape (perm "
                    f"{self._resolved_perm(len(input_shape))})."
                )
        self._create_weights()

    def _create_weights(self) -> None:
        self.weight = self.bias = None
        if self.elementwise_affine:
            self.weight = self.add_weight(name="weight", shape=self.normalized_shape,
                                          initializer="ones")
            if self.use_bias:
                self.bias = self.add_weight(name="bias", shape=self.normalized_shape,
                                            initializer="zeros")

    def call(self, inputs: Any) -> Any:
        axes, order, broadcast = self._layout(len(inputs.shape))
        y, _, _ = normalize_moments(inputs, axes, self.eps)
        # weights are stored in torch's order: transpose to the Keras order and broadcast
        if self.weight is not None:
            y = y * ops.reshape(ops.transpose(self.weight, order), broadcast)
        if self.bias is not None:
            y = y + ops.reshape(ops.transpose(self.bias, order), broadcast)
        return y

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            normalized_shape=list(self.normalized_shape),
            eps=self.eps,
            elementwise_affine=self.elementwise_affine,
            bias=self.use_bias,
            perm=None if self.perm is None else list(self.perm),
            data_format=self.data_format,
        )
        return config

    @classmethod
    def from_torch(
        cls, module: Any, data_format: str | None = None, perm: Sequence[int] | None = None
    ) -> LayerNorm:
        """From ``nn.LayerNorm``, weights copied (``perm``/``data_format`` as in the class)."""
        layer = cls(module.normalized_shape, module.eps, module.elementwise_affine,
                    getattr(module, "bias", None) is not None, perm=perm,
                    data_format=data_format)
        layer._create_weights()  # the weights do not depend on the input rank
        layer.built = True
        weights = []
        if module.elementwise_affine:
            weights.append(_torch_tensor(module, "weight"))
            if module.bias is not None:
                weights.append(_torch_tensor(module, "bias"))
        layer.set_weights(weights)
        return layer


@keras.saving.register_keras_serializable(package="crossport")
class GroupNorm(SpatialLayer):
    """``torch.nn.GroupNorm``: contiguous channel groups, per-channel affine.

    Works on any rank >= 2 (``N, C, *spatial`` in torch). ``GroupNorm(1, C)`` is the TF1
    ``layer_norm`` (normalise over everything but the batch, per-channel affine).

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(2, 5, 5, 6)).astype("float32")  # NHWC
        >>> GroupNorm(3, 6)(x).shape
        TensorShape([2, 5, 5, 6])
    """

    def __init__(
        self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
        data_format: str | None = None, **kwargs: Any,
    ):
        super().__init__(data_format=data_format, **kwargs)
        self.num_groups, self.num_channels = int(num_groups), int(num_channels)
        if self.num_groups < 1 or self.num_channels % self.num_groups:
            raise InputError(
                f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups "
                f"({num_groups})."
            )
        self.eps = float(eps)
        self.affine = bool(affine)

    def build(self, input_shape: Sequence[int | None]) -> None:
        channels = self.channels_last_shape(input_shape)[-1]
        if channels is not None and channels != self.num_channels:
            raise InputError(f"GroupNorm: expected {self.num_channels} channels, got input "
                             f"shape {tuple(input_shape)} ({self.data_format}).")
        self.weight = self.bias = None
        if self.affine:
            self.weight = self.add_weight(name="weight", shape=(self.num_channels,),
                                          initializer="ones")
            self.bias = self.add_weight(name="bias", shape=(self.num_channels,),
                                        initializer="zeros")

    def forward_channels_last(self, x: Any, training: bool | None = None) -> Any:
        shape = dynamic_shape(x)
        # channel c = g * (C/G) + j in torch: split the last axis as (G, C/G), C/G at run
        # time (under a None channel dim the example's C/G reshaped other sizes wrongly)
        grouped = ops.reshape(x, [*shape[:-1], self.num_groups, -1])
        rank = len(grouped.shape)
        axes = [*range(1, rank - 2), rank - 1]
        y, _, _ = normalize_moments(grouped, axes, self.eps)
        y = ops.reshape(y, shape)
        if self.affine:
            y = y * self.weight + self.bias
        return y

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(num_groups=self.num_groups, num_channels=self.num_channels, eps=self.eps,
                      affine=self.affine)
        return config

    @classmethod
    def from_torch(cls, module: Any, data_format: str | None = None) -> GroupNorm:
        """From ``nn.GroupNorm``, weights copied."""
        layer = cls(module.num_groups, module.num_channels, module.eps, module.affine,
                    data_format=data_format)
        layer.build(_channel_shape(layer, module.num_channels, 2))
        if module.affine:
            layer.set_weights([_torch_tensor(module, "weight"), _torch_tensor(module, "bias")])
        return layer


def _channel_shape(layer: SpatialLayer, channels: int, rank: int) -> tuple[int | None, ...]:
    shape: list[int | None] = [None] * rank
    shape[-1 if layer.data_format == "channels_last" else 1] = channels
    return tuple(shape)


class _RunningStatsNorm(SpatialLayer):
    """Shared weights and update rule of InstanceNorm and BatchNorm."""

    def __init__(
        self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
        affine: bool = True, track_running_stats: bool = True, data_format: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(data_format=data_format, **kwargs)
        self.num_features = int(num_features)
        self.eps = float(eps)
        self.momentum = None if momentum is None else float(momentum)
        self.affine = bool(affine)
        self.track_running_stats = bool(track_running_stats)

    def build(self, input_shape: Sequence[int | None]) -> None:
        channels = self.channels_last_shape(input_shape)[-1]
        if channels is not None and channels != self.num_features:
            raise InputError(f"{type(self).__name__}: expected {self.num_features} channels, "
                             f"got input shape {tuple(input_shape)} ({self.data_format}).")
        c = (self.num_features,)
        self.weight = self.bias = self.running_mean = self.running_var = None
        if self.affine:
            self.weight = self.add_weight(name="weight", shape=c, initializer="ones")
            self.bias = self.add_weight(name="bias", shape=c, initializer="zeros")
        if self.track_running_stats:
            kw = {"trainable": False}
            self.running_mean = self.add_weight(name="running_mean", shape=c,
                                                initializer="zeros", **kw)
            self.running_var = self.add_weight(name="running_var", shape=c, initializer="ones",
                                               **kw)
            self.num_batches_tracked = self.add_weight(
                name="num_batches_tracked", shape=(), initializer="zeros", dtype="int64", **kw)

    def _update(self, mean: Any, unbiased_var: Any, m: Any) -> None:
        """torch: ``running = (1 - m) * running + m * batch``."""
        self.running_mean.assign((1 - m) * self.running_mean + m * mean)
        self.running_var.assign((1 - m) * self.running_var + m * unbiased_var)

    def _affine(self, y: Any) -> Any:
        return y * self.weight + self.bias if self.affine else y

    def _running(self, x: Any) -> Any:
        # Folded like torch's CPU inference kernel: x * alpha + beta, alpha and beta per channel.
        alpha = ops.rsqrt(self.running_var + self.eps)
        if self.affine:
            alpha = alpha * self.weight
        beta = -self.running_mean * alpha
        if self.affine:
            beta = beta + self.bias
        return x * alpha + beta

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(num_features=self.num_features, eps=self.eps, momentum=self.momentum,
                      affine=self.affine, track_running_stats=self.track_running_stats)
        return config

    @classmethod
    def from_torch(cls, module: Any, data_format: str | None = None) -> _RunningStatsNorm:
        """From the matching torch module, weights and running statistics copied."""
        layer = cls(module.num_features, module.eps, module.momentum, module.affine,
                    module.track_running_stats, data_format=data_format)
        rank = (layer.ranks or (layer.n_spatial + 2,))[-1]
        layer.build(_channel_shape(layer, module.num_features, rank))
        names = (["weight", "bias"] if module.affine else []) + (
            ["running_mean", "running_var", "num_batches_tracked"]
            if module.track_running_stats else [])
        layer.set_weights([_torch_tensor(module, n) for n in names])
        return layer


class _InstanceNormNd(_RunningStatsNorm):
    def __init__(
        self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
        affine: bool = False, track_running_stats: bool = False,
        data_format: str | None = None, **kwargs: Any,
    ):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, data_format,
                         **kwargs)

    def forward_channels_last(self, x: Any, training: bool | None = None) -> Any:
        if self.track_running_stats and not training:
            return self._running(x)
        spatial = tuple(range(1, len(x.shape) - 1))
        y, mean, var = normalize_moments(x, spatial, self.eps)
        if self.track_running_stats:  # training: torch averages the instance stats over N
            n = ops.cast(ops.size(x), x.dtype) / ops.cast(ops.shape(x)[0] * x.shape[-1], x.dtype)
            unbiased = var * (n / ops.maximum(n - 1, 1))
            # torch's InstanceNorm neither counts batches nor has a cumulative momentum
            m = 0.0 if self.momentum is None else self.momentum
            self._update(ops.mean(mean, axis=(0, *spatial)), ops.mean(unbiased, (0, *spatial)),
                         m)
        return self._affine(y)


_INSTANCE_DOC = """``torch.nn.InstanceNorm{n}d``: per-sample, per-channel statistics over space.

    Defaults as torch: no affine, no running statistics. With ``track_running_stats`` the
    running statistics are used at inference (``training`` falsy) and updated in training.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size={shape}).astype("float32")  # channels-last
        >>> InstanceNorm{n}d(3)(x).shape
        TensorShape({out})
"""


@keras.saving.register_keras_serializable(package="crossport")
class InstanceNorm1d(_InstanceNormNd):
    n_spatial = 1
    __doc__ = _INSTANCE_DOC.format(n=1, shape=(2, 9, 3), out=[2, 9, 3])


@keras.saving.register_keras_serializable(package="crossport")
class InstanceNorm2d(_InstanceNormNd):
    n_spatial = 2
    __doc__ = _INSTANCE_DOC.format(n=2, shape=(2, 5, 6, 3), out=[2, 5, 6, 3])


@keras.saving.register_keras_serializable(package="crossport")
class InstanceNorm3d(_InstanceNormNd):
    n_spatial = 3
    __doc__ = _INSTANCE_DOC.format(n=3, shape=(2, 3, 4, 5, 3), out=[2, 3, 4, 5, 3])


class _BatchNormNd(_RunningStatsNorm):
    def forward_channels_last(self, x: Any, training: bool | None = None) -> Any:
        if self.track_running_stats and not training:
            return self._running(x)
        axes = tuple(range(len(x.shape) - 1))
        y, mean, var = normalize_moments(x, axes, self.eps)
        if training and self.track_running_stats:
            count = ops.cast(ops.size(x) // self.num_features, x.dtype)
            unbiased = ops.reshape(var, (-1,)) * count / ops.maximum(count - 1, 1)
            self.num_batches_tracked.assign_add(ops.cast(1, "int64"))
            m = (1.0 / ops.cast(self.num_batches_tracked, "float32") if self.momentum is None
                 else self.momentum)  # momentum None: cumulative average, as torch
            self._update(ops.reshape(mean, (-1,)), unbiased, m)
        return self._affine(y)


_BATCH_DOC = """``torch.nn.BatchNorm{n}d`` (eps 1e-5, momentum 0.1 = Keras momentum 0.9).

    Inference (``training`` falsy) uses the running statistics; training normalises with the
    batch's biased variance and updates the running variance with the unbiased one, as torch.
    ``track_running_stats=False`` always uses batch statistics. Input ranks: {ranks}.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size={shape}).astype("float32")  # channels-last
        >>> BatchNorm{n}d(3)(x).shape
        TensorShape({out})
"""


@keras.saving.register_keras_serializable(package="crossport")
class BatchNorm1d(_BatchNormNd):
    ranks = (2, 3)
    __doc__ = _BATCH_DOC.format(n=1, ranks="(N, C) or (N, C, L)", shape=(4, 9, 3),
                                out=[4, 9, 3])


@keras.saving.register_keras_serializable(package="crossport")
class BatchNorm2d(_BatchNormNd):
    n_spatial = 2
    __doc__ = _BATCH_DOC.format(n=2, ranks="(N, C, H, W)", shape=(4, 5, 6, 3),
                                out=[4, 5, 6, 3])


@keras.saving.register_keras_serializable(package="crossport")
class BatchNorm3d(_BatchNormNd):
    n_spatial = 3
    __doc__ = _BATCH_DOC.format(n=3, ranks="(N, C, D, H, W)", shape=(2, 3, 4, 5, 3),
                                out=[2, 3, 4, 5, 3])
