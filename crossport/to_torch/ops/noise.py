"""Keras dropout and noise layers -> crossport.to_torch.noise modules.

Keras 3.15 returns their input at inference (``training=False``), an integer tensor
unchanged (``KEEPS_INPUT_DTYPE``: the emitter does not promote it); so do the modules in
``eval()``. In ``train()`` they draw Keras' distribution (see crossport/to_torch/noise.py),
on the tensor as held: a ``noise_shape`` and SpatialDropout's kept (batch, channel) axes are
mapped to the held axes (``physical_order``), never permuted. Tests:
tests/to_torch/test_dropout.py.
"""

from __future__ import annotations

from crossport.layout import physical_order
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.noise import (
    KerasAlphaDropout,
    KerasDropout,
    KerasGaussianDropout,
    KerasGaussianNoise,
)
from crossport.to_torch.registry import channels_first_layer, register_layer

_SPATIAL = ("SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D")
KEEPS_INPUT_DTYPE = frozenset(("Dropout", *_SPATIAL, "GaussianNoise", "GaussianDropout",
                               "AlphaDropout", "ActivityRegularization"))


def _training_call_supported(layer) -> str | None:
    """A call with ``training=True`` fixed drops at inference too: random, not a model."""
    for node in layer._inbound_nodes:
        if node.arguments.kwargs.get("training") is True:
            return ("called with training=True: Keras applies it at inference too (a random "
                    "output); call it without training= so it follows the model's mode")
    return None


def _held_noise_shape(layer, inputs: Held, keras_noise_shape) -> tuple | None:
    """Keras' noise_shape (per Keras axis) per held axis; a rank Keras cannot train with is
    kept as given so the module refuses train() (eval needs none)."""
    if keras_noise_shape is None:
        return None
    if len(keras_noise_shape) != len(inputs.shape):
        return tuple(keras_noise_shape)
    return physical_order(inputs.layout, tuple(keras_noise_shape))


def _spatial_noise_shape(layer, rank: int) -> tuple:
    """SpatialDropout's noise shape in Keras axes: batch and channels kept (None), 1
    elsewhere; the channel axis is 1 for channels_first (2D/3D), last otherwise."""
    channel = 1 if channels_first_layer(layer) else rank - 1
    return tuple(None if axis in (0, channel) else 1 for axis in range(rank))


@register_layer("Dropout", *_SPATIAL, policy=Policy.CUSTOM,
                supports=_training_call_supported)
def Dropout(ctx: Context, layer, inputs: Held, **_call_kwargs) -> Held:
    """keras.layers.Dropout / SpatialDropout1D/2D/3D -> KerasDropout: identity in eval;
    inverted dropout (keep with probability 1 - rate, scale 1 / (1 - rate)) in train, per
    noise_shape cell (SpatialDropout: per sample and channel) on the tensor as held."""
    if type(layer).__name__ in _SPATIAL:
        noise = _spatial_noise_shape(layer, len(inputs.shape))
    else:
        noise = layer.noise_shape
    module = KerasDropout(layer.name, layer.rate, _held_noise_shape(layer, inputs, noise))
    return Held(ctx.call_module(module, inputs.node), inputs.layout, inputs.shape)


@register_layer(policy=Policy.CUSTOM, supports=_training_call_supported)
def AlphaDropout(ctx: Context, layer, inputs: Held, **_call_kwargs) -> Held:
    """keras.layers.AlphaDropout -> KerasAlphaDropout (Keras' formula and noise_shape)."""
    noise = _held_noise_shape(layer, inputs, layer.noise_shape)
    module = KerasAlphaDropout(layer.name, layer.rate, noise)
    return Held(ctx.call_module(module, inputs.node), inputs.layout, inputs.shape)


@register_layer(policy=Policy.AGNOSTIC, supports=_training_call_supported)
def GaussianNoise(ctx: Context, layer, inputs, **_call_kwargs):
    """keras.layers.GaussianNoise -> KerasGaussianNoise: x + N(0, stddev) in train
    (elementwise: any layout)."""
    return ctx.call_module(KerasGaussianNoise(layer.name, layer.stddev), inputs)


@register_layer(policy=Policy.AGNOSTIC, supports=_training_call_supported)
def GaussianDropout(ctx: Context, layer, inputs, **_call_kwargs):
    """keras.layers.GaussianDropout -> KerasGaussianDropout: x * N(1, sqrt(rate / (1 -
    rate))) in train (elementwise: any layout)."""
    return ctx.call_module(KerasGaussianDropout(layer.name, layer.rate), inputs)


@register_layer(policy=Policy.AGNOSTIC)
def ActivityRegularization(ctx: Context, layer, inputs, **_call_kwargs):
    """keras.layers.ActivityRegularization -> no module: the identity in both modes; its
    loss term is the layer's activity_regularizer (``L1L2(l1, l2)``), kept by the
    KerasActivityPenalty node emit puts after every such layer (module.regularization_loss())."""
    return inputs
