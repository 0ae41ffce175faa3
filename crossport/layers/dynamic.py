"""Layers for sizes known only at run time (dynamic batch, sequence length, image size).

A converted model with ``None`` dims computes every size that depends on them from the
inputs' shapes: :class:`SizeOf` reads one dim as a scalar tensor, arithmetic on it is plain
``keras.ops``, and the layers below take such scalars as extra inputs. Each keeps the
static sizes it knows (``None`` elsewhere), so the layers after it still see static
feature dims.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from crossport.layers.ordering import top_k_torch_order
from crossport.layers.padding import fill_value


def _fill(target, scalars) -> list:
    """``target`` with its ``None`` entries replaced by ``scalars`` in order."""
    it = iter(scalars)
    return [ops.cast(next(it), "int32") if s is None else s for s in target]


@keras.saving.register_keras_serializable(package="crossport")
class SizeOf(keras.layers.Layer):
    """The size of ``axis`` of the input, as an int32 scalar tensor.

    Example:
        >>> import keras
        >>> int(SizeOf(1)(keras.ops.zeros((2, 5))))
        5
    """

    def __init__(self, axis: int, **kwargs: Any):
        kwargs.setdefault("autocast", False)  # only the shape is read: no cast
        super().__init__(**kwargs)
        self.axis = axis

    def call(self, x):
        return ops.cast(ops.shape(x)[self.axis], "int32")

    def compute_output_spec(self, x):
        return keras.KerasTensor((), dtype="int32")

    def get_config(self) -> dict:
        return {**super().get_config(), "axis": self.axis}


class _Shaped(keras.layers.Layer):
    """Base: ``target`` sizes with ``None`` for the run-time ones (given as scalar inputs)."""

    def __init__(self, target, dtype_name: str | None = None, **kwargs: Any):
        kwargs.setdefault("autocast", False)  # a float64 tensor stays float64 (as in torch)
        super().__init__(**kwargs)
        self.target = [None if s is None else int(s) for s in target]
        self.dtype_name = dtype_name

    def get_config(self) -> dict:
        return {**super().get_config(), "target": self.target, "dtype_name": self.dtype_name}


@keras.saving.register_keras_serializable(package="crossport")
class DynamicReshape(_Shaped):
    """``reshape(x, target)`` where ``None`` sizes come from scalar inputs: ``(x, *sizes)``."""

    def call(self, x, *sizes):
        return ops.reshape(x, _fill(self.target, sizes))

    def compute_output_spec(self, x, *sizes):
        return keras.KerasTensor(tuple(self.target), dtype=x.dtype)


@keras.saving.register_keras_serializable(package="crossport")
class DynamicBroadcast(_Shaped):
    """``broadcast_to(x, target)`` where ``None`` sizes come from scalar inputs."""

    def call(self, x, *sizes):
        return ops.broadcast_to(x, _fill(self.target, sizes))

    def compute_output_spec(self, x, *sizes):
        return keras.KerasTensor(tuple(self.target), dtype=x.dtype)


@keras.saving.register_keras_serializable(package="crossport")
class DynamicTile(_Shaped):
    """``tile(x, target)`` where ``None`` counts come from scalar inputs (``x.repeat(n, 1)``
    with ``n`` a dynamic batch)."""

    def call(self, x, *counts):
        return ops.tile(x, _fill(self.target, counts))

    def compute_output_spec(self, x, *counts):
        shape = tuple(None if s is None or r is None else s * r
                      for s, r in zip(x.shape, self.target))
        return keras.KerasTensor(shape, dtype=x.dtype)


@keras.saving.register_keras_serializable(package="crossport")
class DynamicPad(keras.layers.Layer):
    """``F.pad`` with run-time amounts (a sequence or an image padded to a multiple of a
    window), in any of torch's modes; a negative amount crops, as in torch.

    ``pads`` holds one ``(before, after)`` pair per Keras axis, ``None`` for an amount given
    as a scalar input (in order). ``constant``: each padded axis is cropped by the negative
    parts, then gets filler blocks for the positive parts concatenated on (``ops.pad``
    cannot take run-time widths inside a graph). ``reflect``, ``replicate`` and
    ``circular``: each padded axis is gathered (``ops.take``) at an index vector built at
    run time from ``arange(size + before + after) - before`` with the mode's rule, exactly
    torch's for every amount torch accepts (reflect: ``before``, ``after`` < size;
    circular: each <= the size left after cropping). Where torch raises instead, the
    reflection or the wrap simply continues periodically (numpy's ``reflect`` / ``wrap``);
    a graph cannot raise.

    Example:
        >>> import numpy as np
        >>> x = np.arange(5, dtype="float32")[None]
        >>> np.asarray(DynamicPad([[0, 0], [None, 2]], mode="reflect")(x, np.int32(3)))[0]
        array([3., 2., 1., 0., 1., 2., 3., 4., 3., 2.], dtype=float32)
    """

    MODES = ("constant", "reflect", "replicate", "circular")

    def __init__(self, pads, value: float = 0.0, mode: str = "constant", **kwargs: Any):
        kwargs.setdefault("autocast", False)  # a float64 tensor stays float64 (as in torch)
        super().__init__(**kwargs)
        if mode not in self.MODES:
            raise ValueError(f"DynamicPad mode {mode!r}: expected one of {self.MODES}")
        self.pads = [[None if a is None else int(a) for a in pair] for pair in pads]
        self.value = value
        self.mode = mode

    def call(self, x, *scalars):
        it = iter(scalars)
        for axis, pair in enumerate(self.pads):
            before, after = (next(it) if a is None else a for a in pair)
            if isinstance(before, int) and isinstance(after, int) and before == after == 0:
                continue
            if self.mode != "constant":
                x = ops.take(x, self._source_index(x, axis, before, after), axis=axis)
                continue
            x = self._crop(x, axis, before, after)
            blocks = [self._filler(x, axis, before), x, self._filler(x, axis, after)]
            x = ops.concatenate([b for b in blocks if b is not None], axis=axis)
        return x

    def _source_index(self, x, axis: int, before, after):
        """For each output position along ``axis``, the input position it copies."""
        size = ops.cast(ops.shape(x)[axis], "int32")
        before, after = ops.cast(before, "int32"), ops.cast(after, "int32")
        position = ops.arange(0, size + before + after, dtype="int32")
        last = size - 1
        if self.mode == "replicate":
            return ops.minimum(ops.maximum(position - before, 0), last)
        if self.mode == "reflect":  # mirror at 0 and size - 1, the edges not repeated
            period = ops.maximum(2 * last, 1)
            index = ops.mod(position - before, period)
            return last - ops.abs(last - index)
        # circular: torch crops by the negative amounts first, then wraps what is left
        start = ops.maximum(-before, 0)
        kept = size - start - ops.maximum(-after, 0)
        index = start + ops.mod(position - ops.maximum(before, 0), ops.maximum(kept, 1))
        return ops.minimum(index, last)  # in range even where torch crops everything away

    @staticmethod
    def _crop(x, axis: int, before, after):
        if all(isinstance(a, int) and a >= 0 for a in (before, after)):
            return x
        start = ops.maximum(-ops.cast(before, "int32"), 0)
        stop = ops.shape(x)[axis] - ops.maximum(-ops.cast(after, "int32"), 0)
        index = [slice(None)] * len(x.shape)
        index[axis] = slice(start, stop)
        return x[tuple(index)]

    def _filler(self, x, axis: int, amount):
        if isinstance(amount, int) and amount <= 0:
            return None
        shape = list(ops.shape(x))
        shape[axis] = amount if isinstance(amount, int) else ops.maximum(
            ops.cast(amount, "int32"), 0)
        # the fill in x's dtype as torch casts it (ops.cast of a Python float rounded it
        # to float32 first: a float64 fill of 0.1 became 0.10000000149)
        return ops.broadcast_to(fill_value(self.value, x.dtype), shape)

    def compute_output_spec(self, x, *scalars):
        shape = [None if s is None or None in pair else s + sum(pair)
                 for s, pair in zip(x.shape, self.pads)]
        return keras.KerasTensor(tuple(shape), dtype=x.dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "pads": self.pads, "value": self.value,
                "mode": self.mode}


@keras.saving.register_keras_serializable(package="crossport")
class DynamicFull(_Shaped):
    """A tensor of ``target`` shape filled with ``fill_value``; ``call(*sizes)``."""

    def __init__(self, target, fill_value=0, dtype_name: str | None = "float32", **kwargs):
        super().__init__(target, dtype_name, **kwargs)
        self.fill_value = fill_value

    def call(self, *sizes):
        return ops.full(_fill(self.target, sizes), self.fill_value, dtype=self.dtype_name)

    def compute_output_spec(self, *sizes):
        return keras.KerasTensor(tuple(self.target), dtype=self.dtype_name)

    def get_config(self) -> dict:
        return {**super().get_config(), "fill_value": self.fill_value}


@keras.saving.register_keras_serializable(package="crossport")
class DynamicRange(keras.layers.Layer):
    """``arange(start, end, step)`` with any of the three a scalar input (``None`` here)."""

    def __init__(self, start=0, end=None, step=1, dtype_name: str = "int64", **kwargs: Any):
        super().__init__(**kwargs)
        self.start, self.end, self.step, self.dtype_name = start, end, step, dtype_name

    def call(self, *scalars):
        values = _fill([self.start, self.end, self.step], scalars)
        return ops.cast(ops.arange(*values), self.dtype_name)

    def compute_output_spec(self, *scalars):
        return keras.KerasTensor((None,), dtype=self.dtype_name)

    def get_config(self) -> dict:
        return {**super().get_config(), "start": self.start, "end": self.end,
                "step": self.step, "dtype_name": self.dtype_name}


@keras.saving.register_keras_serializable(package="crossport")
class SequenceMask(keras.layers.Layer):
    """``arange(T) < lengths[:, None]``: which steps of a batch-major ``[N, T, ...]`` input
    are inside each sequence's length (a packed sequence's real steps).

    Example:
        >>> import keras
        >>> SequenceMask()(keras.ops.zeros((2, 3, 1)), keras.ops.array([3, 1])).numpy().tolist()
        [[True, True, True], [True, False, False]]
    """

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("autocast", False)  # only the shape of x is read
        super().__init__(**kwargs)

    def call(self, x, lengths):
        steps = ops.arange(ops.shape(x)[1], dtype=lengths.dtype)
        return ops.less(steps[None, :], ops.expand_dims(lengths, 1))

    def compute_output_spec(self, x, lengths):
        return keras.KerasTensor(tuple(x.shape[:2]), dtype="bool")


@keras.saving.register_keras_serializable(package="crossport")
class DynamicSlice(keras.layers.Layer):
    """``x[start:end:step]`` along ``axis`` with run-time ``start``/``end`` (``None`` here).

    ``call(x, *scalars)`` takes the scalars for the bounds given as ``None``; the end is
    clamped to the size like torch's slice.
    """

    def __init__(self, axis: int, start=0, end=None, step: int = 1, out_size=None, **kwargs):
        kwargs.setdefault("autocast", False)  # a float64 tensor stays float64 (as in torch)
        super().__init__(**kwargs)
        self.axis, self.start, self.end, self.step = axis, start, end, step
        self.out_size = out_size

    def call(self, x, *scalars):
        it = iter(scalars)
        start = next(it) if self.start is None else self.start
        end = next(it) if self.end is None else self.end
        end = ops.minimum(ops.cast(end, "int32"), ops.shape(x)[self.axis])
        index = [slice(None)] * len(x.shape)
        index[self.axis] = slice(start, end, self.step)
        return x[tuple(index)]

    def compute_output_spec(self, x, *scalars):
        shape = list(x.shape)
        shape[self.axis] = self.out_size
        return keras.KerasTensor(tuple(shape), dtype=x.dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "axis": self.axis, "start": self.start, "end": self.end,
                "step": self.step, "out_size": self.out_size}


@keras.saving.register_keras_serializable(package="crossport")
class DynamicTopK(keras.layers.Layer):
    """``top_k`` along the last axis with a run-time ``k``: ``call(x, k) -> (values, indices)``.

    ``largest=False`` takes the smallest. torch's order: NaN above +inf, ties in index order.
    """

    def __init__(self, largest: bool = True, **kwargs: Any):
        kwargs.setdefault("autocast", False)  # a float64 tensor stays float64 (as in torch)
        super().__init__(**kwargs)
        self.largest = largest

    def call(self, x, k):
        return top_k_torch_order(x, ops.cast(k, "int32"), self.largest)

    def compute_output_spec(self, x, k):
        shape = (*x.shape[:-1], None)
        return (keras.KerasTensor(shape, dtype=x.dtype), keras.KerasTensor(shape, dtype="int32"))

    def get_config(self) -> dict:
        return {**super().get_config(), "largest": self.largest}


def _is_bool(x) -> bool:
    return keras.backend.standardize_dtype(x.dtype) == "bool"


def segment_sum(data, segment_ids, num_segments: int):
    """``keras.ops.segment_sum``; of bools, whether any is True (torch adds bools as or; TF
    has no bool segment sum)."""
    if _is_bool(data):
        counts = ops.segment_sum(ops.cast(data, "int32"), segment_ids, num_segments=num_segments)
        return ops.greater(counts, 0)
    return ops.segment_sum(data, segment_ids, num_segments=num_segments)


def accumulate(x, sums):
    """``x + sums`` as torch adds: ``or`` for bools (TF has no bool Add)."""
    return ops.logical_or(x, sums) if _is_bool(x) else ops.add(x, sums)


def add_scattered(x, coords, updates):
    """``x`` plus ``updates`` scattered to ``coords`` (duplicates add up), bools as ``or``."""
    if _is_bool(x):
        counts = ops.scatter(coords, ops.cast(updates, "int32"), ops.shape(x))
        return ops.logical_or(x, ops.greater(counts, 0))
    return x + ops.scatter(coords, updates, ops.shape(x))


@keras.saving.register_keras_serializable(package="crossport")
class DynamicScatter(keras.layers.Layer):
    """torch's ``scatter`` / ``scatter_add`` along ``dim`` with run-time sizes.

    ``call(x, index, src)`` (``src`` omitted with ``value`` set): every element of ``index``
    writes ``src`` at the same position (or ``value``) into ``x`` at ``index`` along ``dim``;
    ``add=True`` sums, duplicates included. The coordinates are built from the run-time
    shape of ``index``.

    Example:
        >>> import numpy as np
        >>> x, index = np.zeros((2, 3), "float32"), np.array([[2, 0, 1]])
        >>> np.asarray(DynamicScatter(1, add=True)(x, index, np.ones((2, 3), "float32")))[0]
        array([1., 1., 1.], dtype=float32)
    """

    def __init__(self, dim: int, add: bool = False, value: float | None = None, **kwargs: Any):
        kwargs.setdefault("autocast", False)  # a float64 tensor stays float64 (as in torch)
        super().__init__(**kwargs)
        self.dim, self.add, self.value = dim, add, value

    def call(self, x, index, src=None):
        rank = len(x.shape)
        dim = self.dim % rank
        index = ops.cast(index, "int64")
        sizes = ops.shape(index)
        columns = []
        for d in range(rank):
            if d == dim:
                columns.append(index)
                continue
            along = [1] * rank
            along[d] = -1
            columns.append(ops.reshape(ops.arange(0, sizes[d], dtype="int64"), along)
                           + ops.zeros_like(index))
        coords = ops.reshape(ops.stack(columns, axis=-1), (-1, rank))
        if src is None:
            updates = ops.full_like(index, self.value, dtype=x.dtype)
        else:
            updates = src[tuple(slice(0, sizes[d]) for d in range(rank))]
        updates = ops.reshape(ops.cast(updates, x.dtype), (-1,))
        if self.add:
            return add_scattered(x, coords, updates)
        return ops.scatter_update(x, coords, updates)

    def compute_output_spec(self, x, index, src=None):
        return keras.KerasTensor(x.shape, dtype=x.dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "dim": self.dim, "add": self.add, "value": self.value}


@keras.saving.register_keras_serializable(package="crossport")
class DynamicIndexPut(keras.layers.Layer):
    """torch's ``index_put``: ``x[(:,) * first + indices] = values`` with run-time sizes.

    ``call(x, values, *indices)``: integer index tensors on the adjacent dims from ``first``
    (broadcast together, negative ones wrap), ``values`` broadcast to the selection. A
    position written twice keeps the last update (torch on CPU); ``accumulate=True`` adds
    every update, duplicates included. ``index_dtype="int32"`` computes the cell and update
    numbers in int32 (TFLite's segment ops have no int64 kernels): only for sizes known to
    stay below 2**31.

    Example:
        >>> import numpy as np
        >>> x, index = np.zeros((2, 4), "float32"), np.array([3, -1, 0])
        >>> np.asarray(DynamicIndexPut(1)(x, np.array([1.0, 2.0, 3.0], "float32"), index))[0]
        array([3., 0., 0., 2.], dtype=float32)
    """

    def __init__(self, first: int, accumulate: bool = False, index_dtype: str = "int64",
                 **kwargs: Any):
        kwargs.setdefault("autocast", False)  # a float64 tensor stays float64 (as in torch)
        super().__init__(**kwargs)
        self.first, self.accumulate, self.index_dtype = first, accumulate, index_dtype

    def call(self, x, values, *indices):
        first, k, rank = self.first, len(indices), len(x.shape)
        shape = ops.shape(x)
        sizes = [ops.cast(shape[first + i], self.index_dtype) for i in range(k)]
        indices = [ops.cast(t, self.index_dtype) for t in indices]
        zero = sum(ops.zeros_like(t) for t in indices)  # the indices' broadcast shape
        flat = None
        for index, size in zip(indices, sizes):
            index = index + zero
            index = ops.where(index < 0, index + size, index)
            flat = index if flat is None else flat * size + index
        slot = (*shape[:first], *ops.shape(flat), *shape[first + k:])
        rows = ops.reshape(ops.broadcast_to(ops.cast(values, x.dtype), slot),
                           (*shape[:first], -1, *shape[first + k:]))  # [pre, updates, post]
        flat = ops.reshape(flat, (-1,))
        cells = math.prod(sizes)
        if self.accumulate:
            sums = segment_sum(ops.moveaxis(rows, first, 0), flat, cells)
            return accumulate(x, ops.reshape(ops.moveaxis(sums, 0, first), shape))
        numbers = ops.arange(0, ops.shape(flat)[0], dtype=self.index_dtype)
        last = ops.segment_max(numbers, flat, num_segments=cells)
        written = ops.segment_sum(ops.ones_like(numbers), flat, num_segments=cells) > 0
        update = ops.reshape(ops.take(rows, ops.where(written, last, 0), axis=first), shape)
        hit = ops.reshape(written, (*[1] * first, *shape[first:first + k], *[1] * (rank - first - k)))
        return ops.where(hit, update, x)

    def compute_output_spec(self, x, values, *indices):
        return keras.KerasTensor(x.shape, dtype=x.dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "first": self.first, "accumulate": self.accumulate,
                "index_dtype": self.index_dtype}


@keras.saving.register_keras_serializable(package="crossport")
class CausalBias(keras.layers.Layer):
    """``is_causal`` attention's additive mask for the run-time ``[L, S]`` of ``scores``' last
    two axes: 0 where key ``j <= i``, -inf elsewhere (torch's top-left ``tril``)."""

    def call(self, scores):
        shape = ops.shape(scores)
        rows = ops.expand_dims(ops.arange(shape[-2]), 1)
        cols = ops.expand_dims(ops.arange(shape[-1]), 0)
        return ops.cast(ops.where(cols <= rows, 0.0, float("-inf")), scores.dtype)

    def compute_output_spec(self, scores):
        return keras.KerasTensor(tuple(scores.shape[-2:]), dtype=scores.dtype)
