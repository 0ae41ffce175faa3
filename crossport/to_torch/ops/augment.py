"""Keras image augmentation layers -> crossport.to_torch.augment modules.

What Keras 3.15 computes at inference (``training=False``, as ``predict`` and the self-check
run), read from each layer's ``transform_images`` and checked in tests/to_torch/
test_augmentation.py: the random augmentations return their input, float32-cast by the
layers in ``_CASTING`` and unchanged (an int image stays int) by those in ``_KEEPING``;
``AutoContrast`` is deterministic (the same in training); ``RandomCrop`` returns the
uncropped image while declaring the cropped shape, so only a crop to the input's own size
converts. Training behaviour: see crossport/to_torch/augment.py.
"""

from __future__ import annotations

from crossport.layout import canonical, physical_axis
from crossport.layout.policy import Policy
from crossport.to_torch.augment import KerasAugmentation, KerasAutoContrast, KerasRandomFlip
from crossport.to_torch.context import Context, Held
from crossport.to_torch.registry import channels_first_layer, register_layer, registered_layers

_CASTING = ("RandomRotation", "RandomZoom", "RandomTranslation", "RandomShear",
            "RandomPerspective", "RandomElasticTransform", "RandomErasing",
            "RandomGaussianBlur", "RandomSharpness", "Solarization", "AugMix", "CutMix",
            "RandAugment")
_KEEPING = ("RandomContrast", "RandomBrightness", "RandomGrayscale", "RandomHue",
            "RandomSaturation", "RandomColorJitter", "RandomColorDegeneration",
            "RandomPosterization", "RandomInvert", "MixUp", "RandomCrop")
KEEPS_INPUT_DTYPE = frozenset(_KEEPING)  # emit.py: an int image is not promoted for them


def _input_shapes(layer) -> list[tuple]:
    return [tuple(node.input_tensors[0].shape) for node in layer._inbound_nodes]


def _augmentation_supported(layer) -> str | None:
    if type(layer).__name__ != "RandomCrop":
        return None
    first = channels_first_layer(layer)
    for shape in _input_shapes(layer):
        sizes = tuple(shape[2:4] if first else shape[1:3])
        if sizes != (layer.height, layer.width):
            return (f"RandomCrop({layer.height}, {layer.width}) of images of size {sizes}: "
                    "Keras 3.15 returns the uncropped image at inference while declaring the "
                    "cropped shape to the layers after it; use CenterCrop (a deterministic "
                    "crop) or crop in the data pipeline")
    return None


@register_layer(*_CASTING, *_KEEPING, policy=Policy.AGNOSTIC,
                supports=_augmentation_supported)
def RandomAugmentation(ctx: Context, layer, inputs, suffix: str = ""):
    """Keras' random augmentations -> KerasAugmentation: the inference identity (float32
    where Keras casts); raises TrainingModeError in train()."""
    kind = type(layer).__name__
    module = KerasAugmentation(layer.name, kind, cast=kind in _CASTING)
    return ctx.call_module(module, inputs, suffix=suffix)


def _flip_axes(layer) -> tuple[int, ...]:
    """The Keras axes RandomFlip flips: width (horizontal), height (vertical) or both."""
    height, width = (2, 3) if channels_first_layer(layer) else (1, 2)
    return {"horizontal": (width,), "vertical": (height,),
            "horizontal_and_vertical": (height, width)}[layer.mode]


@register_layer(policy=Policy.CUSTOM)
def RandomFlip(ctx: Context, layer, inputs: Held, suffix: str = "") -> Held:
    """keras.layers.RandomFlip -> KerasRandomFlip on the tensor as held (its axes mapped):
    float32 identity in eval; in train a per-sample flip with probability 1/2 along the
    mode's axes (Keras' distribution)."""
    dims = tuple(physical_axis(inputs.layout, axis) for axis in _flip_axes(layer))
    node = ctx.call_module(KerasRandomFlip(dims), inputs.node, suffix=suffix)
    return Held(node, inputs.layout, inputs.shape)


@register_layer(policy=Policy.CANONICAL)
def AutoContrast(ctx: Context, layer, inputs, suffix: str = ""):
    """keras.layers.AutoContrast -> KerasAutoContrast (Keras order: Keras reduces axes 1 and
    2 whatever the data_format)."""
    low, high = layer.value_range
    return ctx.call_module(KerasAutoContrast(low, high), inputs, suffix=suffix)


_PIPELINE_STEPS = {"RandomAugmentation": RandomAugmentation, "RandomFlip": RandomFlip,
                   "AutoContrast": AutoContrast}


def _pipeline_supported(layer) -> str | None:
    for step in layer.layers:
        converter = registered_layers().get(type(step).__name__)
        if converter is None or converter.fn.__name__ not in _PIPELINE_STEPS:
            return (f"Pipeline step {step.name!r} ({type(step).__name__}): only the image "
                    f"augmentation layers convert inside a Pipeline")
        reason = converter.unsupported_reason(step)
        if reason:
            return f"Pipeline step {step.name!r}: {reason}"
    return None


@register_layer(policy=Policy.CANONICAL, supports=_pipeline_supported)
def Pipeline(ctx: Context, layer, inputs):
    """keras.layers.Pipeline of augmentation layers: each step's module in order (the
    tensor in Keras order, so a step's axes are its own data_format's)."""
    x = inputs
    for index, step in enumerate(layer.layers):
        convert = _PIPELINE_STEPS[registered_layers()[type(step).__name__].fn.__name__]
        if convert is RandomFlip:
            x = convert(ctx, step, Held(x, canonical(len(ctx.input_shape)), ctx.input_shape), suffix=f"_{index}")
            x = x.node
        else:
            x = convert(ctx, step, x, suffix=f"_{index}")
    return x
