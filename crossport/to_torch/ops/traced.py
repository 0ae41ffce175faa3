"""keras.ops that traced ``call()``\ s use: ``slice`` (with run-time sizes), ``unstack``,
``outer``, and the operations ``to_torch/lift.py`` records for calls Keras would compute
eagerly (a constant made symbolic, ``arange`` / a size as a tensor with run-time bounds)."""

from __future__ import annotations

import operator

import keras
import numpy as np
import torch

from crossport.errors import UnsupportedLayerError
from crossport.layout import (
    after_reduce,
    canonical,
    normalize_dim,
    physical_axis,
    physical_order,
)
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.registry import register_op
from crossport.to_torch.sizes import RunSize


@register_op(policy=Policy.CUSTOM, sizes=True, keeps_layout=True)
def Slice(ctx: Context, op, x: Held, start_indices) -> Held:
    """keras.ops.slice(x, start_indices, shape): ``x[start:start + size]`` per held axis (a
    size of -1 to the end); starts and sizes may be run-time sizes. A tensor of starts is
    not converted."""
    if isinstance(start_indices, Held) or any(isinstance(s, Held) for s in start_indices):
        raise UnsupportedLayerError(
            f"keras.ops.slice {ctx.path!r} with tensor start indices is not converted",
            [(ctx.path, "Slice", "tensor start indices")])
    x = ctx.plain(x)
    items = []
    for start, size in zip(start_indices, op.shape):
        begin = ctx.size(start)
        if not isinstance(size, torch.fx.Node) and size == -1:
            items.append(slice(begin, None))
            continue
        end = ctx.size(size) if begin == 0 and not isinstance(begin, torch.fx.Node) else \
            ctx.call_function(operator.add, begin, ctx.size(size))
        items.append(slice(begin, end))
    node = ctx.call_function(operator.getitem, x.node, physical_order(x.layout, items))
    return Held(node, x.layout, ctx.output_shapes[0])


@register_op(policy=Policy.CUSTOM)
def TraceConstant(ctx: Context, op, *anchors) -> Held:
    """A constant a traced call passed a keras.ops function along with a run-time size (a
    variable as the module's parameter, an eager tensor or array as a buffer)."""
    if isinstance(op.value, keras.Variable):
        return ctx.variable(op.value)
    return ctx.constant(np.asarray(keras.ops.convert_to_numpy(op.value)))


@register_op(policy=Policy.CUSTOM, sizes=True)
def SizeArange(ctx: Context, op, *anchors) -> Held:
    """``keras.ops.arange`` with run-time bounds: torch.arange in Keras' dtype."""
    node = ctx.call_function(torch.arange, ctx.size(op.start), ctx.size(op.stop),
                             int(op.step), dtype=ctx.output_dtype())
    return Held(node, canonical(1), ctx.output_shapes[0])


@register_op(policy=Policy.CUSTOM, sizes=True)
def SizeScalar(ctx: Context, op, *anchors) -> Held:
    """A run-time size as a 0-d tensor (``ops.cast(ops.shape(x)[1], "float32")``)."""
    node = ctx.call_function(torch.scalar_tensor, ctx.size(op.size), dtype=ctx.output_dtype())
    return Held(node, canonical(0), ())


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def Unstack(ctx: Context, op, x: Held) -> list[Held]:
    """keras.ops.unstack(x, num, axis): ``torch.unbind`` at the held axis. The graph holds
    one output per element, so the axis must have a size known at conversion."""
    x = ctx.plain(x)
    axis = normalize_dim(int(op.axis), x.rank)
    if x.shape[axis] is None:
        raise UnsupportedLayerError(
            f"keras.ops.unstack {ctx.path!r} along axis {axis}, whose size is known only at "
            "run time (the graph holds one output per element); not converted",
            [(ctx.path, "Unstack", "run-time size")])
    node = ctx.call_function(torch.unbind, x.node, physical_axis(x.layout, axis))
    layout = after_reduce(x.layout, [axis], False)
    return [Held(ctx.call_function(operator.getitem, node, i), layout, shape)
            for i, shape in enumerate(ctx.output_shapes)]


@register_op(policy=Policy.CANONICAL)
def Outer(ctx: Context, op, x1, x2):
    """keras.ops.outer(x1, x2): the outer product of the flattened inputs, in Keras'
    result dtype."""
    want = ctx.output_dtype()
    a, b = (ctx.call_method("to", ctx.call_method("reshape", v, -1), want) for v in (x1, x2))
    return ctx.call_function(torch.outer, a, b)


@register_op(policy=Policy.CANONICAL, sizes=True)
def SliceUpdate(ctx: Context, op, inputs, start_indices, updates):
    """keras.ops.slice_update(inputs, start_indices, updates): ``updates`` written over the
    block at ``start_indices``, as XLA's dynamic_update_slice (Keras' TF backend) does:
    each start clamped to ``[0, dim - update_dim]`` so the block fits. Built from
    ``slice_scatter`` dim by dim (no in-place write); starts are ints or run-time sizes, a
    tensor of starts is not converted."""
    if isinstance(start_indices, torch.fx.Node) or any(
            isinstance(s, torch.fx.Node) for s in start_indices):
        raise UnsupportedLayerError(
            f"keras.ops.slice_update {ctx.path!r} with tensor start indices is not converted",
            [(ctx.path, "SliceUpdate", "tensor start indices")])
    shape, update_shape = ctx.tensor_shapes[0], ctx.tensor_shapes[-1]
    starts = []
    for axis, start in enumerate(start_indices):
        size, length = shape[axis], update_shape[axis]
        if size is not None and length is not None and not isinstance(start, RunSize):
            starts.append(min(max(int(start), 0), size - length))
            continue
        dim = ctx.call_method("size", inputs, axis) if size is None else size
        span = ctx.call_method("size", updates, axis) if length is None else length
        top = ctx.call_function(operator.sub, dim, span)
        starts.append(ctx.call_function(max, ctx.call_function(min, ctx.size(start), top), 0))
    return _scatter(ctx, inputs, updates, starts, 0)


def _scatter(ctx: Context, x, updates, starts: list, axis: int):
    """``x`` with ``updates`` written at ``starts[axis:]`` along dims ``axis...``."""
    if axis == len(starts):
        return updates
    length = ctx.call_method("size", updates, axis)
    end = ctx.call_function(operator.add, starts[axis], length)
    block = ctx.call_function(torch.narrow, x, axis, starts[axis], length)
    inner = _scatter(ctx, block, updates, starts, axis + 1)
    return ctx.call_function(torch.slice_scatter, x, inner, axis, starts[axis], end)
