"""Attention layers: MultiHeadAttention and GroupQueryAttention ->
to_torch.modules.KerasMultiHeadAttention (plain Linears and ``F.scaled_dot_product_attention``),
Attention -> KerasAttention, EinsumDense -> Einsum (``torch.einsum`` with the kernel as a
parameter); masks and causal masks included."""

from __future__ import annotations

import operator

import numpy as np
import torch

from crossport.errors import UnsupportedLayerError
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context
from crossport.to_torch.modules import (
    Einsum,
    KerasAdditiveAttention,
    KerasAttention,
    KerasMultiHeadAttention,
)
from crossport.to_torch.ops.activation import activation_unsupported, apply_activation
from crossport.to_torch.registry import register_layer, register_op


def _mha_supported(layer) -> str | None:
    cfg = layer.get_config()
    if tuple(cfg.get("attention_axes") or (1,)) != (1,):
        return f"attention_axes={cfg['attention_axes']} (only attention over axis 1)"
    ranks = {len(t.shape) for node in layer._inbound_nodes for t in node.input_tensors[:1]}
    if ranks - {3}:
        return f"a query of rank {max(ranks)} (only [batch, sequence, features])"
    if cfg.get("output_shape") is not None and np.ndim(cfg["output_shape"]) > 0 and \
            len(cfg["output_shape"]) != 1:
        return "multi-dimensional output_shape is not converted"
    return None


def _dense(linear: torch.nn.Linear, dense, rows: int) -> None:
    """EinsumDense kernel [..in.., ..out..] -> Linear weight [out, in] (flattened)."""
    kernel = np.asarray(dense.kernel.numpy())
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(np.ascontiguousarray(kernel.reshape(rows, -1).T)))
        if linear.bias is not None:
            linear.bias.copy_(torch.from_numpy(np.asarray(dense.bias.numpy()).reshape(-1)))


@register_layer(policy=Policy.CANONICAL, supports=_mha_supported, masks=True)
def MultiHeadAttention(ctx: Context, layer, query, value, key=None, query_mask=None,
                       value_mask=None, key_mask=None, attention_mask=None,
                       return_attention_scores=False, use_causal_mask=False, **_call_kwargs):
    """keras.layers.MultiHeadAttention(num_heads, key_dim, value_dim, output_shape, use_gate,
    sliding_window).

    Keras scales the query by ``1/sqrt(key_dim)`` before the scores; masked scores become a
    large negative number; with ``dropout > 0`` or ``return_attention_scores=True`` Keras
    takes its Softmax-layer path, which also zeroes masked probabilities (fully masked rows:
    zeros, else uniform); the scores returned are those probabilities ``[B, heads, T, S]``.
    The Keras masks (mask_zero / Masking upstream) are ANDed in as ``[B, T, 1]`` /
    ``[B, 1, S]``.
    """
    cfg = layer.get_config()
    heads, key_dim = int(cfg["num_heads"]), int(cfg["key_dim"])
    value_dim = int(cfg["value_dim"] or key_dim)
    return _attention_module(ctx, layer, heads, heads, key_dim, value_dim, cfg, query, value,
                             key, attention_mask, use_causal_mask,
                             (query_mask, value_mask, key_mask), return_attention_scores)


@register_layer(policy=Policy.CANONICAL, masks=True)
def GroupedQueryAttention(ctx: Context, layer, query, value, key=None, query_mask=None,
                          value_mask=None, key_mask=None, attention_mask=None,
                          return_attention_scores=False, use_causal_mask=False,
                          **_call_kwargs):
    """keras.layers.GroupQueryAttention(head_dim, num_query_heads, num_key_value_heads,
    use_gate, sliding_window): MultiHeadAttention's module with ``num_kv_heads`` key/value
    heads, each serving ``num_query_heads // num_key_value_heads`` consecutive query heads
    (Keras repeats them on the head axis); masks, scores and dropout's Softmax path as there.
    """
    cfg = layer.get_config()
    heads, head_dim = int(layer.num_query_heads), int(layer.head_dim)
    return _attention_module(ctx, layer, heads, int(layer.num_key_value_heads), head_dim,
                             head_dim, cfg, query, value, key, attention_mask,
                             use_causal_mask, (query_mask, value_mask, key_mask),
                             return_attention_scores)


