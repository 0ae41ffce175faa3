"""More NaN-ignoring keras.ops, Keras' TF formulas (``numeric.py`` has nansum / nanmean /
nanmax / nanmin, ``quantiles.py`` nanquantile / nanpercentile / nanmedian):

* ``nanprod``: NaN as 1, then ``prod`` in Keras' dtype (bool / int8 / int16 in int32);
* ``nanvar`` / ``nanstd``: the NaN-free mean, the squares of the NaN-free deviations summed
  over the NaN-free count (all-NaN: ``0/0``, NaN), ``std`` its square root; ints in float32;
* ``nancumsum`` / ``nancumprod``: Keras' ``nan_to_num`` first, which also makes ``±inf`` the
  dtype's largest finite values (torch's ``nancumsum`` would keep them), then the cumulative
  op (``axis=None``: over the flattened tensor), bools as int32; a float32 sum or product
  overflows (and a product underflows) as TF's float32 accumulator does
  (``cumulative.py``: torch's CPU kernels accumulate in float64, so ``[max, max, -max]``
  would end finite, ``[max, 2, 0]`` 0 where TF gives NaN);
* ``nanargmax`` / ``nanargmin``: NaN as ``∓inf``, Keras' argmax (``-0.0`` just below 0, the
  first of ties), an all-NaN slice -1; int32.
"""

from __future__ import annotations

import operator

import torch

from crossport.layout import normalize_dim
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context
from crossport.to_torch.ops.cumulative import cumulative
from crossport.to_torch.ops.numeric import _dims, _float, _nan_supported, _rank
from crossport.to_torch.registry import register_op


@register_op(policy=Policy.CANONICAL, supports=_nan_supported)
def Nanprod(ctx: Context, op, x):
    """keras.ops.nanprod(x, axis, keepdims): NaN as 1, the product in Keras' dtype."""
    call = ctx.call_function
    if _float(ctx):
        x = call(torch.where, call(torch.isnan, x), 1.0, x)
    want, keep = ctx.output_dtype(), bool(op.keepdims)
    x = ctx.call_method("to", x, want)
    for dim in sorted(_dims(op, _rank(ctx)), reverse=True):  # torch reduces one dim at a time
        x = call(torch.prod, x, dim, keepdim=keep, dtype=want)
    return x


def _nanvar(ctx: Context, op, x):
    call = ctx.call_function
    want, keep = ctx.output_dtype(), bool(op.keepdims)
    dims = _dims(op, _rank(ctx))
    x = ctx.call_method("to", x, want)
    valid = call(torch.logical_not, call(torch.isnan, x))
    clean = call(torch.where, valid, x, 0.0)
    count = call(torch.sum, ctx.call_method("to", valid, want), dim=dims, keepdim=True)
    mean = call(operator.truediv, call(torch.sum, clean, dim=dims, keepdim=True), count)
    centered = call(torch.where, valid, call(operator.sub, x, mean), 0.0)
    squares = call(torch.sum, call(torch.square, centered), dim=dims, keepdim=True)
    variance = call(operator.truediv, squares, count)
    return variance if keep else call(torch.squeeze, variance, tuple(dims))


@register_op(policy=Policy.CANONICAL, supports=_nan_supported)
def Nanvar(ctx: Context, op, x):
    """keras.ops.nanvar(x, axis, keepdims): the NaN-free biased variance (all-NaN NaN)."""
    return _nanvar(ctx, op, x)


@register_op(policy=Policy.CANONICAL, supports=_nan_supported)
def Nanstd(ctx: Context, op, x):
    """keras.ops.nanstd(x, axis, keepdims): the square root of nanvar."""
    return ctx.call_function(torch.sqrt, _nanvar(ctx, op, x))


@register_op("Nancumsum", "Nancumprod", policy=Policy.CANONICAL)
def Nancumulative(ctx: Context, op, x):
    """keras.ops.nancumsum / nancumprod(x, axis, dtype): Keras' nan_to_num (NaN as 0 / 1,
    ±inf as the dtype's extremes), then cumsum / cumprod in Keras' dtype."""
    call, product = ctx.call_function, type(op).__name__ == "Nancumprod"
    if _float(ctx):
        x = call(torch.nan_to_num, x, nan=1.0 if product else 0.0)
    if op.dtype is not None:
        x = ctx.call_method("to", x, getattr(torch, str(op.dtype)))
    want = ctx.output_dtype()
    if op.axis is None:
        x, axis = ctx.call_method("reshape", x, -1), 0
    else:
        axis = normalize_dim(int(op.axis), _rank(ctx))
    return cumulative(ctx, x, axis, len(ctx.output_shapes[0]), product, want)


@register_op("Nanargmax", "Nanargmin", policy=Policy.CANONICAL)
def Nanargmax(ctx: Context, op, x):
    """keras.ops.nanargmax / nanargmin(x, axis, keepdims): NaN as ∓inf, Keras' argmax
    (-0.0 just below 0), -1 for an all-NaN slice; int32."""
    call, smallest = ctx.call_function, type(op).__name__ == "Nanargmin"
    rank, keep = _rank(ctx), bool(op.keepdims)
    fn = torch.argmin if smallest else torch.argmax
    if op.axis is None:
        flat, dim = ctx.call_method("reshape", x, -1), 0
    else:
        flat, dim = x, normalize_dim(int(op.axis), rank)
    if not _float(ctx):
        return _arg_keepdims(ctx, op, ctx.call_method("to", call(fn, flat, dim), torch.int32),
                             rank)
    nan = call(torch.isnan, flat)
    values = call(torch.where, nan, float("inf") if smallest else float("-inf"), flat)
    negative_zero = call(torch.logical_and, call(torch.eq, values, 0.0),
                         call(torch.signbit, values))
    tiny = torch.finfo(torch.float64 if ctx.input_dtype == "float64" else torch.float32).tiny
    values = call(torch.where, negative_zero, -tiny, values)
    found = _arg_keepdims(ctx, op, call(fn, values, dim), rank)
    all_nan = call(torch.all, call(torch.isnan, x), *([] if op.axis is None else [dim]),
                   **({"keepdim": keep} if op.axis is not None else {}))
    if op.axis is None and keep:
        all_nan = ctx.call_method("reshape", all_nan, *([1] * rank))
    return ctx.call_method("to", call(torch.where, all_nan, -1, found), torch.int32)


def _arg_keepdims(ctx: Context, op, found, rank: int):
    """Keras' keepdims of an arg-reduction: ``axis=None`` keeps every dim as 1."""
    if not op.keepdims:
        return found
    if op.axis is None:
        return ctx.call_method("reshape", found, *([1] * rank))
    return ctx.call_method("unsqueeze", found, normalize_dim(int(op.axis), rank))
