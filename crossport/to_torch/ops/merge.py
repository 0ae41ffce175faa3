"""Merging layers: Add/Subtract/Multiply/Average/Maximum/Minimum (elementwise), Concatenate."""

from __future__ import annotations

import operator

import torch

from crossport.layout import normalize_dim, physical_axis
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.registry import register_layer


def _fold(ctx: Context, fn, inputs):
    out = inputs[0]
    for x in inputs[1:]:
        out = ctx.call_function(fn, out, x)
    return out


@register_layer(policy=Policy.AGNOSTIC)
def Add(ctx: Context, layer, inputs):
    """keras.layers.Add: sum of the inputs in order (same layout, broadcasting as Keras)."""
    return _fold(ctx, operator.add, inputs)


@register_layer(policy=Policy.AGNOSTIC)
def Subtract(ctx: Context, layer, inputs):
    """keras.layers.Subtract: ``inputs[0] - inputs[1]``."""
    return ctx.call_function(operator.sub, inputs[0], inputs[1])


@register_layer(policy=Policy.AGNOSTIC)
def Multiply(ctx: Context, layer, inputs):
    """keras.layers.Multiply: product of the inputs in order."""
    return _fold(ctx, operator.mul, inputs)


@register_layer(policy=Policy.AGNOSTIC)
def Maximum(ctx: Context, layer, inputs):
    """keras.layers.Maximum: elementwise maximum."""
    return _fold(ctx, torch.maximum, inputs)


@register_layer(policy=Policy.AGNOSTIC)
def Minimum(ctx: Context, layer, inputs):
    """keras.layers.Minimum: elementwise minimum."""
    return _fold(ctx, torch.minimum, inputs)


@register_layer(policy=Policy.AGNOSTIC)
def Average(ctx: Context, layer, inputs):
    """keras.layers.Average: the sum divided by the count (Keras' order of operations)."""
    return ctx.call_function(operator.truediv, _fold(ctx, operator.add, inputs), len(inputs))


@register_layer(policy=Policy.CUSTOM, keeps_layout=True)
def Concatenate(ctx: Context, layer, inputs: list[Held]) -> Held:
    """keras.layers.Concatenate(axis): torch.cat on the held dim of the Keras axis.

    Every input takes the first input's layout (channels-first concatenation in CNNs: no
    permute).
    """
    first = ctx.plain(inputs[0])
    values = [ctx.to_layout(x, first.layout) for x in inputs]
    axis = normalize_dim(int(layer.get_config()["axis"]), first.rank)
    node = ctx.call_function(torch.cat, [v.node for v in values],
                             dim=physical_axis(first.layout, axis))
    shape = list(first.shape)
    sizes = [v.shape[axis] for v in values]
    shape[axis] = None if None in sizes else sum(sizes)
    return Held(node, first.layout, tuple(shape))


def _dot_supported(layer) -> str | None:
    axes = layer.get_config()["axes"]
    if not (isinstance(axes, int) or len(axes) == 2):
        return f"Dot axes {axes}"
    for node in layer._inbound_nodes:
        ranks = [len(t.shape) for t in node.input_tensors]
        if len(set(ranks)) != 1 or ranks[0] not in (2, 3):
            return f"Dot of inputs of ranks {ranks} (only two rank-2 or two rank-3 inputs)"
    return None


@register_layer(policy=Policy.CANONICAL, supports=_dot_supported)
def Dot(ctx: Context, layer, inputs):
    """keras.layers.Dot(axes, normalize): batch dot of rank-2/3 inputs (bmm / sum of products)."""
    cfg = layer.get_config()
    x, y = inputs
    rank = len(ctx.input_shape)
    axes = cfg["axes"] if isinstance(cfg["axes"], (list, tuple)) else [cfg["axes"]] * 2
    a1, a2 = (int(a) % rank for a in axes)
    if cfg["normalize"]:  # Keras: l2_normalize along the contracted axes
        x = ctx.call_function(torch.nn.functional.normalize, x, dim=a1, eps=1e-12)
        y = ctx.call_function(torch.nn.functional.normalize, y, dim=a2, eps=1e-12)
    if rank == 2:
        return ctx.call_function(torch.sum, ctx.call_function(operator.mul, x, y), dim=1,
                                 keepdim=True)
    x = x if a1 == 2 else ctx.call_method("transpose", x, 1, 2)
    y = y if a2 == 1 else ctx.call_method("transpose", y, 1, 2)
    return ctx.call_function(torch.bmm, x, y)