def _attention_module(ctx: Context, layer, heads: int, kv_heads: int, key_dim: int,
                      value_dim: int, cfg: dict, query, value, key, attention_mask,
                      use_causal_mask, keras_masks, return_attention_scores):
    """Build and call the KerasMultiHeadAttention of an MHA or GQA layer (same sublayers:
    ``_query_dense`` ... ``_output_dense``, ``_gate_dense``)."""
    qd, kd, vd = layer._query_dense, layer._key_dense, layer._value_dense
    od = layer._output_dense
    gate = getattr(layer, "_gate_dense", None) if cfg.get("use_gate") else None
    module = KerasMultiHeadAttention(
        int(qd.kernel.shape[0]), int(kd.kernel.shape[0]), int(vd.kernel.shape[0]), heads,
        key_dim, value_dim, int(od.kernel.shape[-1]), bool(cfg["use_bias"]),
        zero_masked=float(cfg.get("dropout") or 0.0) > 0.0, num_kv_heads=kv_heads,
        sliding_window=cfg.get("sliding_window"), use_gate=gate is not None,
        dropout=float(cfg.get("dropout") or 0.0))
    for linear, dense in ((module.query, qd), (module.key, kd), (module.value, vd),
                          (module.gate, gate)):
        if dense is not None:
            _dense(linear, dense, int(dense.kernel.shape[0]))
    _dense(module.attention_output, od, heads * value_dim)
    attention_mask = _with_keras_masks(ctx, attention_mask, *keras_masks)
    out = ctx.call_module(module, query, value, key, attention_mask, bool(use_causal_mask),
                          bool(return_attention_scores))
    return _outputs(ctx, out, return_attention_scores)


def _with_keras_masks(ctx: Context, attention_mask, query_mask, value_mask, key_mask):
    """``attention_mask & query_mask[..., None] & value_mask[:, None] & key_mask[:, None]``."""
    parts = [] if attention_mask is None else [ctx.call_method("bool", attention_mask)]
    if query_mask is not None:
        parts.append(ctx.call_method("unsqueeze", ctx.call_method("bool", query_mask), -1))
    for mask in (value_mask, key_mask):
        if mask is not None:
            parts.append(ctx.call_method("unsqueeze", ctx.call_method("bool", mask), -2))
    if not parts:
        return None
    combined = parts[0]
    for part in parts[1:]:
        combined = ctx.call_function(torch.logical_and, combined, part)
    return combined


def _attention_supported(layer) -> str | None:
    if layer.get_config()["score_mode"] not in ("dot", "concat"):
        return f"score_mode={layer.get_config()['score_mode']!r}"
    return None


def _scalar(parameter: torch.nn.Parameter | None, variable) -> None:
    if parameter is not None:
        with torch.no_grad():
            parameter.copy_(torch.as_tensor(np.asarray(variable.numpy())).reshape(()))


@register_layer(policy=Policy.CANONICAL, supports=_attention_supported, masks=True)
def Attention(ctx: Context, layer, inputs, mask=None, use_causal_mask=False,
              return_attention_scores=False, **_call_kwargs):
    """keras.layers.Attention([query, value(, key)]): dot/concat scores, use_scale, causal,
    ``return_attention_scores`` (the softmax weights, masked query rows kept as Keras does).

    ``mask`` is Keras' ``[query_mask, value_mask]`` (either may be None).
    """
    cfg = layer.get_config()
    module = KerasAttention(bool(cfg["use_scale"]), cfg["score_mode"],
                            float(cfg.get("dropout") or 0.0))
    _scalar(module.scale, layer.scale if cfg["use_scale"] else None)
    _scalar(module.concat_score_weight, getattr(layer, "concat_score_weight", None))
    query, value, *key = inputs
    query_mask, value_mask = (list(mask) + [None, None])[:2] if mask is not None else (None, None)
    out = ctx.call_module(module, query, value, key[0] if key else None, query_mask,
                          value_mask, bool(use_causal_mask), bool(return_attention_scores))
    return _outputs(ctx, out, return_attention_scores)


def _outputs(ctx: Context, out, return_attention_scores) -> object:
    """The module's output, or its ``(output, scores)`` pair as two graph values."""
    if not return_attention_scores:
        return out
    return [ctx.call_function(operator.getitem, out, 0),
            ctx.call_function(operator.getitem, out, 1)]


@register_layer(policy=Policy.CANONICAL, masks=True)
def AdditiveAttention(ctx: Context, layer, inputs, mask=None, use_causal_mask=False,
                      return_attention_scores=False, **_call_kwargs):
    """keras.layers.AdditiveAttention([query, value(, key)]): Bahdanau scores with a scale
    vector, masks and causal mask as Attention."""
    cfg = layer.get_config()
    query, value, *key = inputs
    dim = int(layer.scale.shape[0]) if cfg["use_scale"] else 0
    module = KerasAdditiveAttention(dim, bool(cfg["use_scale"]),
                                    float(cfg.get("dropout") or 0.0))
    if module.scale is not None:
        with torch.no_grad():
            module.scale.copy_(torch.from_numpy(np.asarray(layer.scale.numpy())))
    query_mask, value_mask = (list(mask) + [None, None])[:2] if mask is not None else (None, None)
    out = ctx.call_module(module, query, value, key[0] if key else None, query_mask,
                          value_mask, bool(use_causal_mask), bool(return_attention_scores))
    return _outputs(ctx, out, return_attention_scores)


