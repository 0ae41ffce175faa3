"""keras.ops that pick, order or move elements: take, take_along_axis, sort, argsort,
top_k, Python indexing (``x[:, 0]``, ``x[::-1]``), flip, diff, roll, repeat, split, tile,
one_hot, pad.

They run on the held tensor at the held axis of the Keras axis (``crossport.layout``); an
axis of ``None`` flattens the Keras-ordered tensor first, batch included, as Keras' TF
backend does.

Order: TF sorts with ``top_k`` (ascending is ``top_k`` of ``-x``, or of ``~x`` for ints),
whose comparator breaks ties by the lower index; ``-0.0`` equals ``0.0``; ``±inf`` are
ordinary values. That is ``torch.sort(stable=True)`` (descending for ``top_k``), which the
module uses, so values *and* indices match. NaN is no value of that order: TF's kernel
compares with ``<``/``>``, which NaN fails both ways, so a row holding NaN comes out in an
order that is an artifact of the kernel's sorting steps (not sorted, not reproducible by any
torch op). The module puts NaN where torch does (last ascending, first for ``top_k``): rows
without NaN match exactly, rows with NaN hold the same values in another order (the check
reports it, as it compares NaN positions).
"""

from __future__ import annotations

import operator

import numpy as np
import torch

from crossport.errors import UnsupportedLayerError
from crossport.layout import (
    after_reduce,
    canonical,
    normalize_dim,
    physical_array,
    physical_axes,
    physical_axis,
    physical_index,
    physical_order,
    reduction_dims,
)
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.registry import register_op
from crossport.to_torch.sizes import RunSize, sizes_in


def _flat(ctx: Context, x: Held) -> Held:
    """``x`` flattened in Keras order, batch included (what ``axis=None`` means in Keras)."""
    x = ctx.canonical(x)
    return Held(ctx.call_method("reshape", x.node, -1), canonical(1), (None,))


def _index_value(ctx: Context, indices) -> Held | int:
    """Indices as a held tensor in Keras order, or a Python int (a scalar index)."""
    if isinstance(indices, Held):
        return ctx.canonical(indices)
    array = np.asarray(indices)
    if array.ndim == 0:
        return int(array)
    return ctx.constant(array.astype(np.int64))


def _along_axis(ctx: Context, x: Held, axis) -> tuple[Held, int]:
    """``x`` ready to index along Keras' ``axis`` (``None``: the flattened tensor, axis 0)."""
    if axis is None:
        return _flat(ctx, ctx.plain(x)), 0
    x = ctx.plain(x)
    return x, normalize_dim(int(axis), x.rank)


@register_op(policy=Policy.CUSTOM)
def Take(ctx: Context, op, x: Held, indices) -> Held:
    """keras.ops.take(x, indices, axis): ``x[..., indices, ...]`` at the held axis.

    Indices in ``[-n, -1]`` count from the end in both (TF's backend adds ``n``, torch's
    indexing wraps them); others are an error in both. A 1-D index keeps ``x``'s layout; a
    scalar drops the axis; an index of higher rank inserts its dims, on the Keras-ordered
    tensor.
    """
    shape = ctx.output_shapes[0]
    index = _index_value(ctx, indices)
    x, axis = _along_axis(ctx, x, op.axis)
    if isinstance(index, int):
        node = ctx.call_function(torch.select, x.node, physical_axis(x.layout, axis), index)
        return Held(node, after_reduce(x.layout, [axis], False), shape)
    if index.rank != 1:
        x = ctx.canonical(x)
    node = ctx.call_function(operator.getitem, x.node,
                             physical_index(x.layout, axis, index.node))
    layout = x.layout if index.rank == 1 else canonical(len(shape))
    return Held(node, layout, shape)


@register_op(policy=Policy.CUSTOM)
def TakeAlongAxis(ctx: Context, op, x: Held, indices) -> Held:
    """keras.ops.take_along_axis(x, indices, axis): ``torch.take_along_dim`` at the held
    axis, the indices held like ``x`` (both broadcast but along the axis, as in Keras);
    negative indices count from the end (TF's backend adds the axis size)."""
    x, axis = _along_axis(ctx, x, op.axis)
    if isinstance(indices, Held):
        index = ctx.to_layout(ctx.plain(indices), x.layout).node
    else:
        index = ctx.constant(physical_array(np.asarray(indices, np.int64), x.layout)).node
    dim = physical_axis(x.layout, axis)
    index = ctx.call_method("long", index)
    size = ctx.call_method("size", x.node, dim)
    index = ctx.call_function(torch.where, ctx.call_function(operator.lt, index, 0),
                              ctx.call_function(operator.add, index, size), index)
    node = ctx.call_function(torch.take_along_dim, x.node, index, dim=dim)
    return Held(node, x.layout, ctx.output_shapes[0])


