"""Cumulative extremes (cummax/cummin), logcumsumexp, medians (median/nanmedian) and
kthvalue, with torch's indices.

cummax/cummin follow ATen's scan: an element replaces the running extreme when it is NaN,
or when the running one is not NaN and it is ``>=`` (``<=``) it, so ties and NaNs take
the latest index (and -0.0 after 0.0 is the new value). That rule is "the largest key,
latest position" over a total preorder with NaN on top: associative, so a Hillis-Steele
scan of ``ceil(log2 n)`` select steps computes it with builtin ops only (slices, concat,
comparisons, select), no TF scan and no Flex op.

median returns the lower of the two middle values, and its index is the one a stable sort
in torch's order (NaN above +inf) puts at position ``(n - 1) // 2`` (measured against
torch's nth_element on 4800 rows of up to 5000 entries with heavy ties: no difference); a
row holding NaN gives NaN at its first NaN. nanmedian takes the lower median of the
non-NaN entries, its index as median's; for a row of NaN only torch's index is wherever
nth_element leaves it (12 of 20, 17 of 25), which depends on the length alone (every NaN
comparison is false): torch run once on such a row gives it. Both sort with
``top_k_torch_order`` (torch's order, ties in index order) and gather one position per row.

logcumsumexp is the same doubling scan with torch's step ``max + log1p(exp(min - max))``
(a running -inf or +inf stays itself; NaN propagates). torch accumulates in double and
rounds each output once; the scan combines ``ceil(log2 n)`` float32 steps, a few ulps.

kthvalue's value is the k-th in torch's order (NaN largest); its index is refused: torch's
quickselect leaves equal values in no order a rule reproduces (measured: 7253 of 10560 rows
tied at the k-th value gave another index than a stable sort; every tie-free row agreed).
"""

from __future__ import annotations

import operator

import keras
import numpy as np
import torch

from crossport.layers.ordering import top_k_torch_order
from crossport.layout import after_reduce, canonical, physical_axis
from crossport.to_keras.dynamic_dims import is_dynamic_size, static_dims
from crossport.to_keras.ops.elementwise import exp, is_infinite, isnan, keras_add, nan_kept
from crossport.to_keras.ops.reduce import scalar_with_index
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register

aten = torch.ops.aten
ops = keras.ops


def _along(axis: int, rank: int, item) -> tuple:
    return (slice(None),) * axis + (item,) + (slice(None),) * (rank - axis - 1)


def _scan(x, axis: int, n: int, combine):
    """The inclusive scan of ``combine(earlier, later)`` (associative) along ``axis``
    (static length ``n``): ``ceil(log2 n)`` doubling steps of slices, ``combine`` and a
    concat."""
    rank = len(x.shape)
    s = 1
    while s < n:
        head = _along(axis, rank, slice(None, s))
        earlier, later = _along(axis, rank, slice(None, n - s)), _along(axis, rank, slice(s, None))
        x = ops.concatenate([x[head], combine(x[earlier], x[later])], axis=axis)
        s *= 2
    return x


def _scan_extreme(x, axis: int, n: int, later_wins):
    """``(values, int64 indices)`` of the running extreme along ``axis`` (static length
    ``n``): Hillis-Steele doubling, combining each position with the one ``s`` before."""
    rank = len(x.shape)
    positions = np.arange(n, dtype=np.int64).reshape([n if a == axis else 1
                                                       for a in range(rank)])
    index = keras_add(ops.zeros_like(x, dtype="int64"), positions)  # not ops.add: bias_add
    s = 1
    while s < n:
        head = _along(axis, rank, slice(None, s))
        earlier, later = _along(axis, rank, slice(None, n - s)), _along(axis, rank, slice(s, None))
        take = later_wins(x[later], x[earlier])
        x = ops.concatenate([x[head], ops.where(take, x[later], x[earlier])], axis=axis)
        index = ops.concatenate([index[head], ops.where(take, index[later], index[earlier])],
                                axis=axis)
        s *= 2
    return x, index


def _replaces(compare):
    """ATen's rule: ``isnan(later) or (not isnan(earlier) and compare(later, earlier))``."""

    def fn(later, earlier):
        if keras.backend.standardize_dtype(later.dtype) == "bool":
            later, earlier = ops.cast(later, "int8"), ops.cast(earlier, "int8")
        if not keras.backend.is_float_dtype(later.dtype):
            return compare(later, earlier)
        return ops.logical_or(isnan(later), ops.logical_and(ops.logical_not(isnan(earlier)),
                                                            compare(later, earlier)))
    return fn


def _dim_arg(node):
    return [node.args[1]]


