"""Keras' dropout and noise layers: the identity at inference (``training=False``, as
``predict`` and the self-check run Keras), dtype included, and in ``train()`` Keras' own
distribution, checked statistically against Keras' ``training=True`` outputs: the fraction
dropped (within bounds from the sample size), kept values scaled by exactly
``float32(1 / (1 - rate))``, whole channels dropped by SpatialDropout (also on a tensor held
channels-first after a conv), Gaussian noise's mean and standard deviation. What Keras cannot
train with raises TrainingModeError in train()."""

import keras
import numpy as np
import pytest
import torch

import crossport
from crossport.to_torch.noise import KerasDropout
from tests.to_torch.harness import assert_to_torch, chain

L = keras.layers
IMG = (8, 9, 3)

CASES = {
    "dropout": ((6, 4), [L.Dropout(0.5)]),
    "dropout-noise-shape-after-conv": (IMG, [L.Conv2D(4, 1), L.Dropout(0.3, (None, 1, None, 4))]),
    "spatial-dropout1d-after-conv": ((9, 4), [L.Conv1D(3, 1), L.SpatialDropout1D(0.4)]),
    "spatial-dropout2d-after-conv": (IMG, [L.Conv2D(4, 1), L.SpatialDropout2D(0.4)]),
    "spatial-dropout2d-channels-first": ((3, 8, 9), [
        L.SpatialDropout2D(0.4, data_format="channels_first")]),
    "spatial-dropout3d": ((4, 5, 6, 2), [L.Conv3D(2, 1), L.SpatialDropout3D(0.4)]),
    "gaussian-noise": (IMG, [L.Conv2D(4, 1), L.GaussianNoise(1.0)]),
    "gaussian-dropout": ((6, 4), [L.GaussianDropout(0.3)]),
    "alpha-dropout": ((6, 4), [L.Dense(5), L.AlphaDropout(0.2, noise_shape=(None, 1, 5))]),
    "activity-regularization": ((6, 4), [L.ActivityRegularization(0.1, 0.2)]),
}


# an int input where the noise layer comes first (Keras' convs and Dense refuse ints)
_INT = ["dropout", "spatial-dropout2d-channels-first", "gaussian-dropout",
        "activity-regularization"]


@pytest.mark.parametrize("name,dtype", [(n, "float32") for n in CASES] + [(n, "int32") for n in _INT])
def test_inference_is_what_keras_computes(name, dtype):
    """Keras' output at training=False with no permute added: an int tensor comes out int
    (Keras declares float32; before, the module promoted it to float32 and failed the check)."""
    shape, layers = CASES[name]
    assert_to_torch(chain(shape, *layers, dtype=dtype), max_permutes=0)


def test_run_time_sizes():
    """None height and width: checked at a second size, then run at others."""
    model = chain((None, None, 3), L.Conv2D(4, 1), L.SpatialDropout2D(0.3), L.GaussianNoise(0.5),
                  L.Dropout(0.2, (None, 1, None, None)))
    conv = crossport.to_torch_with_report(model, (torch.rand(2, 5, 6, 3),))
    assert len(conv.report.shapes) == 2, conv.report.summary()
    assert conv.permutes <= 2  # the boundary ones only
    for size in ((7, 4), (12, 12)):
        x = np.random.default_rng(1).standard_normal((2, *size, 3)).astype("float32")
        np.testing.assert_allclose(conv.module.eval()(torch.from_numpy(x)).detach().numpy(),
                                   model.predict(x, verbose=0), atol=1e-5)
        assert conv.module.train()(torch.from_numpy(x)).shape == (2, *size, 4)


def _outputs(model, module, x):
    """Keras' and the module's training outputs and what each computes at inference."""
    keras_plain = np.asarray(model(x, training=False))
    keras_train = np.asarray(model(x, training=True))
    torch.manual_seed(0)
    with torch.no_grad():
        torch_plain = module.eval()(torch.from_numpy(x)).numpy()
        torch_train = module.train()(torch.from_numpy(x)).numpy()
    assert torch_train.dtype == keras_train.dtype
    return (keras_plain, keras_train), (torch_plain, torch_train)


def _assert_fraction(count: int, total: int, p: float) -> None:
    """A Binomial(total, p) count within 6 standard deviations of its mean."""
    assert abs(count - p * total) < 6 * np.sqrt(total * p * (1 - p)) + 1, (count, total, p)


def _dropout_model(rate, noise_shape, held):
    first = [L.Conv2D(4, 1, kernel_initializer="ones", bias_initializer="ones")]
    return chain(IMG if held == "after-conv" else (8, 9, 4),
                 *(first if held == "after-conv" else []),
                 L.Dropout(rate, noise_shape))


@pytest.mark.parametrize("held", ["input", "after-conv"])
@pytest.mark.parametrize("noise_shape", [None, (None, 1, None, 4), (None, 8, 1, 1)],
                         ids=["elementwise", "shared-over-height", "per-height"])
