"""Embeddings, gathers, scatters, sorting and boolean masks (pitfalls.md items 14, 15).

Index tensors are int64 like torch's; negative indices wrap where torch wraps them
(advanced indexing), gather/scatter take them as given. Sorting is ``top_k`` based: for
equal keys the lower index comes first, like torch's stable sort.
"""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.layers.dynamic import DynamicSlice, add_scattered
from crossport.layers.ordering import top_k_torch_order
from crossport.layout import (
    after_permute,
    canonical,
    normalize_dim,
    normalize_dims,
    physical_array,
    physical_axes,
    physical_axis,
)
from crossport.to_keras.dynamic_dims import same_size
from crossport.to_keras.fold import is_constant
from crossport.to_keras.initial import call_with_weights
from crossport.to_keras.ops.reduce import _reduce, scalar_with_index
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, bind_arguments, register
from crossport.to_keras.scalars import bound
from crossport.to_keras.values import TensorValue, keras_dtype

aten = torch.ops.aten
ops = keras.ops


def _tensor(ctx, value):
    """A Keras tensor (canonical) or numpy array for an index/mask argument."""
    if isinstance(value, TensorValue):
        return ctx.canonical(value)
    return np.asarray(value)


def _embedding_supports(node):
    return None if is_constant(node.args[0]) else "embedding with a weight computed in the graph"


@register(aten.embedding.default, policy=Policy.CUSTOM, supports=_embedding_supports, dynamic=True)
def aten_embedding_default(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False,
                           sparse=False):
    """embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor

    padding_idx only affects training (its row gets no gradient): the lookup is plain.
    """
    value = as_value(ctx, indices)
    layer = keras.layers.Embedding(weight.shape[0], weight.shape[1], name=ctx.name())
    y = call_with_weights(layer, ctx.canonical(value), embeddings_initializer=np.asarray(weight))
    ctx.out_layout = canonical(value.rank + 1)
    return y


@register(aten.full_like.default, aten.zeros_like.default, aten.ones_like.default,
          aten.empty_like.default, policy=Policy.CUSTOM, keeps_layout=True, dynamic=True)
def aten_full_like_default(ctx, self, fill_value=0, dtype=None, layout=None, device=None,
                           pin_memory=None, memory_format=None):
    """full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, ...) -> Tensor

    zeros_like/ones_like/empty_like alike (empty_like gives zeros).
    """
    value = as_value(ctx, self)
    if ctx.node.target is aten.ones_like.default:
        fill_value = 1
    ctx.out_layout = value.layout
    out_dtype = keras_dtype(ctx.out_dtype)
    if ctx.is_dynamic(fill_value):  # full_like(x, x.shape[1]): the size at run time
        return _filled_at_run_time(ctx, ops.zeros_like(value.tensor, dtype=out_dtype),
                                   fill_value)
    return ops.full_like(value.tensor, fill_value, dtype=out_dtype)


def _run_time_fill(ctx, fill_value, dtype: str):
    """A fill value computed from run-time sizes (``full(..., x.shape[1] - 1)``), as a
    Keras scalar of ``dtype`` (float sizes round to ``dtype`` as torch's fill does)."""
    return ops.cast(ctx.size(fill_value), dtype)


def _filled_at_run_time(ctx, like, fill_value):
    """``like`` (a tensor of the result's shape and dtype) filled with a run-time size: a
    select, not an add to zeros, which TF has no kernel for in bool."""
    fill = _run_time_fill(ctx, fill_value, keras.backend.standardize_dtype(like.dtype))
    return ops.where(ops.ones_like(like, dtype="bool"), fill, like)


def _cumulative(ctx, self, dim, fn):
    """``fn`` (cumsum/cumprod) along ``dim`` at its held axis, in torch's result dtype."""
    value = ctx.plain(as_value(ctx, self))
    ctx.out_layout = value.layout
    x = ops.cast(value.tensor, keras_dtype(ctx.out_dtype))
    if value.rank == 0:  # dim 0 or -1 of a scalar (one element): the value itself
        normalize_dim(dim, 1)
        return x
    return fn(x, axis=physical_axis(value.layout, dim))


@register(aten.cumsum.default, policy=Policy.CUSTOM, keeps_layout=True, dynamic=True)
def aten_cumsum_default(ctx, self, dim, dtype=None):
    """cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor

    Integer and boolean inputs sum to int64 like torch's.
    """
    return _cumulative(ctx, self, dim, ops.cumsum)


