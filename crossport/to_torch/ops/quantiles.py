"""keras.ops quantiles and bins, Keras' TF formulas (``tfp.stats.percentile``'s):

* ``quantile`` / ``percentile`` / ``nanquantile`` / ``nanpercentile`` / ``nanmedian``: the
  axes' values moved last, flattened and sorted; with ``d`` values and ``q`` in float64
  (``q`` as Keras reads it: a float32 tensor, divided by 100 in float32 for percentiles,
  then float64; ``quantile`` keeps a float64 array's dtype), ``exact = (d - 1) * q`` and the
  indices ``floor`` / ``ceil`` / ``round`` (half to even) of it clipped to ``[0, d - 1]``;
  ``linear`` mixes ``s[hi] * (1 - f) + s[lo] * f`` with ``lo = max(hi - 1, 0)`` and
  ``f = hi - exact`` in the compute dtype (so ``inf * 0`` is NaN as in Keras). A slice
  holding NaN is NaN (``quantile``); the nan-variants take each slice's NaN-free values
  (an all-NaN slice is NaN). Keras' ``Quantile`` op ignores ``method`` (its ``call`` never
  passes it): the linear one, as in Keras. A vector ``q`` puts its axis first.
* ``searchsorted(sorted_sequence, values, side)``: TF's binary search, int32; a NaN value
  is 0 on the left side (torch's kernel gives the length) and the length on the right. A
  sequence of run-time length is refused: Keras types the result int64 in its graph, but
  its TF backend gives int32 when run eagerly (the length is known then).
* ``digitize(x, bins)``: TF's ``Bucketize`` (the count of bins ``<=`` x, NaN past the
  last), bins float32 and ints compared as float32, int32.
"""

from __future__ import annotations

import collections
import operator

import numpy as np
import torch

from crossport.errors import UnsupportedLayerError
from crossport.layout import normalize_dim
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context
from crossport.to_torch.registry import register_op

_PERCENT = frozenset({"Percentile", "Nanpercentile"})
_NAN = frozenset({"Nanquantile", "Nanpercentile", "Nanmedian"})


def _axes(axis, rank: int) -> list[int] | None:
    if axis is None:
        return None
    axes = axis if isinstance(axis, (list, tuple)) else [axis]
    return sorted(normalize_dim(int(a), rank) for a in axes)


def _q64(ctx: Context, op, q):
    """``q`` as Keras' ``_quantile`` reads it (see the module docstring): a float64 node and
    its rank."""
    name = type(op).__name__
    if isinstance(q, torch.fx.Node):
        rank = len(ctx.tensor_shapes[1])
        own = ctx.input_dtypes[1]
        if name != "Quantile" or "float" not in own:
            q = ctx.call_method("to", q, torch.float32)
        if name in _PERCENT:
            q = ctx.call_function(operator.truediv, q, 100.0)
        return ctx.call_method("to", q, torch.float64), rank
    keep = name == "Quantile" and isinstance(q, (np.ndarray, np.generic)) \
        and q.dtype == np.float64
    values = np.asarray(q, np.float64 if keep else np.float32)
    if name in _PERCENT:
        values = values / np.float32(100)
    return ctx.constant(values.astype(np.float64)).node, values.ndim


def _rows(ctx: Context, x, axes: list[int] | None, rank: int):
    """``x`` with ``axes`` moved last and flattened into one (``None``: all of it)."""
    if axes is None:
        return ctx.call_method("reshape", x, -1)
    others = [i for i in range(rank) if i not in axes]
    node = ctx.call_method("permute", x, *others, *axes)
    return ctx.call_method("flatten", node, -len(axes)) if len(axes) > 1 else node


def _index(ctx: Context, exact, kind: str, last, per_row: bool):
    """TF's ``clip(int32(floor/ceil/round(exact)), 0, d - 1)``."""
    rounding = {"lower": torch.floor, "higher": torch.ceil, "nearest": torch.round}[kind]
    index = ctx.call_method("to", ctx.call_function(rounding, exact), torch.int64)
    return _clip(ctx, index, last, per_row)


