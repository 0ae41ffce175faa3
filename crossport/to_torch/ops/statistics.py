"""keras.ops statistics in functional graphs: median, moments, ptp, amax / amin.

``median`` is Keras' TF-backend quantile at 0.5 (``tfp.stats.percentile``'s linear
method), computed the same way rather than with ``torch.median`` (the lower median):
the sorted values at ``hi = d // 2`` and ``lo = max(hi - 1, 0)`` mixed as
``s[hi] * (1 - f) + s[lo] * f`` with ``f`` 0 for an odd count and 0.5 for an even one, so an
odd count's ``s[lo] * 0`` is NaN where ``s[lo]`` is infinite, as in Keras
(``median([-inf, 0, 1])`` is NaN); a slice holding NaN gives NaN (Keras overwrites it).
"""

from __future__ import annotations

import operator

import torch

from crossport.layout import after_reduce, canonical, physical_axes, reduction_dims
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.ops.kops import _reduce
from crossport.to_torch.registry import register_op

_reduce("Amax", torch.amax)   # keras.ops.amax / amin: max / min (NaN propagates in both)
_reduce("Amin", torch.amin)


@register_op(policy=Policy.CUSTOM)
def Median(ctx: Context, op, x: Held) -> Held:
    """keras.ops.median(x, axis, keepdims): Keras' linear-quantile formula on a stable
    ``torch.sort`` of the axes' values (moved last and flattened; ``axis=None``: the whole
    tensor, batch included), in Keras' float dtype (ints in float32). See the module
    docstring for infinities and NaN."""
    x = ctx.plain(x)
    want = ctx.output_dtype()
    node = x.node if ctx.input_dtype == str(want).replace("torch.", "") else ctx.call_method(
        "to", x.node, want)
    if op.axis is None:
        x = ctx.canonical(Held(node, x.layout, x.shape))
        axes = list(range(x.rank))
        node = ctx.call_method("reshape", x.node, -1)
        count = None if None in x.shape else _prod(x.shape)
    else:
        axes = sorted(reduction_dims(op.axis, x.rank))
        held = physical_axes(x.layout, axes)
        node = ctx.call_function(torch.movedim, node, tuple(sorted(held)),
                                 tuple(range(-len(held), 0)))
        if len(held) > 1:
            node = ctx.call_method("flatten", node, -len(held))
        sizes = [x.shape[a] for a in axes]
        count = None if None in sizes else _prod(sizes)
    if count is None:
        count = ctx.call_method("size", node, -1)
    values = ctx.call_function(operator.getitem, ctx.call_function(
        torch.sort, node, dim=-1, stable=True), 0)
    call = ctx.call_function
    if isinstance(count, int):
        hi, fraction = count // 2, 0.5 if count % 2 == 0 else 0.0
        lo, keep = max(hi - 1, 0), 1.0 - fraction
    else:  # a size known at run time only
        hi = call(operator.floordiv, count, 2)
        lo = call(operator.sub, hi, 1)  # -1 for one element: that element, as max(-1, 0)
        fraction = call(operator.mul, call(operator.eq, call(operator.mod, count, 2), 0), 0.5)
        keep = call(operator.sub, 1.0, fraction)
    upper = call(torch.select, values, -1, hi)
    lower = call(torch.select, values, -1, lo)
    node = call(operator.add, call(operator.mul, upper, keep),
                call(operator.mul, lower, fraction))
    has_nan = call(torch.any, call(torch.isnan, values), dim=-1)
    node = ctx.call_function(torch.where, has_nan, float("nan"), node)
    if op.axis is None:
        if op.keepdims:
            node = ctx.call_method("reshape", node, *[1] * x.rank)
            return Held(node, canonical(x.rank), ctx.output_shapes[0])
        return Held(node, canonical(0), ctx.output_shapes[0])
    layout = after_reduce(x.layout, axes, bool(op.keepdims))
    if op.keepdims:
        for dim in sorted(physical_axes(x.layout, axes)):
            node = ctx.call_method("unsqueeze", node, dim)
    return Held(node, layout, ctx.output_shapes[0])


def _prod(sizes) -> int:
    total = 1
    for s in sizes:
        total *= int(s)
    return total


@register_op(policy=Policy.CUSTOM)
def Moments(ctx: Context, op, x: Held) -> list[Held]:
    """keras.ops.moments(x, axes, keepdims): tf.nn.moments' ``mean`` and
    ``mean((x - mean)^2)`` over the held axes (the biased variance; an infinity makes it
    NaN in both)."""
    x = ctx.plain(x)
    axes = sorted(reduction_dims(op.axes, x.rank))
    held = physical_axes(x.layout, axes)
    call = ctx.call_function
    mean = call(torch.mean, x.node, dim=held, keepdim=True)
    variance = call(torch.mean, call(torch.square, call(operator.sub, x.node, mean)),
                    dim=held, keepdim=True)
    layout = after_reduce(x.layout, axes, bool(op.keepdims))
    if not op.keepdims:
        mean, variance = (call(torch.squeeze, v, held) for v in (mean, variance))
    return [Held(mean, layout, ctx.output_shapes[0]), Held(variance, layout,
                                                           ctx.output_shapes[1])]


@register_op(policy=Policy.CUSTOM)
def Ptp(ctx: Context, op, x: Held) -> Held:
    """keras.ops.ptp(x, axis, keepdims): ``amax - amin`` over the held axes."""
    x = ctx.plain(x)
    axes = sorted(reduction_dims(op.axis, x.rank))
    held = physical_axes(x.layout, axes)
    keep = bool(op.keepdims)
    node = ctx.call_function(operator.sub,
                             ctx.call_function(torch.amax, x.node, dim=held, keepdim=keep),
                             ctx.call_function(torch.amin, x.node, dim=held, keepdim=keep))
    return Held(node, after_reduce(x.layout, axes, keep), ctx.output_shapes[0])
