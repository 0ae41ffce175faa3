"""Slices, selects and constant-index gathers in forms LiteRT's XNNPACK delegate runs.

XNNPACK takes a ``STRIDED_SLICE`` only with unit strides and no shrink-axis mask, and takes
no ``GATHER`` or ``UNPACK``: each such op splits the graph into one more delegate partition
and runs on TFLite's own kernels (Swin-T had 20 GATHERs from ``torch.roll`` and 48 such
slices: 26 partitions). The same values as unit-stride slices, reshapes and concatenations
stay in one partition, and cost TF the same copies. Every helper works on the Keras axis of
a tensor and falls back to the plain op when sizes it needs are unknown.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from keras import ops

MAX_RUNS = 4  # constant indices in at most this many contiguous runs become slices
XNN_MAX_RANK = 6  # XNNPACK's largest tensor rank


def _index(rank: int, axis: int, item) -> tuple:
    index = [slice(None)] * rank
    index[axis] = item
    return tuple(index)


def select(x: Any, axis: int, index: int) -> Any:
    """``x`` at ``index`` along ``axis`` (dropped): a one-wide slice and a squeeze.

    Example:
        >>> import numpy as np
        >>> np.asarray(select(np.arange(6.0).reshape(2, 3), 1, 2)).tolist()
        [2.0, 5.0]
    """
    size = x.shape[axis]
    if size is None:  # a run-time length: the shrinking slice (Keras cannot squeeze it)
        return x[_index(len(x.shape), axis, index)]
    if index < 0:
        index += size
    return ops.squeeze(x[_index(len(x.shape), axis, slice(index, index + 1))], axis=axis)


def unstack(x: Any, axis: int) -> list:
    """Every entry along a static ``axis``, each dropped: one split and squeezes.

    Example:
        >>> import numpy as np
        >>> [np.asarray(p).tolist() for p in unstack(np.arange(4.0).reshape(2, 2), 0)]
        [[0.0, 1.0], [2.0, 3.0]]
    """
    if x.shape[axis] is None:
        return ops.unstack(x, axis=axis)
    parts = ops.split(x, x.shape[axis], axis=axis)
    return [ops.squeeze(p, axis=axis) for p in parts]


def strided_slice(x: Any, axis: int, start: int, end: int | None, step: int) -> Any:
    """``x[start:end:step]`` along ``axis`` (non-negative static bounds, ``step`` > 1) as
    unit-stride slices: the elements ``start, start+step, ...`` are the first column of the
    range reshaped to ``[count, step]``.

    Example:
        >>> import numpy as np
        >>> np.asarray(strided_slice(np.arange(7.0), 0, 1, None, 3)).tolist()
        [1.0, 4.0]
    """
    shape = list(x.shape)
    size = shape[axis]
    unknown = sum(d is None for d in shape)
    if size is None or unknown > 1 or len(shape) + 1 > XNN_MAX_RANK:
        return x[_index(len(shape), axis, slice(start, end, step))]
    end = size if end is None else min(end, size)
    count = len(range(start, end, step))
    if count == 0:
        return x[_index(len(shape), axis, slice(start, end, step))]
    # rows start at ``base`` <= start (x[1::2] of 56 is column 1 of x[0:56]); pad only when
    # no base keeps the last row inside the tensor (the padding is never selected)
    base = max(min(start, size - count * step), start - step + 1, 0)
    stop = base + count * step
    y = x[_index(len(shape), axis, slice(base, min(stop, size)))]
    if stop > size:
        widths = [(0, 0)] * len(shape)
        widths[axis] = (0, stop - size)
        y = ops.pad(y, widths)
    dims = [-1 if d is None else d for d in shape]
    rows = ops.reshape(y, dims[:axis] + [count, step] + dims[axis + 1:])
    column = start - base
    picked = rows[_index(len(shape) + 1, axis + 1, slice(column, column + 1))]
    return ops.reshape(picked, dims[:axis] + [count] + dims[axis + 1:])


def contiguous_runs(indices: np.ndarray, size: int | None) -> list[tuple[int, int]] | None:
    """``[(start, stop), ...]`` when constant 1-D ``indices`` (into a static ``size``) are at
    most ``MAX_RUNS`` ascending runs of consecutive values (a roll is two), else ``None``.

    Example:
        >>> contiguous_runs(np.array([3, 4, 5, 0, 1, 2]), 6)
        [(3, 6), (0, 3)]
    """
    if size is None or indices.ndim != 1 or indices.size == 0 or indices.dtype.kind not in "iu":
        return None
    flat = np.where(indices < 0, indices + size, indices).astype(np.int64)
    if flat.min() < 0 or flat.max() >= size:
        return None
    breaks = np.flatnonzero(np.diff(flat) != 1) + 1
    if len(breaks) + 1 > MAX_RUNS:
        return None
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [flat.size]])
    return [(int(flat[a]), int(flat[b - 1]) + 1) for a, b in zip(starts, stops)]


def take_runs(x: Any, axis: int, runs: list[tuple[int, int]]) -> Any:
    """The entries of ``runs`` (from :func:`contiguous_runs`) along ``axis``, concatenated.

    Example:
        >>> import numpy as np
        >>> np.asarray(take_runs(np.arange(5.0), 0, [(3, 5), (0, 3)])).tolist()
        [3.0, 4.0, 0.0, 1.0, 2.0]
    """
    parts = [x[_index(len(x.shape), axis, slice(a, b))] for a, b in runs]
    return parts[0] if len(parts) == 1 else ops.concatenate(parts, axis=axis)
