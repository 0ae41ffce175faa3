"""keras.layers.Adaptive{Average,Max}Pooling{1,2,3}D -> torch's adaptive pools: Keras' TF
kernel pools ``[floor(i*L/o), ceil((i+1)*L/o))`` like torch, checked at lengths the output
does not divide, longer outputs than inputs, both data formats and run-time sizes."""

import keras
import numpy as np
import pytest
import torch

import crossport
from tests.to_torch.harness import assert_to_torch, chain

L = keras.layers

ADAPTIVE = {
    "avg1d-uneven": ((13, 3), L.AdaptiveAveragePooling1D(5)),
    "max1d-uneven": ((13, 3), L.AdaptiveMaxPooling1D(5)),
    "avg1d-upsample": ((3, 2), L.AdaptiveAveragePooling1D(5)),
    "avg1d-to-one": ((7, 2), L.AdaptiveAveragePooling1D(1)),
    "avg2d-uneven": ((7, 10, 3), L.AdaptiveAveragePooling2D((4, 3))),
    "max2d-uneven": ((7, 10, 3), L.AdaptiveMaxPooling2D((4, 3))),
    "max2d-upsample": ((3, 2, 2), L.AdaptiveMaxPooling2D((5, 3))),
    "avg2d-channels-first": ((3, 7, 10), L.AdaptiveAveragePooling2D(
        (4, 3), data_format="channels_first")),
    "max2d-channels-first": ((3, 7, 10), L.AdaptiveMaxPooling2D(
        (3, 4), data_format="channels_first")),
    "avg3d-uneven": ((5, 7, 6, 2), L.AdaptiveAveragePooling3D((2, 3, 4))),
    "max3d-uneven": ((5, 7, 6, 2), L.AdaptiveMaxPooling3D((2, 3, 4))),
    "max3d-channels-first": ((2, 5, 7, 6), L.AdaptiveMaxPooling3D(
        (3, 2, 4), data_format="channels_first")),
}


@pytest.mark.parametrize("case", ADAPTIVE.values(), ids=ADAPTIVE.keys())
def test_adaptive_pooling(case):
    shape, layer = case
    assert_to_torch(chain(shape, layer))


def test_adaptive_pooling_after_a_conv_keeps_the_channels_first_layout():
    model = chain((9, 11, 3), L.Conv2D(4, 3), L.AdaptiveAveragePooling2D((3, 2)),
                  L.Conv2D(2, 1))
    assert_to_torch(model, max_permutes=0)


@pytest.mark.parametrize("layer", [L.AdaptiveAveragePooling2D((3, 4)),
                                   L.AdaptiveMaxPooling2D((3, 4))], ids=["avg", "max"])
def test_adaptive_pooling_at_run_time_sizes(layer):
    """None height and width: checked by the conversion at a second size, then here at
    sizes the output divides, does not divide, and exceeds."""
    model = chain((None, None, 2), layer)
    conv = crossport.to_torch_with_report(model, (torch.randn(2, 9, 7, 2),))
    assert len(conv.report.shapes) == 2, conv.report.summary()
    rng = np.random.default_rng(0)
    for size in ((6, 8), (13, 5), (2, 3)):
        x = rng.standard_normal((2, *size, 2)).astype("float32")
        np.testing.assert_allclose(conv.module(torch.from_numpy(x)).numpy(),
                                   np.asarray(model(x)), atol=1e-5)


@pytest.mark.parametrize("layer,shape", [(L.AdaptiveMaxPooling2D(1), (6, 6, 2)),
                                         (L.AdaptiveMaxPooling1D(3), (1, 2))],
                         ids=["output-size-1", "input-size-1"])
def test_adaptive_max_pooling_where_keras_crashes_is_refused(layer, shape):
    with pytest.raises(crossport.UnsupportedLayerError, match="crashes the process"):
        crossport.to_torch(chain(shape, layer), (torch.zeros(2, *shape),))
