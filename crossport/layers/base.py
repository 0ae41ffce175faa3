"""Shared helpers of the torch-exact Keras layers: layouts, argument normalisation, padding math.

Layout convention used by every layer in :mod:`crossport.layers`:

* ``data_format="channels_last"`` (the default, and what the converter emits): the Keras
  tensor is the torch ``N, C, *spatial`` tensor held as ``N, *spatial, C``.
* ``data_format="channels_first"``: the Keras tensor has torch's own ``N, C, *spatial`` layout
  (for hand ports that keep NCHW). Layers transpose to channels-last internally, because TF's
  CPU kernels only run channels-last.
* ``perm`` (layers that act on tensors of any rank): ``keras_tensor = torch_tensor.permute(perm)``,
  so Keras axis ``i`` holds torch dim ``perm[i]``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from crossport.errors import InputError

DATA_FORMATS = ("channels_last", "channels_first")


def normalize_data_format(data_format: str | None) -> str:
    """``None`` -> ``"channels_last"``; anything else must be one of :data:`DATA_FORMATS`."""
    if data_format is None:
        return "channels_last"
    if data_format not in DATA_FORMATS:
        raise InputError(f"data_format must be one of {DATA_FORMATS} or None, got {data_format!r}.")
    return data_format


def ntuple(value: int | Sequence[int], n: int, name: str) -> tuple[int, ...]:
    """Torch's ``_ntuple``: an int is repeated ``n`` times, a sequence must have length ``n``."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (int(value),) * n
    try:
        values = tuple(int(v) for v in value)  # type: ignore[union-attr]
    except TypeError:
        raise InputError(f"{name} must be an int or a sequence of {n} ints, got {value!r}.") from None
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise InputError(f"{name} must be an int or a sequence of {n} ints, got {value!r}.")
    return values


def channels_last_perm(rank: int) -> tuple[int, ...]:
    """The ``perm`` of a channels-last tensor: torch ``N, C, *s`` -> Keras ``N, *s, C``."""
    if rank < 3:
        return tuple(range(rank))
    return (0, *range(2, rank), 1)


def resolve_perm(rank: int, perm: Sequence[int] | None, data_format: str | None) -> tuple[int, ...]:
    """The Keras-from-torch permutation for a tensor of ``rank``; ``perm`` wins over data_format."""
    if perm is not None:
        perm = tuple(int(p) for p in perm)
        if sorted(perm) != list(range(rank)):
            raise InputError(f"perm {perm} is not a permutation of the {rank} dims of the input.")
        return perm
    if normalize_data_format(data_format) == "channels_last":
        return channels_last_perm(rank)
    return tuple(range(rank))


def to_channels_last(x: Any) -> Any:
    """``N, C, *s`` -> ``N, *s, C``."""
    return ops.transpose(x, channels_last_perm(len(x.shape)))


def to_channels_first(x: Any) -> Any:
    """``N, *s, C`` -> ``N, C, *s``."""
    rank = len(x.shape)
    return ops.transpose(x, (0, rank - 1, *range(1, rank - 1)))


def dynamic_shape(x: Any) -> list[Any]:
    """Static sizes where known, symbolic ones elsewhere (for reshapes under a None batch)."""
    dynamic = ops.shape(x)
    return [s if s is not None else dynamic[i] for i, s in enumerate(x.shape)]


def contract_axis(x: Any, matrix: np.ndarray, axis: int) -> Any:
    """``x`` with ``axis`` (length ``size``) replaced by ``out`` weighted sums, ``matrix[size, out]``.

    A broadcast matmul on an ``(outer, size, inner)`` view: unlike ``tensordot`` + ``moveaxis``
    it puts no Transpose in the graph (the layout pass promises none inside CNNs).
    """
    shape = dynamic_shape(x)
    outer = shape[:axis]
    inner = shape[axis + 1 :]
    size, out = matrix.shape
    flat = ops.reshape(x, [-1, size, math.prod(inner) if all(isinstance(s, int) for s in inner)
                           else ops.prod(ops.stack(inner))])
    y = ops.matmul(ops.cast(matrix.T, x.dtype), flat)
    return ops.reshape(y, [*outer, out, *inner])


