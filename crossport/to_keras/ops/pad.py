"""Padding: ``F.pad`` and the ATen pad ops it lowers to (pitfalls.md item 7).

``F.pad`` lists ``(before, after)`` pairs from the **last** torch dim; negative amounts crop.
``crossport.layers.Pad`` takes exactly that, plus the Keras-from-torch ``perm`` of the
arriving tensor, so every converter here keeps the layout it receives (no transpose).
"""

from __future__ import annotations

import torch

from crossport import layers as torch_semantics
from crossport.layout import physical_pad
from crossport.to_keras.dynamic_dims import is_dynamic_size
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register

aten = torch.ops.aten

_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_supports(node: torch.fx.Node) -> str | None:
    mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
    if mode not in _MODES:
        return f"pad mode {mode!r} (supported: {', '.join(_MODES)})"
    return None


def _runtime_amounts(node: torch.fx.Node) -> str | None:
    """``dynamic=``: any input dim may be dynamic; amounts computed from a dynamic size only
    in constant mode (``DynamicPad``), otherwise refused, never frozen at the example's
    value (a pad to a multiple of a window is 0 there, and at the check's sizes too)."""
    amounts = node.args[1] if len(node.args) > 1 else ()
    dynamic = [(i, v) for i, v in enumerate(map(_dynamic_amount, amounts)) if v is not None]
    if dynamic and _mode(node) != "constant":
        i, value = dynamic[0]
        return (f"pad amount {i} ({value}) is computed from a dynamic size; only constant "
                f"padding takes run-time amounts, not {_mode(node)!r}")
    return None


def _dynamic_amount(item):
    value = item.meta.get("val") if isinstance(item, torch.fx.Node) else item
    return value if is_dynamic_size(value) else None


def _mode(node: torch.fx.Node) -> str:
    if node.target is aten.pad.default:
        return node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
    return "constant" if node.target is aten.constant_pad_nd.default else "other"


def emit_pad(ctx, self, pad, mode: str, value):
    """``Pad(pad, mode, value, perm=layout.perm)`` on the arriving layout.

    The layer maps the torch pad list onto the held axes itself
    (``crossport.layout.physical_pad``), so it is given the layout's permutation.
    """
    value_ = ctx.plain(as_value(ctx, self))  # a flat-permuted [N, F]: feature order undone
    x, layout = value_.tensor, value_.layout
    ctx.out_layout = layout
    if any(ctx.is_dynamic(p) for p in pad):
        return _pad_at_run_time(ctx, x, layout, pad, value)
    pad = [int(p) for p in pad]
    if not any(pad):
        return x
    layer = torch_semantics.Pad(pad, mode=mode, value=value if mode == "constant" else None,
                                perm=layout.perm, name=ctx.name())
    return layer(x)


def _pad_at_run_time(ctx, x, layout, pad, value):
    """Constant padding whose amounts are run-time sizes (negative ones crop), per held axis."""
    from crossport.layers.dynamic import DynamicPad

    pairs = physical_pad(layout, list(pad))
    scalars = [ctx.size(a) for pair in pairs for a in pair if ctx.is_dynamic(a)]
    static = [[None if ctx.is_dynamic(a) else int(a) for a in pair] for pair in pairs]
    return DynamicPad(static, value=value, name=ctx.name("pad"))(x, *scalars)


@register(aten.pad.default, policy=Policy.CUSTOM, keeps_layout=True, supports=_pad_supports,
          dynamic=_runtime_amounts)
def aten_pad_default(ctx, self, pad, mode="constant", value=None):
    """pad(Tensor self, SymInt[] pad, str mode="constant", float? value=None) -> Tensor

    F.pad pairs start at the last torch dim (tf.pad: first dim); negative pads crop.
    reflect mirrors without repeating the edge; replicate and circular have no tf.pad mode.
    """
    return emit_pad(ctx, self, pad, mode, 0.0 if value is None else value)


@register(aten.constant_pad_nd.default, policy=Policy.CUSTOM, keeps_layout=True,
          dynamic=_runtime_amounts)
def aten_constant_pad_nd_default(ctx, self, pad, value=0):
    """constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor"""
    return emit_pad(ctx, self, pad, "constant", value)


@register(aten.reflection_pad1d.default, aten.reflection_pad2d.default,
          aten.reflection_pad3d.default, policy=Policy.CUSTOM, keeps_layout=True,
          dynamic=_runtime_amounts)
def aten_reflection_pad2d_default(ctx, self, padding):
    """reflection_pad2d(Tensor self, SymInt[4] padding) -> Tensor (mirror, edge not repeated)"""
    return emit_pad(ctx, self, padding, "reflect", None)


@register(aten.replication_pad1d.default, aten.replication_pad2d.default,
          aten.replication_pad3d.default, policy=Policy.CUSTOM, keeps_layout=True,
          dynamic=_runtime_amounts)
def aten_replication_pad2d_default(ctx, self, padding):
    """replication_pad2d(Tensor self, SymInt[4] padding) -> Tensor (edge repeated)"""
    return emit_pad(ctx, self, padding, "replicate", None)


@register(aten._pad_circular.default, policy=Policy.CUSTOM, keeps_layout=True,
          dynamic=_runtime_amounts)
def aten_pad_circular_default(ctx, self, pad):
    """_pad_circular(Tensor self, SymInt[] pad) -> Tensor (wraps around)"""
    return emit_pad(ctx, self, pad, "circular", None)
