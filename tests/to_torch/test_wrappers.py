"""keras.layers.TimeDistributed over the layers it commonly wraps -> the inner layer's torch
module on folded time steps (harness: tests/to_torch/harness.py)."""

import keras
import pytest

from tests.to_torch.harness import assert_to_torch, chain

L = keras.layers
TD = L.TimeDistributed
FRAMES = (4, 6, 5, 3)  # T, H, W, C

ROWS = {
    "dense": ((4, 6), [TD(L.Dense(3, activation="relu"))]),
    "conv2d-same-stride2": (FRAMES, [TD(L.Conv2D(4, 3, 2, padding="same"))]),
    "conv2d-pool-flatten-dense": (FRAMES, [TD(L.Conv2D(4, 3)), TD(L.MaxPooling2D(2)),
                                           TD(L.Flatten()), TD(L.Dense(5))]),
    "avgpool-same": (FRAMES, [TD(L.AveragePooling2D(3, 2, padding="same"))]),
    "global-pool-then-lstm": (FRAMES, [TD(L.Conv2D(4, 1)), TD(L.GlobalAveragePooling2D()),
                                       L.LSTM(3)]),
    "batchnorm": ((4, 6), [TD(L.BatchNormalization())]),
    "dense-after-flatten-in-keras-order": (FRAMES, [TD(L.Flatten()), TD(L.Dense(2))]),
}


@pytest.mark.parametrize("case", ROWS.values(), ids=ROWS.keys())
def test_time_distributed(case):
    shape, layers = case
    assert_to_torch(chain(shape, *layers), export=True)


def test_time_distributed_over_an_unsupported_layer_is_refused():
    import torch

    import crossport
    model = chain((4, 6), TD(L.Lambda(lambda t: t * 2)))
    with pytest.raises(crossport.UnsupportedLayerError, match="TimeDistributed"):
        crossport.to_torch(model, (torch.zeros(1, 4, 6),))


SPECTRAL = {
    "dense": ((6,), [L.SpectralNormalization(L.Dense(4, activation="relu"))]),
    "conv2d-after-conv": ((6, 6, 3), [L.Conv2D(3, 1),
                                      L.SpectralNormalization(L.Conv2D(4, 3, padding="same")),
                                      L.Conv2D(2, 1)]),
}


@pytest.mark.parametrize("case", SPECTRAL.values(), ids=SPECTRAL.keys())
def test_spectral_normalization_is_its_layer_at_inference(case):
    """Keras normalizes and assigns the kernel only in training calls."""
    import numpy as np

    shape, layers = case
    model = chain(shape, *layers)
    model.compile("sgd", "mse")   # one training step: the stored kernel is the normalized one
    x = np.random.default_rng(0).standard_normal((4, *shape)).astype("float32")
    model.fit(x, model.predict(x, verbose=0) + 1.0, epochs=1, verbose=0)
    assert_to_torch(model, live=False)
