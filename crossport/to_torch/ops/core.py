"""Core layers: Dense, Embedding, Identity, Rescaling, Normalization, CategoryEncoding."""

from __future__ import annotations

import operator

import keras
import numpy as np
import torch
from torch import nn

from crossport.layout import canonical, physical_axis, physical_broadcast
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.modules import ChannelScale, Scale, ScaleShift, Standardize
from crossport.to_torch.ops.activation import (
    activation_unsupported,
    apply_activation,
    layer_activation,
)
from crossport.to_torch.ops.conv import load
from crossport.to_torch.registry import register_layer
from crossport.weights import dense_weight_from_keras, flat_feature_order


def _dense_supported(layer) -> str | None:
    return activation_unsupported(layer_activation(layer))


@register_layer(policy=Policy.CUSTOM, supports=_dense_supported)
def Dense(ctx: Context, layer, inputs: Held) -> Held:
    """keras.layers.Dense -> nn.Linear over the last Keras axis (any rank).

    After a flatten of a channels-first block the features arrive C-major: the Linear weight's
    columns are permuted instead of the activations (pitfall 9).
    """
    cfg = layer.get_config()
    weight = dense_weight_from_keras(np.asarray(layer.kernel.numpy()))
    if inputs.layout.flat is not None:
        flat = inputs.layout.flat
        # order[j]: the Keras feature held at position j
        order = flat_feature_order(flat.block_shape, flat.block_perm)
        weight = weight[:, order]
        layout = canonical(2)
    else:
        inputs = ctx.canonical(inputs)
        layout = inputs.layout
    module = nn.Linear(weight.shape[1], weight.shape[0], bias=cfg["use_bias"])
    y = ctx.call_module(load(module, weight, layer.bias if cfg["use_bias"] else None),
                        inputs.node)
    y = apply_activation(ctx, layer_activation(layer), y, dim=-1)
    return Held(y, layout, (*inputs.shape[:-1], weight.shape[0]))


@register_layer("Identity", policy=Policy.AGNOSTIC)
def Identity(ctx: Context, layer, inputs, **_call_kwargs):
    """keras.layers.Identity: no module (dropout and noise layers: ops/noise.py)."""
    return inputs


@register_layer(policy=Policy.CANONICAL)
def Embedding(ctx: Context, layer, inputs):
    """keras.layers.Embedding -> nn.Embedding (int64 indices; Keras casts to int32).

    Keras looks ids up with ``ops.take``, which on TF counts an id in ``[-n, -1]`` from the
    end (``n + id``) where nn.Embedding raises: the ids are wrapped the same way first. An id
    ``>= n`` or ``< -n`` stays out of range: an error in both frameworks.
    ``mask_zero=True``: the mask is its own graph node (``not_equal(ids, 0)``), converted
    where the layers consuming it take it.
    """
    table = np.asarray(layer.embeddings.numpy())
    module = nn.Embedding(*table.shape)
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(table))
    index = ctx.call_method("long", inputs)
    negative = ctx.call_function(operator.lt, index, 0)
    index = ctx.call_function(torch.where, negative,
                              ctx.call_function(operator.add, index, table.shape[0]), index)
    return ctx.call_module(module, index)


def _reversible_supported(layer) -> str | None:
    if getattr(layer, "quantization_mode", None):
        return f"quantized ({layer.quantization_mode}): only float32 weights convert"
    if layer.mask_zero:
        return "mask_zero=True (the mask is set inside its call): not reproduced"
    if layer.reverse_dtype not in (None, "float32"):
        return f"reverse_dtype={layer.reverse_dtype!r}: only float32 computes convert"
    return None


