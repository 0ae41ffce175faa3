"""torch's ``scatter_reduce``, ``index_reduce`` and ``embedding_bag`` reductions as Keras layers
of segment reductions (TFLite builtins ``UNSORTED_SEGMENT_SUM/PROD/MAX/MIN``)."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

ops = keras.ops

REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


@keras.saving.register_keras_serializable(package="crossport")
class ScatterReduce(keras.layers.Layer):
    """``x.scatter_reduce(dim, index, src, reduce, include_self=...)`` with run-time sizes.

    Every element of ``index`` sends the element of ``src`` at the same position to ``x`` at
    that position with ``dim`` replaced by the index; each target reduces what it receives
    (``sum``, ``prod``, ``mean``, ``amax``, ``amin``), together with its own value when
    ``include_self``, and a target that receives nothing keeps its value. As torch: ``mean``
    of integers divides rounding down, ``amax``/``amin`` propagate NaN, bools reduce as
    ``or`` (sum, amax) and ``and`` (prod, amin). ``index_along_dim=True`` is
    ``index_reduce``: ``index`` is 1-D and names the target of each slice of ``src`` along
    ``dim``.

    The targets are flat positions of ``x``; each reduction is one unsorted segment op over
    them (TFLite builtins ``UNSORTED_SEGMENT_SUM/PROD/MAX/MIN``).

    Example:
        >>> import numpy as np
        >>> x = np.array([10, 20, 30, 40], "int32")
        >>> index, src = np.array([0, 0, 1, 3, 3, 3]), np.array([1, 2, 7, -3, -4, 5], "int32")
        >>> np.asarray(ScatterReduce(0, "mean")(x, index, src)).tolist()
        [4, 13, 30, 9]
    """

    def __init__(self, dim: int, reduce: str, include_self: bool = True,
                 index_along_dim: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        if reduce not in REDUCTIONS:
            raise ValueError(f"reduce must be one of {REDUCTIONS}, got {reduce!r}")
        self.dim, self.reduce, self.include_self = dim, reduce, include_self
        self.index_along_dim = index_along_dim

    def call(self, x, index, src):
        dtype = keras.backend.standardize_dtype(x.dtype)
        index = ops.cast(index, "int32")
        if dtype == "bool":  # or / and as integer sums, products, max and min
            out = self._reduce(ops.cast(x, "int32"), index, ops.cast(src, "int32"))
            return ops.not_equal(out, 0)
        return self._reduce(x, index, ops.cast(src, dtype))

    def _reduce(self, x, index, src):
        if len(x.shape) == 0:  # torch reads a 0-dim tensor as one element along dim 0
            one = [ops.reshape(t, (-1,)) for t in (x, index, src)]
            return ops.reshape(self._reduce(*one), ())
        rank = len(x.shape)
        dim = self.dim % rank
        if self.index_along_dim:
            along = [1] * rank
            along[dim] = -1
            index = ops.broadcast_to(ops.reshape(index, along), ops.shape(src))
        sizes = ops.shape(index)
        src = src[tuple(slice(0, sizes[d]) for d in range(rank))]
        targets = ops.reshape(_flat_targets(index, dim, ops.shape(x)), (-1,))
        flat = ops.reshape(x, (-1,))
        count = _size(ops.shape(x))
        values = ops.reshape(src, (-1,))
        received = ops.segment_sum(ops.ones_like(targets), targets, num_segments=count)
        out = self._combine(flat, values, targets, count, ops.greater(received, 0), received)
        return ops.reshape(out, ops.shape(x))

    def _combine(self, own, values, targets, count, hit, received):
        def segment(fn, data):
            return fn(data, targets, num_segments=count)

        if self.reduce in ("sum", "mean"):
            total = segment(ops.segment_sum, values)
            if self.include_self:
                total = own + total
            if self.reduce == "sum":
                return ops.where(hit, total, own)
            n = ops.cast(received + (1 if self.include_self else 0), own.dtype)
            n = ops.where(ops.equal(n, 0), ops.ones_like(n), n)
            if keras.backend.is_float_dtype(own.dtype):
                return ops.where(hit, total / n, own)
            return ops.where(hit, ops.floor_divide(total, n), own)
        if self.reduce == "prod":
            product = segment(ops.segment_prod, values)
            return ops.where(hit, own * product if self.include_self else product, own)
        return self._extreme(own, values, segment, hit)

    def _extreme(self, own, values, segment, hit):
        """amax/amin, NaN propagating from the data and from ``self``."""
        largest = self.reduce == "amax"
        value = segment_extreme(values, segment, largest)
        if self.include_self:
            value = ops.maximum(own, value) if largest else ops.minimum(own, value)
        if keras.backend.is_float_dtype(own.dtype):
            nan = ops.greater(segment(ops.segment_sum, ops.cast(ops.not_equal(values, values),
                                                                "int32")), 0)
            if self.include_self:
                nan = ops.logical_or(nan, ops.not_equal(own, own))
            # a NaN from the data (a NaN constant would be a TFLite converter's guess)
            value = ops.where(nan, segment(ops.segment_sum, values) + own * 0.0, value)
        return ops.where(hit, value, own)

    def compute_output_spec(self, x, index, src):
        return keras.KerasTensor(x.shape, dtype=x.dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "dim": self.dim, "reduce": self.reduce,
                "include_self": self.include_self, "index_along_dim": self.index_along_dim}


@keras.saving.register_keras_serializable(package="crossport")
class BagReduce(keras.layers.Layer):
    """The bag reduction of ``F.embedding_bag`` over looked-up rows, sizes read at run time.

    ``call(rows, indices, offsets, per_sample_weights=None)``: ``rows[i]`` is the embedding
    of ``indices[i]``; bag ``b`` holds the entries from ``offsets[b]`` to the next offset
    (the last bag to the end; ``include_last_offset``: ``offsets`` has one more element,
    the end), without entries equal to ``padding_idx`` (``-1``: none). ``mode``: ``sum``
    (rows times ``per_sample_weights`` if given), ``mean`` (over the bag's entries) or
    ``max``. An empty bag is 0. As torch's CPU kernel, ``max`` starts from the bag's first
    entry and takes a later one only where it is greater: NaN where the first entry is NaN,
    later NaN entries are ignored.

    An extra last offset short of the end is honoured by torch's float32 sum/mean kernel
    without padding only (and the mean still divides by the count to the end); its other
    kernels read to the end. ``stop_at_last_offset`` says which torch ran (measured).

    Example:
        >>> import numpy as np
        >>> rows = np.array([[1.0], [2.0], [5.0]], "float32")
        >>> BagReduce("mean")(rows, np.array([0, 1, 2]), np.array([0, 2])).numpy().tolist()
        [[1.5], [5.0]]
    """

    def __init__(self, mode: str, include_last_offset: bool = False, padding_idx: int = -1,
                 stop_at_last_offset: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"mode must be sum, mean or max, got {mode!r}")
        self.mode, self.include_last_offset = mode, include_last_offset
        self.padding_idx, self.stop_at_last_offset = padding_idx, stop_at_last_offset

    def call(self, rows, indices, offsets, per_sample_weights=None):
        entries = ops.shape(indices)[0]
        offsets = ops.cast(offsets, "int32")
        bags = ops.shape(offsets)[0] - (1 if self.include_last_offset else 0)
        starts = offsets[:bags] if self.include_last_offset else offsets
        # bag of entry i: how many bags start at or before i, less one (empty bags too)
        marks = ops.segment_sum(ops.ones_like(starts), ops.minimum(starts, entries),
                                num_segments=entries + 1)[:entries]
        bag = ops.cumsum(marks) - 1
        keep = ops.greater_equal(bag, 0)
        if self.padding_idx >= 0:
            keep = ops.logical_and(keep, ops.not_equal(indices, self.padding_idx))
        counted = ops.where(keep, bag, bags)  # the rest go to one more bag, dropped below
        if self.include_last_offset and self.stop_at_last_offset:
            inside = ops.less(ops.arange(0, entries, dtype="int32"), offsets[bags])
            keep = ops.logical_and(keep, inside)
        bag = ops.where(keep, bag, bags)

        def segment(fn, data, ids=bag):
            return fn(data, ids, num_segments=bags + 1)[:bags]

        count = segment(ops.segment_sum, ops.ones_like(counted), counted)
        empty = ops.expand_dims(ops.equal(count, 0), -1)
        if per_sample_weights is not None:
            rows = rows * ops.expand_dims(ops.cast(per_sample_weights, rows.dtype), -1)
        if self.mode == "max":
            out = self._max(rows, bag, bags, segment)
        else:
            out = segment(ops.segment_sum, rows)
            if self.mode == "mean":
                out = out / ops.expand_dims(ops.cast(ops.maximum(count, 1), rows.dtype), -1)
        return ops.where(empty, ops.zeros_like(out), out)

    def _max(self, rows, bag, bags, segment):
        """The first entry, then every greater one: NaN only from the first entry."""
        entries = ops.shape(rows)[0]
        first = segment(ops.segment_min, ops.arange(0, entries, dtype="int32"))
        first = ops.minimum(first, entries - 1)  # empty bags: any row, zeroed later
        first_rows = ops.take(rows, first, axis=0)
        if not keras.backend.is_float_dtype(rows.dtype):
            return segment_extreme(rows, segment, largest=True)
        lead = ops.take(first_rows, ops.minimum(bag, bags - 1), axis=0)
        clean = ops.where(ops.not_equal(rows, rows), lead, rows)  # a later NaN: no change
        value = segment_extreme(clean, segment, largest=True)
        return ops.where(ops.not_equal(first_rows, first_rows), first_rows, value)

    def compute_output_spec(self, rows, indices, offsets, per_sample_weights=None):
        bags = offsets.shape[0]
        if bags is not None and self.include_last_offset:
            bags -= 1
        return keras.KerasTensor((bags, rows.shape[-1]), dtype=rows.dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "mode": self.mode,
                "include_last_offset": self.include_last_offset,
                "padding_idx": self.padding_idx,
                "stop_at_last_offset": self.stop_at_last_offset}


def segment_extreme(values, segment, largest: bool):
    """Each segment's max (``largest``) or min of ``values`` (NaN in them is not handled).

    TF's segment max/min start at the type's lowest/highest finite value, so a segment
    holding only -inf came out -3.4e38 (measured): there the segment's infinity is taken
    from the opposite reduction. An empty segment gives that finite bound.
    """
    best, worst = ((ops.segment_max, ops.segment_min) if largest
                   else (ops.segment_min, ops.segment_max))
    value = segment(best, values)
    if not keras.backend.is_float_dtype(values.dtype):
        return value
    finite = np.finfo(keras.backend.standardize_dtype(values.dtype)).max
    beyond = ops.less(values, -finite) if largest else ops.greater(values, finite)
    only_infinite = ops.equal(segment(ops.segment_sum, ops.cast(beyond, "int32")),
                              segment(ops.segment_sum, ops.ones_like(beyond, "int32")))
    return ops.where(only_infinite, segment(worst, values), value)  # that infinity


def _size(shape):
    """The element count of ``shape`` (an int when every size is static)."""
    count = 1
    for s in shape:
        count = count * s
    return count


def _flat_targets(index, dim: int, shape):
    """The flat (row-major) position in ``x`` of shape ``shape`` each element of ``index``
    writes to: its own coordinates with ``dim`` replaced by the index."""
    rank = len(shape)
    sizes = ops.shape(index)
    flat = None
    stride = 1
    for d in reversed(range(rank)):
        if d == dim:
            coordinate = index
        else:
            along = [1] * rank
            along[d] = -1
            coordinate = ops.reshape(ops.arange(0, sizes[d], dtype="int32"), along)
        term = coordinate * ops.cast(stride, "int32") if not isinstance(stride, int) \
            else coordinate * stride
        flat = term if flat is None else flat + term
        stride = stride * shape[d]
    return flat + ops.zeros_like(index)  # broadcast to index's shape
