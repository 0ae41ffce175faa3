"""Torch-exact max/average pooling with fixed windows (pitfalls.md item 2); adaptive pools
are in ``adaptive_pooling.py``.

Fixed pools pad explicitly (``-inf`` for max, zeros for average) and run a ``valid`` Keras
pool; what Keras cannot express (torch's ceil-mode window rule, the average divisor at the
borders, dilated max pooling) is computed exactly around it. Plain configurations reduce to a
single ``keras.ops.max_pool`` / ``average_pool``, the same kernel ``MaxPooling2D`` runs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from crossport.errors import InputError
from crossport.layers.base import (
    SpatialLayer,
    ntuple,
    pool_output_length,
    slice_axis,
    static_spatial,
)
from crossport.layers.padding import pad_axes


def _window_max(
    x: Any, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]
) -> Any:
    """Valid max pooling with dilation, as the max of ``prod(kernel)`` strided slices.

    Tap ``j`` of an axis reads ``x[j*d :: s]`` cut to the output length; the stop is written
    relative to the end so it also holds for dynamic sizes.
    """
    result = None
    for taps in itertools.product(*(range(k) for k in kernel)):
        window = x
        for axis, (j, k, s, d) in enumerate(zip(taps, kernel, stride, dilation), start=1):
            stop = j * d - d * (k - 1)
            window = slice_axis(window, axis, j * d, stop if stop else None, s)
        result = window if result is None else ops.maximum(result, window)
    return result


def _ceil_length(size: Any, kernel: int, stride: int, padding: int, dilation: int) -> Any:
    """:func:`pool_output_length` with ``ceil_mode`` for a run-time ``size`` (or an int)."""
    if isinstance(size, int):
        return pool_output_length(size, kernel, stride, padding, dilation, True)
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (span + stride - 1) // stride + 1
    starts_past_input = ops.cast((out - 1) * stride >= size + padding, out.dtype)
    return out - starts_past_input
def _edge_pad(x: Any, pads: Sequence[tuple[int, int]]) -> Any:
    """Pad each spatial axis by repeating its edge element; negative amounts crop.

    For an undilated max pool this equals torch's ``-inf`` padding: a window holding a
    padded element is contiguous and also holds the edge element it repeats (torch keeps
    ``padding <= kernel // 2`` and starts every window inside the input or the left
    padding). Unlike ``-inf`` it keeps the tensor's value range, which full-integer TFLite
    quantization calibrates from (an ``-inf`` pad gave the pool a ~1e36 scale).
    """
    for axis, (before, after) in enumerate(pads, start=1):
        if before < 0 or after < 0:
            start, stop = -before if before < 0 else None, after if after < 0 else None
            x = slice_axis(x, axis, start, stop)
        if before > 0 or after > 0:
            first, last = slice_axis(x, axis, 0, 1), slice_axis(x, axis, -1, None)
            x = ops.concatenate([first] * max(before, 0) + [x] + [last] * max(after, 0), axis)
    return x


class _FixedPool(SpatialLayer):
    """Shared argument handling of MaxPool/AvgPool."""

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        data_format: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(data_format=data_format, **kwargs)
        n = self.n_spatial
        self.kernel_size = ntuple(kernel_size, n, "kernel_size")
        # torch: stride None (or an empty list, in the functional form) means stride = kernel
        self.stride = self.kernel_size if not stride else ntuple(stride, n, "stride")
        self.padding = ntuple(padding, n, "padding")
        self.ceil_mode = bool(ceil_mode)

    def _lengths(self, sizes: Sequence[int], dilation: Sequence[int]) -> list[int]:
        outs = [
            pool_output_length(size, k, s, p, d, self.ceil_mode)
            for size, k, s, p, d in zip(sizes, self.kernel_size, self.stride, self.padding, dilation)
        ]
        if min(outs) < 1:
            raise InputError(
                f"{type(self).__name__}: input spatial size {tuple(sizes)} is too small for "
                f"kernel {self.kernel_size}, stride {self.stride}, padding {self.padding}."
            )
        return outs

    def _explicit_pads(self, x: Any, dilation: Sequence[int]) -> list[tuple[int, int]]:
        """``(before, after)`` per spatial axis so that a valid pool yields torch's length."""
        if all(size is not None for size in x.shape[1:-1]):
            self._lengths(x.shape[1:-1], dilation)  # raises on an empty output, like torch
        if not self.ceil_mode:  # a valid pool floors exactly like torch: symmetric padding
            return [(p, p) for p in self.padding]
        sizes = static_spatial(x, type(self).__name__, "ceil_mode=True")
        outs = self._lengths(sizes, dilation)
        return [
            (p, (o - 1) * s + d * (k - 1) + 1 - size - p)  # may be negative: crop
            for size, o, k, s, p, d in zip(
                sizes, outs, self.kernel_size, self.stride, self.padding, dilation
            )
        ]

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            kernel_size=list(self.kernel_size),
            stride=list(self.stride),
            padding=list(self.padding),
            ceil_mode=self.ceil_mode,
        )
        return config


