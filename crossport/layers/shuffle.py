"""``PixelShuffle`` / ``PixelUnshuffle`` with torch's channel order.

torch's output channel ``c`` at sub-pixel ``(i, j)`` reads input channel ``c*r*r + i*r + j``;
TF's ``depth_to_space`` reads ``(i*r + j)*C + c`` instead, so it cannot stand in for it.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from crossport.errors import InputError
from crossport.layers.base import SpatialLayer, dynamic_shape


class _Shuffle(SpatialLayer):
    n_spatial = 2

    def __init__(self, factor: int, data_format: str | None = None, **kwargs: Any):
        super().__init__(data_format=data_format, **kwargs)
        self.factor = int(factor)
        if self.factor < 1:
            raise InputError(f"{type(self).__name__}: the factor must be >= 1, got {factor}.")

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        # Both layouts are a reshape/transpose/reshape: no need to go through channels-last.
        self._check_rank(len(inputs.shape))
        return self._shuffle(inputs, channels_last=self.data_format == "channels_last")

    def _channels(self, x: Any, channels_last: bool) -> Any:
        """The channel count: an int when static, else the run-time size (a dynamic
        channel dim; torch checks its divisibility at run time, as the reshape does)."""
        axis = -1 if channels_last else 1
        return dynamic_shape(x)[axis]


@keras.saving.register_keras_serializable(package="crossport")
class PixelShuffle(_Shuffle):
    """``torch.nn.PixelShuffle(upscale_factor)``: ``C*r*r, H, W`` -> ``C, H*r, W*r``.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(1, 3, 5, 8)).astype("float32")  # NHWC
        >>> PixelShuffle(2)(x).shape
        TensorShape([1, 6, 10, 2])
    """

    def __init__(self, upscale_factor: int, data_format: str | None = None, **kwargs: Any):
        super().__init__(upscale_factor, data_format=data_format, **kwargs)

    def _shuffle(self, x: Any, channels_last: bool) -> Any:
        r = self.factor
        c = self._channels(x, channels_last)
        if isinstance(c, int) and c % (r * r):
            raise InputError(f"PixelShuffle({r}): {c} channels are not divisible by {r * r}.")
        c //= r * r
        if channels_last:
            n, h, w, _ = dynamic_shape(x)
            y = ops.reshape(x, [n, h, w, c, r, r])
            y = ops.transpose(y, (0, 1, 4, 2, 5, 3))  # n, h, i, w, j, c
            return ops.reshape(y, [n, h * r, w * r, c])
        n, _, h, w = dynamic_shape(x)
        y = ops.reshape(x, [n, c, r, r, h, w])
        y = ops.transpose(y, (0, 1, 4, 2, 5, 3))  # n, c, h, i, w, j
        return ops.reshape(y, [n, c, h * r, w * r])

    def get_config(self) -> dict:
        config = super().get_config()
        config["upscale_factor"] = self.factor
        return config

    @classmethod
    def from_torch(cls, module: Any, data_format: str | None = None) -> PixelShuffle:
        """From ``nn.PixelShuffle``."""
        return cls(module.upscale_factor, data_format=data_format)


@keras.saving.register_keras_serializable(package="crossport")
class PixelUnshuffle(_Shuffle):
    """``torch.nn.PixelUnshuffle(downscale_factor)``: ``C, H*r, W*r`` -> ``C*r*r, H, W``.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(1, 6, 10, 2)).astype("float32")  # NHWC
        >>> PixelUnshuffle(2)(x).shape
        TensorShape([1, 3, 5, 8])
    """

    def __init__(self, downscale_factor: int, data_format: str | None = None, **kwargs: Any):
        super().__init__(downscale_factor, data_format=data_format, **kwargs)

    def _shuffle(self, x: Any, channels_last: bool) -> Any:
        r = self.factor
        c = self._channels(x, channels_last)
        spatial = x.shape[1:3] if channels_last else x.shape[2:4]
        if any(s is not None and s % r for s in spatial):
            raise InputError(f"PixelUnshuffle({r}): spatial sizes {tuple(spatial)} are not "
                             f"divisible by {r}.")
        if channels_last:
            n, h, w, _ = dynamic_shape(x)
            y = ops.reshape(x, [n, h // r, r, w // r, r, c])
            y = ops.transpose(y, (0, 1, 3, 5, 2, 4))  # n, h, w, c, i, j
            return ops.reshape(y, [n, h // r, w // r, c * r * r])
        n, _, h, w = dynamic_shape(x)
        y = ops.reshape(x, [n, c, h // r, r, w // r, r])
        y = ops.transpose(y, (0, 1, 3, 5, 2, 4))  # n, c, i, j, h, w
        return ops.reshape(y, [n, c * r * r, h // r, w // r])

    def get_config(self) -> dict:
        config = super().get_config()
        config["downscale_factor"] = self.factor
        return config

    @classmethod
    def from_torch(cls, module: Any, data_format: str | None = None) -> PixelUnshuffle:
        """From ``nn.PixelUnshuffle``."""
        return cls(module.downscale_factor, data_format=data_format)
