"""Keras' image augmentation layers: what Keras computes at inference (``training=False``,
as ``predict`` and the self-check run Keras), and the torch module's train() behaviour.

Random augmentations are the inference identity (float32-cast by some, an int image kept
int by others, per Keras 3.15's ``transform_images``); in train() ``RandomFlip`` flips each
sample with probability 1/2 as Keras does, the others raise TrainingModeError.
``AutoContrast`` is deterministic in both modes."""

import keras
import numpy as np
import pytest
import torch

import crossport
from crossport.to_torch.registry import registered_layers
from tests.to_torch.harness import assert_to_torch, chain

L = keras.layers
IMG = (8, 9, 3)

RANDOM = {
    "RandomRotation": lambda: L.RandomRotation(0.1),
    "RandomZoom": lambda: L.RandomZoom(0.1),
    "RandomTranslation": lambda: L.RandomTranslation(0.1, 0.1),
    "RandomShear": lambda: L.RandomShear(0.1, 0.1),
    "RandomPerspective": lambda: L.RandomPerspective(),
    "RandomElasticTransform": lambda: L.RandomElasticTransform(),
    "RandomErasing": lambda: L.RandomErasing(),
    "RandomGaussianBlur": lambda: L.RandomGaussianBlur(),
    "RandomSharpness": lambda: L.RandomSharpness(0.2),
    "Solarization": lambda: L.Solarization(0.5),
    "AugMix": lambda: L.AugMix(),
    "CutMix": lambda: L.CutMix(),
    "RandAugment": lambda: L.RandAugment(),
    "RandomContrast": lambda: L.RandomContrast(0.2),
    "RandomBrightness": lambda: L.RandomBrightness(0.2),
    "RandomGrayscale": lambda: L.RandomGrayscale(),
    "RandomHue": lambda: L.RandomHue(0.2, (0, 255)),
    "RandomSaturation": lambda: L.RandomSaturation(0.2),
    "RandomColorJitter": lambda: L.RandomColorJitter(brightness_factor=0.2,
                                                     contrast_factor=0.2),
    "RandomColorDegeneration": lambda: L.RandomColorDegeneration(0.2),
    "RandomPosterization": lambda: L.RandomPosterization(4),
    "RandomInvert": lambda: L.RandomInvert(),
    "MixUp": lambda: L.MixUp(),
    "RandomCrop-to-input-size": lambda: L.RandomCrop(*IMG[:2]),
    "RandomFlip": lambda: L.RandomFlip(),
    "RandomFlip-channels-first": lambda: L.RandomFlip(data_format="channels_first"),
    "Pipeline": lambda: L.Pipeline([L.RandomFlip("vertical"), L.RandomRotation(0.1),
                                    L.RandomContrast(0.1)]),
}


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("make", RANDOM.values(), ids=RANDOM.keys())
def test_random_augmentation_is_what_keras_computes_at_inference(make, dtype):
    """Keras' output at training=False, dtype included: an int image comes out float32
    from the layers that cast, int32 from the others (Keras declares float32 for both)."""
    assert_to_torch(chain(IMG, make(), dtype=dtype), int_high=255, max_permutes=0)


@pytest.mark.parametrize("make", [m for n, m in RANDOM.items() if not n.startswith("RandomFlip")],
                         ids=[n for n in RANDOM if not n.startswith("RandomFlip")])
def test_random_augmentation_in_train_mode_is_refused(make):
    layer = make()
    module = crossport.to_torch(chain(IMG, layer), (torch.rand(2, *IMG),))
    module.train()
    # a Pipeline's vertical flip flips in training too; its rotation is the first to refuse
    name = layer.layers[1].name if isinstance(layer, L.Pipeline) else layer.name
    with pytest.raises(crossport.TrainingModeError, match=f"'{name}'.*Call .eval"):
        module(torch.rand(2, *IMG))
    module.eval()
    module(torch.rand(2, *IMG))


def _tutorial_model():
    """The Keras tutorial pattern: an augmentation Sequential in front of a small CNN,
    images of any size (None height and width)."""
    augmentation = keras.Sequential([L.RandomFlip("horizontal"), L.RandomRotation(0.1),
                                     L.RandomZoom(0.1)], name="augmentation")
    inp = keras.Input((None, None, 3))
    x = L.Rescaling(1 / 255)(augmentation(inp))
    x = L.Conv2D(4, 3, activation="relu")(x)
    x = L.GlobalAveragePooling2D()(L.MaxPooling2D(2)(x))
    return keras.Model(inp, L.Dense(2)(x))


def test_augmentation_in_front_of_a_cnn_at_run_time_sizes():
    model = _tutorial_model()
    conv = crossport.to_torch_with_report(model, (torch.rand(2, 12, 10, 3) * 255,))
    assert len(conv.report.shapes) == 2, conv.report.summary()  # a second size was checked
    rng = np.random.default_rng(1)
    for size in ((7, 15), (16, 16)):
        x = rng.uniform(0, 255, (3, *size, 3)).astype("float32")
        np.testing.assert_allclose(conv.module(torch.from_numpy(x)).detach().numpy(),
                                   model.predict(x, verbose=0), atol=1e-5)
    conv.module.train()
    with pytest.raises(crossport.TrainingModeError, match="RandomRotation"):
        conv.module(torch.rand(2, 12, 10, 3))


