"""Padding: ``F.pad`` and the ATen pad ops it lowers to (pitfalls.md item 7).

``F.pad`` lists ``(before, after)`` pairs from the **last** torch dim; negative amounts crop.
``crossport.layers.Pad`` takes exactly that, plus the Keras-from-torch ``perm`` of the
arriving tensor, so every converter here keeps the layout it receives (no transpose).

Amounts computed from dynamic sizes (a pad to a multiple of a window: Swin's ``maybe_pad``,
SwinIR / Restormer / NAFNet's ``check_image_size``) take ``DynamicPad`` in every mode,
never frozen at the example's value (the amount is often 0 there). Static amounts keep
``Pad`` (tf.pad, MirrorPad).
"""

from __future__ import annotations

import torch

import crossport.capture.pad  # noqa: F401  (defines torch.ops.crossport.pad_circular)
from crossport import layers as torch_semantics
from crossport.layout import physical_pad
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register

aten = torch.ops.aten

_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_supports(node: torch.fx.Node) -> str | None:
    mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
    if mode not in _MODES:
        return f"pad mode {mode!r} (supported: {', '.join(_MODES)})"
    return None


def emit_pad(ctx, self, pad, mode: str, value):
    """``Pad(pad, mode, value, perm=layout.perm)`` on the arriving layout.

    The layer maps the torch pad list onto the held axes itself
    (``crossport.layout.physical_pad``), so it is given the layout's permutation.
    """
    value_ = ctx.plain(as_value(ctx, self))  # a flat-permuted [N, F]: feature order undone
    x, layout = value_.tensor, value_.layout
    ctx.out_layout = layout
    if any(ctx.is_dynamic(p) for p in pad):
        return _pad_at_run_time(ctx, x, layout, pad, mode, value)
    pad = [int(p) for p in pad]
    if not any(pad):
        return x
    layer = torch_semantics.Pad(pad, mode=mode, value=value if mode == "constant" else None,
                                perm=layout.perm, name=ctx.name())
    return layer(x)


def _pad_at_run_time(ctx, x, layout, pad, mode: str, value):
    """Padding whose amounts are run-time sizes (negative ones crop), per held axis.

    Constant mode concatenates filler blocks; reflect / replicate / circular gather each
    padded axis at indices computed at run time (``crossport.layers.DynamicPad``), exact
    wherever torch accepts the amounts. Where torch raises (a reflect amount >= the size,
    a circular one > it) the graph cannot: the reflection or wrap continues periodically,
    and the parity check only compares sizes torch runs.
    """
    from crossport.layers.dynamic import DynamicPad

    pairs = physical_pad(layout, list(pad))
    scalars = [ctx.size(a) for pair in pairs for a in pair if ctx.is_dynamic(a)]
    static = [[None if ctx.is_dynamic(a) else int(a) for a in pair] for pair in pairs]
    fill = 0.0 if value is None else value
    return DynamicPad(static, value=fill, mode=mode, name=ctx.name("pad"))(x, *scalars)


@register(aten.pad.default, policy=Policy.CUSTOM, keeps_layout=True, supports=_pad_supports,
          dynamic=True)
def aten_pad_default(ctx, self, pad, mode="constant", value=None):
    """pad(Tensor self, SymInt[] pad, str mode="constant", float? value=None) -> Tensor

    F.pad pairs start at the last torch dim (tf.pad: first dim); negative pads crop.
    reflect mirrors without repeating the edge; replicate and circular have no tf.pad mode.
    """
    return emit_pad(ctx, self, pad, mode, 0.0 if value is None else value)


@register(aten.constant_pad_nd.default, policy=Policy.CUSTOM, keeps_layout=True,
          dynamic=True)
def aten_constant_pad_nd_default(ctx, self, pad, value=0):
    """constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor"""
    return emit_pad(ctx, self, pad, "constant", value)


@register(aten.reflection_pad1d.default, aten.reflection_pad2d.default,
          aten.reflection_pad3d.default, policy=Policy.CUSTOM, keeps_layout=True,
          dynamic=True)
def aten_reflection_pad2d_default(ctx, self, padding):
    """reflection_pad2d(Tensor self, SymInt[4] padding) -> Tensor (mirror, edge not repeated)"""
    return emit_pad(ctx, self, padding, "reflect", None)


@register(aten.replication_pad1d.default, aten.replication_pad2d.default,
          aten.replication_pad3d.default, policy=Policy.CUSTOM, keeps_layout=True,
          dynamic=True)
def aten_replication_pad2d_default(ctx, self, padding):
    """replication_pad2d(Tensor self, SymInt[4] padding) -> Tensor (edge repeated)"""
    return emit_pad(ctx, self, padding, "replicate", None)


@register(aten._pad_circular.default, policy=Policy.CUSTOM, keeps_layout=True,
          dynamic=True)
def aten_pad_circular_default(ctx, self, pad):
    """_pad_circular(Tensor self, SymInt[] pad) -> Tensor (wraps around)"""
    return emit_pad(ctx, self, pad, "circular", None)


@register(torch.ops.crossport.pad_circular.default, policy=Policy.CUSTOM, keeps_layout=True,
          dynamic=True)
def crossport_pad_circular_default(ctx, self, pad):
    """pad_circular(Tensor self, SymInt[] pad) -> Tensor (crossport.capture.pad: a circular
    F.pad with amounts from dynamic sizes, opaque during capture)"""
    return emit_pad(ctx, self, pad, "circular", None)