def _sorted(ctx: Context, op, x: Held, descending: bool = False) -> tuple[torch.fx.Node, Held]:
    """``torch.sort(stable=True)`` along the op's Keras axis (None: flattened): the sort
    node and the sorted tensor as held (TF's order but for NaN, see the module docstring)."""
    axis = getattr(op, "axis", -1)
    x = _flat(ctx, ctx.plain(x)) if axis is None else ctx.plain(x)
    dim = physical_axis(x.layout, 0 if axis is None else int(axis))
    node = ctx.call_function(torch.sort, x.node, dim=dim, descending=descending, stable=True)
    return node, x


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def Sort(ctx: Context, op, x: Held) -> Held:
    """keras.ops.sort(x, axis): stable ascending ``torch.sort`` on the held axis."""
    node, x = _sorted(ctx, op, x)
    return Held(ctx.call_function(operator.getitem, node, 0), x.layout, ctx.output_shapes[0])


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def Argsort(ctx: Context, op, x: Held) -> Held:
    """keras.ops.argsort(x, axis): the stable ascending order's indices, int32 as Keras."""
    node, x = _sorted(ctx, op, x)
    indices = ctx.call_method("to", ctx.call_function(operator.getitem, node, 1),
                              ctx.output_dtype())
    return Held(indices, x.layout, ctx.output_shapes[0])


def _top_k_supported(op) -> str | None:
    if op.sorted or int(op.k) == 1:
        return None
    sizes = {t.shape[-1] for node in getattr(op, "_inbound_nodes", ())
             for t in node.input_tensors[:1]}
    if sizes == {int(op.k)}:  # every element taken: TF returns them sorted anyway
        return None
    return ("top_k(sorted=False) returns the k largest in the order TF's selection kernel "
            "leaves them (an implementation detail, not reproduced); use sorted=True")


@register_op(policy=Policy.CUSTOM, supports=_top_k_supported, keeps_layout=True)
def TopK(ctx: Context, op, x: Held) -> list[Held]:
    """keras.ops.top_k(x, k, sorted): the first ``k`` of a stable descending ``torch.sort``
    on the last Keras axis (ties: the lower index first, as TF; ``torch.topk`` does not
    promise an order for ties)."""
    node, x = _sorted(ctx, op, x, descending=True)
    first_k = physical_index(x.layout, -1, slice(0, int(op.k)))
    values = ctx.call_function(operator.getitem, ctx.call_function(operator.getitem, node, 0),
                               first_k)
    indices = ctx.call_function(operator.getitem, ctx.call_function(operator.getitem, node, 1),
                                first_k)
    indices = ctx.call_method("to", indices, ctx.output_dtype(1))
    return [Held(values, x.layout, ctx.output_shapes[0]),
            Held(indices, x.layout, ctx.output_shapes[1])]


def _getitem_keys(op) -> list:
    return [node.arguments.args[1] if len(node.arguments.args) > 1 else None
            for node in getattr(op, "_inbound_nodes", ())]


def _getitem_supported(op) -> str | None:
    for key in _getitem_keys(op):
        for item in key if isinstance(key, (tuple, list)) else (key,):
            if isinstance(item, slice):
                parts = (item.start, item.stop, item.step)
                if not all(p is None or isinstance(p, (int, np.integer)) for p in parts):
                    return "a slice with tensor bounds is not converted"
                if item.step == 0:
                    return "a slice with step 0"
            elif not (item is None or item is Ellipsis or (
                    isinstance(item, (int, np.integer)) and not isinstance(item, bool))):
                return (f"indexing with {type(item).__name__} (only ints, slices, None and "
                        "...); use keras.ops.take / take_along_axis")
    return None