def _cumulative_extreme(ctx, self, dim, compare):
    scalar = scalar_with_index(ctx, self, dim)
    if scalar is not None:
        return scalar
    value = ctx.plain(as_value(ctx, self))
    axis = physical_axis(value.layout, dim)
    n = int(value.shape[dim])
    ctx.out_layout = (value.layout, value.layout)
    return _scan_extreme(value.tensor, axis, n, _replaces(compare))


_SCAN_STATIC = static_dims("self", _dim_arg, "a cumulative max/min (a scan of log2(n) steps)")


@register(aten.cummax.default, policy=Policy.CUSTOM, dynamic=_SCAN_STATIC)
def aten_cummax_default(ctx, self, dim):
    """cummax(Tensor self, int dim) -> (Tensor values, Tensor indices): ties and NaNs take
    the latest index, as ATen's scan does."""
    return _cumulative_extreme(ctx, self, dim, ops.greater_equal)


@register(aten.cummin.default, policy=Policy.CUSTOM, dynamic=_SCAN_STATIC)
def aten_cummin_default(ctx, self, dim):
    """cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)"""
    return _cumulative_extreme(ctx, self, dim, ops.less_equal)


def _log_add_exp(a, b):
    """torch's logcumsumexp step: ``max + log1p(exp(min - max))``; two equal infinities
    give themselves (``inf - inf`` is NaN), NaN propagates (XNNPACK's MAXIMUM drops a first
    operand's NaN: ``nan_kept`` puts it back)."""
    hi = nan_kept(a, ops.maximum(a, b))
    lo = ops.minimum(a, b)
    same_infinity = ops.logical_and(ops.equal(a, b), is_infinite(a))
    return ops.where(same_infinity, a, hi + ops.log1p(exp(lo - hi)))


def _float_only(node, self, **_):
    if not self.meta["val"].dtype.is_floating_point:
        return f"logcumsumexp of {self.meta['val'].dtype} (torch takes floating inputs)"
    return None


@register(aten.logcumsumexp.default, policy=Policy.CUSTOM, supports=_float_only,
          dynamic=static_dims("self", _dim_arg, "logcumsumexp (a scan of log2(n) steps)"))
def aten_logcumsumexp_default(ctx, self, dim):
    """logcumsumexp(Tensor self, int dim) -> Tensor: ``log(cumsum(exp(x)))`` without
    overflow, by the doubling scan of torch's step."""
    value = ctx.plain(as_value(ctx, self))
    ctx.out_layout = value.layout
    if value.rank == 0:  # a scalar is one element
        return value.tensor
    axis = physical_axis(value.layout, dim)
    return _scan(value.tensor, axis, int(value.shape[dim]), _log_add_exp)


