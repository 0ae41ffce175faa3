"""Scaled dot-product attention, kept whole (one converter, no decomposition).

``nn.MultiheadAttention`` in eval exports as linear/view/bmm/softmax (or as this op when it
needs no weights), transformers' attention as this op: both end here or in the generic
converters. The query, key and value arrive in whatever layout the surrounding views left
them in (BERT's ``view -> transpose(1, 2)`` is free): the products are einsums over the
Keras axes, so no transpose is placed, and the output takes the query's layout.
"""

from __future__ import annotations

import math
import string

import keras
import numpy as np
import torch

from crossport.layout import Layout, canonical, physical_order
from crossport.to_keras.dynamic_dims import same_size
from crossport.to_keras.ops.elementwise import keras_multiply
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.values import TensorValue, concrete

aten = torch.ops.aten
ops = keras.ops


def _sdpa_supports(node):
    args = list(node.args) + [None] * 8
    dropout_p = node.kwargs.get("dropout_p", args[4] or 0.0)
    if dropout_p:
        return (f"dropout_p={dropout_p}: scaled_dot_product_attention drops at random even in "
                "eval mode; pass dropout_p=0.0 when not training (nn.MultiheadAttention and "
                "transformers do)")
    ranks = {a.meta["val"].dim() for a in args[:3]}
    if min(ranks) < 2:
        return "query/key/value of rank < 2"
    return None


@register(aten.scaled_dot_product_attention.default, policy=Policy.CUSTOM,
          supports=_sdpa_supports, dynamic=True)