class _MaxPoolNd(_FixedPool):
    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        ceil_mode: bool = False,
        data_format: str | None = None,
        *,
        return_indices: bool = False,
        **kwargs: Any,
    ):
        super().__init__(kernel_size, stride, padding, ceil_mode, data_format, **kwargs)
        if return_indices:
            raise InputError(f"{type(self).__name__}: return_indices=True is not supported.")
        self.dilation = ntuple(dilation, self.n_spatial, "dilation")
        for k, p, d in zip(self.kernel_size, self.padding, self.dilation):
            if p > (d * (k - 1) + 1) // 2:
                raise InputError(
                    f"{type(self).__name__}: padding {self.padding} must be at most half of the "
                    f"effective kernel size (torch raises too)."
                )

    def forward_channels_last(self, x: Any, training: bool | None = None) -> Any:
        if self.ceil_mode and any(size is None for size in x.shape[1:-1]):
            return self._ceil_at_run_time(x)
        pads = self._explicit_pads(x, self.dilation)
        if all(d == 1 for d in self.dilation):
            x = _edge_pad(x, pads)
            return ops.max_pool(x, self.kernel_size, self.stride, padding="valid")
        if any(b or a for b, a in pads):
            # torch max pooling pads with -inf: padded elements never win
            x = pad_axes(x, [(0, 0), *pads, (0, 0)], value=float("-inf"))
        return _window_max(x, self.kernel_size, self.stride, self.dilation)

    def _ceil_at_run_time(self, x: Any) -> Any:
        """ceil_mode on a dynamic size: pad ``stride - 1`` more ``-inf`` after (enough for
        the last partial window), pool, and keep torch's run-time output length."""
        sizes = [ops.shape(x)[axis] for axis in range(1, self.n_spatial + 1)]
        pads = [(p, p + s - 1) for p, s in zip(self.padding, self.stride)]
        if all(d == 1 for d in self.dilation):  # every kept window holds the edge it repeats
            y = ops.max_pool(_edge_pad(x, pads), self.kernel_size, self.stride, padding="valid")
        else:
            y = pad_axes(x, [(0, 0), *pads, (0, 0)], value=float("-inf"))
            y = _window_max(y, self.kernel_size, self.stride, self.dilation)
        for axis, (size, k, s, p, d) in enumerate(
            zip(sizes, self.kernel_size, self.stride, self.padding, self.dilation), start=1
        ):
            y = slice_axis(y, axis, 0, _ceil_length(size, k, s, p, d))
        return y

    def get_config(self) -> dict:
        config = super().get_config()
        config["dilation"] = list(self.dilation)
        return config

    @classmethod
    def from_torch(cls, module: Any, data_format: str | None = None) -> _MaxPoolNd:
        """The layer computing what ``module`` (an ``nn.MaxPool{n}d``) computes."""
        return cls(
            module.kernel_size,
            module.stride,
            module.padding,
            module.dilation,
            module.ceil_mode,
            data_format=data_format,
            return_indices=module.return_indices,
        )


@keras.saving.register_keras_serializable(package="crossport")
class MaxPool1d(_MaxPoolNd):
    """``torch.nn.MaxPool1d``: ``(kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False)``.

    ``return_indices`` is keyword-only here and must be False.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(2, 9, 3)).astype("float32")  # N, L, C
        >>> MaxPool1d(3, stride=2, padding=1, ceil_mode=True)(x).shape
        TensorShape([2, 5, 3])
    """

    n_spatial = 1