@register_op(policy=Policy.CUSTOM, supports=_getitem_supported, sizes=True)
def GetItem(ctx: Context, op, x: Held, key) -> Held:
    """``x[key]`` with ints, slices, ``None`` and ``...`` (what a functional graph records for
    Python indexing): each item applied at the held axis of its Keras dim, an int dropping
    it; a key inserting dims (``None``) runs on the Keras-ordered tensor. A negative step
    (``x[::-1]``, ``x[5:1:-2]``) flips the dim and takes the mirrored forward slice
    (``start -> -start - 1``, the same at every size). Out-of-range slices clamp and
    out-of-range ints fail in both. Run-time bounds (``x[:, :ops.shape(y)[1]]`` in a traced
    call) are read at run time."""
    items = list(key) if isinstance(key, (tuple, list)) else [key]  # a list: Keras' tuple
    x, items = _flip_negative_steps(ctx, ctx.plain(x), items)
    items = [ctx.size(i) if sizes_in(i) else i for i in items]
    if any(item is None for item in items):
        x = ctx.canonical(x)
        node = ctx.call_function(operator.getitem, x.node, tuple(items))
        return Held(node, canonical(len(ctx.output_shapes[0])), ctx.output_shapes[0])
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (x.rank - len(items) + 1)
    items += [slice(None)] * (x.rank - len(items))
    items = [int(i) if isinstance(i, (int, np.integer)) else i for i in items]
    dropped = [d for d, item in enumerate(items)
               if isinstance(item, (int, torch.fx.Node))]
    node = ctx.call_function(operator.getitem, x.node, physical_order(x.layout, items))
    return Held(node, after_reduce(x.layout, dropped, False), ctx.output_shapes[0])


def _flip_negative_steps(ctx: Context, x: Held, items: list) -> tuple[Held, list]:
    """``x`` flipped along the dims sliced with a negative step, and the key with those
    slices mirrored: ``x[a:b:-k] == flip(x)[-a - 1:-b - 1:k]`` (``None`` stays ``None``),
    Python's clamping included, whatever the dim's size."""
    consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
    dim, flips, mirrored = 0, [], []
    for item in items:
        if item is Ellipsis:
            dim += x.rank - consumed
        elif item is not None:
            if isinstance(item, slice) and item.step is not None and item.step < 0:
                flips.append(dim)
                item = slice(*(None if v is None else -v - 1 for v in (
                    item.start, item.stop)), -int(item.step))
            dim += 1
        mirrored.append(item)
    if not flips:
        return x, items
    node = ctx.call_function(torch.flip, x.node, physical_axes(x.layout, flips))
    return Held(node, x.layout, x.shape), mirrored


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def Flip(ctx: Context, op, x: Held) -> Held:
    """keras.ops.flip(x, axis): torch.flip at the held axes (None: every axis)."""
    x = ctx.plain(x)
    axes = reduction_dims(op.axis, x.rank)  # None: all of them, as tf.reverse over range
    node = ctx.call_function(torch.flip, x.node, physical_axes(x.layout, axes))
    return Held(node, x.layout, ctx.output_shapes[0])


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def Diff(ctx: Context, op, x: Held) -> Held:
    """keras.ops.diff(a, n, axis): torch.diff at the held axis, ``n`` times (``x[1:] -
    x[:-1]`` in the input's dtype, ints wrapping alike; bools xor, TF's ``not_equal``)."""
    x = ctx.plain(x)
    if int(op.n) == 0:
        return x
    axis = normalize_dim(int(op.axis), x.rank)
    node = ctx.call_function(torch.diff, x.node, int(op.n), physical_axis(x.layout, axis))
    return Held(node, x.layout, ctx.output_shapes[0])


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def Roll(ctx: Context, op, x: Held) -> Held:
    """keras.ops.roll(x, shift, axis): torch.roll at the held axes; without an axis over the
    flattened Keras-ordered tensor (batch included), reshaped back."""
    x = ctx.plain(x)
    if op.axis is None:
        x = ctx.canonical(x)
        flat = ctx.call_function(torch.roll, ctx.call_method("reshape", x.node, -1),
                                 int(op.shift), 0)
        node = ctx.call_method("reshape_as", flat, x.node)  # the run-time shape: any None dims
        return Held(node, x.layout, ctx.output_shapes[0])
    axes = op.axis if isinstance(op.axis, (list, tuple)) else [op.axis]
    shifts = op.shift if isinstance(op.shift, (list, tuple)) else [op.shift] * len(axes)
    node = ctx.call_function(torch.roll, x.node, [int(s) for s in shifts],
                             list(physical_axes(x.layout, [int(a) for a in axes])))
    return Held(node, x.layout, ctx.output_shapes[0])


