"""Normalisation in inference mode (pitfalls.md items 3, 5, 14)."""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.to_keras.registry import Policy, register

aten = torch.ops.aten


def _is_param(arg) -> bool:
    return arg is None or (isinstance(arg, torch.fx.Node) and arg.op == "placeholder")


def _batch_norm_supports(node: torch.fx.Node) -> str | None:
    args = list(node.args) + [None] * 9
    weight, bias, mean, var, training = args[1], args[2], args[3], args[4], args[5]
    if node.target is aten.batch_norm.default and training:
        return "batch_norm in training mode (call module.eval() before converting)"
    if mean is None or var is None:
        return "batch_norm without running statistics (track_running_stats=False)"
    if not all(_is_param(a) for a in (weight, bias, mean, var)):
        return "batch_norm statistics computed in the graph"
    return None


def emit_batch_norm(ctx, input, weight, bias, running_mean, running_var, momentum, eps):
    """Keras BatchNormalization with torch's eps (Keras' default is 1e-3: pitfall 5)."""
    layer = keras.layers.BatchNormalization(
        axis=-1, epsilon=eps, momentum=1.0 - momentum,  # Keras momentum is mirrored
        center=bias is not None, scale=weight is not None, name=ctx.name(),
    )
    y = layer(input)
    weights = [w for w in (weight, bias) if w is not None] + [running_mean, running_var]
    layer.set_weights([np.asarray(w, dtype=np.float32) for w in weights])
    return y


@register(aten.batch_norm.default, policy=Policy.CHANNELS_LAST, supports=_batch_norm_supports)
def aten_batch_norm_default(ctx, input, weight, bias, running_mean, running_var, training,
                            momentum, eps, cudnn_enabled):
    """batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float momentum, float eps, bool cudnn_enabled) -> Tensor"""
    return emit_batch_norm(ctx, input, weight, bias, running_mean, running_var, momentum, eps)


@register(aten._native_batch_norm_legit_no_training.default, policy=Policy.CHANNELS_LAST,
          supports=_batch_norm_supports)
def aten_native_batch_norm_legit_no_training(ctx, input, weight, bias, running_mean,
                                             running_var, momentum, eps):
    """_native_batch_norm_legit_no_training(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor)

    Only output 0 is used in inference graphs; the saved statistics are not materialised.
    """
    y = emit_batch_norm(ctx, input, weight, bias, running_mean, running_var, momentum, eps)
    return (y, None, None)