@register(aten.cumprod.default, policy=Policy.CUSTOM, keeps_layout=True, dynamic=True)
def aten_cumprod_default(ctx, self, dim, dtype=None):
    """cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor (integers and
    bools multiply in int64, as torch's)"""
    return _cumulative(ctx, self, dim, ops.cumprod)


def _harmonise_pair(ctx, self, index):
    value = ctx.plain(as_value(ctx, self))
    if isinstance(index, TensorValue):
        idx = ctx.to_layout(index, value.layout)
    else:
        idx = physical_array(index, value.layout)
    return value, idx


@register(aten.gather.default, policy=Policy.CUSTOM, dynamic=True)
def aten_gather_default(ctx, self, dim, index, sparse_grad=False):
    """gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor

    torch's gather is numpy's take_along_axis when index has self's shape off ``dim``;
    a smaller index reads the leading part of the other dims.
    """
    value, idx = _harmonise_pair(ctx, self, index)
    x = value.tensor
    if value.rank == 0:  # a scalar's index is 0-dim too, and 0 (else torch raises)
        normalize_dim(dim, 1)
        ctx.out_layout = value.layout
        return x
    dim = normalize_dim(dim, value.rank)
    x = _leading_part(ctx, x, value, dim)
    ctx.out_layout = value.layout
    return ops.take_along_axis(x, idx, axis=physical_axis(value.layout, dim))


def _leading_part(ctx, x, value: TensorValue, dim: int):
    """``x`` cut to the index's sizes off ``dim`` (gather reads their leading part), at
    run time where the index's size is dynamic: the example's sizes cut other index sizes
    wrongly (a TakeAlongAxis that failed to broadcast)."""
    self_shape = tuple(ctx.node.args[0].meta["val"].shape)
    index_shape = tuple(bind_arguments(ctx.node)["index"].meta["val"].shape)
    for d in range(value.rank):
        size = index_shape[d]
        if d == dim or same_size(size, self_shape[d]):
            continue
        axis = physical_axis(value.layout, d)
        if ctx.is_dynamic(size):
            x = DynamicSlice(axis, 0, None, 1, out_size=None,
                             name=ctx.name(f"lead{d}"))(x, ctx.size(size))
        else:
            cut = [slice(None)] * value.rank
            cut[axis] = slice(0, int(size))
            x = x[tuple(cut)]
    return x


def _index_supports(node):
    indices = node.args[1]
    if any(t is not None and t.meta["val"].dtype == torch.bool for t in indices):
        return "boolean-mask indexing (x[mask]) has a data-dependent shape"
    return None


def indexed_dims_first(ctx, value: TensorValue, indices: list):
    """Index tensors on non-adjacent dims (``x[i, :, j]``) as adjacent ones at dim 0: the
    value permuted with its indexed dims to the front (held canonical in that order), the
    indices moved alike, and the layout in which that held tensor is ``value`` itself (None
    when the index tensors are adjacent already: everything as given)."""
    present = [d for d, t in enumerate(indices) if t is not None]
    if present == list(range(present[0], present[0] + len(present))):
        return value, indices, None
    order = [*present, *(d for d in range(value.rank) if d not in present)]
    value = ctx.plain(value)
    moved = TensorValue(value.tensor, after_permute(value.layout, order),
                        tuple(value.shape[d] for d in order), value.dtype)
    front = [indices[d] for d in present] + [None] * (value.rank - len(present))
    held_as = after_permute(canonical(value.rank), np.argsort(order))
    return (TensorValue(ctx.canonical(moved), canonical(value.rank), moved.shape, value.dtype),
            front, held_as)