def _repeats(op) -> int | list[int]:
    repeats = op.repeats
    if isinstance(repeats, RunSize):
        return repeats  # a count known at run time (DeBERTa: the sequence length)
    if isinstance(repeats, (int, np.integer)):
        return int(repeats)
    repeats = [int(r) for r in np.asarray(repeats).reshape(-1)]
    return repeats[0] if len(repeats) == 1 else repeats


def _repeat_supported(op) -> str | None:
    try:
        _repeats(op)
    except (TypeError, ValueError):
        return f"keras.ops.repeat with repeats {op.repeats!r} (only ints) is not converted"
    return None


@register_op(policy=Policy.CUSTOM, supports=_repeat_supported, sizes=True)
def Repeat(ctx: Context, op, x: Held) -> Held:
    """keras.ops.repeat(x, repeats, axis): torch.repeat_interleave at the held axis (each
    element repeated in place, as tf.repeat); without an axis over the flattened tensor.
    One count may be a run-time size (read at run time).
    Per-element repeats (a list, one per element along the axis) gather the axis at
    ``np.repeat(arange(n), repeats)``, which needs ``n`` static."""
    x, axis = _along_axis(ctx, x, op.axis)
    repeats = _repeats(op)
    dim = physical_axis(x.layout, axis)
    if isinstance(repeats, int):
        node = ctx.call_function(torch.repeat_interleave, x.node, ctx.size(repeats), dim=dim)
        return Held(node, x.layout, ctx.output_shapes[0])
    size = x.shape[axis]
    if size is None or size != len(repeats):
        what = ("a dim of run-time size (the batch, or a flattened tensor)" if size is None
                else f"a dim of size {size}")
        raise UnsupportedLayerError(
            f"keras.ops.repeat {ctx.path!r}: {len(repeats)} per-element repeats along {what}; "
            "give the axis a static size equal to the number of repeats",
            [(ctx.path, "Repeat", "per-element repeats")])
    index = np.repeat(np.arange(size), repeats)
    node = ctx.call_function(torch.index_select, x.node, dim, ctx.constant(index).node)
    return Held(node, x.layout, ctx.output_shapes[0])


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def Split(ctx: Context, op, x: Held) -> list[Held]:
    """keras.ops.split(x, indices_or_sections, axis): torch.tensor_split at the held axis
    (equal sections, or split points; Keras refuses sections that do not divide)."""
    x = ctx.plain(x)
    axis = normalize_dim(int(op.axis), x.rank)
    sections = op.indices_or_sections
    sections = int(sections) if isinstance(sections, (int, np.integer)) else [
        int(i) for i in sections]
    dim = physical_axis(x.layout, axis)
    if isinstance(sections, int) and x.shape[axis] is None:
        # tf.split raises on sections that do not divide a size it learns at run time;
        # tensor_split would split unequally
        size = ctx.call_method("size", x.node, dim)
        ctx.call_function(torch._assert, ctx.call_function(
            operator.eq, ctx.call_function(operator.mod, size, sections), 0),
            f"ops.split {ctx.path!r}: {sections} sections do not divide the axis' size")
    parts = ctx.call_function(torch.tensor_split, x.node, sections, dim=dim)
    return [Held(ctx.call_function(operator.getitem, parts, i), x.layout, shape)
            for i, shape in enumerate(ctx.output_shapes)]


@register_op(policy=Policy.CUSTOM, sizes=True)
def Tile(ctx: Context, op, x: Held) -> Held:
    """keras.ops.tile(x, repeats): torch.tile with the repeats listed per held axis (fewer
    repeats than dims count from the right, as in Keras; more add leading dims, on the
    Keras-ordered tensor); run-time repeats (``ops.shape(x)[0]``) read at run time."""
    x = ctx.plain(x)
    repeats = [ctx.size(r) if isinstance(r, RunSize) else int(r) for r in (
        op.repeats if isinstance(op.repeats, (list, tuple)) else [op.repeats])]
    if len(repeats) > x.rank:
        x = ctx.canonical(x)
        node = ctx.call_function(torch.tile, x.node, repeats)
        return Held(node, canonical(len(repeats)), ctx.output_shapes[0])
    repeats = [1] * (x.rank - len(repeats)) + repeats
    node = ctx.call_function(torch.tile, x.node, list(physical_order(x.layout, repeats)))
    return Held(node, x.layout, ctx.output_shapes[0])