@pytest.mark.parametrize("mode,axes", [("horizontal", (2,)), ("vertical", (1,)),
                                       ("horizontal_and_vertical", (1, 2))])
@pytest.mark.parametrize("held", ["input", "after-conv"])
def test_random_flip_in_train_mode_flips_like_keras(mode, axes, held):
    """Keras (training=True) returns each sample or its flip along the mode's axes (both
    at once for horizontal_and_vertical), each with probability 1/2; so must the module,
    also on a tensor held NCHW after a conv."""
    layers = [L.Conv2D(3, 1, use_bias=False)] if held == "after-conv" else []
    model = chain(IMG, *layers, L.RandomFlip(mode))
    module = crossport.to_torch(model, (torch.rand(2, *IMG),)).train()
    x = np.random.default_rng(0).standard_normal((400, *IMG)).astype("float32")
    plain = np.asarray(model(x, training=False))
    flipped = np.flip(plain, axis=tuple(a for a in axes))
    torch.manual_seed(0)
    with torch.no_grad():
        got = module(torch.from_numpy(x)).numpy()
    keras_got = np.asarray(model(x, training=True))
    for out in (got, keras_got):
        same = np.all(np.isclose(out, plain, atol=1e-5), axis=(1, 2, 3))
        flip = np.all(np.isclose(out, flipped, atol=1e-5), axis=(1, 2, 3))
        assert np.all(same | flip)
        assert 120 < flip.sum() < 280, flip.sum()  # Binomial(400, 1/2): 8 sigma either side


def _images(shape, seed):
    x = np.random.default_rng(seed).uniform(0.2, 0.8, shape).astype("float32")
    x[0, ..., 1] = 0.5       # a constant channel: Keras' 0/0 keeps the input
    x[1, 2, 3, 0] = np.nan   # a NaN: its channel keeps the input too
    return x


@pytest.mark.parametrize("layer", [L.AutoContrast(value_range=(0, 1)), L.AutoContrast(),
                                   L.AutoContrast(value_range=(-1, 1)),
                                   L.AutoContrast(data_format="channels_first")],
                         ids=["unit-range", "byte-range", "signed-range", "channels-first"])
def test_auto_contrast(layer):
    """Deterministic: the same in training and inference, at every image size (None dims);
    constant channels and NaN keep their inputs as in Keras."""
    model = chain((None, None, 3), layer)
    module = crossport.to_torch(model, (torch.rand(2, 5, 6, 3),))
    for shape, seed in (((3, 5, 6, 3), 1), ((3, 9, 4, 3), 2)):
        x = _images(shape, seed)
        want = np.asarray(model(x, training=False))
        np.testing.assert_array_equal(want, np.asarray(model(x, training=True)))
        for mode in (module.eval(), module.train()):
            got = mode(torch.from_numpy(x)).numpy()
            np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_auto_contrast_after_a_conv():
    assert_to_torch(chain(IMG, L.Conv2D(3, 1), L.AutoContrast()))


def test_random_crop_to_another_size_is_refused():
    """Keras 3.15's RandomCrop returns the uncropped image at inference but declares the
    cropped shape: nothing faithful to convert."""
    with pytest.raises(crossport.UnsupportedLayerError, match="uncropped image"):
        crossport.to_torch(chain(IMG, L.RandomCrop(5, 6)), (torch.rand(2, *IMG),))


def test_pipeline_with_a_non_augmentation_step_is_refused():
    model = chain(IMG, L.Pipeline([L.RandomFlip(), L.Resizing(4, 4)]))
    with pytest.raises(crossport.UnsupportedLayerError, match="only the image augmentation"):
        crossport.to_torch(model, (torch.rand(2, *IMG),))


def test_equalization_leaves_no_node_in_a_model():
    """Keras 3.15's Equalization returns its symbolic input itself (the identity it is at
    inference): the model has no node for it and converts without it."""
    inp = keras.Input(IMG, name="image")  # (Keras names the input's clone imageCLONE)
    model = keras.Model(inp, L.Conv2D(2, 1)(L.Equalization()(inp)))
    assert not any(isinstance(layer, L.Equalization) for layer in model.layers)
    assert_to_torch(model)


def test_every_keras_augmentation_layer_has_a_converter():
    """keras.layers' image preprocessing classes, against the registry; the ones left out
    say why."""
    base = keras.src.layers.preprocessing.image_preprocessing.base_image_preprocessing_layer
    left_out = {
        "Equalization": "returns its symbolic input itself: no node in a model",
        "MaxNumBoundingBoxes": "bounding-box padding; images pass through",
        "ContrastLimitedAdaptiveHistogramEqualization": "deterministic tiled histogram "
                                                        "equalization: not converted yet",
    }
    classes = {name for name, cls in vars(L).items() if isinstance(cls, type)
               and issubclass(cls, base.BaseImagePreprocessingLayer)}
    missing = classes - set(registered_layers()) - set(left_out)
    assert not missing, sorted(missing)