def _einsum_supported(layer) -> str | None:
    cfg = layer.get_config()
    if cfg.get("lora_rank"):
        return "EinsumDense with LoRA (lora_rank) is not converted"
    if getattr(layer, "quantization_mode", None):
        return f"quantized EinsumDense ({layer.quantization_mode}) is not converted"
    return activation_unsupported(cfg.get("activation"))


@register_layer(policy=Policy.CANONICAL, supports=_einsum_supported)
def EinsumDense(ctx: Context, layer, inputs):
    """keras.layers.EinsumDense(equation, output_shape, bias_axes) -> Einsum + activation.

    Keras' equation runs unchanged on the Keras-ordered tensor (``torch.einsum`` has the same
    syntax, ``...`` included); the bias keeps Keras' shape, which broadcasts from the right.
    """
    cfg = layer.get_config()
    kernel = torch.from_numpy(np.ascontiguousarray(np.asarray(layer.kernel.numpy())))
    bias = None if layer.bias is None else torch.from_numpy(
        np.ascontiguousarray(np.asarray(layer.bias.numpy())))
    y = ctx.call_module(Einsum(cfg["equation"], kernel, bias), inputs)
    return apply_activation(ctx, cfg.get("activation"), y, dim=-1)


def _dot_product_attention_supported(op) -> str | None:
    if op.flash_attention:
        return "flash_attention=True (Keras' TF backend refuses it too)"
    return None


@register_op(policy=Policy.CANONICAL, supports=_dot_product_attention_supported)
def DotProductAttention(ctx: Context, op, query, key, value, bias=None, mask=None,
                        scale=None):
    """keras.ops.dot_product_attention(query, key, value, bias, mask, scale, is_causal) on
    ``[B, T, N, H]`` tensors, as Keras' TF backend computes it: key/value heads repeated
    for grouped queries (more than one key head), logits ``BTNH,BSNH->BNTS`` times
    ``scale`` (default ``1/sqrt(H)`` in float32) plus ``bias``, masked (``mask`` and the
    lower-triangular causal mask) to ``-0.7 * 3.38953e38``, softmax over S, ``BNTS,BSNH``.
    ``attn_logits_soft_cap`` is ignored, as the TF backend ignores it."""
    query_heads, key_heads = ctx.input_shape[2], _shape_of(ctx, 1)[2]
    if query_heads is not None and key_heads is not None and query_heads > key_heads > 1:
        groups = query_heads // key_heads
        key = ctx.call_function(torch.repeat_interleave, key, groups, dim=2)
        value = ctx.call_function(torch.repeat_interleave, value, groups, dim=2)
    if scale is None:
        head_dim = _shape_of(ctx, 1)[-1]
        if head_dim is None:
            raise UnsupportedLayerError(
                f"keras.ops.dot_product_attention {ctx.path!r}: the head size is not known "
                "(the default scale depends on it)", [(ctx.path, "DotProductAttention",
                                                       "unknown head size")])
        scale = float(np.float32(1.0) / np.sqrt(np.float32(head_dim)))
    logits = ctx.call_function(torch.einsum, "btnh,bsnh->bnts", query, key)
    logits = ctx.call_function(operator.mul, logits, scale)
    if bias is not None:
        logits = ctx.call_function(operator.add, logits, bias)
    keep = None
    if mask is not None:
        keep = ctx.call_method("to", mask, torch.bool)
    if op.is_causal:
        plane = ctx.call_function(operator.getitem, logits, (0, 0))
        causal = ctx.call_method("tril", ctx.call_function(torch.ones_like, plane,
                                                           dtype=torch.bool))
        keep = causal if keep is None else ctx.call_function(torch.logical_and, keep, causal)
    if keep is not None:
        logits = ctx.call_function(torch.where, keep, logits, -0.7 * 3.38953e38)
    probs = ctx.call_function(torch.softmax, logits, -1)
    return ctx.call_function(torch.einsum, "bnts,bsnh->btnh", probs, value)


def _shape_of(ctx: Context, index: int) -> tuple:
    """The Keras shape of the op's tensor input ``index`` (query 0, key 1, value 2)."""
    return ctx.tensor_shapes[index]