def _one_hot_supported(op) -> str | None:
    return "sparse one_hot is not converted" if op.sparse else None


@register_op(policy=Policy.CUSTOM, supports=_one_hot_supported)
def OneHot(ctx: Context, op, x: Held) -> Held:
    """keras.ops.one_hot(x, num_classes, axis, dtype): ``x[..., None] == arange(n)`` moved to
    ``axis``, in Keras' dtype; an index outside ``[0, n)`` gives a zero row, as tf.one_hot
    (F.one_hot raises on it)."""
    x = ctx.canonical(x)
    classes = ctx.call_function(torch.arange, int(op.num_classes))
    hot = ctx.call_function(operator.eq, ctx.call_method("unsqueeze", x.node, -1), classes)
    rank = x.rank + 1
    axis = normalize_dim(int(op.axis), rank)
    if axis != rank - 1:
        hot = ctx.call_function(torch.movedim, hot, -1, axis)
    node = ctx.call_method("to", hot, ctx.output_dtype())
    return Held(node, canonical(rank), ctx.output_shapes[0])


_PAD_MODES = ("constant", "reflect", "symmetric")


def _pad_supported(op) -> str | None:
    if op.mode not in _PAD_MODES:
        return f"keras.ops.pad mode={op.mode!r} (supported: {', '.join(_PAD_MODES)})"
    return None


@register_op(policy=Policy.CUSTOM, supports=_pad_supported, keeps_layout=True)
def Pad(ctx: Context, op, x: Held, constant_values=None) -> Held:
    """keras.ops.pad(x, pad_width, mode, constant_values) at the held axes: ``constant`` is
    ``F.pad``; ``reflect`` / ``symmetric`` (``tf.pad``'s modes; torch has no symmetric, and
    its reflect pads 3 trailing dims at most) gather each padded axis of static size at the
    indices ``np.pad`` gives ``arange(size)``, and concatenate flipped edge slices along a
    dim of run-time size."""
    x = ctx.plain(x)
    if isinstance(constant_values, Held):
        raise UnsupportedLayerError(
            f"keras.ops.pad {ctx.path!r}: a tensor constant_values is not converted",
            [(ctx.path, "Pad", "tensor constant_values")])
    pairs = [tuple(int(v) for v in p) for p in np.broadcast_to(
        np.asarray(op.pad_width, dtype=np.int64), (x.rank, 2))]
    node = x.node
    if op.mode == "constant":
        held = physical_order(x.layout, pairs)
        flat = [v for before, after in reversed(held) for v in (before, after)]  # F.pad order
        node = ctx.call_function(torch.nn.functional.pad, node, flat,
                                 value=float(constant_values or 0))
        return Held(node, x.layout, ctx.output_shapes[0])
    for dim, (before, after) in enumerate(pairs):
        if not before and not after:
            continue
        axis = physical_axis(x.layout, dim)
        if x.shape[dim] is None:
            node = _mirror_pad(ctx, node, axis, before, after, op.mode)
            continue
        index = np.pad(np.arange(x.shape[dim]), (before, after), mode=op.mode)
        node = ctx.call_function(torch.index_select, node, axis, ctx.constant(index).node)
    return Held(node, x.layout, ctx.output_shapes[0])


def _mirror_pad(ctx: Context, node, dim: int, before: int, after: int, mode: str):
    """A reflect / symmetric pad along a dim of run-time size ``n``: the flipped edge slices
    concatenated (reflect leaves the edge out: ``x[1:before + 1]``, ``x[-after - 1:-1]``),
    which read the same at every ``n``; a pad TF's MirrorPad refuses (``>= n`` for reflect,
    ``> n`` for symmetric) fails here too rather than padding short."""
    call = ctx.call_function
    size = ctx.call_method("size", node, dim)
    skip = 1 if mode == "reflect" else 0
    limit = max(before, after) + skip
    call(torch._assert, call(operator.le, limit, size),
         f"keras.ops.pad mode={mode!r}: pads of {before}, {after} need a size of at least "
         f"{limit} along dim {dim}")
    parts = []
    if before:
        parts.append(call(torch.flip, call(torch.narrow, node, dim, skip, before), [dim]))
    parts.append(node)
    if after:
        start = call(operator.sub, size, after + skip)
        parts.append(call(torch.flip, call(torch.narrow, node, dim, start, after), [dim]))
    return call(torch.cat, parts, dim)