@register_layer(policy=Policy.CANONICAL, supports=_reversible_supported)
def ReversibleEmbedding(ctx: Context, layer, inputs, reverse=False):
    """keras.layers.ReversibleEmbedding (keras_hub's token embeddings).

    ``reverse=False``: the Embedding lookup. ``reverse=True``: logits ``x @ embeddings.T``
    (tied) or ``x @ reverse_embeddings``, then Keras' soft cap ``tanh(l / cap) * cap``.
    """
    if not reverse:
        return Embedding(ctx, layer, inputs)
    if layer.tie_weights:
        weight = np.asarray(layer.embeddings.numpy())
    else:
        weight = np.asarray(layer.reverse_embeddings.numpy()).T
    module = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(np.ascontiguousarray(weight)))
    logits = ctx.call_module(module, inputs, suffix="reverse")
    cap = layer.logit_soft_cap
    if cap is not None:
        logits = ctx.call_function(operator.mul, ctx.call_function(
            torch.tanh, ctx.call_function(operator.truediv, logits, float(cap))), float(cap))
    return logits


def _rescaling_constants(layer) -> tuple[np.ndarray, np.ndarray]:
    """Keras' scale/offset as arrays, with Rescaling.call's channels_first reshape of scale."""
    cfg = layer.get_config()
    scale, offset = (np.asarray(keras.saving.deserialize_keras_object(cfg[k]),
                                dtype=np.float32) for k in ("scale", "offset"))
    if scale.ndim and keras.config.image_data_format() == "channels_first":
        scale = scale.reshape(scale.shape + (1,) * (3 - scale.ndim))
    return scale, offset


def _rescaling_supported(layer) -> str | None:
    try:
        rank = len(layer.input.shape)
    except (AttributeError, ValueError):  # a layer called several times: checked per call
        rank = None
    scale, offset = _rescaling_constants(layer)
    if rank is not None and max(scale.ndim, offset.ndim) > rank - 1:
        return (f"scale/offset of shape {scale.shape}/{offset.shape} broadcast beyond the "
                "input's non-batch axes")
    return None


def _held_constant(value: np.ndarray, inputs: Held) -> torch.Tensor:
    """A Keras-broadcast constant shaped to broadcast against the held tensor."""
    return torch.from_numpy(physical_broadcast(value, inputs.layout)[0])


@register_layer(policy=Policy.CUSTOM, supports=_rescaling_supported, keeps_layout=True)
def Rescaling(ctx: Context, layer, inputs: Held) -> Held:
    """keras.layers.Rescaling: ``x * scale + offset``, scalars or per-axis vectors (buffers
    laid out like the held input: a channel vector on an NCHW tensor is ``[C, 1, 1]``)."""
    scale, offset = _rescaling_constants(layer)
    if scale.ndim or offset.ndim:  # per-axis constants see the feature order
        inputs = ctx.plain(inputs)
    x = ctx.call_method("float", inputs.node)
    if not scale.ndim and not offset.ndim:
        return Held(ctx.call_module(Scale(float(scale), float(offset)), x), inputs.layout,
                    inputs.shape)
    module = ScaleShift(_held_constant(scale, inputs), _held_constant(offset, inputs))
    return Held(ctx.call_module(module, x), inputs.layout, inputs.shape)


@register_layer(policy=Policy.CUSTOM, keeps_layout=True)
def Normalization(ctx: Context, layer, inputs: Held) -> Held:
    """keras.layers.Normalization: mean/variance buffers laid out like the held input."""
    inputs = ctx.plain(inputs)
    mean, var = (physical_broadcast(np.asarray(w.numpy(), dtype=np.float32), inputs.layout)
                 for w in (layer.mean, layer.variance))
    module = Standardize(torch.from_numpy(mean), torch.from_numpy(var),
                         bool(layer.get_config().get("invert", False)))
    return Held(ctx.call_module(module, inputs.node), inputs.layout, inputs.shape)


@register_layer(policy=Policy.CUSTOM, keeps_layout=True)
def Masking(ctx: Context, layer, inputs: Held) -> Held:
    """keras.layers.Masking(mask_value): steps whose features all equal ``mask_value`` are
    zeroed (``where(any(x != v, axis=-1), x, 0)``); the mask is a separate graph node."""
    inputs = ctx.plain(inputs)
    value = float(layer.get_config()["mask_value"])
    keep = ctx.call_function(torch.any, ctx.call_function(torch.ne, inputs.node, value),
                             dim=physical_axis(inputs.layout, -1), keepdim=True)
    node = ctx.call_function(torch.where, keep, inputs.node, 0.0)
    return Held(node, inputs.layout, inputs.shape)