@register(aten.index.Tensor, policy=Policy.CUSTOM, supports=_index_supports, dynamic=True)
def aten_index_tensor(ctx, self, indices):
    """index.Tensor(Tensor self, Tensor?[] indices) -> Tensor

    Index tensors on adjacent dims broadcast together and replace those dims; negative
    indices wrap like torch's. Several index tensors are linearised into one take. Index
    tensors on non-adjacent dims (``x[i, :, j]``) put their broadcast dims first, then the
    other dims in order: the indexed dims are moved to the front, and the take is the
    adjacent one at dim 0.
    """
    value, indices, _moved = indexed_dims_first(ctx, as_value(ctx, self), indices)
    x = ctx.canonical(value)
    first = next(i for i, t in enumerate(indices) if t is not None)
    tensors = [_tensor(ctx, t) for t in indices if t is not None]
    sizes = value.shape[first:first + len(tensors)]  # SymInts for dynamic dims
    wrapped = [_wrap_negative(t, ctx.size(n)) for t, n in zip(tensors, sizes)]
    flat = wrapped[-1]
    stride = sizes[-1]
    for t, n in zip(reversed(wrapped[:-1]), reversed(sizes[:-1])):
        flat = ops.add(ops.multiply(t, ops.cast(ctx.size(stride), "int64")), flat)
        stride = stride * n
    if len(tensors) > 1:
        merged = [*value.shape[:first], stride, *value.shape[first + len(tensors):]]
        x = ctx.reshape(x, merged)
    ctx.out_layout = canonical(len(ctx.out_shape))
    return ops.take(x, flat, axis=first)


def _wrap_negative(index, size):
    if isinstance(index, np.ndarray) and not (index < 0).any():
        return index.astype(np.int64)
    if isinstance(index, np.ndarray) and isinstance(size, int):
        return np.where(index < 0, index + size, index).astype(np.int64)
    index = ops.cast(index, "int64")
    return ops.where(ops.less(index, 0), ops.add(index, ops.cast(size, "int64")), index)


def _scatter_coords(ctx, index, dim, rank):
    """``[n, rank]`` coordinates of every element of ``index`` with ``index`` at ``dim``."""
    shape = ctx.arg_shape(2)
    grids = np.meshgrid(*[np.arange(s, dtype=np.int64) for s in shape], indexing="ij")
    idx = ops.cast(index, "int64")
    columns = [idx if d == dim % rank else grids[d] for d in range(rank)]
    return ops.reshape(ops.stack(columns, axis=-1), (-1, rank)), shape


@register(aten.scatter.src, aten.scatter.value, aten.scatter_add.default,
          policy=Policy.CANONICAL, dynamic=True)
def aten_scatter_src(ctx, self, dim, index, src=None, value=None):
    """scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor

    scatter.value writes a scalar; scatter_add sums into ``self`` (duplicates add up).
    Static shapes: coordinates are constants; a dynamic dim: a ``DynamicScatter`` layer
    builds them from the run-time shape of ``index``.
    """
    if any(ctx.is_dynamic(s) for a in ctx.node.args if isinstance(a, torch.fx.Node)
           for s in a.meta["val"].shape):
        from crossport.layers.dynamic import DynamicScatter

        layer = DynamicScatter(dim, add=ctx.node.target is aten.scatter_add.default,
                               value=None if value is None else float(value),
                               name=ctx.name())
        return layer(self, index) if src is None else layer(self, index, src)
    rank = len(ctx.out_shape)
    if isinstance(self, np.ndarray):  # a constant (torch.zeros(k)): numpy + a KerasTensor fails
        self = ops.convert_to_tensor(self)
    coords, shape = _scatter_coords(ctx, index, dim, rank)
    if ctx.node.target is aten.scatter.value:
        updates = np.full(shape, value, dtype=keras_dtype(ctx.out_dtype))
    else:
        updates = src[tuple(slice(0, s) for s in shape)]
    updates = ops.reshape(updates, (-1,))
    if ctx.node.target is aten.scatter_add.default:
        return add_scattered(self, coords, updates)
    return ops.scatter_update(self, coords, updates)


def _on_last_axis(ctx, self, dim, fn):
    """Run ``fn`` (values, indices along the last axis) along torch ``dim``."""
    value = ctx.plain(as_value(ctx, self))
    x, layout = value.tensor, value.layout
    axis = physical_axis(layout, dim)
    last = value.rank - 1
    if axis != last:
        x = ops.moveaxis(x, axis, last)
    values, indices = fn(x)
    if axis != last:
        values, indices = ops.moveaxis(values, last, axis), ops.moveaxis(indices, last, axis)
    ctx.out_layout = (layout, layout)
    return values, ops.cast(indices, "int64")


