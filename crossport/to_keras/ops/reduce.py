"""Reductions, softmax and arg-reductions: dims remapped through the layout."""

from __future__ import annotations

import keras
import torch

from crossport.layers.reduction import stable_mean, stable_sum
from crossport.layout import (
    after_reduce,
    canonical,
    normalize_dim,
    order_free,
    physical_axes,
    physical_axis,
    reduction_dims,
)
from crossport.to_keras.ops.elementwise import isnan as is_nan
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.scalars import in_dtype
from crossport.to_keras.values import TensorValue, keras_dtype

aten = torch.ops.aten
ops = keras.ops


def _reduce(ctx, self, dim, keepdim, fn):
    """``fn`` over the torch dims ``dim`` names; a flat-permuted input reduced over its
    features stays as it is (the feature order does not matter), no transpose back."""
    value = as_value(ctx, self)
    dims = reduction_dims(dim, value.rank)
    if not order_free(value.layout, dims):
        value = ctx.plain(value)
    ctx.out_layout = after_reduce(value.layout, dims, keepdim)
    return fn(value.tensor, axis=physical_axes(value.layout, dims), keepdims=keepdim)


def _no_elements(x) -> bool:
    """A static zero-size dim (torch specializes size 0, so it is never a dynamic one)."""
    return any(d == 0 for d in x.shape)


def _empty(x, axis, keepdims, dtype):
    """The (empty) result of reducing ``x``, which has no elements, over a dim that is not
    empty (torch rejects an empty reduced dim at capture): Keras' max/min/argmax assert a
    non-empty input, so the model failed at run time; a sum has the shape and no check."""
    return ops.cast(ops.sum(ops.zeros_like(x, dtype="float32"), axis=axis, keepdims=keepdims),
                    dtype)


def _propagating_nan(reduce_fn):
    """``reduce_fn`` (``ops.max``/``ops.min``) with torch's NaN rule: a reduced slice holding
    NaN gives NaN. TF's CPU kernels propagate NaN already, but TFLite's REDUCE_MAX/REDUCE_MIN
    skip it (measured: ``amax([inf, -inf, nan, 1])`` is 1.0 in a .tflite file), so the
    exported model needs the rule spelled out: one isnan/any, as the arg-reductions have."""

    def fn(x, axis=None, keepdims=False):
        if _no_elements(x):
            return _empty(x, axis, keepdims, x.dtype)
        y = reduce_fn(x, axis=axis, keepdims=keepdims)
        if not keras.backend.is_float_dtype(x.dtype):
            return y
        has_nan = ops.any(is_nan(x), axis=axis, keepdims=keepdims)
        return ops.where(has_nan, ops.cast(float("nan"), y.dtype), y)
    return fn


nan_max = _propagating_nan(ops.max)
nan_min = _propagating_nan(ops.min)


def _accumulating(ctx, self):
    """``self`` in the result dtype before a sum or product: torch accumulates bools and
    integers of every width in int64 (and a ``dtype=`` argument's type). Reducing in the
    input's type first and casting after wrapped: an int32 sum past 2**31 came out negative,
    an int8 product past 127 wrapped, a uint8 product came out uint32."""
    value = as_value(ctx, self)
    want = keras_dtype(ctx.out_dtype)
    if value.tensor.dtype == want:
        return value
    return TensorValue(ops.cast(value.tensor, want), value.layout, value.shape, ctx.out_dtype)


def _cast_out(ctx, y):
    return in_dtype(y, keras_dtype(ctx.out_dtype))


@register(aten.mean.dim, aten.mean.default, policy=Policy.CUSTOM, dynamic=True)
def aten_mean_dim(ctx, self, dim=None, keepdim=False, dtype=None):
    """mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)

    ``dtype=`` casts first, as torch does (an int tensor's mean in float64).
    """
    # torch-like accuracy (pairwise)
    return _reduce(ctx, _accumulating(ctx, self), dim, keepdim, stable_mean)


