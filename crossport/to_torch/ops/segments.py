"""keras.ops.segment_sum / segment_max / segment_min / segment_prod, TF's kernels (the
segments along the first dim, one id per row):

* unsorted (``sorted=False``): ``num_segments`` rows (``None``: the number of distinct ids
  for a sum, ``max(ids) + 1`` otherwise, read at run time), each starting at the reduction's
  initial value, which a segment without rows keeps: 0, 1, the dtype's lowest (max) or
  highest (min) finite value, not an infinity; rows of a negative id are dropped (and of
  one past the segments, where TF raises);
* sorted (``sorted=True``): ``ids[-1] + 1`` rows, a segment without rows 0 (1 for a
  product); with a ``num_segments`` refused (Keras' TF backend raises);
* NaN in a max / min: TF folds each segment in order with ``acc = v if not v < acc`` (max),
  so a NaN is the result only when it is the segment's last value and is otherwise replaced
  by the next value (``[1, nan, 3]`` gives 3, ``[2, nan]`` NaN, ``[1, nan, -inf]`` -inf:
  the initial value went with the NaN); torch's reductions propagate any NaN, so the module
  takes the maximum of the values after each segment's last NaN (from ``-inf`` when the
  segment held one), and NaN where that NaN is the last value. TF's sorted kernel folds so
  only on Eigen's scalar path; its vectorised columns skip NaN (docs/parity.md): not
  imitated.
"""

from __future__ import annotations

import operator

import numpy as np
import torch

from crossport.layout.policy import Policy
from crossport.to_torch.context import Context
from crossport.to_torch.registry import register_op

_REDUCE = {"SegmentSum": "sum", "SegmentMax": "amax", "SegmentMin": "amin",
           "SegmentProd": "prod"}


def _initial(name: str, dtype: torch.dtype, sorted_ids: bool):
    if name == "SegmentProd":
        return 1
    if name == "SegmentSum" or sorted_ids:
        return 0
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    return info.min if name == "SegmentMax" else info.max


def _count(ctx: Context, op, ids):
    """The number of segments: ``num_segments``, or read from the ids at run time."""
    call = ctx.call_function
    if op.num_segments is not None and not op.sorted:
        return int(op.num_segments)
    if op.sorted:
        last = call(operator.getitem, ids, -1)
    elif type(op).__name__ == "SegmentSum":
        return ctx.call_method("numel", call(torch.unique, ids))
    else:
        last = call(torch.max, ids)
    return call(operator.add, ctx.call_method("item", last), 1)


_SNAKE = {"SegmentSum": "segment_sum", "SegmentMax": "segment_max",
          "SegmentMin": "segment_min", "SegmentProd": "segment_prod"}


def _segments_supported(op) -> str | None:
    if op.sorted and op.num_segments is not None:
        return (f"keras.ops.{_SNAKE[type(op).__name__]}(sorted=True, num_segments="
                f"{op.num_segments}): Keras' TF backend raises for num_segments with sorted "
                "ids; pass sorted=False, or leave num_segments out (ids[-1] + 1 segments)")
    return None


@register_op("SegmentSum", "SegmentMax", "SegmentMin", "SegmentProd", policy=Policy.CANONICAL,
             supports=_segments_supported)
def SegmentReduction(ctx: Context, op, data, segment_ids):
    """keras.ops.segment_sum / max / min / prod(data, segment_ids, num_segments, sorted):
    a scatter-reduce over the first dim into the segments plus one dropped row (see the
    module docstring for empty segments and NaN)."""
    name, call = type(op).__name__, ctx.call_function
    if isinstance(segment_ids, np.ndarray):
        segment_ids = ctx.constant(segment_ids).node
    ids = ctx.call_method("to", segment_ids, torch.int64)
    count = _count(ctx, op, ids)
    dtype = ctx.output_dtype()
    out_of_range = call(torch.logical_or, call(operator.lt, ids, 0),
                        call(operator.ge, ids, count))
    rows = call(torch.where, out_of_range, count, ids)  # the extra row, dropped below
    index = _per_value(ctx, rows, data)
    shape = call(operator.add, (call(operator.add, count, 1),),
                 call(operator.getitem, call(getattr, data, "shape"), slice(1, None)))
    fold = name in ("SegmentMax", "SegmentMin") and dtype.is_floating_point
    base = call(torch.full, shape, _initial(name, dtype, bool(op.sorted)), dtype=dtype)
    if fold:
        index, ends_in_nan, had_nan = _after_last_nan(ctx, data, index, count, shape)
        if not op.sorted:  # the NaN replaced the initial value: -inf after it stays -inf
            base = call(torch.where, had_nan, float("-inf" if name == "SegmentMax" else "inf"),
                        base)
    result = ctx.call_method("scatter_reduce", base, 0, index, data, _REDUCE[name],
                             include_self=not op.sorted)
    if fold:
        result = call(torch.where, ends_in_nan, float("nan"), result)
    return call(operator.getitem, result, slice(None, -1))


def _per_value(ctx: Context, rows, data):
    """The segment row of each value of ``data`` (``rows`` per first-dim index)."""
    rank = len(ctx.tensor_shapes[0])
    return ctx.call_method("expand_as", ctx.call_method("reshape", rows, -1,
                                                        *([1] * (rank - 1))), data)


def _after_last_nan(ctx: Context, data, index, count, shape):
    """TF's in-order fold of a max / min: the values at or before their segment's (per
    column) last NaN go to the dropped row. Returned with the new index: the masks (of the
    result's shape) of the segments whose last value is NaN (NaN) and of those holding a
    NaN (whose fold starts again after it, without the initial value)."""
    call = ctx.call_function
    position = _per_value(ctx, call(torch.arange, ctx.call_method("size", data, 0)), data)
    marked = call(torch.where, call(torch.isnan, data), position, -1)
    last_nan_at = ctx.call_method("scatter_reduce", call(torch.full, shape, -1), 0, index,
                                  marked, "amax")
    last_at = ctx.call_method("scatter_reduce", call(torch.full, shape, -1), 0, index,
                              position, "amax")
    had_nan = call(operator.ge, last_nan_at, 0)
    ends_in_nan = call(torch.logical_and, had_nan, call(operator.eq, last_nan_at, last_at))
    after = call(operator.gt, position, call(torch.gather, last_nan_at, 0, index))
    return call(torch.where, after, index, count), ends_in_nan, had_nan
