"""``torch.export`` of a converted module with dynamic shapes (what users who export the
module themselves get; the CLI's .pt2 is static): the exported program, run at sizes other
than the example's, against Keras 3 (TF) at those sizes.

Resizing (bilinear / nearest, with crop / pad to the aspect ratio) keeps a dynamic height and
width; other methods raise a clear ExportError. TF SAME padding with a stride exports down to
the smallest size torch's own ``nn.Conv2d`` exports at (the output at least 2: torch guards
an output dim that could be 1). RNNs keep a dynamic batch; torch's own ``nn.LSTM`` / ``GRU``
fix the sequence length in export (its decomposition unrolls the steps), documented by the
last test."""

import keras
import numpy as np
import pytest
import torch
from torch.export import Dim

import crossport
from tests.to_torch.harness import make_live

L = keras.layers


def _exported(model, example, dynamic: dict):
    module = crossport.to_torch(make_live(model), (example,))
    return torch.export.export(module, (example,), dynamic_shapes=(dynamic,)).module()


def _assert_matches_keras(program, model, shapes, seed: int = 0):
    rng = np.random.default_rng(seed)
    for shape in shapes:
        x = rng.standard_normal(shape).astype("float32")
        with torch.no_grad():
            got = program(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, np.asarray(model(x)), rtol=1e-5, atol=1e-5,
                                   err_msg=str(shape))


def _image_model(layer):
    return keras.Sequential([keras.Input((None, None, 3)), layer])


RESIZING = {
    "bilinear": dict(interpolation="bilinear"),
    "nearest": dict(interpolation="nearest"),
    "bilinear-crop": dict(interpolation="bilinear", crop_to_aspect_ratio=True),
    "nearest-crop": dict(interpolation="nearest", crop_to_aspect_ratio=True),
    "bilinear-pad": dict(interpolation="bilinear", pad_to_aspect_ratio=True, fill_value=0.5),
}


@pytest.mark.parametrize("options", RESIZING.values(), ids=RESIZING.keys())
def test_resizing_with_a_dynamic_height_and_width(options):
    """Before: TypeError 'unhashable type: non-nested SymInt' from the cached matrices.
    (Sizes whose crop stays >= 2: torch.export guards an intermediate dim that could be 1.)"""
    model = _image_model(L.Resizing(5, 7, **options))
    program = _exported(model, torch.randn(1, 8, 8, 3),
                        {1: Dim("H", min=2, max=64), 2: Dim("W", min=2, max=64)})
    _assert_matches_keras(program, model, [(1, 11, 13, 3), (1, 3, 40, 3), (1, 8, 8, 3),
                                           (1, 64, 3, 3)])


def test_resizing_bicubic_with_a_dynamic_size_is_a_clear_error():
    model = _image_model(L.Resizing(5, 7, interpolation="bicubic"))
    module = crossport.to_torch(model, (torch.randn(1, 8, 8, 3),))
    with pytest.raises(crossport.ExportError, match="'bicubic'.*run-time input height"):
        torch.export.export(module, (torch.randn(1, 8, 8, 3),),
                            dynamic_shapes=({1: Dim("H", min=2, max=64)},))


SAME_STRIDED = {
    "conv-3-s2": (L.Conv2D(4, 3, strides=2, padding="same"), 3),
    "conv-2-s2": (L.Conv2D(4, 2, strides=2, padding="same"), 3),
    "conv-1-s2": (L.Conv2D(4, 1, strides=2, padding="same"), 3),
    "conv-5-s3": (L.Conv2D(4, 5, strides=3, padding="same"), 4),
    "depthwise-3-s2": (L.DepthwiseConv2D(3, strides=2, padding="same"), 3),
    "max-pool-3-s2": (L.MaxPooling2D(3, strides=2, padding="same"), 3),
    "avg-pool-3-s2": (L.AveragePooling2D(3, strides=2, padding="same"), 3),
}


@pytest.mark.parametrize("case", SAME_STRIDED.values(), ids=SAME_STRIDED.keys())
def test_same_padding_with_a_stride_at_small_minimum_sizes(case):
    """The smallest minimum torch's own strided nn.Conv2d exports at (before: 5 for a 3x3
    stride 2, the float ceil and max of the padding rule were not bounded by export)."""
    layer, smallest = case
    model = _image_model(layer)
    program = _exported(model, torch.randn(1, 16, 16, 3),
                        {1: Dim("H", min=smallest, max=64), 2: Dim("W", min=smallest, max=64)})
    _assert_matches_keras(program, model, [(1, smallest, smallest + 1, 3), (1, 7, 9, 3),
                                           (1, 64, smallest, 3)])


@pytest.mark.parametrize("rnn", [lambda: L.LSTM(4, return_sequences=True),
                                 lambda: L.Bidirectional(L.GRU(3), merge_mode="sum")],
                         ids=["lstm", "bidirectional-gru"])
def test_rnn_with_a_dynamic_batch(rnn):
    model = keras.Sequential([keras.Input((6, 3)), rnn()])
    program = _exported(model, torch.randn(2, 6, 3), {0: Dim("N", min=1, max=32)})
    _assert_matches_keras(program, model, [(1, 6, 3), (5, 6, 3)])


def test_rnn_sequence_length_is_fixed_by_torch_export():
    """torch's nn.LSTM itself specialises the sequence length in torch.export (the converted
    module's forward is that module alone): the README says so; this keeps it true."""
    model = keras.Sequential([keras.Input((None, 3)), L.LSTM(4)])
    module = crossport.to_torch(model, (torch.randn(2, 6, 3),))
    assert [type(m).__name__ for m in module.children()].count("LSTM") == 1
    with pytest.raises(Exception, match="specialized it to be a constant"):
        torch.export.export(module, (torch.randn(2, 6, 3),),
                            dynamic_shapes=({1: Dim("T", min=2, max=64)},))