@register(aten.sum.dim_IntList, aten.sum.default, policy=Policy.CUSTOM, dynamic=True)
def aten_sum_dim_intlist(ctx, self, dim=None, keepdim=False, dtype=None):
    """sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)

    torch sums bools and ints to int64.
    """
    return _cast_out(ctx, _reduce(ctx, _accumulating(ctx, self), dim, keepdim, stable_sum))


@register(aten.amax.default, policy=Policy.CUSTOM, dynamic=True)
def aten_amax_default(ctx, self, dim=(), keepdim=False):
    """amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return _reduce(ctx, self, dim, keepdim, nan_max)


@register(aten.amin.default, policy=Policy.CUSTOM, dynamic=True)
def aten_amin_default(ctx, self, dim=(), keepdim=False):
    """amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return _reduce(ctx, self, dim, keepdim, nan_min)


@register(aten.max.default, policy=Policy.CUSTOM, dynamic=True)
def aten_max_default(ctx, self):
    """max(Tensor self) -> Tensor (every element; NaN propagates, as in amax)"""
    return _reduce(ctx, self, None, False, nan_max)


@register(aten.min.default, policy=Policy.CUSTOM, dynamic=True)
def aten_min_default(ctx, self):
    """min(Tensor self) -> Tensor (every element; NaN propagates, as in amin)"""
    return _reduce(ctx, self, None, False, nan_min)


@register(aten.prod.dim_int, policy=Policy.CUSTOM, dynamic=True)
def aten_prod_dim_int(ctx, self, dim, keepdim=False, dtype=None):
    """prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None)

    torch multiplies bools and ints in int64.
    """
    return _cast_out(ctx, _reduce(ctx, _accumulating(ctx, self), dim, keepdim, ops.prod))


@register(aten.prod.default, policy=Policy.CUSTOM, dynamic=True)
def aten_prod_default(ctx, self, dtype=None):
    """prod(Tensor self, *, ScalarType? dtype=None) -> Tensor (every element; bools and ints
    multiplied in int64, 1 for no elements)"""
    return _cast_out(ctx, _reduce(ctx, _accumulating(ctx, self), None, False, ops.prod))


def _var(ctx, self, dim, correction, keepdim, with_mean=False):
    """Variance with torch's correction (unbiased, correction=1, by default).

    The element count comes from the run-time shape, so a dynamic reduced dim divides by
    its own length.
    """
    value = ctx.plain(as_value(ctx, self))
    dims = reduction_dims(dim, value.rank)
    axes = physical_axes(value.layout, dims)
    correction = 1 if correction is None else correction
    x = value.tensor
    mean = stable_mean(x, axis=axes, keepdims=True)
    centred = x - mean  # two-pass, pairwise sums
    total = stable_sum(ops.square(centred), axis=axes, keepdims=keepdim)
    ctx.out_layout = after_reduce(value.layout, dims, keepdim)
    n = 1
    for d in dims:
        n = n * ctx.size(value.shape[d])
    if isinstance(n, int):
        var = total / (n - correction) if n - correction > 0 else total / 0.0
    else:
        dof = ops.maximum(ops.cast(n, x.dtype) - correction, 0.0)
        var = total / dof  # torch: a non-positive dof gives inf/nan, as x / 0 does here
    if not with_mean:
        return var
    # torch's var_mean takes its mean from a Welford update, which is NaN once an inf is
    # followed by anything (inf - inf); NaN wherever the slice holds an inf is that rule
    # except for a lone inf in the last position (docs/parity.md). x - x is NaN at inf/NaN.
    mean = mean if keepdim else ops.squeeze(mean, axis=tuple(axes))
    non_finite = stable_sum(x - x, axis=axes, keepdims=keepdim)
    return var, ops.where(is_nan(non_finite), non_finite, mean)