def _clip(ctx: Context, index, last, per_row: bool):
    """``index`` in ``[0, last]`` (``last`` is -1 for an empty slice: 0 here, NaN later)."""
    call = ctx.call_function
    if per_row:  # a tensor of the rows' last indices
        return call(torch.clamp, call(torch.minimum, index, last), min=0)
    return call(torch.clamp, call(torch.clamp, index, max=last), min=0)


def _pick(ctx: Context, values, index, per_row: bool):
    """``values[..., index]``: one index set for all rows, or one per row."""
    if not per_row:
        return ctx.call_function(operator.getitem, values, (Ellipsis, index))
    return ctx.call_function(torch.gather, values, -1, index)


def _estimate(ctx: Context, values, count, q, method: str, dtype, per_row: bool):
    """The ``method`` quantiles ``q`` of sorted ``values`` (``count`` valid ones per row:
    an int, or an int64 tensor of the rows' shape plus one when ``per_row``)."""
    call = ctx.call_function
    last = call(operator.sub, count, 1)
    exact = call(operator.mul, call(operator.sub, ctx.call_method("to", count, torch.float64)
                                    if per_row else count, 1), q)
    if method in ("lower", "higher", "nearest"):
        return _pick(ctx, values, _index(ctx, exact, method, last, per_row), per_row)
    if method == "midpoint":
        low = _pick(ctx, values, _index(ctx, exact, "lower", last, per_row), per_row)
        high = _pick(ctx, values, _index(ctx, exact, "higher", last, per_row), per_row)
        return call(operator.mul, call(operator.add, low, high), 0.5)
    larger = _index(ctx, exact, "higher", last, per_row)
    smaller = call(torch.clamp, call(operator.sub, larger, 1), min=0)
    larger = _clip(ctx, call(operator.add, smaller, 1), last, per_row)
    fraction = ctx.call_method("to", call(operator.sub, ctx.call_method(
        "to", larger, torch.float64), exact), dtype)
    keep = call(torch.rsub, fraction, 1)
    return call(operator.add,
                call(operator.mul, _pick(ctx, values, larger, per_row), keep),
                call(operator.mul, _pick(ctx, values, smaller, per_row), fraction))


def _quantile_supported(op) -> str | None:
    if getattr(op, "method", "linear") not in ("linear", "lower", "higher", "midpoint",
                                               "nearest"):
        return f"keras.ops.{type(op).__name__.lower()} method {op.method!r} is not Keras'"
    if isinstance(op.axis, (list, tuple)) and len(op.axis) == 0:
        return f"keras.ops.{type(op).__name__.lower()} over no axis is not converted"
    return None


@register_op("Quantile", "Percentile", "Nanquantile", "Nanpercentile", "Nanmedian",
             policy=Policy.CANONICAL, supports=_quantile_supported)
def Quantile(ctx: Context, op, x, q=0.5):
    """keras.ops.quantile / percentile / nanquantile / nanpercentile / nanmedian(x, q, axis,
    method, keepdims): Keras' TF formula (module docstring), in Keras' float dtype."""
    name, call = type(op).__name__, ctx.call_function
    rank, dtype = len(ctx.input_shape), ctx.output_dtype()
    axes = _axes(op.axis, rank)
    method = "linear" if name in ("Quantile", "Nanmedian") else op.method
    q, q_rank = _q64(ctx, op, q)
    if q_rank > 1:
        raise UnsupportedLayerError(f"keras.ops.{name.lower()} {ctx.path!r}: q of rank "
                                    f"{q_rank} is not converted (a number or a vector)")
    x = ctx.call_method("to", x, dtype)
    rows = _rows(ctx, x, axes, rank)
    values = call(operator.getitem, call(torch.sort, rows, dim=-1), 0)  # NaN sorted last
    if name in _NAN:
        valid = call(torch.logical_not, call(torch.isnan, rows))
        count = call(torch.sum, valid, dim=-1, keepdim=True)            # (rows..., 1)
        if q_rank:
            q = ctx.call_method("reshape", q, *([1] * (rank - len(axes or range(rank)))), -1)
        result = _estimate(ctx, values, count, q, method, dtype, per_row=True)
        empty = call(operator.eq, count, 0)
        result = call(torch.where, empty, float("nan"), result)
        if not q_rank:
            result = ctx.call_method("squeeze", result, -1)
    else:
        count = ctx.call_method("size", values, -1)
        result = _estimate(ctx, values, count, q, method, dtype, per_row=False)
        nan = call(torch.any, call(torch.isnan, x), *([] if axes is None else [axes]))
        for _ in range(q_rank):
            nan = ctx.call_method("unsqueeze", nan, -1)
        result = call(torch.where, nan, float("nan"), result)
    return _keras_layout(ctx, result, axes, rank, q_rank, bool(op.keepdims))


