"""keras.ops.cumsum / cumprod, and the float32 accumulator ``nanstats``' nancumsum /
nancumprod share: TF's float32 kernels accumulate in float32, one element after another,
while torch's CPU kernels accumulate float32 in float64 and round the partial results. The
rounding is better in torch (a float64 reference says so); what differs is semantics:

* a float32 sum or product that overflows is ``±inf`` in TF from there on (``inf`` plus a
  finite value stays ``inf``; ``-inf`` or NaN later makes it NaN), where torch's float64
  partial results can come back into range: ``[max, max, -max]`` is ``[max, inf, inf]`` in
  TF, ``[max, inf, max]`` in torch; ``[max, max, -inf]`` ends NaN in TF, ``-inf`` in torch;
  ``[max, 10, 0.01]`` ends ``inf`` in TF, ``3e37`` in torch; ``[max, 2, 0]`` NaN, 0;
* a float32 product that falls below float32's smallest normal value is 0 in TF (its CPU
  kernels flush subnormal results to zero) and stays 0 (NaN times an infinity), where the
  float64 product can grow back: ``[1e-30, 1e-30, 1e30, 1e30]`` is ``[1e-30, 0, 0, 0]`` in
  TF, ``[1e-30, 0, 1e-30, 1]`` in torch.

So the module accumulates in float64 (torch's rounding), finds along the axis the first
partial result float32 cannot hold, and from there on gives what TF's float32 accumulator
holds. A float32 sum whose partial result falls into the subnormal range differs from TF's
flushed 0 by less than float32's smallest normal value (rounding, not reproduced).
"""

from __future__ import annotations

import operator

import torch

from crossport.layout import physical_axis
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.ops.indexing import _flat
from crossport.to_torch.registry import register_op

# a float64 sum or product rounds to float32 inf from here on: 2**128 - 2**103 is half an
# ulp past float32's largest finite value (the tie rounds to even, 2**128)
FLOAT32_OVERFLOW = float(2**128 - 2**103)
# TF's CPU kernels flush float32 results below the smallest normal value to 0
FLOAT32_SMALLEST_NORMAL = float(torch.finfo(torch.float32).tiny)


def _first_event(ctx: Context, event, dim: int, rank: int):
    """For each position along ``dim``: whether ``event`` held at it or before, and the
    index of its first occurrence (clamped into range where it never held)."""
    call = ctx.call_function
    length = ctx.call_method("size", event, dim)
    steps = ctx.call_method("reshape", call(torch.arange, length), -1, *([1] * (rank - dim - 1)))
    first = call(operator.getitem, call(torch.cummin, call(torch.where, event, steps, length),
                                        dim), 0)
    seen = call(operator.lt, first, length)
    return seen, call(torch.clamp, first, max=call(operator.sub, length, 1))


def _running_any(ctx: Context, mask, dim: int):
    """Whether ``mask`` held at each position along ``dim`` or before."""
    return ctx.call_function(operator.getitem, ctx.call_function(torch.cummax, mask, dim), 0)


def float32_cumsum(ctx: Context, x, dim: int, rank: int):
    """A float32 cumulative sum as TF's float32 accumulator gives it: the float64 partial
    sums rounded to float32, and from the first one past float32's range on, that
    infinity plus the float64 partial sum (NaN where an opposite infinity or NaN came)."""
    call = ctx.call_function
    total = call(torch.cumsum, ctx.call_method("to", x, torch.float64), dim)
    overflow = call(operator.ge, call(torch.abs, total), FLOAT32_OVERFLOW)
    seen, first = _first_event(ctx, overflow, dim, rank)
    stuck = call(operator.mul, call(torch.gather, total, dim, first), float("inf"))  # its sign
    return ctx.call_method("to", call(torch.where, seen, call(operator.add, stuck, total), total),
                           torch.float32)


def float32_cumprod(ctx: Context, x, dim: int, rank: int):
    """A float32 cumulative product as TF's float32 accumulator gives it: the float64
    partial products rounded to float32, and from the first one past float32's range
    (``±inf``) or below its smallest normal value (``±0``, flushed) on, that infinity or
    zero with the float64 product's sign; NaN from there on where a zero factor meets the
    infinity or an infinite factor the zero (and where a factor is NaN)."""
    call = ctx.call_function
    x = ctx.call_method("to", x, torch.float64)
    total = call(torch.cumprod, x, dim)
    magnitude = call(torch.abs, total)
    overflow = call(operator.ge, magnitude, FLOAT32_OVERFLOW)
    underflow = call(operator.and_, call(operator.lt, magnitude, FLOAT32_SMALLEST_NORMAL),
                     call(operator.gt, magnitude, 0.0))
    seen, first = _first_event(ctx, call(operator.or_, overflow, underflow), dim, rank)
    overflowed = call(torch.gather, overflow, dim, first)
    stuck = call(torch.copysign, call(torch.where, overflowed, float("inf"), 0.0), total)
    clash = call(torch.where, overflowed, _running_any(ctx, call(operator.eq, x, 0.0), dim),
                 _running_any(ctx, call(torch.isinf, x), dim))
    stuck = call(torch.where, call(operator.or_, clash, call(torch.isnan, total)),
                 float("nan"), stuck)
    return ctx.call_method("to", call(torch.where, seen, stuck, total), torch.float32)


def cumulative(ctx: Context, x, dim: int, rank: int, product: bool, want: torch.dtype):
    """cumsum / cumprod of ``x`` along ``dim`` in ``want``: float32 as TF's float32
    accumulator, other dtypes as torch computes them."""
    if want == torch.float32:
        return (float32_cumprod if product else float32_cumsum)(ctx, x, dim, rank)
    return ctx.call_function(torch.cumprod if product else torch.cumsum, x, dim, dtype=want)


@register_op("Cumsum", "Cumprod", policy=Policy.CUSTOM, keeps_layout=True)
def Cumulative(ctx: Context, op, x: Held) -> Held:
    """keras.ops.cumsum / cumprod(x, axis): on the held dim (``axis=None``: over the tensor
    flattened in Keras order), in Keras' dtype (int32 stays int32; torch widens it to
    int64), float32 as TF's float32 accumulator (above)."""
    x = _flat(ctx, ctx.plain(x)) if op.axis is None else ctx.plain(x)
    dim = physical_axis(x.layout, 0 if op.axis is None else int(op.axis))
    want, values = ctx.output_dtype(), x.node
    if want == torch.float32 and ctx.input_dtype != "float32":
        values = ctx.call_method("to", values, torch.float32)  # ints: rounded as in Keras
    node = cumulative(ctx, values, dim, len(x.shape), type(op).__name__ == "Cumprod", want)
    return Held(node, x.layout, x.shape)
