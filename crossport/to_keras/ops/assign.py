"""In-place assignment after functionalisation: ``copy``, ``slice_scatter``, ``index_put``,
``diagonal_scatter``, ``masked_scatter``.

``z[:, :, 0] = z[:, :, 0] / w`` (SAM's prompt encoder), ``x[..., :2] = 0`` and
``x[idx] = v`` reach the graph as pure ops that return the updated tensor. Each becomes a
``where`` that picks the written positions from the gathered values and the others from the
original, so sizes may be run-time ones (an ``arange`` of the dynamic size).
"""

from __future__ import annotations

import math

import keras
import numpy as np
import torch

from crossport.layers.dynamic import accumulate as accumulate_into
from crossport.layers.dynamic import segment_sum
from crossport.layout import after_reduce, canonical, normalize_dims, physical_axis
from crossport.to_keras.dynamic_dims import static_dims
from crossport.to_keras.int_bounds import fits_int32, largest_count
from crossport.to_keras.ops.index import _index_supports, _wrap_negative, indexed_dims_first
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.values import TensorValue, concrete, keras_dtype

aten = torch.ops.aten
ops = keras.ops


@register(aten.copy.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_copy_default(ctx, self, src, non_blocking=False):
    """copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor

    The functional form of ``self.copy_(src)``: ``src`` cast to ``self``'s dtype and
    broadcast to its shape.
    """
    src = ops.cast(src, keras_dtype(ctx.out_dtype))
    if ctx.arg_shape(0) == ctx.arg_shape(1):
        return src
    return ops.where(ops.ones_like(self, dtype="bool"), src, self)  # broadcasts, any size


def _plain_value(ctx, value) -> TensorValue:
    return ctx.plain(as_value(ctx, value))


def _positions(ctx, size):
    """``arange(size)`` as int64: numpy for a static size, a run-time range otherwise."""
    if not ctx.is_dynamic(size):
        return np.arange(int(size), dtype=np.int64)
    from crossport.layers.dynamic import DynamicRange

    return DynamicRange(0, None, 1, dtype_name="int64", name=ctx.name("positions"))(
        ctx.size(size))


def _bound(ctx, bound, default, size):
    """A slice bound as torch clamps it: negative counts from the end, then into [0, size]."""
    if bound is None:
        return default
    if not ctx.is_dynamic(bound) and not ctx.is_dynamic(size):
        b = int(bound) + (int(size) if int(bound) < 0 else 0)
        return min(max(b, 0), int(size))
    b = ops.cast(ctx.size(bound), "int64")
    n = ops.cast(ctx.size(size), "int64")
    if not ctx.is_dynamic(bound) and int(bound) >= 0:
        return ops.minimum(b, n)
    b = ops.where(ops.less(b, 0), ops.add(b, n), b)
    return _clip(b, n)


@register(aten.slice_scatter.default, policy=Policy.CUSTOM, keeps_layout=True, dynamic=True)
def aten_slice_scatter_default(ctx, self, src, dim=0, start=None, end=None, step=1):
    """slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor

    ``self`` with ``self[start:end:step]`` along ``dim`` replaced by ``src``: a concat for
    static unit-step bounds, else a gather of ``src`` and a ``where`` on the positions.
    """
    value = _plain_value(ctx, self)
    src = as_value(ctx, src)
    y = ctx.to_layout(src, value.layout)
    return _scatter_slice(ctx, value, y, src.shape[dim], dim, start, end, step)


@register(aten.select_scatter.default, policy=Policy.CUSTOM, keeps_layout=True,
          dynamic=True)
def aten_select_scatter_default(ctx, self, src, dim, index):
    """select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor

    ``self[index]`` along ``dim`` replaced: the slice ``index:index+1`` (kept whole, so the
    channels-last layout of a conv output survives, unlike its decomposition).
    """
    value = _plain_value(ctx, self)
    y = ctx.to_layout(as_value(ctx, src), after_reduce(value.layout, [dim], keepdim=False))
    y = ops.expand_dims(y, physical_axis(value.layout, dim))
    if not ctx.is_dynamic(index) and index < 0 and not ctx.is_dynamic(value.shape[dim]):
        index += int(value.shape[dim])
    end = None if not ctx.is_dynamic(index) and index == -1 else index + 1
    return _scatter_slice(ctx, value, y, 1, dim, index, end, 1)


def _scatter_slice(ctx, value, y, count, dim, start, end, step):
    """``value`` with ``[start:end:step]`` along ``dim`` replaced by ``y`` (same layout)."""
    layout, x = value.layout, value.tensor
    if y.dtype != x.dtype:
        y = ops.cast(y, x.dtype)
    axis, size = physical_axis(layout, dim), value.shape[dim]
    ctx.out_layout = layout
    first = _bound(ctx, start, 0, size)
    full = ops.cast(ctx.size(size), "int64") if ctx.is_dynamic(size) else int(size)
    last = _bound(ctx, end, full, size)
    if all(isinstance(b, int) for b in (first, last)) and step == 1:
        return _concat_around(x, y, axis, first, last, int(concrete(size)), ctx)
    positions = _positions(ctx, size)
    offset = ops.subtract(positions, first)
    written = ops.logical_and(ops.greater_equal(offset, 0), ops.less(positions, last))
    if step != 1:  # (TFLite has no int64 FLOOR_DIV: a unit step divides by nothing)
        written = ops.logical_and(written, ops.equal(ops.mod(offset, step), 0))
    if ctx.is_dynamic(count):  # an empty src at some size (x[:, :n // 2] at n = 1): TF's
        # gather rejects any index into it, so it gathers from src and one row of x
        y = ops.concatenate([y, _first_row(x, axis)], axis=axis)
    count = ops.cast(ctx.size(count), "int64") if ctx.is_dynamic(count) else int(count)
    source = _clip(offset if step == 1 else ops.floor_divide(offset, step),
                   ops.maximum(count - 1, 0))
    gathered = ops.take(y, source, axis=axis)
    shape = [1] * value.rank
    shape[axis] = -1
    return ops.where(ops.reshape(written, shape), gathered, x)


def _first_row(x, axis):
    index = [slice(None)] * len(x.shape)
    index[axis] = slice(0, 1)
    return x[tuple(index)]


def _clip(x, high):
    """``x`` clamped to [0, high] in int64 (Keras' clip would mix int32 bounds in)."""
    high = np.int64(high) if isinstance(high, int) else ops.cast(high, "int64")
    return ops.minimum(ops.maximum(x, np.int64(0)), high)


def _concat_around(x, y, axis, first, last, size, ctx):
    """``x[:first] ++ y ++ x[last:]`` along ``axis`` (the parts that are not empty)."""
    def part(lo, hi):
        index = [slice(None)] * len(x.shape)
        index[axis] = slice(lo, hi)
        return x[tuple(index)]

    parts = ([part(0, first)] if first > 0 else []) + [y] + (
        [part(last, None)] if last < size else [])
    if len(parts) == 1:
        return y
    return keras.layers.Concatenate(axis=axis, name=ctx.name("slice_scatter"))(parts)


def _index_put_supports(node: torch.fx.Node) -> str | None:
    indices, values = node.args[1], node.args[2]
    present = [t for t in indices if t is not None]
    if any(t.meta["val"].dtype == torch.bool for t in present):
        if len(present) > 1:
            return "assignment through a boolean mask combined with other index tensors"
        mask = present[0].meta["val"]
        first = next(i for i, t in enumerate(indices) if t is not None)
        slot = _slot_shape(node.args[0].meta["val"].shape, first, mask.dim())
        if not _broadcasts_without_count(values.meta["val"].shape, slot):
            return ("x[mask] = values with one value per selected element (the count "
                    "depends on the data): assign a scalar or values broadcast over the "
                    "selection, or use torch.where(mask, values, x)")
        return None
    return _index_supports(node)


def _slot_shape(shape, first, k):
    """x[..mask..]'s shape with the selection's count as None: [pre, None, post]."""
    return (*shape[:first], None, *shape[first + k:])


def _broadcasts_without_count(values_shape, slot) -> bool:
    """Whether values broadcast to ``slot`` with a size 1 (or missing) count dim."""
    if len(values_shape) > len(slot):
        return False
    count_dim = len(values_shape) - (len(slot) - slot.index(None))
    size = values_shape[count_dim] if count_dim >= 0 else 1
    return isinstance(size, int) and size == 1  # an unbacked count is a SymInt


@register(aten.index_put.default, policy=Policy.CUSTOM, keeps_layout=True,
          supports=_index_put_supports, dynamic=True)
def aten_index_put_default(ctx, self, indices, values, accumulate=False):
    """index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor

    Boolean mask: a ``where`` (values broadcast over the selection). Integer indices on
    adjacent dims (negative ones wrap): for every position of the indexed dims the number
    of the update that writes it (the last one, like torch on CPU), then a gather of the
    values and a ``where``; ``accumulate`` sums duplicates (a segment sum) into ``self``.
    Index tensors on non-adjacent dims write with those dims moved to the front.
    """
    value = _plain_value(ctx, self)
    moved = None
    if _dtype_of(next(t for t in indices if t is not None)) != torch.bool:
        # x[i, :, j] = v writes what x[i, :, j] reads: the indexed dims moved to the front
        value, indices, moved = indexed_dims_first(ctx, value, indices)
    first = next(i for i, t in enumerate(indices) if t is not None)
    present = [t for t in indices if t is not None]
    vals = as_value(ctx, values)
    if vals.dtype != value.dtype:
        vals = TensorValue(ops.cast(vals.tensor, keras_dtype(value.dtype)), vals.layout,
                           vals.shape, value.dtype)
    ctx.out_layout = value.layout
    if _dtype_of(present[0]) == torch.bool:
        return _put_by_mask(ctx, value, first, present[0], vals, accumulate)
    if any(ctx.is_dynamic(s) for s in value.shape[first:first + len(present)]) or any(
            ctx.is_dynamic(s) for t in present if isinstance(t, TensorValue) for s in t.shape):
        result = _put_at_run_time(ctx, value, first, present, vals, accumulate)
    else:
        result = _put_by_index(ctx, value, first, present, vals, accumulate)
    if moved is not None:  # the result holds self's dims in the moved order
        ctx.out_layout = moved
    return result


def _put_at_run_time(ctx, value, first, present, vals, accumulate):
    """An indexed dim or an index tensor of run-time size: the written cells are counted in
    the graph."""
    from crossport.layers.dynamic import DynamicIndexPut

    indices = [ctx.canonical(t) if isinstance(t, TensorValue) else np.asarray(t)
               for t in present]
    ctx.out_layout = canonical(value.rank)
    # cells and update numbers within int32 (their sizes' ranges prove it): int32 index
    # arithmetic, which TFLite's segment ops need
    cells = largest_count([value.shape[first:first + len(present)]])
    updates = largest_count([tuple(np.shape(t)) if not isinstance(t, TensorValue) else t.shape
                             for t in present])
    narrow = None not in (cells, updates) and fits_int32(max(cells, updates))
    layer = DynamicIndexPut(first, bool(accumulate), index_dtype="int32" if narrow else "int64",
                            name=ctx.name())
    return layer(ctx.canonical(value), ctx.canonical(vals), *indices)


def _dtype_of(index) -> torch.dtype:
    return index.dtype if isinstance(index, TensorValue) else torch.from_numpy(
        np.zeros(0, np.asarray(index).dtype)).dtype


def _in_layout(ctx, tensor, shape, dtype, layout):
    """A canonical tensor/array of torch ``shape`` in ``layout`` (same rank)."""
    return ctx.to_layout(TensorValue(tensor, canonical(len(shape)), tuple(shape), dtype), layout)


def _put_by_mask(ctx, value, first, mask, vals, accumulate):
    mask = as_value(ctx, mask)
    k, rank = mask.rank, value.rank
    if k == rank:  # a mask of self's shape: in self's layout as it is
        m = ctx.to_layout(mask, value.layout)
    else:
        mask_shape = (1,) * first + tuple(mask.shape) + (1,) * (rank - first - k)
        m = ctx.reshape(ctx.canonical(mask), mask_shape)
        m = _in_layout(ctx, m, mask_shape, torch.bool, value.layout)
    v = ctx.canonical(vals)
    slot_rank = rank - k + 1  # [pre, count, post]
    v_shape = (1,) * (slot_rank - vals.rank) + tuple(vals.shape)
    v_shape = (*v_shape[:first], *(1,) * k, *v_shape[first + 1:])  # count -> k unit dims
    v = _in_layout(ctx, ctx.reshape(v, v_shape), v_shape, value.dtype, value.layout)
    x = value.tensor
    return ops.where(m, accumulate_into(x, v) if accumulate else v, x)


def _flat_index(ctx, present, sizes):
    """Broadcast index tensors -> one int64 index into the indexed dims' grid, [n]."""
    shapes = [tuple(np.shape(t) if not isinstance(t, TensorValue) else t.static_shape())
              for t in present]
    grid = np.broadcast_shapes(*shapes)
    flat = None
    for t, size in zip(present, sizes):
        t = ctx.canonical(t) if isinstance(t, TensorValue) else np.asarray(t)
        if tuple(np.shape(t) if isinstance(t, np.ndarray) else t.shape) != grid:
            t = (np.broadcast_to(t, grid) if isinstance(t, np.ndarray)
                 else ops.broadcast_to(t, grid))
        t = _wrap_negative(t, int(size))
        flat = t if flat is None else ops.add(ops.multiply(flat, int(size)), t)
    return (np.reshape(flat, [-1]) if isinstance(flat, np.ndarray)
            else ops.reshape(flat, [-1])), grid


def _put_by_index(ctx, value, first, present, vals, accumulate):
    rank, k = value.rank, len(present)
    sizes = [int(s) for s in value.static_shape()[first:first + k]]
    flat, grid = _flat_index(ctx, present, sizes)
    cells, n = math.prod(sizes), math.prod(grid)
    # values as [vpre, V, vpost] with V the grid dims merged; update u reads row vidx[u]
    slot_rank = first + len(grid) + (rank - first - k)
    v_shape = (1,) * (slot_rank - vals.rank) + tuple(vals.shape)
    v_grid = v_shape[first:first + len(grid)]
    v_rows = np.broadcast_to(np.arange(math.prod(v_grid)).reshape(v_grid), grid).ravel()
    merged = (*v_shape[:first], math.prod(v_grid), *v_shape[first + len(grid):])
    v = ctx.reshape(ctx.canonical(vals), merged)
    out_shape = (*v_shape[:first], *sizes, *v_shape[first + len(grid):])
    hit_shape = (1,) * first + tuple(sizes) + (1,) * (rank - first - k)
    x = value.tensor
    if accumulate:
        rows = ops.take(v, v_rows, axis=first)  # [vpre, n, vpost]
        rows = ops.moveaxis(rows, first, 0) if first else rows
        sums = segment_sum(rows, flat, cells)
        sums = ops.moveaxis(sums, 0, first) if first else sums
        sums = ctx.reshape(sums, out_shape)
        return accumulate_into(x, _in_layout(ctx, sums, out_shape, value.dtype, value.layout))
    writer = _last_writer(flat, cells, n)  # [cells]: the update writing each cell, or -1
    rows = ops.take(v_rows, ops.maximum(writer, 0))
    update = ops.take(v, ops.reshape(rows, sizes), axis=first)
    hit = ops.reshape(ops.greater_equal(writer, 0), hit_shape)
    update = _in_layout(ctx, update, out_shape, value.dtype, value.layout)
    hit = _in_layout(ctx, hit, hit_shape, torch.bool, value.layout)
    return ops.where(hit, update, x)


def _last_writer(flat, cells: int, n: int):
    """For each of ``cells`` positions, the last update number ``u`` with flat[u] == it."""
    if isinstance(flat, np.ndarray):
        writer = np.full(cells, -1, dtype=np.int64)
        writer[flat] = np.arange(n)  # numpy assigns in order: the last one stays
        return writer
    # the largest update number per cell: a segment max of the update numbers. Cells and
    # update numbers are static sizes, so int32 holds them (TFLite's segment ops have no
    # int64 kernels); an index past int32 is out of bounds, where torch raises
    narrow = fits_int32(max(cells, n))
    flat = ops.cast(flat, "int32") if narrow else flat
    count = np.arange(n, dtype=np.int32 if narrow else np.int64)
    numbers = ops.add(ops.multiply(flat, 0), count)  # symbolic, so Keras builds it
    best = ops.segment_max(numbers, flat, num_segments=cells)
    counts = ops.segment_sum(ops.ones_like(numbers), flat, num_segments=cells)
    return ops.where(ops.greater(counts, 0), best, -1)


def _scatter_diagonal_dims(node: torch.fx.Node) -> list[int]:
    args = list(node.args) + [None] * 5
    dim1 = node.kwargs.get("dim1", args[3] if args[3] is not None else 0)
    dim2 = node.kwargs.get("dim2", args[4] if args[4] is not None else 1)
    return [dim1, dim2]


@register(aten.diagonal_scatter.default, policy=Policy.CANONICAL,
          dynamic=static_dims("self", _scatter_diagonal_dims, "diagonal_scatter's positions"))
def aten_diagonal_scatter_default(ctx, self, src, offset=0, dim1=0, dim2=1):
    """diagonal_scatter(Tensor self, Tensor src, int offset=0, int dim1=0, int dim2=1) -> Tensor

    ``self`` with ``diagonal(self, offset, dim1, dim2)`` replaced by ``src`` (the diagonal
    last): one gather of ``src`` over the ``(dim1, dim2)`` plane, moved into place, and a
    ``where`` on the diagonal's positions (static; the other dims may be run-time sizes).
    """
    shape = ctx.node.meta["val"].shape
    rank = len(shape)
    dim1, dim2 = normalize_dims((dim1, dim2), rank)
    n, m = int(shape[dim1]), int(shape[dim2])
    start_row, start_col = max(-offset, 0), max(offset, 0)
    length = max(0, min(n - start_row, m - start_col))
    x = ops.convert_to_tensor(self) if isinstance(self, np.ndarray) else self
    if length == 0:
        return x
    rows, cols = np.indices((n, m))
    on_diagonal = cols - rows == offset
    source = np.clip(rows - start_row, 0, length - 1).astype("int32").ravel()
    y = ops.take(ops.cast(src, x.dtype), source, axis=-1)  # [rest..., n * m]
    rest = [d for d in range(rank) if d not in (dim1, dim2)]
    y = ctx.reshape(y, [shape[d] for d in rest] + [n, m])
    order = rest + [dim1, dim2]
    if order != list(range(rank)):
        y = ops.transpose(y, [order.index(d) for d in range(rank)])
    plane = on_diagonal if dim1 < dim2 else on_diagonal.T
    mask_shape = [1] * rank
    mask_shape[dim1], mask_shape[dim2] = n, m
    return ops.where(plane.reshape(mask_shape), y, x)


@register(aten.masked_scatter.default, policy=Policy.CANONICAL,
          dynamic=static_dims("source", lambda node: range(node.args[2].meta["val"].dim()),
                              "masked_scatter's bound on the source elements"))
def aten_masked_scatter_default(ctx, self, mask, source):
    """masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor

    ``self`` (broadcast with ``mask``) where ``mask`` is False; where it is True, the
    elements of ``source`` in row-major order: the k-th True position takes
    ``source.flatten()[k]``, k a running count (a cumsum) of the flattened mask. The
    output's shape is static in the data; ``source`` must hold at least as many elements as
    ``mask`` has True (torch raises otherwise; here the index is clamped to its last).
    """
    x = ops.convert_to_tensor(self) if isinstance(self, np.ndarray) else self
    mask = ops.logical_and(mask, ops.ones_like(x, dtype="bool"))  # broadcast to the output
    count = ops.cumsum(ops.cast(ops.reshape(mask, [-1]), "int32")) - 1
    flat_source = ops.reshape(ops.cast(source, x.dtype), [-1])
    last = max(math.prod(int(d) for d in source.shape) - 1, 0)
    taken = ops.take(flat_source, ops.clip(count, 0, last))
    return ops.where(mask, ctx.reshape(taken, list(ctx.node.meta["val"].shape)), x)


def _flat(ctx, value) -> TensorValue:
    """``value.flatten()`` (torch order) as a rank-1 value."""
    if not isinstance(value, TensorValue):
        value = as_value(ctx, value)
    n = math.prod(value.static_shape())
    return TensorValue(ops.reshape(ctx.canonical(value), [n]), canonical(1), (n,), value.dtype)


@register(aten.put.default, policy=Policy.CUSTOM)
def aten_put_default(ctx, self, index, source, accumulate=False):
    """put(Tensor self, Tensor index, Tensor source, bool accumulate=False) -> Tensor

    ``self.flatten()[index.flatten()] = source.flatten()`` (negative indices wrap), as
    index_put on the flattened tensor: the last write of a repeated index wins, like
    torch on CPU, or ``accumulate`` sums them; reshaped back.
    """
    value = as_value(ctx, self)
    flat = _flat(ctx, value)
    index = np.reshape(index, [-1]) if isinstance(index, np.ndarray) else _flat(ctx, index)
    source = _flat(ctx, source)
    if source.dtype != value.dtype:
        source = TensorValue(ops.cast(source.tensor, keras_dtype(value.dtype)), source.layout,
                             source.shape, value.dtype)
    out = _put_by_index(ctx, flat, 0, [index], source, accumulate)
    ctx.out_layout = canonical(value.rank)
    return ops.reshape(out, value.static_shape())