@pytest.mark.parametrize("rate", [0.2, 0.7])
def test_dropout_in_train_mode_drops_like_keras(rate, noise_shape, held):
    """Each noise_shape cell dropped with probability rate (the same cell dropped along its
    broadcast axes), kept values times exactly float32(1 / (1 - rate)); also on the tensor
    held NCHW after a conv (noise_shape mapped to the held axes), and at another batch."""
    model = _dropout_model(rate, noise_shape, held)
    module = crossport.to_torch(model, (torch.rand(2, *model.inputs[0].shape[1:]),))
    x = np.random.default_rng(0).uniform(1, 2, (300, *model.inputs[0].shape[1:]))
    scale = np.float32(1 / (1 - rate))
    broadcast = () if noise_shape is None else tuple(
        axis for axis, n in enumerate(noise_shape) if n == 1)
    for plain, out in _outputs(model, module, x.astype("float32")):
        dropped = out == 0
        np.testing.assert_array_equal(out[~dropped], plain[~dropped] * scale)
        assert not np.any(plain == 0)
        cells = dropped.all(axis=broadcast) if broadcast else dropped
        np.testing.assert_array_equal(cells, dropped.any(axis=broadcast) if broadcast
                                      else dropped)  # whole cells dropped
        _assert_fraction(int(cells.sum()), cells.size, rate)


SPATIAL = {
    "1d": ((9, 4), [L.Conv1D(3, 1)], L.SpatialDropout1D(0.4), (1,)),
    "2d": ((None, None, 3), [L.Conv2D(4, 1)], L.SpatialDropout2D(0.4), (1, 2)),
    "2d-channels-first": ((5, 6, 7), [], L.SpatialDropout2D(0.4, "channels_first"), (2, 3)),
    "3d": ((4, 5, 6, 2), [L.Conv3D(3, 1)], L.SpatialDropout3D(0.4), (1, 2, 3)),
    "3d-channels-first": ((2, 3, 4, 5), [], L.SpatialDropout3D(0.4, "channels_first"),
                          (2, 3, 4)),
}


@pytest.mark.parametrize("case", SPATIAL.values(), ids=SPATIAL.keys())
def test_spatial_dropout_in_train_mode_drops_whole_channels(case):
    """Per sample and channel (the data_format's channel axis) all or nothing, with
    probability rate; kept maps scaled by float32(1 / (1 - rate)). The 2D model has
    run-time sizes: trained at another size than the example's."""
    shape, first, layer, spatial = case
    model = chain(shape, *first, layer)
    example = tuple(s or 5 for s in shape)
    module = crossport.to_torch(model, (torch.rand(2, *example),))
    size = tuple(s or 7 for s in shape)
    x = np.random.default_rng(1).uniform(1, 2, (400, *size)).astype("float32")
    scale = np.float32(1 / (1 - layer.rate))
    for plain, out in _outputs(model, module, x):
        dropped = out == 0
        np.testing.assert_array_equal(out[~dropped], plain[~dropped] * scale)
        maps = dropped.all(axis=spatial)
        np.testing.assert_array_equal(maps, dropped.any(axis=spatial))
        _assert_fraction(int(maps.sum()), maps.size, layer.rate)


def _assert_normal(sample: np.ndarray, mean: float, std: float) -> None:
    """Mean, standard deviation and the share within one sd of a N(mean, std) sample, each
    within 6 standard errors for its size."""
    n = sample.size
    assert abs(sample.mean() - mean) < 6 * std / np.sqrt(n), sample.mean()
    assert abs(sample.std() - std) < 6 * std / np.sqrt(2 * n), sample.std()
    _assert_fraction(int((np.abs(sample - mean) < std).sum()), n, 0.6826894921370859)


@pytest.mark.parametrize("stddev", [0.1, 1.0])
def test_gaussian_noise_in_train_mode_adds_keras_noise(stddev):
    model = chain(IMG, L.Conv2D(4, 1), L.GaussianNoise(stddev))
    module = crossport.to_torch(model, (torch.rand(2, *IMG),))
    x = np.random.default_rng(2).standard_normal((300, *IMG)).astype("float32")
    for plain, out in _outputs(model, module, x):
        _assert_normal((out - plain).astype("float64"), 0.0, stddev)


@pytest.mark.parametrize("rate", [0.2, 0.6])
def test_gaussian_dropout_in_train_mode_multiplies_by_keras_noise(rate):
    """x times N(1, sqrt(rate / (1 - rate))), Keras' stddev."""
    model = chain((6, 4), L.GaussianDropout(rate))
    module = crossport.to_torch(model, (torch.rand(2, 6, 4),))
    x = np.random.default_rng(3).uniform(1, 2, (2000, 6, 4)).astype("float32")
    for plain, out in _outputs(model, module, x):
        _assert_normal(out.astype("float64") / plain, 1.0, np.sqrt(rate / (1 - rate)))