@register_layer(policy=Policy.CUSTOM, keeps_layout=True)
def LayerScale(ctx: Context, layer, inputs: Held) -> Held:
    """keras.applications' LayerScale (ConvNeXt): ``x * gamma`` over the last Keras axis."""
    inputs = ctx.plain(inputs)
    gamma = np.asarray(layer.gamma.numpy())
    module = ChannelScale(torch.from_numpy(physical_broadcast(gamma, inputs.layout)[0]))
    return Held(ctx.call_module(module, inputs.node), inputs.layout, inputs.shape)


def _discretization_supported(layer) -> str | None:
    cfg = layer.get_config()
    if cfg["output_mode"] != "int" or cfg.get("sparse"):
        return f"Discretization output_mode={cfg['output_mode']!r}: only 'int' converts"
    if layer.bin_boundaries is None:
        return "Discretization without bin boundaries (not adapted)"
    return None


@register_layer(policy=Policy.AGNOSTIC, supports=_discretization_supported)
def Discretization(ctx: Context, layer, inputs):
    """keras.layers.Discretization(bin_boundaries), output_mode 'int': the bucket index, the
    number of boundaries ``<= x`` (TF's Bucketize = ``torch.bucketize(right=True)``), with
    float32 boundaries as TF holds them, in Keras' output dtype (int64)."""
    bins = ctx.constant(np.asarray(layer.bin_boundaries, dtype=np.float32)).node
    x = ctx.call_method("to", inputs, torch.float32)
    index = ctx.call_function(torch.bucketize, x, bins, right=True)
    return ctx.call_method("to", index, ctx.output_dtype())


def _category_encoding_supported(layer) -> str | None:
    if layer.sparse:
        return "CategoryEncoding(sparse=True): torch modules return dense tensors"
    return None


@register_layer(policy=Policy.CANONICAL, supports=_category_encoding_supported)
def CategoryEncoding(ctx: Context, layer, inputs, count_weights=None):
    """keras.layers.CategoryEncoding(num_tokens, output_mode) on integer ids.

    ``one_hot`` (a trailing axis of size 1 at run time squeezed first, as Keras does) compares each id with
    ``arange(num_tokens)``: an id out of range, negative included, is a zero row as in
    tf.one_hot. ``multi_hot`` / ``count`` reduce that one-hot over axis 1 (axis 0 of a
    rank-1 input: Keras' bincount and its rank-3 fallback alike; TF ignores ids
    ``>= num_tokens``, and fails on negative ones where torch counts nothing); ``count``
    scales each id by its ``count_weights`` and takes their dtype, as Keras does.
    """
    depth = int(layer.num_tokens)
    rank = len(ctx.input_shape)
    ids = ctx.call_method("long", inputs)
    if layer.output_mode == "one_hot" and rank > 1 and ctx.input_shape[-1] in (1, None):
        # Keras squeezes the last axis where it is 1 at run time: squeeze(-1) does too, and
        # leaves a run-time size other than 1 as it is
        ids, rank = ctx.call_method("squeeze", ids, -1), rank - 1
    classes = ctx.call_function(torch.arange, depth)
    hot = ctx.call_function(operator.eq, ctx.call_method("unsqueeze", ids, -1), classes)
    dtype = ctx.output_dtype() if count_weights is None else \
        getattr(torch, ctx.input_dtypes[1])
    hot = ctx.call_method("to", hot, dtype)
    if layer.output_mode == "one_hot":
        return hot
    if count_weights is not None:
        hot = ctx.call_function(operator.mul, hot, ctx.call_method("unsqueeze", count_weights, -1))
    axis = 1 if rank > 1 else 0
    if layer.output_mode == "multi_hot":
        return ctx.call_function(torch.amax, hot, dim=axis)
    return ctx.call_function(torch.sum, hot, dim=axis)