def _top_k(x, k, largest, ctx=None):
    """top_k in torch's order (NaN above +inf, ties in index order) for every dtype.

    ``k`` may be a run-time size (a ``DynamicTopK`` layer, named through ``ctx``).
    """
    if not isinstance(k, int):  # a run-time size: k known only when the model runs
        from crossport.layers.dynamic import DynamicTopK

        return DynamicTopK(largest, name=ctx.name("top_k"))(x, k)
    return top_k_torch_order(x, k, largest)


@register(aten.topk.default, policy=Policy.CUSTOM, dynamic=True)
def aten_topk_default(ctx, self, k, dim=-1, largest=True, sorted=True):
    """topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)"""
    scalar = scalar_with_index(ctx, self, dim)
    if scalar is not None:
        return scalar
    k = ctx.size(k)
    return _on_last_axis(ctx, self, dim, lambda x: _top_k(x, k, largest, ctx))


@register(aten.sort.default, aten.sort.stable, policy=Policy.CUSTOM, dynamic=True)
def aten_sort_default(ctx, self, dim=-1, descending=False, stable=False):
    """sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)

    sort.stable has ``stable`` before ``dim`` (kwarg-only): equal keys keep their order.
    """
    scalar = scalar_with_index(ctx, self, dim)
    if scalar is not None:
        return scalar
    n = ctx.size(ctx.node.args[0].meta["val"].shape[dim])  # run-time for a dynamic dim
    out_dtype = keras_dtype(ctx.out_dtype)

    def sort(x):
        values, indices = _top_k(x, n, descending, ctx)
        return ops.cast(values, out_dtype), indices

    return _on_last_axis(ctx, self, dim, sort)


@register(aten.any.dim, aten.any.dims, aten.any.default, policy=Policy.CUSTOM, dynamic=True)
def aten_any_dim(ctx, self, dim=None, keepdim=False):
    """any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor"""
    return _reduce(ctx, _as_bool(ctx, self), dim, keepdim, ops.any)


@register(aten.all.dim, aten.all.dims, aten.all.default, policy=Policy.CUSTOM, dynamic=True)
def aten_all_dim(ctx, self, dim=None, keepdim=False):
    """all.dim(Tensor self, int dim, bool keepdim=False) -> Tensor"""
    return _reduce(ctx, _as_bool(ctx, self), dim, keepdim, ops.all)


def _as_bool(ctx, self) -> TensorValue:
    value = as_value(ctx, self)
    if value.dtype == torch.bool:
        return value
    return TensorValue(ops.not_equal(value.tensor, 0), value.layout, value.shape, torch.bool)


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor, policy=Policy.AGNOSTIC, dynamic=True)
def aten_masked_fill_scalar(ctx, self, mask, value):
    """masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor

    The result keeps self's dtype: torch casts the value to it first (2.5 into an int64
    tensor is 2, toward zero; into a bool tensor, nonzero is True). A bare float would
    promote Keras' where to float32.
    """
    dtype = keras_dtype(ctx.out_dtype)
    if hasattr(value, "dtype"):
        return ops.where(mask, ops.cast(value, dtype), self)
    return ops.where(mask, ops.convert_to_tensor(bound(value, dtype)), self)


def _scalar(ctx, value):
    """A Python number, or the run-time Keras scalar of a symbolic size."""
    if isinstance(value, (torch.SymInt, torch.SymFloat)):
        return ctx.size(value)
    return value


@register(aten.arange.start_step, aten.arange.start, aten.arange.default, policy=Policy.CUSTOM, dynamic=True)
def aten_arange_start_step(ctx, start=0, end=None, step=1, dtype=None, layout=None, device=None,
                           pin_memory=None):
    """arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, ...)

    Static ranges are folded to constants before conversion; this builds the ones whose
    bounds are run-time sizes (``arange(seq_len)`` under a dynamic sequence dim).
    """
    bounds = [_scalar(ctx, v) for v in (start, end, step)]
    out_dtype = keras_dtype(ctx.out_dtype)
    if all(isinstance(b, (int, float)) for b in bounds):
        return np.arange(*bounds).astype(out_dtype)
    from crossport.layers.dynamic import DynamicRange

    static = [b if isinstance(b, (int, float)) else None for b in bounds]
    scalars = [b for b in bounds if not isinstance(b, (int, float))]
    return DynamicRange(*static, dtype_name=out_dtype, name=ctx.name("arange"))(*scalars)


@register(aten.full.default, aten.zeros.default, aten.ones.default, aten.empty.memory_format,
          policy=Policy.CUSTOM, dynamic=True)