@pytest.mark.parametrize("noise_shape", [None, (None, 1, 16)], ids=["elementwise", "shared"])
def test_alpha_dropout_in_train_mode_is_keras_formula(noise_shape):
    """Every sample is the same row: per element Keras' output takes exactly two values
    (kept: a * x + b, dropped: a * alpha' + b); the module's must take the same two, bit for
    bit, dropped with probability rate (whole noise_shape cells)."""
    rate = 0.3
    model = chain((3, 16), L.AlphaDropout(rate, noise_shape=noise_shape))
    module = crossport.to_torch(model, (torch.rand(2, 3, 16),))
    row = np.random.default_rng(4).standard_normal((1, 3, 16)).astype("float32")
    x = np.repeat(row, 500, axis=0)
    (_, keras_out), (_, torch_out) = _outputs(model, module, x)
    values, counts = np.unique(keras_out, return_counts=True)
    dropped_value = values[np.argmax(counts)]  # the one value every dropped element takes
    for out in (keras_out, torch_out):
        for position in np.ndindex(row.shape[1:]):
            values = np.unique(out[(slice(None), *position)])
            np.testing.assert_array_equal(values, np.unique(keras_out[(slice(None), *position)]))
        dropped = out == dropped_value
        cells = dropped if noise_shape is None else dropped.all(axis=1)
        if noise_shape is not None:
            np.testing.assert_array_equal(cells, dropped.any(axis=1))
        _assert_fraction(int(cells.sum()), cells.size, rate)


def test_rate_edge_cases_in_train_mode_are_keras():
    """Dropout(1) gives zeros, NaN and inf included (TF returns zeros_like); rate 0 and
    GaussianNoise(0) return the input; GaussianDropout(1) and AlphaDropout(1) fail in Keras'
    training call (a division by zero) and raise TrainingModeError here."""
    x = np.tile(np.array([1.5, np.nan, np.inf, -2.0], "float32"), (3, 2))
    for layer in (L.Dropout(1.0), L.Dropout(0.0), L.SpatialDropout1D(1.0),
                  L.GaussianDropout(0.0), L.GaussianNoise(0.0), L.AlphaDropout(0.0)):
        model = chain((8,) if "Spatial" not in type(layer).__name__ else (2, 4), layer)
        xs = x if len(model.inputs[0].shape) == 2 else x.reshape(3, 2, 4)
        module = crossport.to_torch(model, (torch.rand(*xs.shape),))
        want = np.asarray(model(xs, training=True))
        got = module.train()(torch.from_numpy(xs)).numpy()
        np.testing.assert_array_equal(got, want)
    for layer in (L.GaussianDropout(1.0), L.AlphaDropout(1.0)):
        model = chain((8,), layer)
        with pytest.raises(ZeroDivisionError):
            model(x, training=True)
        module = crossport.to_torch(model, (torch.rand(3, 8),)).train()
        with pytest.raises(crossport.TrainingModeError, match=f"'{layer.name}'.*divides"):
            module(torch.from_numpy(x))


@pytest.mark.parametrize("make", [lambda: L.Dropout(0.5), lambda: L.GaussianNoise(1.0),
                                  lambda: L.GaussianDropout(0.3), lambda: L.AlphaDropout(0.3)],
                         ids=["dropout", "gaussian-noise", "gaussian-dropout", "alpha-dropout"])
def test_integer_input_in_train_mode_is_refused_like_keras(make):
    layer = make()
    model = chain((4,), layer, dtype="int32")
    xi = np.arange(8, dtype="int32").reshape(2, 4)
    with pytest.raises(Exception):  # noqa: B017 (TF's and Keras' errors differ per layer)
        model(xi, training=True)
    module = crossport.to_torch(model, (torch.from_numpy(xi),)).train()
    with pytest.raises(crossport.TrainingModeError, match=f"'{layer.name}'.*int32"):
        module(torch.from_numpy(xi))


def test_noise_shape_that_does_not_broadcast_refuses_train_mode():
    """Keras converts it for inference and fails in training; so does the module."""
    model = chain((4,), L.Dropout(0.5, noise_shape=(None, 3)))
    x = np.ones((2, 4), "float32")
    with pytest.raises(Exception):  # noqa: B017 (TF's InvalidArgumentError)
        model(x, training=True)
    module = crossport.to_torch(model, (torch.from_numpy(x),)).train()
    with pytest.raises(crossport.TrainingModeError, match="does not broadcast"):
        module(torch.from_numpy(x))


def test_called_with_training_true_is_refused():
    """Dropout(x, training=True) drops at inference too: Keras' predict is random."""
    inp = keras.Input((4,))
    model = keras.Model(inp, L.Dropout(0.5)(inp, training=True))
    with pytest.raises(crossport.UnsupportedLayerError, match="training=True"):
        crossport.to_torch(model, (torch.rand(2, 4),))


def test_converted_model_uses_the_dropout_modules():
    model = chain(IMG, L.Conv2D(4, 1), L.SpatialDropout2D(0.3, name="drop"))
    module = crossport.to_torch(model, (torch.rand(2, *IMG),))
    assert isinstance(module.drop, KerasDropout)
    assert module.drop.noise_shape == (None, None, 1, 1)  # NCHW held: (N, C) kept
