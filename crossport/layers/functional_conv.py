"""``FunctionalConv`` / ``FunctionalConvTranspose``: torch's ``F.conv{n}d`` and
``F.conv_transpose{n}d`` with the kernel as an input, computed at run time.

Modulated convolutions (StyleGAN's per-sample weights, run as one conv with
``groups=batch``), conditional and dynamic kernels (CondConv) and hypernetworks compute
their weights in ``forward``. These layers take the kernel as a second input, in Keras'
layout, and apply torch's padding, stride, dilation and groups exactly as the weight-holding
:class:`crossport.layers.Conv2d` does (the same functions run both).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras

from crossport.layers.conv import conv_channels_last, conv_transpose_channels_last


def _pairs(pads: Sequence) -> list[tuple[int, int]]:
    return [(int(before), int(after)) for before, after in pads]


@keras.saving.register_keras_serializable(package="crossport")
class FunctionalConv(keras.layers.Layer):
    """``F.conv{n}d(x, weight, bias, stride, padding, dilation, groups)`` on channels-last
    ``x`` with a run-time ``kernel`` ``[*k, in/groups, out]`` (torch's weight
    ``[out, in/groups, *k]`` moved to Keras' layout); ``groups`` is
    ``in_channels / kernel.shape[-2]``. ``pads``: (before, after) per spatial dim.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> x = rng.normal(size=(2, 9, 9, 4)).astype("float32")
        >>> kernel = rng.normal(size=(3, 3, 2, 6)).astype("float32")  # groups=2
        >>> FunctionalConv(stride=(2, 2), pads=[(1, 1), (1, 1)])(x, kernel).shape
        TensorShape([2, 5, 5, 6])
    """

    def __init__(self, stride: Sequence[int], pads: Sequence[Sequence[int]],
                 dilation: Sequence[int] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.stride = tuple(int(s) for s in stride)
        self.pads = _pairs(pads)
        self.dilation = tuple(int(d) for d in dilation or (1,) * len(self.stride))

    def call(self, x: Any, kernel: Any, bias: Any = None) -> Any:
        return conv_channels_last(x, kernel, bias, self.stride, self.pads, self.dilation)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(stride=list(self.stride), pads=[list(p) for p in self.pads],
                      dilation=list(self.dilation))
        return config


@keras.saving.register_keras_serializable(package="crossport")
class FunctionalConvTranspose(keras.layers.Layer):
    """``F.conv_transpose{n}d(x, weight, bias, stride, padding, output_padding, groups,
    dilation)`` on channels-last ``x`` with a run-time ``kernel`` ``[*k, out/groups, in]``
    (torch's weight ``[in, out/groups, *k]`` moved to Keras' layout).

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> x = rng.normal(size=(2, 5, 5, 4)).astype("float32")
        >>> kernel = rng.normal(size=(3, 3, 8, 4)).astype("float32")
        >>> FunctionalConvTranspose(stride=(2, 2), padding=(1, 1),
        ...                         output_padding=(1, 1))(x, kernel).shape
        TensorShape([2, 10, 10, 8])
    """

    def __init__(self, stride: Sequence[int], padding: Sequence[int],
                 output_padding: Sequence[int], dilation: Sequence[int] | None = None,
                 groups: int = 1, **kwargs: Any):
        super().__init__(**kwargs)
        self.stride = tuple(int(s) for s in stride)
        self.padding = tuple(int(p) for p in padding)
        self.output_padding = tuple(int(p) for p in output_padding)
        self.dilation = tuple(int(d) for d in dilation or (1,) * len(self.stride))
        self.groups = int(groups)

    def call(self, x: Any, kernel: Any, bias: Any = None) -> Any:
        return conv_transpose_channels_last(x, kernel, bias, self.stride, self.padding,
                                            self.output_padding, self.dilation, self.groups)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(stride=list(self.stride), padding=list(self.padding),
                      output_padding=list(self.output_padding), dilation=list(self.dilation),
                      groups=self.groups)
        return config
