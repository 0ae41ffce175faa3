"""Views, permutes, concatenation, splitting, slicing (pitfalls.md items 8, 9).

These are CUSTOM-policy converters: they receive ``TensorValue``s and keep whatever layout
arrives when they can (a permute is free: it only changes the layout), remapping the dims
they name.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import torch

from crossport.layout import (
    Layout,
    after_insert,
    after_permute,
    after_reduce,
    after_unfold,
    canonical,
    normalize_dim,
    permuted_shape,
    physical_axis,
    physical_index,
    physical_order,
    shared_layout,
    transpose_perm,
)
from crossport.layout.reshape import flat_layout, layout_after_reshape, reshape_groups
from crossport.to_keras import slicing
from crossport.to_keras.dynamic_dims import is_dynamic_size, static_dims
from crossport.to_keras.ops.elementwise import keras_add
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.values import TensorValue, concrete, keras_dtype

aten = torch.ops.aten
ops = keras.ops


def as_value(ctx, value) -> TensorValue:
    """Parameters and constants (numpy) as a canonical TensorValue."""
    if isinstance(value, TensorValue):
        return value
    array = np.asarray(value)
    return TensorValue(ctx.constant(array), canonical(array.ndim), array.shape,
                       torch.from_numpy(np.zeros(0, array.dtype)).dtype)


_INT32_MAX = 2**31 - 1


def _out_torch_shape(ctx):
    val = ctx.node.meta["val"]
    return tuple(val.shape)


def reshape(ctx, value: TensorValue):
    """The node's output shape from ``value``: a plain Keras reshape whenever possible.

    Genuinely layout-specific, so it stays here rather than in the dim contract: which
    dims a view merges or splits depends on the sizes, and the result may be a reshape in
    the held order, a reshape plus a gather, a flat-permuted layout or a transpose first
    (``layout/reshape.py`` answers the layout questions).
    """
    value = as_value(ctx, value)
    target = _out_torch_shape(ctx)
    in_static, out_static = value.static_shape(), tuple(concrete(d) for d in target)
    layout = layout_after_reshape(value.layout, in_static, out_static)
    if layout is None and not _merges_dynamic_dims(ctx, value, in_static, out_static):
        layout = flat_layout(value.layout, in_static, out_static)
    x = value.tensor
    if layout is None:
        merged = _merge_by_gather(ctx, value, in_static, out_static, target)
        if merged is not None:
            return merged
        nearest = _reshapable_layout(value.layout, in_static, out_static)
        if nearest is None:
            x, layout = ctx.canonical(value), canonical(len(target))
        else:
            x = ctx.to_layout(value, nearest)
            layout = layout_after_reshape(nearest, in_static, out_static)
    sizes = permuted_shape(target, Layout(layout.perm))
    ctx.out_layout = layout
    return ctx.reshape(x, sizes)


def _merges_dynamic_dims(ctx, value: TensorValue, in_shape, out_shape) -> bool:
    """Whether the reshape merges or splits a dynamic dim: a flat-permuted layout's feature
    order is built for the example's sizes (flatten(1) of NHWC with a dynamic H/W kept the
    example's H*W*C and row order, silently wrong at other sizes), so such a reshape goes
    through torch order instead."""
    groups = reshape_groups(in_shape, out_shape)
    if groups is None:
        return any(ctx.is_dynamic(d) for d in value.shape)
    return any(len(gi) > 1 or len(go) > 1 for gi, go in groups
               for d in gi if ctx.is_dynamic(value.shape[d]))


def _merge_by_gather(ctx, value: TensorValue, in_shape, out_shape, target):
    """A reshape that only merges dims which sit side by side in Keras, but in another
    order than torch's: reshape in Keras order, then one fixed gather along each merged
    axis puts the elements in torch's order. No transpose: a channel shuffle
    (``view -> transpose(1, 2) -> view``) on NHWC becomes a reshape and a channel gather.
    """
    nearest = _reshapable_layout(value.layout, in_shape, out_shape)
    groups = reshape_groups(in_shape, out_shape)
    if nearest is None or any(len(go) != 1 for _gi, go in groups):
        return None
    keras_order = [d for d in value.layout.perm if in_shape[d] != 1]
    reorders = []
    for gi, go in groups:
        positions = sorted(keras_order.index(d) for d in gi)
        if positions != list(range(positions[0], positions[0] + len(gi))):
            return None  # the merged dims are not side by side in Keras
        run = [keras_order[p] for p in positions]
        if run != list(gi) and any(ctx.is_dynamic(value.shape[d]) for d in run):
            return None  # the gather order is built for static sizes only
        if run != list(gi):
            block = np.arange(math.prod(in_shape[d] for d in run)).reshape(
                [in_shape[d] for d in run])
            reorders.append((go[0], block.transpose([run.index(d) for d in gi]).ravel()))
    out_layout = layout_after_reshape(nearest, in_shape, out_shape)
    y = ctx.reshape(value.tensor, permuted_shape(target, Layout(out_layout.perm)))
    for out_dim, index in reorders:
        y = ops.take(y, index.astype("int32"), axis=out_layout.axis(out_dim))
    ctx.out_layout = out_layout
    return y


def _reshapable_layout(layout: Layout, in_shape, out_shape) -> Layout | None:
    """The layout nearest ``layout`` in which the reshape is a plain Keras reshape.

    Each run of dims the reshape merges or splits is put back in torch order where its
    first dim sits; the other dims keep their Keras position. A channel shuffle
    (``view -> transpose(1, 2) -> view`` on NHWC) then costs one transpose of the two
    channel factors instead of a round trip through NCHW.
    """
    groups = reshape_groups(in_shape, out_shape)
    if layout.flat is not None or groups is None:
        return None
    group_of = {d: gi for gi, _go in groups for d in gi}
    perm, done = [], set()
    for d in layout.perm:
        if d not in group_of:  # a size-1 dim stays where it is
            perm.append(d)
        elif group_of[d][0] not in done:
            perm.extend(group_of[d])
            done.add(group_of[d][0])
    nearest = Layout(tuple(perm))
    return nearest if layout_after_reshape(nearest, in_shape, out_shape) else None


@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default,
          aten.view_copy.default, aten.flatten.using_ints, aten.unflatten.int,
          aten.unsqueeze.default, policy=Policy.CUSTOM, dynamic=True)
def aten_view_default(ctx, self, *args, **kwargs):
    """view(Tensor(a) self, SymInt[] size) and flatten/unsqueeze: one reshape rule.

    flatten(1) of an NHWC block orders features H,W,C: the result is marked flat-permuted
    and the next Linear permutes its kernel rows instead (pitfalls.md item 9).
    """
    return reshape(ctx, self)


def _squeezed_dims(node: torch.fx.Node) -> list[int]:
    if node.target is aten.squeeze.default:
        return list(range(node.args[0].meta["val"].ndim))
    dims = node.args[1]
    return list(dims) if isinstance(dims, (list, tuple)) else [dims]


# torch.export assumes a dynamic size is at least 2, so a squeeze of a dynamic dim is traced
# as a no-op; at size 1 torch drops the dim, a rank the Keras graph cannot change at run time
@register(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, policy=Policy.CUSTOM,
          dynamic=static_dims("self", _squeezed_dims,
                              "squeeze (torch drops the dim when its size is 1; squeeze a "
                              "static dim, or make this one static)"))
def aten_squeeze_dim(ctx, self, *args, **kwargs):
    """squeeze(Tensor(a) self, int[]? dim): the reshape rule, on static dims only."""
    return reshape(ctx, self)


@register(aten.permute.default, aten.permute_copy.default, aten.transpose.int, aten.t.default,
          aten.numpy_T.default, policy=Policy.CUSTOM, dynamic=True)
def aten_permute_default(ctx, self, *args, **kwargs):
    """permute(Tensor(a) self, int[] dims): free; only the layout changes (no Keras op)."""
    value = ctx.plain(as_value(ctx, self))
    ctx.out_layout = after_permute(value.layout, _permutation(ctx.node, value.rank))
    return value.tensor


def _permutation(node, rank) -> tuple[int, ...]:
    if node.target in (aten.permute.default, aten.permute_copy.default):
        return tuple(node.args[1])
    if node.target is aten.transpose.int:
        return transpose_perm(rank, node.args[1], node.args[2])
    return transpose_perm(rank)  # t, numpy_T: every dim reversed


@register(aten.expand.default, policy=Policy.CUSTOM, keeps_layout=True, dynamic=True)
def aten_expand_default(ctx, self, size, implicit=False):
    """expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)

    Broadcasts by adding zeros of the expanded sizes, so dynamic dims that are not
    expanded stay dynamic.
    """
    value = as_value(ctx, self)
    out_shape = tuple(concrete(d) for d in _out_torch_shape(ctx))
    rank = len(out_shape)
    if value.rank < rank:
        x = ctx.canonical(value)
        for _ in range(rank - value.rank):
            x = ops.expand_dims(x, 0)
        value = TensorValue(x, canonical(rank), (1,) * (rank - value.rank) + tuple(value.shape),
                            value.dtype)
    value = ctx.plain(value)
    grow = [out_shape[d] if value.static_shape()[d] == 1 else 1 for d in range(rank)]
    ctx.out_layout = value.layout
    if all(g == 1 for g in grow):
        return value.tensor
    torch_out = _out_torch_shape(ctx)
    if any(ctx.is_dynamic(torch_out[d]) for d in range(rank) if grow[d] != 1):
        from crossport.layers.dynamic import DynamicBroadcast

        sizes = physical_order(value.layout, torch_out)
        keep = physical_order(value.layout, value.shape)  # dims not expanded keep theirs
        sizes = [k if concrete(k) != 1 else s for k, s in zip(keep, sizes)]
        dynamic = [ctx.is_dynamic(s) for s in sizes]
        target = [None if dyn else int(concrete(s)) for s, dyn in zip(sizes, dynamic)]
        scalars = [ctx.size(s) for s, dyn in zip(sizes, dynamic) if dyn]
        return DynamicBroadcast(target, name=ctx.name("broadcast"))(value.tensor, *scalars)
    return _grow(value, physical_order(value.layout, grow))


def _grow(value, grow: list[int]):
    """``value`` broadcast by adding zeros of shape ``grow`` (static sizes; the dims that stay
    may be dynamic). TF has no bool add and no unsigned negation (``keras_add``'s form)."""
    if value.dtype == torch.bool:
        return ops.logical_or(value.tensor, np.zeros(grow, dtype=bool))
    if not value.dtype.is_floating_point and not value.dtype.is_signed:  # uint8
        wide = keras_add(ops.cast(value.tensor, "int32"), np.zeros(grow, dtype=np.int32))
        return ops.cast(wide, keras_dtype(value.dtype))
    zeros = np.zeros(grow, dtype=keras_dtype(value.dtype))
    return keras_add(value.tensor, zeros)  # ops.add may become a wrong-axis bias_add


@register(aten.repeat.default, policy=Policy.CUSTOM, keeps_layout=True, dynamic=True)
def aten_repeat_default(ctx, self, repeats):
    """repeat(Tensor self, SymInt[] repeats) -> Tensor (``Tensor.repeat``, ``torch.tile``)

    A tile on the held layout, counts in held order; extra counts add leading dims (the
    tensor is put in torch order first, as expand does). A count computed from a dynamic
    size (``ids.repeat(batch, 1)``) is a scalar input of ``DynamicTile``.
    """
    value = ctx.plain(as_value(ctx, self))
    x, layout = value.tensor, value.layout
    if len(repeats) > value.rank:
        x = ctx.canonical(value)
        for _ in range(len(repeats) - value.rank):
            x = ops.expand_dims(x, 0)
        layout = canonical(len(repeats))
    ctx.out_layout = layout
    counts = physical_order(layout, list(repeats))
    if any(ctx.is_dynamic(c) for c in counts):
        from crossport.layers.dynamic import DynamicTile

        target = [None if ctx.is_dynamic(c) else int(concrete(c)) for c in counts]
        scalars = [ctx.size(c) for c in counts if ctx.is_dynamic(c)]
        return DynamicTile(target, name=ctx.name("tile"))(x, *scalars)
    counts = [int(concrete(c)) for c in counts]
    return x if all(c == 1 for c in counts) else ops.tile(x, counts)


@register(aten.expand_as.default, policy=Policy.CUSTOM, keeps_layout=True, dynamic=True)
def aten_expand_as_default(ctx, self, other):
    """expand_as(Tensor(a) self, Tensor other) -> Tensor(a): expand to ``other``'s shape."""
    return aten_expand_default(ctx, self, _out_torch_shape(ctx))


def _harmonised(ctx, values) -> tuple[list, Layout]:
    values = [as_value(ctx, v) for v in values]
    layout = shared_layout([v.layout for v in values])
    return [ctx.to_layout(v, layout) for v in values], layout


@register(aten.cat.default, aten.concat.default, policy=Policy.CUSTOM, keeps_layout=True, dynamic=True)
def aten_cat_default(ctx, tensors, dim=0):
    """cat(Tensor[] tensors, int dim=0) -> Tensor: in the first input's layout."""
    tensors = [t for t in tensors if not _is_empty(t)]
    xs, layout = _harmonised(ctx, tensors)
    ctx.out_layout = layout
    if len(xs) == 1:
        return xs[0]
    return keras.layers.Concatenate(axis=physical_axis(layout, dim), name=ctx.name())(xs)


def _is_empty(value) -> bool:
    shape = value.shape if isinstance(value, (TensorValue, np.ndarray)) else ()
    return any(concrete(s) == 0 for s in shape) and len(shape) == 1


@register(aten.stack.default, policy=Policy.CUSTOM, dynamic=True)
def aten_stack_default(ctx, tensors, dim=0):
    """stack(Tensor[] tensors, int dim=0) -> Tensor

    Canonical inputs stack at torch's dim (canonical out: no transpose for a torch-order
    consumer such as a model output); permuted inputs get the new dim last.
    """
    xs, layout = _harmonised(ctx, tensors)
    out_layout = after_insert(layout, dim)
    ctx.out_layout = out_layout
    return ops.stack(xs, axis=physical_axis(out_layout, dim))


@register(aten.split.Tensor, policy=Policy.CUSTOM, keeps_layout=True, dynamic=True)
def aten_split_tensor(ctx, self, split_size, dim=0):
    """split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]

    Equal chunks of ``split_size``; the last one holds the remainder.
    """
    return aten_split_with_sizes_default(ctx, self, split_size, dim)


def _split_at_run_time(ctx, value: TensorValue, dim: int):
    """Chunks of a dynamic dim (``chunk`` on a sequence): each output's bounds from the
    run-time sizes torch traced for it (``(s + 1) // 2`` ...), as ``DynamicSlice``s."""
    from crossport.layers.dynamic import DynamicSlice

    value = ctx.plain(value)
    x, layout = value.tensor, value.layout
    axis = physical_axis(layout, dim)
    parts, start = [], 0
    for out in ctx.node.meta["val"]:
        end = start + out.shape[dim]
        bounds = [None if ctx.is_dynamic(b) else int(b) for b in (start, end)]
        scalars = [ctx.size(b) for b in (start, end) if ctx.is_dynamic(b)]
        size = None if ctx.is_dynamic(out.shape[dim]) else int(out.shape[dim])
        parts.append(DynamicSlice(axis, *bounds, 1, out_size=size,
                                  name=ctx.name("split"))(x, *scalars))
        start = end
    ctx.out_layout = [layout] * len(parts)
    return tuple(parts)


_XNNPACK_MAX_SPLIT = 4  # outputs of one SPLIT that LiteRT's XNNPACK delegate takes


@register(aten.split_with_sizes.default, aten.split_with_sizes_copy.default,
          policy=Policy.CUSTOM, keeps_layout=True, dynamic=True)
def aten_split_with_sizes_default(ctx, self, split_sizes, dim=0):
    """split_with_sizes(Tensor(a) self, SymInt[] split_sizes, int dim=0) -> Tensor[]"""
    value = as_value(ctx, self)
    if any(ctx.is_dynamic(out.shape[dim]) for out in ctx.node.meta["val"]):
        return _split_at_run_time(ctx, value, dim)
    value = ctx.plain(value)
    x, layout = value.tensor, value.layout
    total = value.static_shape()[dim]
    if isinstance(split_sizes, int):
        split_sizes = [split_sizes] * (total // split_sizes) + (
            [total % split_sizes] if total % split_sizes else [])
    cuts = list(np.cumsum(split_sizes)[:-1])
    if not cuts:  # one part (chunk(1), or a split size >= the length): the tensor itself
        ctx.out_layout = [layout]
        return (x,)
    axis = physical_axis(layout, dim)
    if len(set(split_sizes)) == 1 and len(split_sizes) <= _XNNPACK_MAX_SPLIT:
        parts = ops.split(x, len(split_sizes), axis=axis)  # one SPLIT
    else:  # TFLite's SPLIT_V is no XNNPACK op (GPT-2's q/k/v split cut its graph 12 times)
        bounds = zip([0, *cuts], [*cuts, total])
        parts = [x[tuple([slice(None)] * axis + [slice(int(a), int(b))])] for a, b in bounds]
    ctx.out_layout = [layout] * len(parts)
    return tuple(parts)


@register(aten.unbind.int, aten.unbind_copy.int, policy=Policy.CUSTOM, dynamic=True)
def aten_unbind_int(ctx, self, dim=0):
    """unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[] (and unbind_copy: the
    same values; Keras has no views)"""
    value = ctx.plain(as_value(ctx, self))
    parts = slicing.unstack(value.tensor, physical_axis(value.layout, dim))  # not UNPACK: XNNPACK has no kernel for it
    ctx.out_layout = [after_reduce(value.layout, [dim], keepdim=False)] * len(parts)
    return tuple(parts)


@register(aten.slice.Tensor, policy=Policy.CUSTOM, keeps_layout=True, dynamic=True)
def aten_slice_tensor(ctx, self, dim=0, start=None, end=None, step=1):
    """slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1)"""
    value = ctx.plain(as_value(ctx, self))
    x, layout = value.tensor, value.layout
    if ctx.is_dynamic(start) or ctx.is_dynamic(end):  # bounds from run-time sizes
        from crossport.layers.dynamic import DynamicSlice

        start = 0 if start is None else start
        if end is None or (not ctx.is_dynamic(end) and end >= _INT32_MAX):
            end = _INT32_MAX  # open end: clamped to the size at run time (None = a scalar)
        bounds = [None if ctx.is_dynamic(b) else int(b) for b in (start, end)]
        scalars = [ctx.size(b) for b in (start, end) if ctx.is_dynamic(b)]
        out = ctx.out_shape[dim] if not ctx.is_dynamic(ctx.node.meta["val"].shape[dim]) else None
        ctx.out_layout = layout
        return DynamicSlice(physical_axis(layout, dim), *bounds, step, out_size=out,
                            name=ctx.name("slice"))(x, *scalars)
    start = 0 if start is None else start
    static_end = not ctx.is_dynamic(value.shape[dim]) and end is not None and end >= value.shape[dim]
    if static_end or (end is not None and end >= _INT32_MAX):  # open: torch's sys.maxsize end
        end = None
    # Otherwise keep the bound: on a dynamic dim x[:8] is 8 long at length 12, like torch.
    ctx.out_layout = layout
    if step > 1 and start >= 0 and (end is None or end >= 0):  # unit strides for XNNPACK
        return slicing.strided_slice(x, physical_axis(layout, dim), start, end, step)
    return x[physical_index(layout, dim, slice(start, end, step))]


def _narrow_bounds_static(node, self, dim, start, length) -> str | None:
    """narrow_copy's dim, start and length must be known when converting."""
    if any(is_dynamic_size(s) for s in (start, length)):
        return "narrow_copy with a start or length computed from a run-time size"
    return static_dims("self", lambda _node: [dim], "narrow_copy")(node)


@register(aten.narrow_copy.default, policy=Policy.CUSTOM, keeps_layout=True,
          dynamic=_narrow_bounds_static)
def aten_narrow_copy_default(ctx, self, dim, start, length):
    """narrow_copy(Tensor self, int dim, SymInt start, SymInt length) -> Tensor

    ``length`` elements from ``start`` (a negative start counts from the end, as torch's):
    the slice ``start:start + length``.
    """
    size = as_value(ctx, self).static_shape()[dim]
    start = start + size if start < 0 else start
    return aten_slice_tensor(ctx, self, dim, start, start + length)


@register(aten.select.int, policy=Policy.CUSTOM, dynamic=True)
def aten_select_int(ctx, self, dim, index):
    """select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)"""
    value = ctx.plain(as_value(ctx, self))
    ctx.out_layout = after_reduce(value.layout, [dim], keepdim=False)
    if isinstance(index, int):  # a slice and a squeeze: XNNPACK takes no shrinking slice
        return slicing.select(value.tensor, physical_axis(value.layout, dim), index)
    if is_dynamic_size(index):  # x[:, x.shape[1] // 2]: the position is known at run time
        length = ctx.size(ctx.node.args[0].meta["val"].shape[dim])
        position = ctx.size(index)
        position = keras.ops.where(position < 0, position + length, position)
        return keras.ops.take(value.tensor, position, axis=physical_axis(value.layout, dim))
    return value.tensor[physical_index(value.layout, dim, index)]


@register(aten.unfold.default, policy=Policy.CUSTOM, dynamic=static_dims(
    "self", lambda node: [node.args[1]], "unfold (its number of windows)"))
def aten_unfold_default(ctx, self, dimension, size, step):
    """unfold(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)

    The windows ``x[i*step : i*step + size]`` along ``dimension`` (a new last dim of
    ``size``; torch.stft's framing): one gather along the dim's axis with the
    ``[windows, size]`` index table, the window dim held right after it.
    """
    value = ctx.plain(as_value(ctx, self))
    if value.rank == 0:  # a scalar is one element: one window of it (size 1) or none (0)
        normalize_dim(dimension, 1)
        ctx.out_layout = canonical(1)
        return ops.slice(ops.reshape(value.tensor, (1,)), [0], [size])
    length = concrete(value.shape[dimension])
    windows = (length - size) // step + 1
    index = np.arange(windows)[:, None] * step + np.arange(size)[None, :]
    ctx.out_layout = after_unfold(value.layout, dimension)
    axis = physical_axis(value.layout, dimension)
    return ops.take(value.tensor, index.astype("int32"), axis=axis)


@register(aten.index_select.default, policy=Policy.CUSTOM, keeps_layout=True, dynamic=True)
def aten_index_select_default(ctx, self, dim, index):
    """index_select(Tensor self, int dim, Tensor index) -> Tensor"""
    value = ctx.plain(as_value(ctx, self))
    ctx.out_layout = value.layout
    if value.rank == 0:  # a scalar's one element: its index holds one value, 0 (or torch raises)
        normalize_dim(dim, 1)
        return value.tensor
    axis = physical_axis(value.layout, dim)
    if not isinstance(index, TensorValue):  # a constant index (a roll): slices, not GATHER
        runs = slicing.contiguous_runs(np.asarray(index), value.tensor.shape[axis])
        if runs is not None:
            return slicing.take_runs(value.tensor, axis, runs)
    indices = index.tensor if isinstance(index, TensorValue) else np.asarray(index)
    return ops.take(value.tensor, indices, axis=axis)


@register(aten.clone.default, aten.contiguous.default, aten.alias.default, aten.detach.default,
          aten.lift_fresh_copy.default, aten.conj_physical.default, policy=Policy.CUSTOM,
          keeps_layout=True, dynamic=True)
def aten_clone_default(ctx, self, *args, **kwargs):
    """clone/contiguous/alias/detach, and conj_physical of a real tensor: the identity (a
    complex one has its own converter, ``complex.py``)."""
    value = as_value(ctx, self)
    ctx.out_layout = value.layout
    return value.tensor


def _dropout_supports(node: torch.fx.Node, train=False, **_arguments) -> str | None:
    # crossport captures in eval mode: this is code that drops whatever the module's mode
    return ("dropout with training=True in eval mode (F.dropout(x, p) defaults to "
            "training=True: pass training=self.training)") if train else None


@register(aten.dropout.default, aten.feature_dropout.default, aten.alpha_dropout.default,
          policy=Policy.CUSTOM, keeps_layout=True, supports=_dropout_supports, dynamic=True)
def aten_dropout_default(ctx, input, p, train):
    """dropout(Tensor input, float p, bool train) -> Tensor: the identity in eval mode."""
    value = as_value(ctx, input)
    ctx.out_layout = value.layout
    return value.tensor


@register(aten.dropout_.default, policy=Policy.CUSTOM, keeps_layout=True,
          supports=_dropout_supports, dynamic=True)
def aten_dropout__default(ctx, self, p, train):
    """dropout_(Tensor(a!) self, float p, bool train) -> Tensor(a!): the identity in eval mode."""
    return aten_dropout_default(ctx, self, p, train)


@register(aten._to_copy.default, aten.to.dtype, aten.type_as.default, policy=Policy.CUSTOM, keeps_layout=True, dynamic=True)
def aten_to_copy_default(ctx, self, *args, **kwargs):
    """_to_copy(Tensor self, *, ScalarType? dtype=None, ...) -> Tensor: a cast (or identity)."""
    value = as_value(ctx, self)
    ctx.out_layout = value.layout
    if ctx.out_dtype == value.dtype:
        return value.tensor
    return ops.cast(value.tensor, keras_dtype(ctx.out_dtype))
