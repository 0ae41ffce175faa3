"""keras.ops on bits and the NaN-ignoring reductions, Keras' TF formulas (not torch's
kernels where they differ):

* ``bitwise_and/or/xor/invert``: both operands cast to Keras' result dtype first;
* ``left_shift`` / ``right_shift`` (and the ``bitwise_`` names): TF's kernels clamp the
  shift to ``[0, bits - 1]`` (``1 << 40`` on int32 is ``1 << 31``, ``200 >> 9`` on uint8 is
  ``200 >> 7``); torch shifts past the width to 0 / -1, so the module clamps as TF does;
* ``nansum`` (NaN as 0; bool / int8 / int16 sum in int32), ``nanmean`` (the NaN-free sum
  over the NaN-free count: all-NaN is ``0/0``, NaN; ints as a float32 mean), ``nanmax`` /
  ``nanmin`` (NaN as ``∓inf``, all-NaN NaN; bools as any / all).
"""

from __future__ import annotations

import operator

import numpy as np
import torch

from crossport.layout import normalize_dim
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context
from crossport.to_torch.registry import register_op

_BINARY = {"BitwiseAnd": operator.and_, "BitwiseOr": operator.or_,
           "BitwiseXor": operator.xor}


def _as(ctx: Context, value, dtype: torch.dtype):
    """A tensor operand in ``dtype``; a numpy operand a number or a buffer."""
    if isinstance(value, np.ndarray):
        value = ctx.constant(value).node
    elif isinstance(value, np.generic):
        return value.item()
    return ctx.call_method("to", value, dtype) if isinstance(value, torch.fx.Node) else value


def _bitwise(name: str, fn) -> None:
    @register_op(name, policy=Policy.CANONICAL)
    def convert(ctx: Context, op, x, y):
        want = ctx.output_dtype()
        return ctx.call_function(fn, _as(ctx, x, want), _as(ctx, y, want))

    convert.__name__ = convert.__qualname__ = name
    convert.__doc__ = f"keras.ops.{name}: both operands in Keras' result dtype, then {fn.__name__}."


for _name, _fn in _BINARY.items():
    _bitwise(_name, _fn)


@register_op("BitwiseInvert", "BitwiseNot", policy=Policy.CANONICAL)
def BitwiseInvert(ctx: Context, op, x):
    """keras.ops.bitwise_invert / bitwise_not: ``~x`` (bools: logical not)."""
    return ctx.call_function(torch.bitwise_not, x)


def _shift(ctx: Context, x, y, fn):
    want = ctx.output_dtype()
    x = _as(ctx, x, want)
    bits = torch.iinfo(want).bits if want != torch.bool else 1
    if isinstance(y, torch.fx.Node):
        y = ctx.call_function(torch.clamp, _as(ctx, y, want), 0, bits - 1)
    else:
        y = min(max(int(_as(ctx, y, want)), 0), bits - 1)
    return ctx.call_function(fn, x, y)


@register_op("BitwiseLeftShift", "LeftShift", policy=Policy.CANONICAL)
def BitwiseLeftShift(ctx: Context, op, x, y):
    """keras.ops.left_shift: ``x << clamp(y, 0, bits - 1)`` (TF's kernel)."""
    return _shift(ctx, x, y, operator.lshift)


@register_op("BitwiseRightShift", "RightShift", policy=Policy.CANONICAL)
def BitwiseRightShift(ctx: Context, op, x, y):
    """keras.ops.right_shift: ``x >> clamp(y, 0, bits - 1)`` (arithmetic for signed)."""
    return _shift(ctx, x, y, operator.rshift)


def _dims(op, rank: int) -> list[int]:
    if op.axis is None:
        return list(range(rank))
    axes = op.axis if isinstance(op.axis, (list, tuple)) else [op.axis]
    return sorted(normalize_dim(int(a), rank) for a in axes)


def _nan_supported(op) -> str | None:
    if isinstance(op.axis, (list, tuple)) and len(op.axis) == 0:
        return f"keras.ops.{type(op).__name__.lower()} over no axis is not converted"
    return None


def _rank(ctx: Context) -> int:
    return len(ctx.input_shape)


@register_op(policy=Policy.CANONICAL, supports=_nan_supported)
def Nansum(ctx: Context, op, x):
    """keras.ops.nansum(x, axis, keepdims): NaN as 0, in Keras' sum dtype."""
    call = ctx.call_function
    clean = call(torch.where, call(torch.isnan, x), 0, x) if _float(ctx) else x
    dims = _dims(op, _rank(ctx))
    want = ctx.output_dtype()
    if not dims:
        return _as(ctx, clean, want)
    return call(torch.sum, clean, dim=dims, keepdim=bool(op.keepdims), dtype=want)


@register_op(policy=Policy.CANONICAL, supports=_nan_supported)
def Nanmean(ctx: Context, op, x):
    """keras.ops.nanmean(x, axis, keepdims): the NaN-free sum over the NaN-free count
    (all-NaN: NaN); integers: the float32 mean."""
    call = ctx.call_function
    dims, keep, want = _dims(op, _rank(ctx)), bool(op.keepdims), ctx.output_dtype()
    if not _float(ctx):
        return call(torch.mean, _as(ctx, x, want), dim=dims, keepdim=keep)
    nan = call(torch.isnan, x)
    total = call(torch.sum, call(torch.where, nan, 0, x), dim=dims, keepdim=keep)
    count = call(torch.sum, _as(ctx, call(torch.logical_not, nan), want), dim=dims,
                 keepdim=keep)
    return call(operator.truediv, _as(ctx, total, want), count)


def _nan_extreme(ctx: Context, op, x, reduce, fill: float, boolean):
    call = ctx.call_function
    dims, keep = _dims(op, _rank(ctx)), bool(op.keepdims)
    if ctx.input_dtype == "bool":
        return call(boolean, x, dim=dims, keepdim=keep)
    if not _float(ctx):
        return call(reduce, x, dim=dims, keepdim=keep)
    nan = call(torch.isnan, x)
    value = call(reduce, call(torch.where, nan, fill, x), dim=dims, keepdim=keep)
    all_nan = call(torch.all, nan, dim=dims, keepdim=keep)
    return call(torch.where, all_nan, float("nan"), value)


@register_op(policy=Policy.CANONICAL, supports=_nan_supported)
def Nanmax(ctx: Context, op, x):
    """keras.ops.nanmax(x, axis, keepdims): NaN as -inf, all-NaN NaN; bools: any."""
    return _nan_extreme(ctx, op, x, torch.amax, float("-inf"), torch.any)


@register_op(policy=Policy.CANONICAL, supports=_nan_supported)
def Nanmin(ctx: Context, op, x):
    """keras.ops.nanmin(x, axis, keepdims): NaN as +inf, all-NaN NaN; bools: all."""
    return _nan_extreme(ctx, op, x, torch.amin, float("inf"), torch.all)


def _float(ctx: Context) -> bool:
    return ctx.input_dtype.startswith(("float", "bfloat"))