@keras.saving.register_keras_serializable(package="crossport")
class MaxPool2d(_MaxPoolNd):
    """``torch.nn.MaxPool2d``: ``(kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False)``.

    ``return_indices`` is keyword-only here and must be False.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(2, 7, 7, 3)).astype("float32")  # NHWC
        >>> MaxPool2d(3, stride=2, padding=1)(x).shape
        TensorShape([2, 4, 4, 3])
    """

    n_spatial = 2


@keras.saving.register_keras_serializable(package="crossport")
class MaxPool3d(_MaxPoolNd):
    """``torch.nn.MaxPool3d``: ``(kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False)``.

    ``return_indices`` is keyword-only here and must be False.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(1, 4, 5, 6, 2)).astype("float32")
        >>> MaxPool3d(2, ceil_mode=True)(x).shape
        TensorShape([1, 2, 3, 3, 2])
    """

    n_spatial = 3


class _AvgPoolNd(_FixedPool):
    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
        data_format: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(kernel_size, stride, padding, ceil_mode, data_format, **kwargs)
        self.count_include_pad = bool(count_include_pad)
        self.divisor_override = None if divisor_override is None else int(divisor_override)
        if self.divisor_override == 0:
            raise InputError(f"{type(self).__name__}: divisor_override must be non-zero.")
        for k, p in zip(self.kernel_size, self.padding):
            if p > k // 2:
                raise InputError(
                    f"{type(self).__name__}: padding {self.padding} must be at most half of "
                    f"kernel_size {self.kernel_size} (torch raises too)."
                )

    def _divisor(self, sizes: Sequence[int]) -> np.ndarray:
        """Torch's per-window divisor, a product of one vector per axis (shape ``*out, 1``)."""
        vectors = []
        ones = (1,) * self.n_spatial
        for size, out, k, s, p in zip(
            sizes, self._lengths(sizes, ones), self.kernel_size, self.stride, self.padding
        ):
            start = np.arange(out) * s - p
            end = np.minimum(start + k, size + p)  # ceil-mode overhang past the pad not counted
            if self.count_include_pad:
                vectors.append(end - start)
            else:
                vectors.append(np.minimum(end, size) - np.maximum(start, 0))
        divisor = vectors[0].astype(np.float64)
        for v in vectors[1:]:
            divisor = np.multiply.outer(divisor, v)
        return divisor[..., None].astype(np.float32)

    def forward_channels_last(self, x: Any, training: bool | None = None) -> Any:
        uniform = not self.ceil_mode and (self.count_include_pad or not any(self.padding))
        if not uniform and any(size is None for size in x.shape[1:-1]):
            return self._border_at_run_time(x)
        if not uniform and self.divisor_override is None:
            sizes = static_spatial(x, type(self).__name__, "a border-dependent divisor")
        pads = self._explicit_pads(x, (1,) * self.n_spatial)
        if any(b or a for b, a in pads):
            x = pad_axes(x, [(0, 0), *pads, (0, 0)])
        # Keras divides every window sum by prod(kernel); rescale to torch's divisor.
        mean = ops.average_pool(x, self.kernel_size, self.stride, padding="valid")
        window = math.prod(self.kernel_size)
        if self.divisor_override is not None:
            return mean * (window / self.divisor_override)
        if uniform:
            return mean
        return mean * (window / self._divisor(sizes))

    def _border_at_run_time(self, x: Any) -> Any:
        """ceil_mode or a border-dependent divisor on a dynamic size: zero-pad (``stride - 1``
        more after, for ceil_mode's last partial window), sum-pool, keep torch's run-time
        length, and divide by ``_divisor``'s per-axis counts computed in the graph."""
        sizes = [ops.shape(x)[axis] for axis in range(1, self.n_spatial + 1)]
        extra = [s - 1 if self.ceil_mode else 0 for s in self.stride]
        pads = [(p, p + e) for p, e in zip(self.padding, extra)]
        window = math.prod(self.kernel_size)
        y = ops.average_pool(pad_axes(x, [(0, 0), *pads, (0, 0)]), self.kernel_size,
                             self.stride, padding="valid")
        divisor = None
        for axis, (size, k, s, p) in enumerate(
            zip(sizes, self.kernel_size, self.stride, self.padding), start=1
        ):
            out = (_ceil_length(size, k, s, p, 1) if self.ceil_mode
                   else (size + 2 * p - k) // s + 1)
            y = slice_axis(y, axis, 0, out)
            start = ops.arange(0, out, dtype="int32") * s - p
            end = ops.minimum(start + k, size + p)  # ceil-mode overhang past the pad: not counted
            count = end - start if self.count_include_pad else (
                ops.minimum(end, size) - ops.maximum(start, 0))
            shape = [1] * (self.n_spatial + 2)
            shape[axis] = -1
            count = ops.reshape(ops.cast(count, "float32"), shape)
            divisor = count if divisor is None else divisor * count
        if self.divisor_override is not None:
            return y * (window / self.divisor_override)
        return y * ops.cast(window / divisor, y.dtype)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            count_include_pad=self.count_include_pad, divisor_override=self.divisor_override
        )
        return config

    @classmethod
    def from_torch(cls, module: Any, data_format: str | None = None) -> _AvgPoolNd:
        """The layer computing what ``module`` (an ``nn.AvgPool{n}d``) computes."""
        return cls(
            module.kernel_size,
            module.stride,
            module.padding,
            module.ceil_mode,
            module.count_include_pad,
            getattr(module, "divisor_override", None),
            data_format=data_format,
        )