@register(aten.var.correction, aten.var.dim, policy=Policy.CUSTOM, dynamic=True)
def aten_var_correction(ctx, self, dim=None, correction=None, keepdim=False, unbiased=True):
    """var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False)"""
    if ctx.node.target is aten.var.dim:
        correction = 1 if unbiased else 0
    return _var(ctx, self, dim, correction, keepdim)


@register(aten.std.correction, aten.std.dim, policy=Policy.CUSTOM, dynamic=True)
def aten_std_correction(ctx, self, dim=None, correction=None, keepdim=False, unbiased=True):
    """std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False)"""
    if ctx.node.target is aten.std.dim:
        correction = 1 if unbiased else 0
    return ops.sqrt(_var(ctx, self, dim, correction, keepdim))


@register(aten.var_mean.correction, aten.var_mean.dim, policy=Policy.CUSTOM, dynamic=True)
def aten_var_mean_correction(ctx, self, dim=None, correction=None, keepdim=False,
                             unbiased=True):
    """var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None,
    bool keepdim=False) -> (Tensor, Tensor)

    std_mean is var_mean and a sqrt in the captured graph.
    """
    if ctx.node.target is aten.var_mean.dim:
        correction = 1 if unbiased else 0
    return _var(ctx, self, dim, correction, keepdim, with_mean=True)


def _first_extreme(index_fn):
    """The first index of the maximum (minimum) of a float tensor, as torch picks it.

    ``keras.ops.argmax`` on floats orders -0.0 below 0.0 through a sign-bit test (TF's
    ``BitwiseAnd`` on the float's bits, which has no TFLite builtin: a TFLite export of any
    argmax failed with a Flex-op error) where torch takes them as equal (first wins).
    Comparing with the extreme and taking the first hit is torch's rule, with builtin ops
    (an int32 argmax, which Keras passes to TF's ArgMax as is).
    """
    extreme = {ops.argmax: ops.max, ops.argmin: ops.min}[index_fn]

    def fn(x, axis, keepdims=False):
        if not str(x.dtype).startswith(("float", "bfloat")):
            return index_fn(x, axis=axis, keepdims=keepdims)
        hit = ops.equal(x, extreme(x, axis=axis, keepdims=True))
        return ops.argmax(ops.cast(hit, "int32"), axis=axis, keepdims=keepdims)
    return fn


def _nan_first(index_fn):
    """torch's argmax/argmin/max(dim)/min(dim) point at the first NaN (NaN is the extreme);
    TF's arg-reductions skip NaN. One isnan/any over the reduced tensor (measured within
    noise on logits-sized inputs) makes the index torch's."""
    first = _first_extreme(index_fn)

    def fn(x, axis, keepdims=False):
        if _no_elements(x):
            return _empty(x, axis, keepdims, "int64")
        index = ops.cast(first(x, axis=axis, keepdims=keepdims), "int64")
        if not str(x.dtype).startswith(("float", "bfloat")):
            return index
        isnan = is_nan(x)
        first_nan = ops.cast(ops.argmax(ops.cast(isnan, "int32"), axis=axis, keepdims=keepdims),
                             "int64")
        return ops.where(ops.any(isnan, axis=axis, keepdims=keepdims), first_nan, index)
    return fn


def _arg_reduce(ctx, self, dim, keepdim, fn):
    """argmax/argmin: first index of the extreme in both frameworks; int64 like torch."""
    fn = _nan_first(fn)
    value = ctx.plain(as_value(ctx, self))
    x = value.tensor
    if dim is None or value.rank == 0:  # a 0-dim tensor reads as one element
        x = ops.reshape(ctx.canonical(value), [-1])
        ctx.out_layout = canonical(0)
        return ops.cast(fn(x, axis=0), "int64")
    y = ops.cast(fn(x, axis=physical_axis(value.layout, dim), keepdims=keepdim), "int64")
    ctx.out_layout = after_reduce(value.layout, [dim], keepdim)
    return y


