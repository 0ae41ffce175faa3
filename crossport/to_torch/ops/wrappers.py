"""Wrapper layers: TimeDistributed(layer) runs its inner layer's converter on folded time."""

from __future__ import annotations

import torch

from crossport.errors import UnsupportedLayerError
from crossport.layout import canonical
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.registry import lookup, register_layer


def _time_distributed_supported(layer) -> str | None:
    inner = layer.layer
    converter = lookup(inner)
    if converter is None:
        return f"TimeDistributed({type(inner).__name__}): no converter for the inner layer"
    reason = converter.unsupported_reason(inner)
    if reason:
        return f"TimeDistributed({type(inner).__name__}): {reason}"
    try:
        sizes = tuple(layer.input.shape[2:])
    except (AttributeError, ValueError):
        return None
    if None in sizes:
        return f"TimeDistributed needs static per-step sizes, got {sizes}"
    return None


@register_layer(policy=Policy.CUSTOM, supports=_time_distributed_supported, masks=True)
def TimeDistributed(ctx: Context, layer, inputs: Held, mask=None, **_call_kwargs) -> Held:
    """keras.layers.TimeDistributed(layer): ``[N, T, *step] -> [N*T, *step]``, the inner
    layer's own converter (its torch module is named after the wrapper), then back to
    ``[N, T, *out]``. Inner channels-first layers hold the folded tensor NCHW as usual.
    A Keras mask is dropped as Keras drops it for an inner layer whose call takes none
    (Dense, Conv2D ...); one that takes it is refused."""
    from crossport.to_torch.emit import apply_converter  # emit imports the registry users

    inner = layer.layer
    if mask is not None and getattr(inner, "_call_has_mask_arg", True):
        raise UnsupportedLayerError(
            f"Keras layer {ctx.path!r} (TimeDistributed({type(inner).__name__})) gets a Keras "
            "mask its inner layer consumes per step; not converted",
            [(ctx.path, "TimeDistributed", "masked inner layer")])
    inputs = ctx.canonical(inputs)
    steps, step_shape = inputs.shape[1], tuple(inputs.shape[2:])
    batch = ctx.call_method("size", inputs.node, 0)
    folded = ctx.call_method("reshape", inputs.node, -1, *step_shape)
    inner_in = Held(folded, canonical(len(step_shape) + 1), (None, *step_shape))
    inner_out = tuple(inner.compute_output_shape((None, *step_shape)))
    outer_shape = ctx.input_shape
    ctx.input_shape = inner_in.shape
    try:
        (held,) = apply_converter(ctx, lookup(inner), inner, (inner_in,), {}, [inner_out])
    finally:
        ctx.input_shape = outer_shape
    held = ctx.canonical(held)
    node = ctx.call_method("reshape", held.node, batch, -1 if steps is None else steps,
                           *inner_out[1:])
    return Held(node, canonical(len(inner_out) + 1), (inputs.shape[0], steps, *inner_out[1:]))


def _spectral_supported(layer) -> str | None:
    converter = lookup(layer.layer)
    if converter is None:
        return f"SpectralNormalization({type(layer.layer).__name__}): no converter for it"
    reason = converter.unsupported_reason(layer.layer)
    return f"SpectralNormalization({type(layer.layer).__name__}): {reason}" if reason else None


@register_layer(policy=Policy.CUSTOM, supports=_spectral_supported)
def SpectralNormalization(ctx: Context, layer, inputs: Held, **_call_kwargs) -> Held:
    """keras.layers.SpectralNormalization(layer) at inference: the inner layer with its
    kernel as stored (Keras normalizes and assigns it only in training calls); the inner
    layer's own converter, its module named after the wrapper; the output cast to the
    input's dtype as Keras does."""
    from crossport.to_torch.emit import apply_converter  # emit imports the registry users

    inner = layer.layer
    out_shape = tuple(inner.compute_output_shape(ctx.input_shape))
    (held,) = apply_converter(ctx, lookup(inner), inner, (inputs,), {}, [out_shape])
    if ctx.input_dtype != str(inner.compute_dtype):  # Keras casts to the input's dtype (its
        held = Held(ctx.call_method("to", held.node, getattr(torch, ctx.input_dtype)),
                    held.layout, held.shape)          # symbolic output says otherwise)
    return held