@keras.saving.register_keras_serializable(package="crossport")
class AvgPool1d(_AvgPoolNd):
    """``torch.nn.AvgPool1d`` (same arguments, plus ``divisor_override`` as in 2d/3d).

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(2, 8, 3)).astype("float32")  # N, L, C
        >>> AvgPool1d(3, stride=2, padding=1, count_include_pad=False)(x).shape
        TensorShape([2, 4, 3])
    """

    n_spatial = 1


@keras.saving.register_keras_serializable(package="crossport")
class AvgPool2d(_AvgPoolNd):
    """``torch.nn.AvgPool2d`` (same arguments).

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(2, 7, 7, 3)).astype("float32")  # NHWC
        >>> AvgPool2d(2, ceil_mode=True)(x).shape
        TensorShape([2, 4, 4, 3])
    """

    n_spatial = 2


@keras.saving.register_keras_serializable(package="crossport")
class AvgPool3d(_AvgPoolNd):
    """``torch.nn.AvgPool3d`` (same arguments).

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(1, 4, 5, 6, 2)).astype("float32")
        >>> AvgPool3d(3, stride=2, padding=1)(x).shape
        TensorShape([1, 2, 3, 3, 2])
    """

    n_spatial = 3


def max_pool_with_indices(
    x: Any,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    ceil_mode: bool = False,
) -> tuple[Any, Any]:
    """torch's ``max_pool{n}d(..., return_indices=True)`` on a channels-last ``x`` with
    static spatial sizes: the values and, as int64, each maximum's flat position in its
    input plane (``h * W + w``), as torch's CPU kernel picks it.

    The kernel scans a window's positions inside the input in order and takes one when
    ``value > best`` or it is NaN, starting from ``-inf`` at the first position: the first
    maximum, the last NaN. Here each window tap is a strided slice and that rule is applied
    tap by tap (``prod(kernel)`` selects).

    Example:
        >>> import numpy as np
        >>> x = np.array([[1, 5, 5, 0], [2, 3, 7, 7]], "float32").reshape(1, 2, 4, 1)
        >>> values, indices = max_pool_with_indices(x, (2, 2), (2, 2), (0, 0), (1, 1))
        >>> np.asarray(values).ravel().tolist(), np.asarray(indices).ravel().tolist()
        ([5.0, 7.0], [1, 6])
    """
    sizes = static_spatial(x, "max pooling", "return_indices=True")
    outs = [pool_output_length(size, k, s, p, d, ceil_mode)
            for size, k, s, p, d in zip(sizes, kernel_size, stride, padding, dilation)]
    pads = [(p, max(0, (o - 1) * s + d * (k - 1) + 1 - size - p))
            for size, o, k, s, p, d in zip(sizes, outs, kernel_size, stride, padding, dilation)]
    x = pad_axes(x, [(0, 0), *pads, (0, 0)], value=float("-inf"))
    plane = np.cumprod([1, *sizes[::-1]])[-2::-1]  # elements per step along each axis
    starts = [np.arange(o) * s - p for o, s, p in zip(outs, stride, padding)]
    best = ops.full_like(_tap(x, (0,) * len(outs), outs, stride, dilation), float("-inf"))
    first = _grid(_first_valid(starts, sizes, dilation, kernel_size), plane)
    index = ops.add(ops.zeros_like(best, dtype="int64"), first[None, ..., None])
    for taps in itertools.product(*(range(k) for k in kernel_size)):
        positions = [start + j * d for start, j, d in zip(starts, taps, dilation)]
        inside = _grid([(0 <= p) & (p < size) for p, size in zip(positions, sizes)], None)
        value = _tap(x, taps, outs, stride, dilation)
        take = ops.logical_and(inside[None, ..., None],
                               ops.logical_or(ops.greater(value, best), ops.isnan(value)))
        best = ops.where(take, value, best)
        index = ops.where(take, _grid(positions, plane)[None, ..., None], index)
    return best, index