@register(aten.argmax.default, policy=Policy.CUSTOM, dynamic=True)
def aten_argmax_default(ctx, self, dim=None, keepdim=False):
    """argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    return _arg_reduce(ctx, self, dim, keepdim, ops.argmax)


@register(aten.argmin.default, policy=Policy.CUSTOM, dynamic=True)
def aten_argmin_default(ctx, self, dim=None, keepdim=False):
    """argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    return _arg_reduce(ctx, self, dim, keepdim, ops.argmin)


def _softmax(ctx, self, dim, fn):
    """Along one dim, in the arriving layout (a flat-permuted input along its features
    keeps its feature order: the same permutation in and out). ``dtype=`` casts the input
    first, as torch does (the result is in that dtype; an integer input needs it)."""
    value = as_value(ctx, self)
    if not order_free(value.layout, [dim]):
        value = ctx.plain(value)
    ctx.out_layout = value.layout
    x, want = value.tensor, keras_dtype(ctx.out_dtype)
    if keras.backend.standardize_dtype(x.dtype) != want:
        x = ops.cast(x, want)
    if value.rank == 0:  # dim 0 or -1 of a scalar, one element: softmax 1, log_softmax 0,
        normalize_dim(dim, 1)  # NaN at NaN and ±inf (x - x)
        return (x - x) + 1.0 if fn is ops.softmax else x - x
    return fn(x, axis=physical_axis(value.layout, dim))


@register(aten._softmax.default, aten.softmax.int, policy=Policy.CUSTOM, dynamic=True)
def aten_softmax_int(ctx, self, dim, half_to_float=False, dtype=None):
    """_softmax(Tensor self, int dim, bool half_to_float) -> Tensor
    (softmax.int(Tensor self, int dim, ScalarType? dtype=None): computed in ``dtype``)"""
    return _softmax(ctx, self, dim, ops.softmax)


@register(aten._log_softmax.default, aten.log_softmax.int, policy=Policy.CUSTOM, dynamic=True)
def aten_log_softmax_int(ctx, self, dim, half_to_float=False, dtype=None):
    """_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor"""
    return _softmax(ctx, self, dim, ops.log_softmax)


def scalar_with_index(ctx, self, dim):
    """``(x, 0)`` for a 0-dim ``self``, else None. torch reads a scalar as one element
    along dim 0 or -1, so its max/min(dim), sort, topk (k = 0 too), median and cummax/cummin
    are the value itself and index 0, keepdim adding no dim (a Keras axis of a 0-dim
    tensor is out of range: the converters failed)."""
    value = as_value(ctx, self)
    if value.rank != 0:
        return None
    normalize_dim(dim, 1)  # torch raises past [-1, 0]
    ctx.out_layout = (canonical(0), canonical(0))
    return value.tensor, ops.cast(ops.zeros_like(value.tensor), "int64")


def _extreme_with_index(ctx, self, dim, keepdim, value_fn, index_fn):
    scalar = scalar_with_index(ctx, self, dim)
    if scalar is not None:
        return scalar
    value = ctx.plain(as_value(ctx, self))
    axis = physical_axis(value.layout, dim)
    layout = after_reduce(value.layout, [dim], keepdim)
    ctx.out_layout = (layout, layout)
    values = value_fn(value.tensor, axis=axis, keepdims=keepdim)
    indices = _nan_first(index_fn)(value.tensor, axis=axis, keepdims=keepdim)
    return values, indices


@register(aten.max.dim, policy=Policy.CUSTOM, dynamic=True)
def aten_max_dim(ctx, self, dim, keepdim=False):
    """max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)

    Indices are int64 like torch's (first occurrence of the maximum).
    """
    return _extreme_with_index(ctx, self, dim, keepdim, nan_max, ops.argmax)


@register(aten.min.dim, policy=Policy.CUSTOM, dynamic=True)
def aten_min_dim(ctx, self, dim, keepdim=False):
    """min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _extreme_with_index(ctx, self, dim, keepdim, nan_min, ops.argmin)