def slice_axis(x: Any, axis: int, start: int | None, stop: int | None, step: int | None = None) -> Any:
    """``x[..., start:stop:step, ...]`` on one axis (plain slicing works on every backend)."""
    index = [slice(None)] * len(x.shape)
    index[axis] = slice(start, stop, step)
    return x[tuple(index)]


def torch_same_padding(kernel: Sequence[int], dilation: Sequence[int]) -> list[tuple[int, int]]:
    """Torch ``padding='same'``: total ``d*(k-1)``, the odd extra element goes on the right."""
    pads = []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        pads.append((total // 2, total - total // 2))
    return pads


def tf_same_padding(size: int, kernel: int, stride: int = 1, dilation: int = 1) -> tuple[int, int]:
    """TF ``padding='SAME'`` as explicit ``(before, after)``; the extra element goes after."""
    total = max((math.ceil(size / stride) - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def pool_output_length(
    size: int, kernel: int, stride: int, padding: int, dilation: int = 1, ceil_mode: bool = False
) -> int:
    """Torch's ``pooling_output_shape``: the last ceil-mode window must start inside input+left pad."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def dilate_kernel(kernel: Any, dilation: Sequence[int]) -> Any:
    """Insert ``d-1`` zeros between kernel taps on each leading spatial axis.

    A dilated convolution equals an undilated one with this kernel; used where a TF kernel does
    not support a dilation (stride>1 with dilation>1, transposed conv) — the extra products are
    exact zeros, so the result is unchanged.
    """
    for axis, d in enumerate(dilation):
        if d == 1:
            continue
        shape = list(kernel.shape)
        k = shape[axis]
        expanded = ops.expand_dims(kernel, axis + 1)
        widths = [(0, 0)] * len(expanded.shape)
        widths[axis + 1] = (0, d - 1)
        expanded = ops.pad(expanded, widths)
        shape[axis] = k * d
        kernel = slice_axis(ops.reshape(expanded, shape), axis, 0, (k - 1) * d + 1)
    return kernel


class SpatialLayer(keras.layers.Layer):
    """Base of the layers on ``N, C, *spatial`` tensors; subclasses implement channels-last only.

    Args:
        n_spatial: number of spatial dims (1, 2 or 3), or ``None`` for "any rank >= 2".
        data_format: ``"channels_last"`` (default) or ``"channels_first"``.
    """

    n_spatial: int | None = None
    #: accepted input ranks (default: ``n_spatial + 2``; ``None`` n_spatial: any rank >= 2)
    ranks: tuple[int, ...] | None = None

    def __init__(self, data_format: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.data_format = normalize_data_format(data_format)

    def _check_rank(self, rank: int) -> None:
        ranks = self.ranks or ((self.n_spatial + 2,) if self.n_spatial is not None else None)
        if (ranks is not None and rank not in ranks) or rank < 2:
            expected = " or ".join(str(r) for r in ranks) if ranks else ">= 2"
            raise InputError(
                f"{type(self).__name__} expects an input of rank {expected} "
                f"(N, C, spatial dims...), got rank {rank}."
            )

    def channels_last_shape(self, shape: Sequence[int | None]) -> tuple[int | None, ...]:
        """The input shape in channels-last order, whatever ``data_format`` is."""
        shape = tuple(shape)
        self._check_rank(len(shape))
        if self.data_format == "channels_first" and len(shape) > 2:
            return (shape[0], *shape[2:], shape[1])
        return shape

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        self._check_rank(len(inputs.shape))
        channels_first = self.data_format == "channels_first" and len(inputs.shape) > 2
        x = to_channels_last(inputs) if channels_first else inputs
        y = self.forward_channels_last(x, training=training)
        return to_channels_first(y) if channels_first else y

    def forward_channels_last(self, x: Any, training: bool | None = None) -> Any:
        """The computation on an ``N, *spatial, C`` tensor."""
        raise NotImplementedError

    def get_config(self) -> dict:
        config = super().get_config()
        config["data_format"] = self.data_format
        return config


def static_spatial(x: Any, layer: str, what: str) -> tuple[int, ...]:
    """The static spatial sizes of a channels-last tensor, or an InputError naming ``what``."""
    sizes = tuple(x.shape[1:-1])
    if any(s is None for s in sizes):
        raise InputError(
            f"{layer}: {what} needs static spatial sizes, got input shape {tuple(x.shape)}."
        )
    return sizes  # type: ignore[return-value]