def _median_last(ctx, x, n, ignore_nan: bool):
    """``(values, int64 indices)`` of the lower median along the last axis of ``x``; ``n``
    is its length (an int, or a run-time size)."""
    values, indices = top_k_torch_order(x, n, largest=False) if isinstance(n, int) else (
        _dynamic_sort(ctx, x, n))
    # positions in int32: TFLite has no int64 FloorDiv
    n32 = n if isinstance(n, int) else ops.cast(n, "int32")
    if keras.backend.is_float_dtype(x.dtype):
        nans = ops.sum(ops.cast(isnan(x), "int32"), axis=-1, keepdims=True)
        if ignore_nan:  # lower median of the rest; all NaN: position 0, a NaN
            position = ops.maximum(ops.floor_divide(n32 - nans - 1, 2), 0)
        else:  # the first NaN sorts right after the numbers
            position = ops.where(ops.greater(nans, 0), n32 - nans,
                                 ops.zeros_like(nans) + (n32 - 1) // 2)
    elif isinstance(n32, int):
        return values[..., (n32 - 1) // 2], indices[..., (n32 - 1) // 2]
    else:
        position = ops.zeros_like(indices[..., :1], dtype="int32") + (n32 - 1) // 2
    # [..., 0], not squeeze: under a run-time n Keras cannot tell the taken axis is 1 long
    return (ops.take_along_axis(values, position, axis=-1)[..., 0],
            ops.take_along_axis(indices, position, axis=-1)[..., 0])


def _dynamic_sort(ctx, x, n):
    from crossport.layers.dynamic import DynamicTopK

    return DynamicTopK(False, name=ctx.name("sort"))(x, n)


def _median_dim(ctx, self, dim, keepdim, ignore_nan):
    scalar = scalar_with_index(ctx, self, dim)
    if scalar is not None:
        return scalar
    value = ctx.plain(as_value(ctx, self))
    axis = physical_axis(value.layout, dim)
    x = value.tensor
    last = value.rank - 1
    if axis != last:
        x = ops.moveaxis(x, axis, last)
    values, indices = _median_last(ctx, x, ctx.size(value.shape[dim]), ignore_nan)
    indices = ops.cast(indices, "int64")
    # a dynamic dim: the indices are unused (_nanmedian_dynamic)
    if ignore_nan and keras.backend.is_float_dtype(x.dtype) and not ctx.is_dynamic(
            value.shape[dim]):
        where_torch_leaves = _all_nan_index(int(value.shape[dim]), value.dtype)
        indices = ops.where(ops.all(isnan(x), axis=-1), np.int64(where_torch_leaves), indices)
    if keepdim:
        values, indices = ops.expand_dims(values, axis), ops.expand_dims(indices, axis)
    layout = after_reduce(value.layout, [dim], keepdim)
    ctx.out_layout = (layout, layout)
    return values, indices


def _median_all(ctx, self, ignore_nan):
    value = as_value(ctx, self)  # the value only: the order of the elements does not matter
    n = 1
    for size in value.shape:
        n = n * ctx.size(size)
    flat = ops.reshape(value.tensor, [-1])
    ctx.out_layout = canonical(0)
    return _median_last(ctx, flat, n, ignore_nan)[0]


def _indices_used(node) -> bool:
    return any(user.target is operator.getitem and user.args[1] == 1 and user.users
               for user in node.users)


def _all_nan_index(n: int, dtype: torch.dtype) -> int:
    """nanmedian's index of a row of ``n`` NaN: where torch's ``nth_element`` leaves the
    element it places first. Every comparison of two NaN is false, so the permutation it
    applies depends on ``n`` alone (0, 0, 0, 2, 2, 3, 5, ... for n = 1, 2, ...): torch
    itself, run once on such a row, is the rule."""
    row = torch.full((n,), float("nan"), dtype=dtype)
    return int(torch.nanmedian(row, 0).indices)


def _nanmedian_dynamic(node, self, dim, keepdim=False):
    """The index of an all-NaN row is read from torch for the row's length: static."""
    if _indices_used(node) and self.meta["val"].dtype.is_floating_point:
        return static_dims("self", lambda _: [dim], "nanmedian's index of an all-NaN row "
                           "(where torch's nth_element leaves it, by the row's length)")(node)
    return None


def _refuse_empty(node, self, **_):
    if self.meta["val"].numel() == 0:
        return "the median of no elements (torch raises)"
    return None


@register(aten.median.dim, policy=Policy.CUSTOM, dynamic=True)
def aten_median_dim(ctx, self, dim, keepdim=False):
    """median.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)

    The lower median; its index as a stable sort in torch's order places it; a row with
    NaN gives NaN at its first NaN.
    """
    return _median_dim(ctx, self, dim, keepdim, ignore_nan=False)


@register(aten.nanmedian.dim, policy=Policy.CUSTOM, dynamic=_nanmedian_dynamic)
def aten_nanmedian_dim(ctx, self, dim, keepdim=False):
    """nanmedian.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)

    The lower median of the non-NaN entries, its index where a stable sort in torch's
    order puts it (measured on 3000 rows of up to 300 entries with ties and NaN: no
    difference); a row of NaN only gives NaN at ``_all_nan_index``.
    """
    return _median_dim(ctx, self, dim, keepdim, ignore_nan=True)


@register(aten.median.default, policy=Policy.CUSTOM, supports=_refuse_empty, dynamic=True)
def aten_median_default(ctx, self):
    """median(Tensor self) -> Tensor: the lower median of every element, NaN if any is."""
    return _median_all(ctx, self, ignore_nan=False)


@register(aten.nanmedian.default, policy=Policy.CUSTOM, supports=_refuse_empty, dynamic=True)
def aten_nanmedian_default(ctx, self):
    """nanmedian(Tensor self) -> Tensor: the lower median of the non-NaN elements."""
    return _median_all(ctx, self, ignore_nan=True)


def _refuse_kth_indices(node, self, **_):
    if _indices_used(node):
        return ("the indices of kthvalue: among equal values torch returns whichever index "
                "its quickselect leaves at position k, which no rule reproduces (measured: "
                "7253 of 10560 tied rows differ from a stable sort); use .values (converted), "
                "or torch.sort(x, dim, stable=True) and take position k - 1 for a defined "
                "index")
    return None


def _kth_dynamic(node, self, k, **_) -> str | None:
    """The dim may be dynamic, but ``k`` is the top-k's static size: one computed from a
    run-time size (a median as ``kthvalue(n // 2 + 1)``) would stay the example's."""
    k = k.meta.get("val") if isinstance(k, torch.fx.Node) else k
    if is_dynamic_size(k):
        return f"kthvalue with k computed from a run-time size ({k}) needs it static"
    return None


@register(aten.kthvalue.default, policy=Policy.CUSTOM, supports=_refuse_kth_indices,
          dynamic=_kth_dynamic)
def aten_kthvalue_default(ctx, self, k, dim=-1, keepdim=False):
    """kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)

    The k-th smallest in torch's order (NaN above +inf), from a top-k of the k smallest;
    the indices are refused (``_refuse_kth_indices``).
    """
    value = ctx.plain(as_value(ctx, self))
    if value.rank == 0:  # one element: itself, at index 0
        ctx.out_layout = (value.layout, value.layout)
        return value.tensor, ops.zeros_like(value.tensor, dtype="int64")
    axis = physical_axis(value.layout, dim)
    x = value.tensor
    last = value.rank - 1
    if axis != last:
        x = ops.moveaxis(x, axis, last)
    values, indices = top_k_torch_order(x, int(k), largest=False)
    values, indices = values[..., int(k) - 1], ops.cast(indices[..., int(k) - 1], "int64")
    if keepdim:
        values, indices = ops.expand_dims(values, axis), ops.expand_dims(indices, axis)
    layout = after_reduce(value.layout, [dim], keepdim)
    ctx.out_layout = (layout, layout)
    return values, indices


# std::sort (libstdc++) insertion-sorts ranges of at most 16 elements: stable there, so a
# tied mode's index is its last occurrence; longer rows are introsorted (no rule)
_STABLE_SORT_LENGTH = 16


def _mode_supports(node, self, dim=-1, keepdim=False):
    val = self.meta["val"]
    if val.dtype.is_floating_point:
        return ("mode of floats: where a row holds NaN and no other value repeats, torch's "
                "value is wherever its sort (NaN unordered) leaves the NaN, which no rule "
                "reproduces; mode of integers is converted (cast x.long() if the values "
                "are whole numbers)")
    if _indices_used(node) and val.dim() > 0:
        size = val.shape[dim]
        if not isinstance(size, int) or size > _STABLE_SORT_LENGTH:
            return (f"the indices of mode along a dim of {size} elements: torch's "
                    f"unstable sort leaves tied values in no reproducible order past "
                    f"{_STABLE_SORT_LENGTH} (measured: 2004 of 3000 rows); use .values "
                    "(converted)")
    return None


def _mode_last(x):
    """``(values, int64 indices)`` of the mode along the last axis of integer ``x``: the
    smallest of the most frequent values (counted by pairwise equality), at its last
    occurrence."""
    as_int = _wide(x)
    equal = ops.equal(ops.expand_dims(as_int, -1), ops.expand_dims(as_int, -2))
    counts = ops.sum(ops.cast(equal, "int32"), axis=-1)
    most = ops.equal(counts, ops.max(counts, axis=-1, keepdims=True))
    largest = np.array(np.iinfo(keras.backend.standardize_dtype(as_int.dtype)).max,
                       keras.backend.standardize_dtype(as_int.dtype))
    value = ops.min(ops.where(most, as_int, largest), axis=-1, keepdims=True)
    n = int(x.shape[-1]) if x.shape[-1] is not None else None
    positions = ops.cumsum(ops.ones_like(as_int, dtype="int32"), axis=-1) - 1 if n is None \
        else np.arange(n, dtype=np.int32)
    index = ops.max(ops.where(ops.equal(as_int, value), positions, -1), axis=-1)
    value = ops.squeeze(value, -1)
    return value, ops.cast(index, "int64")


def _wide(x):
    """Bools and narrow integers as int32: TFLite's TRANSPOSE, EQUAL and REDUCE_MIN take
    no bool/int8/int16."""
    keep = keras.backend.standardize_dtype(x.dtype) in ("int32", "int64", "uint32")
    return x if keep else ops.cast(x, "int32")


@register(aten.mode.default, policy=Policy.CUSTOM, supports=_mode_supports, dynamic=True)
def aten_mode_default(ctx, self, dim=-1, keepdim=False):
    """mode(Tensor self, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)

    Of integers and bools: the most frequent value, the smallest on a tie of counts (torch
    sorts, then keeps the first longest run); its index is the last occurrence, which
    torch's sort gives for rows of at most 16 (``_mode_supports`` refuses longer ones' and
    float inputs). Pairwise equality: ``n²`` comparisons per row.
    """
    value = ctx.plain(as_value(ctx, self))
    if value.rank == 0:  # one element: itself, at index 0
        ctx.out_layout = (value.layout, value.layout)
        return value.tensor, ops.zeros_like(value.tensor, dtype="int64")
    axis = physical_axis(value.layout, dim)
    x = _wide(value.tensor)
    last = value.rank - 1
    if axis != last:
        x = ops.moveaxis(x, axis, last)
    values, indices = _mode_last(x)
    values = ops.cast(values, value.tensor.dtype)
    if keepdim:
        values, indices = ops.expand_dims(values, axis), ops.expand_dims(indices, axis)
    layout = after_reduce(value.layout, [dim], keepdim)
    ctx.out_layout = (layout, layout)
    return values, indices
