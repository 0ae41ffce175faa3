"""Reductions into targets an index names: scatter_reduce, index_reduce, embedding_bag.

scatter_reduce, index_reduce and ``Tensor.scatter(reduce=)`` become :class:`crossport.layers.scatter.ScatterReduce`:
every element is sent to a flat position of ``self`` and each position reduces what it
receives with one unsorted segment op (TFLite builtins), sizes read at run time.
embedding_bag looks rows up and reduces them per bag the same way
(:class:`crossport.layers.scatter.BagReduce`).
"""

from __future__ import annotations

import operator

import keras
import numpy as np
import torch

from crossport.layers.scatter import REDUCTIONS, BagReduce, ScatterReduce
from crossport.layout import canonical
from crossport.to_keras.initial import call_with_weights
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.values import concrete, keras_dtype

aten = torch.ops.aten
ops = keras.ops


def _reduce_supports(node, reduce, **_):
    if reduce not in REDUCTIONS:
        return f"reduce={reduce!r} (torch takes {', '.join(REDUCTIONS)})"
    return None


def _compute_dtype(ctx) -> dict:
    """A float result's dtype as the layer's (Keras would cast float64 inputs to float32)."""
    dtype = ctx.out_dtype
    return {"dtype": keras_dtype(dtype)} if dtype.is_floating_point else {}


def _as_keras(ctx, value):
    """A Keras tensor for a layer input: numpy constants (a zeros ``self``) as constants."""
    if isinstance(value, np.ndarray):
        return ctx.constant(value)
    return value


@register(aten.scatter_reduce.two, policy=Policy.CANONICAL, supports=_reduce_supports,
          dynamic=True)
def aten_scatter_reduce_two(ctx, self, dim, index, src, reduce, include_self=True):
    """scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor

    sum, prod, mean (integers divide rounding down), amax, amin (NaN propagates);
    ``include_self=False`` leaves ``self`` out of the targets that receive a value.
    """
    layer = ScatterReduce(dim, reduce, include_self, name=ctx.name(), **_compute_dtype(ctx))
    return layer(*(_as_keras(ctx, v) for v in (self, index, src)))


_SCATTER_REDUCTIONS = {"add": "sum", "multiply": "prod"}


def _scatter_reduce_supports(node, reduce, **_):
    if reduce not in _SCATTER_REDUCTIONS:
        return f"scatter with reduce={reduce!r} (torch takes 'add', 'multiply')"
    return None


@register(aten.scatter.reduce, aten.scatter.value_reduce, policy=Policy.CANONICAL,
          supports=_scatter_reduce_supports, dynamic=True)
def aten_scatter_reduce(ctx, self, dim, index, src=None, value=None, reduce="add"):
    """scatter.reduce(Tensor self, int dim, Tensor index, Tensor src, *, str reduce) -> Tensor

    ``Tensor.scatter(..., reduce='add' | 'multiply')``: scatter_reduce's sum / prod with
    ``self`` included (the same values, torch runs the same kernel). value_reduce scatters
    a scalar, cast to ``self``'s dtype as torch does (toward zero for integers).
    """
    if src is None:
        src = _filled_like(ctx, index, value)
    layer = ScatterReduce(dim, _SCATTER_REDUCTIONS[reduce], True, name=ctx.name(),
                          **_compute_dtype(ctx))
    return layer(*(_as_keras(ctx, v) for v in (self, index, src)))


def _filled_like(ctx, index, value):
    """``value`` in the result's dtype, one per element of ``index`` (a constant when the
    index is, else sized at run time)."""
    dtype = keras_dtype(ctx.out_dtype)
    scalar = np.asarray(value).astype(dtype)
    if isinstance(index, np.ndarray):
        return np.full(index.shape, scalar, dtype=dtype)
    return ops.full_like(index, scalar, dtype=dtype)


@register(aten.index_reduce.default, policy=Policy.CANONICAL, supports=_reduce_supports,
          dynamic=True)
def aten_index_reduce_default(ctx, self, dim, index, source, reduce, include_self=True):
    """index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True) -> Tensor

    The slice ``i`` of ``source`` along ``dim`` reduces into slice ``index[i]`` of ``self``
    (prod, mean, amax, amin), as scatter_reduce with the index spread over each slice.
    """
    layer = ScatterReduce(dim, reduce, include_self, index_along_dim=True, name=ctx.name(),
                          **_compute_dtype(ctx))
    return layer(*(_as_keras(ctx, v) for v in (self, index, source)))


_BAG_MODES = {0: "sum", 1: "mean", 2: "max"}


def _bag_supports(node, indices, mode=0, **_):
    for user in node.users:
        if user.target is not operator.getitem or user.args[1] != 0:
            return ("embedding_bag's offset2bag, bag_size or max_indices output is used (only "
                    "the bags convert); use the first output only")
    if mode not in _BAG_MODES:
        return f"embedding_bag mode={mode} (torch knows 0 sum, 1 mean, 2 max)"
    if 0 in [concrete(d) for d in indices.meta["val"].shape]:  # example sizes: no guard
        return "embedding_bag of no indices (every bag empty); drop the op"
    return None


@register(aten._embedding_bag.default, aten._embedding_bag_forward_only.default,
          policy=Policy.CANONICAL, supports=_bag_supports, dynamic=True)
def aten__embedding_bag_default(ctx, weight, indices, offsets, scale_grad_by_freq=False,
                                mode=0, sparse=False, per_sample_weights=None,
                                include_last_offset=False, padding_idx=-1):
    """_embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)

    F.embedding_bag / nn.EmbeddingBag: the rows looked up (an ``Embedding`` layer when the
    weight is a parameter), then reduced per bag (:class:`crossport.layers.scatter.
    BagReduce`): sum (times per_sample_weights), mean or max, padding_idx left out, empty
    bags 0. scale_grad_by_freq and sparse only affect gradients.
    """
    ids = _as_keras(ctx, indices)
    if isinstance(weight, np.ndarray):
        table = keras.layers.Embedding(weight.shape[0], weight.shape[1], name=ctx.name(),
                                       dtype=keras_dtype(ctx.out_dtype))
        rows = call_with_weights(table, ids, embeddings_initializer=np.asarray(weight))
    else:
        rows = ops.take(weight, ids, axis=0)
    # torch's float32 sum/mean kernel without padding stops at an extra last offset short
    # of the end; its other kernels read to the end (measured)
    stop = mode != 2 and padding_idx < 0 and ctx.out_dtype == torch.float32
    layer = BagReduce(_BAG_MODES[mode], bool(include_last_offset), int(padding_idx), stop,
                      name=ctx.name("bags"), **_compute_dtype(ctx))
    extra = () if per_sample_weights is None else (_as_keras(ctx, per_sample_weights),)
    bags = layer(rows, ids, _as_keras(ctx, offsets), *extra)
    ctx.out_layout = (canonical(2),) * 4
    return bags, None, None, None
