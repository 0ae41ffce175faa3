"""searchsorted and bucketize: torch's binary search, step for step.

ATen's CPU kernel (``Bucketization.cpp``) runs, per value, ``while start < end: mid = start +
((end - start) >> 1)`` and moves ``start`` past ``mid`` when ``!(boundary[mid] >= value)``
(left) or ``!(boundary[mid] > value)`` (right). The converter runs that loop for every value
at once, ``bit_length(n)`` steps (the loop's longest run) of one GATHER, a comparison and
selects, so its result is torch's for any input, not only sorted ones: a NaN value is past
every boundary (each comparison with it fails), and NaN boundaries, which torch's sort puts
last, are passed by the same failing comparison wherever the search meets them. ``sorter``
reads the boundaries in its order (``boundary[sorter[mid]]``): one gather first. Both
operands are compared in their promoted dtype, as torch compares them.
"""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.layout import canonical
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.values import TensorValue, keras_dtype

aten = torch.ops.aten
ops = keras.ops

# a boundary length known only at run time: enough steps for any length int32 indexes
_DYNAMIC_STEPS = 31


def _compared_dtype(sorted_sequence, value) -> torch.dtype:
    """The dtype torch compares in: both operands promoted (a Python number is weak)."""
    other = value.meta["val"] if isinstance(value, torch.fx.Node) else value
    return torch.result_type(sorted_sequence.meta["val"], other)


def _refused_dtype(dtype: torch.dtype) -> str | None:
    if dtype.is_complex or dtype in (torch.float16, torch.bfloat16):
        return f"a search in {dtype}: convert the boundaries and values to float32 first"
    return None


def _search_supports(node, sorted_sequence, self, **_):
    return _refused_dtype(_compared_dtype(sorted_sequence, self))


def _binary_search(boundaries, values, n, right: bool, steps: int):
    """int32 positions of ``values`` in ``boundaries`` (last axis, length ``n``: an int or a
    run-time scalar), as ATen's cus_lower_bound / cus_upper_bound find them. One-dim
    boundaries serve every value; otherwise their leading dims are the values'."""
    start = ops.zeros_like(values, dtype="int32")
    end = start + (n if isinstance(n, int) else ops.cast(n, "int32"))
    last = end - 1
    one_dim = len(boundaries.shape) == 1
    for _ in range(steps):
        active = ops.less(start, end)
        mid = start + ops.floor_divide(end - start, 2)
        at = ops.maximum(ops.minimum(mid, last), 0)  # an inactive lane may point past the end
        found = (ops.take(boundaries, at, axis=0) if one_dim
                 else ops.take_along_axis(boundaries, at, axis=-1))
        bound = ops.greater(found, values) if right else ops.greater_equal(found, values)
        # selects on ``bound`` itself: the TFLite converter rewrites not(a >= b) as a < b,
        # which a NaN fails the other way (NaN values stopped at 0)
        start = ops.where(active, ops.where(bound, start, mid + 1), start)
        end = ops.where(ops.logical_and(active, bound), mid, end)
    return start


def _search(ctx, sorted_sequence, self, dtype: torch.dtype, out_int32, right, sorter):
    """int64 (int32) positions of ``self`` (a tensor, or a Python number) in
    ``sorted_sequence``, both compared in ``dtype``."""
    dtype = keras_dtype(dtype)
    seq = as_value(ctx, sorted_sequence)
    n = ctx.size(seq.shape[-1])
    boundaries = ctx.canonical(seq)
    if sorter is not None:
        boundaries = ops.take_along_axis(boundaries, ctx.canonical(as_value(ctx, sorter)),
                                         axis=-1)
    value = as_value(ctx, self if isinstance(self, TensorValue) else np.asarray(self, dtype))
    if seq.rank == 1:  # each value is searched alone: any layout will do
        value = ctx.plain(value)
        values = value.tensor
    else:
        values = ctx.canonical(value)
        value = TensorValue(values, canonical(value.rank), value.shape, value.dtype)
    steps = n.bit_length() if isinstance(n, int) else _DYNAMIC_STEPS
    positions = _binary_search(ops.cast(boundaries, dtype), ops.cast(values, dtype), n, right,
                               steps)
    ctx.out_layout = value.layout
    return ops.cast(positions, "int32" if out_int32 else "int64")


@register(aten.searchsorted.Tensor, aten.searchsorted.Scalar, policy=Policy.CUSTOM,
          supports=_search_supports, dynamic=True)
def aten_searchsorted_tensor(ctx, sorted_sequence, self, out_int32=False, right=False,
                             side=None, sorter=None):
    """searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None) -> Tensor

    ``side`` (when given) decides over ``right``; every size may be dynamic (a run-time
    boundary length takes 31 steps).
    """
    right = side == "right" if side is not None else right
    dtype = _compared_dtype(*ctx.node.args[:2])
    return _search(ctx, sorted_sequence, self, dtype, out_int32, right, sorter)


def _bucketize_supports(node, self, boundaries, **_):
    return _refused_dtype(_compared_dtype(boundaries, self))


@register(aten.bucketize.Tensor, aten.bucketize.Scalar, policy=Policy.CUSTOM,
          supports=_bucketize_supports, dynamic=True)
def aten_bucketize_tensor(ctx, self, boundaries, out_int32=False, right=False):
    """bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor

    searchsorted of ``self`` in the one-dim ``boundaries`` (torch's own definition).
    """
    dtype = _compared_dtype(ctx.node.args[1], ctx.node.args[0])
    return _search(ctx, boundaries, self, dtype, out_int32, right, None)