def _tap(x: Any, taps, outs, stride, dilation) -> Any:
    """Tap ``taps`` of every window: ``x[j*d :: s]`` cut to the output length, per axis."""
    for axis, (j, o, s, d) in enumerate(zip(taps, outs, stride, dilation), start=1):
        x = slice_axis(x, axis, j * d, j * d + (o - 1) * s + 1, s)
    return x


def _first_valid(starts, sizes, dilation, kernel) -> list[np.ndarray]:
    """Per axis, the first tap position of each window inside the input (torch's start)."""
    firsts = []
    for start, size, d, k in zip(starts, sizes, dilation, kernel):
        taps = start[:, None] + d * np.arange(k)[None, :]
        inside = (taps >= 0) & (taps < size)
        firsts.append(taps[np.arange(len(start)), np.argmax(inside, axis=1)])
    return firsts


def _grid(per_axis: list[np.ndarray], plane) -> np.ndarray:
    """Per-axis vectors combined over the output grid: flat positions (``plane`` given) or
    the logical and of per-axis masks."""
    mesh = np.meshgrid(*per_axis, indexing="ij")
    if plane is None:
        return np.logical_and.reduce(mesh)
    return sum(m.astype(np.int64) * int(step) for m, step in zip(mesh, plane))


def adaptive_max_pool_with_indices(x: Any, output_size: Sequence[int]) -> tuple[Any, Any]:
    """torch's ``adaptive_max_pool{n}d(..., return_indices=True)`` on a channels-last ``x``
    with static spatial sizes: window ``i`` of an axis of length ``L`` is
    ``[floor(i * L / O), ceil((i + 1) * L / O))``, scanned with the same rule as
    :func:`max_pool_with_indices` (first maximum, last NaN). Taps past a shorter window's end
    are gathered at its last position and never taken.

    Example:
        >>> import numpy as np
        >>> x = np.array([1, 5, 2, 7, 7], "float32").reshape(1, 5, 1)
        >>> values, indices = adaptive_max_pool_with_indices(x, (2,))
        >>> np.asarray(values).ravel().tolist(), np.asarray(indices).ravel().tolist()
        ([5.0, 7.0], [1, 3])
    """
    sizes = static_spatial(x, "adaptive max pooling", "return_indices=True")
    plane = np.cumprod([1, *sizes[::-1]])[-2::-1]
    starts = [np.arange(o) * size // o for o, size in zip(output_size, sizes)]
    ends = [-(-(np.arange(o) + 1) * size // o) for o, size in zip(output_size, sizes)]
    widths = [int((e - s).max()) for s, e in zip(starts, ends)]
    best = index = None
    for taps in itertools.product(*(range(w) for w in widths)):
        positions = [np.minimum(s + j, e - 1) for s, e, j in zip(starts, ends, taps)]
        inside = _grid([s + j < e for s, e, j in zip(starts, ends, taps)], None)
        value = x
        for axis, where in enumerate(positions, start=1):
            value = ops.take(value, where, axis=axis)
        flat = _grid(positions, plane)[None, ..., None]
        if best is None:  # the first tap is inside every window: torch's starting point
            best = ops.full_like(value, float("-inf"))
            index = ops.add(ops.zeros_like(value, dtype="int64"), flat)
        take = ops.logical_and(inside[None, ..., None],
                               ops.logical_or(ops.greater(value, best), ops.isnan(value)))
        best = ops.where(take, value, best)
        index = ops.where(take, flat, index)
    return best, index