def aten_scaled_dot_product_attention_default(ctx, query, key, value, attn_mask=None,
                                              dropout_p=0.0, is_causal=False, scale=None,
                                              enable_gqa=False):
    """scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor

    Boolean masks keep True positions (added as 0/-inf, like torch, so an inf or NaN score
    at a masked position still makes the row NaN), float masks are added; is_causal is top-left
    aligned (``tril`` of an ``[L, S]`` block). Rows with every position masked give 0
    (torch's safe softmax), not NaN. scale defaults to ``1/sqrt(E)``.
    """
    q, k, v = (ctx.plain(as_value(ctx, t)) for t in (query, key, value))
    rank = q.rank
    scale = _default_scale(ctx, q) if scale is None else scale
    heads = [t.shape[-3] for t in (q, k, v)]
    grouped = enable_gqa and not all(same_size(heads[0], h) for h in heads[1:])
    if grouped and not any(map(ctx.is_dynamic, heads)):
        # static counts: repeated key/value heads keep the einsum in the given layouts
        # (measured no slower than the grouped reshape on a 16/4-head causal block)
        k, v = (_repeat_heads(ctx, t, concrete(heads[0]) // concrete(t.shape[-3]))
                for t in (k, v))
        grouped = False
    if grouped:
        q, k, v = (_canonical(ctx, t) for t in (q, k, v))
    batch = string.ascii_lowercase[:rank - 2]
    same_batch = q.static_shape()[:-2] == k.static_shape()[:-2] == v.static_shape()[:-2]
    if not same_batch:  # broadcasting batch dims: canonical matmuls broadcast like torch
        q, k, v = (_canonical(ctx, t) for t in (q, k, v))
    q_sub = _subscripts(batch + "wy", q.layout)
    k_sub = _subscripts(batch + "xy", k.layout)
    v_sub = _subscripts(batch + "xz", v.layout)
    out_sub = _subscripts(batch + "wz", q.layout)
    scaled_q = keras_multiply(q.tensor, scale)
    if grouped:
        scores = _grouped_scores(ctx, scaled_q, q, k)
    elif same_batch:
        scores = ops.einsum(f"{q_sub},{k_sub}->{batch}wx", scaled_q, k.tensor)
    else:
        scores = ops.matmul(scaled_q, ops.swapaxes(k.tensor, -1, -2))
    if _adds_nothing(attn_mask):  # HF's "every token attends" mask, folded to a constant
        attn_mask = None
    masked = attn_mask is not None or is_causal
    if attn_mask is not None:
        mask = _mask(ctx, attn_mask)
        if _is_bool(attn_mask):  # as torch does: -inf added, so inf/NaN scores give NaN
            mask = (np.where(mask, 0.0, -np.inf).astype(np.float32)
                    if isinstance(mask, np.ndarray) else ops.where(mask, 0.0, float("-inf")))
        scores = ops.add(scores, ops.cast(mask, scores.dtype))
    if is_causal:  # added as 0/-inf, as torch does
        scores = ops.add(scores, ops.cast(_causal_bias(ctx, q.shape[-2], k.shape[-2], scores),
                                          scores.dtype))
    probs = ops.softmax(scores, axis=-1)
    if masked and _may_mask_a_whole_row(attn_mask, is_causal, q.shape[-2], k.shape[-2]):
        # a fully masked row is 0 in torch, NaN in a plain softmax
        alive = ops.any(ops.greater(scores, float("-inf")), axis=-1, keepdims=True)
        probs = ops.where(alive, probs, ops.zeros_like(probs))
    if grouped:
        out = _grouped_values(ctx, probs, q, v)
        ctx.out_layout = canonical(rank)
        return out
    if same_batch:
        out = ops.einsum(f"{batch}wx,{v_sub}->{out_sub}", probs, v.tensor)
    else:
        out = ops.matmul(probs, v.tensor)
    ctx.out_layout = q.layout
    return out


def _default_scale(ctx, q: TensorValue):
    """``1/sqrt(E)``: a number for a static E, else computed from E at run time (a scale
    baked from the example's E was silently wrong at every other feature size)."""
    e = q.shape[-1]
    if not ctx.is_dynamic(e):
        return 1.0 / math.sqrt(concrete(e))
    return ops.rsqrt(ops.cast(ctx.size(e), q.tensor.dtype))


def _subscripts(letters: str, layout: Layout) -> str:
    """Einsum subscripts of a tensor held in ``layout`` (torch dims named by ``letters``).

    Batch dims are a, b, ...; query length w, key length x, key features y, values z.
    """
    return "".join(physical_order(layout, letters))


def _canonical(ctx, value: TensorValue) -> TensorValue:
    return TensorValue(ctx.canonical(value), canonical(value.rank), value.shape, value.dtype)


def _repeat_heads(ctx, value: TensorValue, times: int) -> TensorValue:
    """GQA: each key/value head serves ``times`` consecutive query heads."""
    value = _canonical(ctx, value)
    x = ops.repeat(value.tensor, times, axis=value.rank - 3)
    shape = list(value.shape)
    shape[-3] = shape[-3] * times
    return TensorValue(x, value.layout, tuple(shape), value.dtype)


def _grouped_scores(ctx, scaled_q, q: TensorValue, k: TensorValue):
    """GQA's ``q @ k^T`` (canonical layouts) with each key head serving ``Hq // Hk``
    consecutive query heads: the query is split into ``[..., Hk, g, L, E]`` with ``g`` read
    at run time and the key broadcast over ``g``, rather than repeated (torch's
    ``repeat_interleave``): no key copy, and head counts may be dynamic. When ``Hk`` does
    not divide ``Hq`` the split fails at run time, as torch raises."""
    heads, length = q.shape[-3], q.shape[-2]
    split_q = ctx.reshape(scaled_q, [*q.shape[:-3], k.shape[-3], heads // k.shape[-3],
                                     length, q.shape[-1]])
    keys = ops.expand_dims(k.tensor, -3)
    scores = ops.matmul(split_q, ops.swapaxes(keys, -1, -2))  # [..., Hk, g, L, S]
    return ctx.reshape(scores, [*_batch_sizes(ctx), heads, length, k.shape[-2]])


def _grouped_values(ctx, probs, q: TensorValue, v: TensorValue):
    """GQA's ``probs @ v``, grouped by the value's head count (which torch lets differ
    from the key's) as ``_grouped_scores`` groups by the key's."""
    heads, length = q.shape[-3], q.shape[-2]
    split = ctx.reshape(probs, [*_batch_sizes(ctx), v.shape[-3], heads // v.shape[-3],
                                length, v.shape[-2]])
    out = ops.matmul(split, ops.expand_dims(v.tensor, -3))  # [..., Hv, g, L, Ev]
    return ctx.reshape(out, [*_batch_sizes(ctx), heads, length, v.shape[-1]])


def _batch_sizes(ctx) -> list:
    """The output's leading (batch) sizes, query and key broadcast (torch sizes)."""
    return list(ctx.node.meta["val"].shape[:-3])


def _causal_bias(ctx, length, source, scores):
    """0 where key j <= query i (``tril`` of ``[L, S]``), -inf elsewhere: a constant for
    static lengths, a ``CausalBias`` of ``scores``' run-time shape when either is dynamic."""
    if not (ctx.is_dynamic(length) or ctx.is_dynamic(source)):
        keep = np.tril(np.ones((concrete(length), concrete(source)), dtype=bool))
        return np.where(keep, 0.0, -np.inf).astype(np.float32)
    from crossport.layers.dynamic import CausalBias

    return CausalBias(name=ctx.name("causal"))(scores)


def _may_mask_a_whole_row(attn_mask, is_causal: bool, length, source) -> bool:
    """Whether some query row can end up with every key at -inf.

    Decided from the graph when it can be: a causal mask alone never masks a whole row (row i
    keeps keys 0..i), and a constant mask is checked. The run-time check it saves costs
    three ops XNNPACK does not take (GREATER, REDUCE_ANY, SELECT_V2) in every attention
    layer of a TFLite file, each splitting the delegate's graph.
    """
    if attn_mask is None:
        return False  # is_causal only
    if isinstance(attn_mask, TensorValue) or not isinstance(length, int) \
            or not isinstance(source, int):
        return True  # known at run time only
    mask = np.asarray(attn_mask)
    keep = mask if mask.dtype == np.bool_ else mask > -np.inf
    keep = np.broadcast_to(keep, keep.shape[:-2] + (length, source))
    if is_causal:
        keep = keep & np.tril(np.ones((length, source), dtype=bool))
    return bool((~keep.any(axis=-1)).any())


def _adds_nothing(attn_mask) -> bool:
    """A constant mask that keeps every position: all True, or all zeros added. Dropping it
    changes nothing but the sign of a zero score (torch: -0.0 + 0.0 = 0.0), and saves a
    full-size add per attention layer (transformers 5 BERT builds one without padding)."""
    if attn_mask is None or isinstance(attn_mask, TensorValue):
        return False
    mask = np.asarray(attn_mask)
    return bool(mask.all()) if mask.dtype == np.bool_ else not mask.any()


def _mask(ctx, mask):
    if isinstance(mask, TensorValue):
        return ctx.canonical(mask)
    return np.asarray(mask)


def _is_bool(mask) -> bool:
    dtype = mask.dtype if isinstance(mask, TensorValue) else np.asarray(mask).dtype
    return dtype in (torch.bool, np.bool_)