def _keras_layout(ctx: Context, result, axes, rank: int, q_rank: int, keepdims: bool):
    """``result`` (rows..., q...) laid out as Keras returns it: kept dims inserted, then
    the q axis rotated to the front (``rotate_transpose``)."""
    ndims = (0 if axes is None else rank - len(axes)) + q_rank  # the dims left
    if keepdims:
        inserted = range(rank) if axes is None else axes
        for i in sorted(inserted):
            result = ctx.call_method("unsqueeze", result, 0 if axes is None else i)
        ndims = rank + q_rank
    if ndims < 2 or q_rank == 0:
        return result
    order = collections.deque(range(ndims))
    order.rotate(q_rank)
    return ctx.call_method("permute", result, *order)


@register_op(policy=Policy.CANONICAL)
def SearchSorted(ctx: Context, op, sorted_sequence, values):
    """keras.ops.searchsorted(sorted_sequence, values, side): torch.searchsorted (int32);
    a NaN value is 0 on the left side as TF's binary search gives."""
    sequence = sorted_sequence
    if isinstance(sequence, torch.fx.Node) and ctx.tensor_shapes[0][0] is None:
        raise UnsupportedLayerError(
            f"keras.ops.searchsorted {ctx.path!r}: the sorted sequence has a run-time length, "
            "for which Keras' result dtype is int64 in its graph and int32 when run eagerly; "
            "give the sequence a fixed length (a Keras Input dim without None)")
    if isinstance(sequence, np.ndarray) or not isinstance(sequence, torch.fx.Node):
        sequence = ctx.constant(np.asarray(sequence)).node
    sequence = ctx.call_method("to", sequence, _dtype_of(ctx, values))
    if not isinstance(values, torch.fx.Node):
        values = ctx.constant(np.asarray(values)).node
    found = ctx.call_function(torch.searchsorted, sequence, values, side=op.side,
                              out_int32=True)
    if op.side == "left" and "float" in ctx.input_dtypes[-1]:
        found = ctx.call_function(torch.where, ctx.call_function(torch.isnan, values), 0,
                                  found)
    return ctx.call_method("to", found, ctx.output_dtype())


def _dtype_of(ctx: Context, values) -> torch.dtype:
    return getattr(torch, ctx.input_dtypes[-1]) if isinstance(values, torch.fx.Node) \
        else torch.from_numpy(np.asarray(values)).dtype


@register_op(policy=Policy.CANONICAL)
def Digitize(ctx: Context, op, x, bins):
    """keras.ops.digitize(x, bins): TF's Bucketize, the count of (float32) bins ``<=`` x,
    int32; ints and bools compared as float32, a NaN past the last bin."""
    compare = torch.float64 if ctx.input_dtype == "float64" else torch.float32
    edges = np.asarray([float(b) for b in np.asarray(bins).reshape(-1)], np.float32)
    x = ctx.call_method("to", x, compare)
    edges_node = ctx.call_method("to", ctx.constant(edges).node, compare)
    found = ctx.call_function(torch.bucketize, x, edges_node, right=True, out_int32=True)
    return ctx.call_function(torch.where, ctx.call_function(torch.isnan, x), len(edges), found)