def aten_full_default(ctx, size, fill_value=0, dtype=None, layout=None, device=None,
                      pin_memory=None, memory_format=None):
    """full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, ...) -> Tensor

    zeros/ones/empty alike (empty gives zeros). Run-time sizes: a ``DynamicFull``.
    """
    if ctx.node.target is aten.ones.default:
        fill_value = 1
    elif ctx.node.target is not aten.full.default:
        fill_value = 0
    out_dtype = keras_dtype(ctx.out_dtype)
    run_time_fill = ctx.is_dynamic(fill_value)
    if not any(ctx.is_dynamic(s) for s in size):
        shape = [int(s) for s in size]
        if run_time_fill:  # a Keras tensor, so the model computes it (and has an output)
            return ops.broadcast_to(_run_time_fill(ctx, fill_value, out_dtype), shape)
        return np.full(shape, fill_value, dtype=out_dtype)
    from crossport.layers.dynamic import DynamicFull

    target = [None if ctx.is_dynamic(s) else int(s) for s in size]
    scalars = [ctx.size(s) for s in size if ctx.is_dynamic(s)]
    full = DynamicFull(target, 0 if run_time_fill else fill_value, out_dtype,
                       name=ctx.name("full"))(*scalars)
    return _filled_at_run_time(ctx, full, fill_value) if run_time_fill else full


@register(aten.scalar_tensor.default, policy=Policy.CUSTOM, dynamic=True)
def aten_scalar_tensor_default(ctx, s, dtype=None, layout=None, device=None, pin_memory=None):
    """scalar_tensor(Scalar s, *, ScalarType? dtype=None, ...) -> Tensor (a run-time size)"""
    out_dtype = keras_dtype(ctx.out_dtype)
    if not ctx.is_dynamic(s):
        return np.asarray(s, dtype=out_dtype)
    return ops.cast(ctx.size(s), out_dtype)


@register(aten.flip.default, policy=Policy.CUSTOM, keeps_layout=True, dynamic=True)
def aten_flip_default(ctx, self, dims):
    """flip(Tensor self, int[] dims) -> Tensor"""
    value = ctx.plain(as_value(ctx, self))
    ctx.out_layout = value.layout
    x = value.tensor
    if value.rank == 0:  # dims 0 / -1 of a scalar: one element, nothing to flip
        normalize_dims(dims, 1)
        return x
    for axis in physical_axes(value.layout, dims):
        x = ops.flip(x, axis=axis)
    return x


@register(aten.nonzero_static.default, policy=Policy.CANONICAL)
def aten_nonzero_static_default(ctx, self, size, fill_value=-1):
    """nonzero_static(Tensor self, *, SymInt size, int fill_value=-1) -> Tensor

    The coordinates of the first ``size`` non-zero elements (NaN is non-zero, -0.0 is not)
    in row-major order, ``fill_value`` rows after the last: each element's rank among the
    non-zero ones names its output row (one UNSORTED_SEGMENT_SUM of the flat positions),
    then the flat positions become coordinates by the static strides.
    """
    shape = [int(d) for d in ctx.arg_shape(0)]
    count = int(np.prod(shape))
    if not shape or size == 0 or count == 0:  # no coordinates, or none to write
        return np.full((size, len(shape)), fill_value, dtype=np.int64)
    nonzero = ops.reshape(ops.cast(self, "bool"), (-1,))
    rank = ops.cumsum(ops.cast(nonzero, "int32")) - 1
    row = ops.where(ops.logical_and(nonzero, ops.less(rank, size)), rank, size)  # size: dropped
    positions = ctx.constant(np.arange(count, dtype=np.int32))
    flat = ops.slice(ops.segment_sum(positions, row, num_segments=size + 1), [0], [size])
    hits = ops.segment_sum(ops.ones_like(row), row, num_segments=size + 1)
    found = ops.expand_dims(ops.greater(ops.slice(hits, [0], [size]), 0), -1)
    strides = np.cumprod([1, *shape[::-1]])[:-1][::-1].astype(np.int32)
    coordinates = ops.mod(ops.floor_divide(ops.expand_dims(flat, -1), strides),
                          np.array(shape, np.int32))
    filled = ops.where(found, ops.cast(coordinates, "int64"), np.int64(fill_value))
    return filled
