"""Keras activations, normalization, pooling, shape and core layers -> torch, one table per
family through tests/to_torch/harness.py (pitfalls 2, 3, 5, 7, 9, 11, 12, 14)."""

import keras
import numpy as np
import pytest
import torch

import crossport
from crossport.parity.compare import REVERSE, compare_outputs
from tests.to_torch.harness import assert_to_torch, chain, module_types

L = keras.layers
IMG = (8, 8, 4)

ACTIVATIONS = ["relu", "relu6", "sigmoid", "tanh", "elu", "selu", "swish", "silu", "gelu",
               "hard_sigmoid", "hard_swish", "hard_silu", "mish", "softplus", "softsign",
               "leaky_relu", "exponential", "log_sigmoid", "softmax", "log_softmax", "linear"]


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_on_conv_output(name):
    # after a conv the tensor is held NCHW: softmax's Keras axis -1 is torch dim 1
    assert_to_torch(chain(IMG, L.Conv2D(4, 1), L.Activation(name)), max_permutes=0)


ACT_LAYERS = {
    "relu-max6": L.ReLU(max_value=6.0),
    "relu-slope": L.ReLU(negative_slope=0.1),
    "relu-max-slope": L.ReLU(max_value=2.0, negative_slope=0.1),
    "leaky-default0.3": L.LeakyReLU(),
    "elu-alpha": L.ELU(alpha=0.5),
    "softmax-axis1": L.Softmax(axis=1),
    "softmax-last": L.Softmax(),
}


@pytest.mark.parametrize("layer", ACT_LAYERS.values(), ids=ACT_LAYERS.keys())
def test_activation_layers(layer):
    assert_to_torch(chain(IMG, L.Conv2D(4, 1), layer), max_permutes=0)




def test_gelu_exact_in_dense():
    conv = assert_to_torch(chain((6,), L.Dense(5, activation="gelu")))
    gelu = [m for m in conv.module.modules() if type(m).__name__ == "GELU"]
    assert [g.approximate for g in gelu] == ["none"]


NORM = {
    "bn-cnn": (IMG, [L.Conv2D(4, 1), L.BatchNormalization()], "KerasBatchNorm2d"),
    "bn-eps-momentum": (IMG, [L.Conv2D(4, 1), L.BatchNormalization(epsilon=1e-5, momentum=0.9)],
                        "KerasBatchNorm2d"),
    "bn-dense": ((6,), [L.Dense(5), L.BatchNormalization()], "KerasBatchNorm1d"),
    "bn-sequence": ((7, 6), [L.BatchNormalization()], "KerasBatchNorm1d"),
    "bn-noscale": (IMG, [L.Conv2D(4, 1), L.BatchNormalization(scale=False)], "KerasBatchNorm"),
    "bn-conv3d": ((4, 5, 6, 3), [L.Conv3D(4, 1), L.BatchNormalization()], "KerasBatchNorm3d"),
    "ln-last-seq": ((7, 6), [L.LayerNormalization()], "LayerNorm"),
    "ln-channels-cnn": (IMG, [L.Conv2D(4, 1), L.LayerNormalization(epsilon=1e-6)],
                        "KerasLayerNorm"),
    # held (C, H, W) are the trailing dims: nn.LayerNorm with gamma transposed to C, H, W
    "ln-multi-axis": (IMG, [L.Conv2D(4, 1), L.LayerNormalization(axis=[1, 2, 3])],
                      "LayerNorm"),
    "ln-two-axes-cnn": (IMG, [L.Conv2D(4, 1), L.LayerNormalization(axis=[2, 3])],
                        "KerasLayerNorm"),
    "ln-multi-axis-seq": ((5, 6), [L.LayerNormalization(axis=[1, 2])], "LayerNorm"),
    "ln-nocenter": ((7, 6), [L.LayerNormalization(center=False)], "LayerNorm"),
    "ln-rms": ((7, 6), [L.LayerNormalization(rms_scaling=True)], "KerasLayerNorm"),
    "gn-cnn": (IMG, [L.Conv2D(6, 1), L.GroupNormalization(groups=3)], "GroupNorm"),
    "gn-instance": (IMG, [L.Conv2D(4, 1), L.GroupNormalization(groups=-1)], "GroupNorm"),
    "gn-seq": ((7, 6), [L.GroupNormalization(groups=2)], "KerasGroupNorm"),
    "unit-norm-seq": ((7, 6), [L.UnitNormalization()], "KerasUnitNorm"),
    "unit-norm-spatial-cnn": (IMG, [L.Conv2D(4, 1), L.UnitNormalization(axis=[1, 2])],
                              "KerasUnitNorm"),
    "rms-norm-seq": ((7, 6), [L.RMSNormalization(epsilon=1e-3)], "RMSNorm"),
    "rms-norm-cnn": (IMG, [L.Conv2D(4, 1), L.RMSNormalization()], "RMSNorm"),
    "rms-norm-two-trailing-axes": ((5, 7, 6), [L.RMSNormalization(axis=[2, 3])], "RMSNorm"),
}


@pytest.mark.parametrize("case", NORM.values(), ids=NORM.keys())
def test_normalization(case):
    shape, layers, expected = case
    conv = assert_to_torch(chain(shape, *layers))
    assert expected in module_types(conv.module)


POOL = {
    "max2d-valid": (IMG, L.MaxPooling2D(2)),
    "max2d-same-stride2-odd": ((7, 7, 4), L.MaxPooling2D(3, 2, padding="same")),
    "max2d-same-stride1": (IMG, L.MaxPooling2D(3, 1, padding="same")),
    "avg2d-valid": (IMG, L.AveragePooling2D(2)),
    "avg2d-same-stride2": ((7, 7, 4), L.AveragePooling2D(3, 2, padding="same")),
    "avg2d-same-stride1-excludes-pad": (IMG, L.AveragePooling2D(3, 1, padding="same")),
    "avg2d-same-even": (IMG, L.AveragePooling2D(2, 1, padding="same")),
    "max1d-same": ((9, 4), L.MaxPooling1D(2, padding="same")),
    "avg1d-valid": ((9, 4), L.AveragePooling1D(3, 2)),
    "max3d": ((4, 6, 6, 2), L.MaxPooling3D(2)),
    "avg3d-same": ((5, 5, 5, 2), L.AveragePooling3D(3, 2, padding="same")),
    "gap2d": (IMG, L.GlobalAveragePooling2D()),
    "gap2d-keepdims": (IMG, L.GlobalAveragePooling2D(keepdims=True)),
    "gmp2d": (IMG, L.GlobalMaxPooling2D()),
    "gap1d": ((9, 4), L.GlobalAveragePooling1D()),
    "gmp1d-keepdims": ((9, 4), L.GlobalMaxPooling1D(keepdims=True)),
    "gap3d": ((4, 5, 6, 2), L.GlobalAveragePooling3D()),
}


@pytest.mark.parametrize("case", POOL.values(), ids=POOL.keys())
def test_pooling(case):
    shape, layer = case
    assert_to_torch(chain(shape, L.Conv1D(4, 1) if len(shape) == 2 else
                          (L.Conv2D(shape[-1], 1) if len(shape) == 3 else L.Conv3D(2, 1)),
                          layer), max_permutes=0)


SHAPE = {
    "flatten-dense": (IMG, [L.Conv2D(3, 1), L.Flatten(), L.Dense(5)], 0),
    "flatten-output": (IMG, [L.Conv2D(3, 1), L.Flatten()], 1),
    "flatten-dropout-dense": (IMG, [L.Conv2D(3, 1), L.Flatten(), L.Dropout(0.2), L.ReLU(),
                                    L.Dense(5)], 0),
    "flatten-unit-spatial": ((1, 1, 4), [L.Conv2D(3, 1), L.Flatten(), L.Softmax()], 0),
    "reshape": (IMG, [L.Conv2D(3, 1), L.Reshape((16, 12))], 1),
    "reshape-back-to-image": ((12,), [L.Reshape((2, 2, 3)), L.Conv2D(2, 1)], None),
    "squeeze-excite-reshape": (IMG, [L.Conv2D(4, 1), L.GlobalAveragePooling2D(),
                                     L.Reshape((1, 1, 4)), L.Conv2D(4, 1)], 0),
    "reshape-unit-dims-seq": ((6, 4), [L.Reshape((6, 1, 4)), L.Reshape((6, 4))], 0),
    "permute": (IMG, [L.Conv2D(3, 1), L.Permute((3, 1, 2))], None),
    "permute-conv": ((4, 8, 8), [L.Permute((2, 3, 1)), L.Conv2D(3, 1)], 0),
    "zeropad2d": (IMG, [L.Conv2D(3, 1), L.ZeroPadding2D(((1, 2), (0, 3))), L.Conv2D(2, 3)], 0),
    "zeropad1d": ((9, 4), [L.ZeroPadding1D((2, 1)), L.Conv1D(2, 3)], 0),
    "zeropad3d": ((3, 4, 5, 2), [L.ZeroPadding3D(1), L.Conv3D(2, 2)], 0),
    "cropping2d": (IMG, [L.Conv2D(3, 1), L.Cropping2D(((1, 2), (0, 3)))], 0),
    "cropping1d": ((9, 4), [L.Cropping1D((2, 1)), L.Conv1D(2, 3)], 0),
    "upsampling2d-nearest": (IMG, [L.Conv2D(3, 1), L.UpSampling2D((2, 3))], 0),
    "upsampling2d-bilinear": (IMG, [L.Conv2D(3, 1), L.UpSampling2D(2, interpolation="bilinear")],
                              0),
    "upsampling1d": ((5, 4), [L.Conv1D(3, 1), L.UpSampling1D(3)], 0),
    "upsampling3d": ((3, 4, 2, 2), [L.Conv3D(3, 1), L.UpSampling3D((2, 1, 3))], 0),
    "dense-rank3": ((7, 6), [L.Dense(5, activation="tanh")], 0),
    "dense-on-conv-rank4": (IMG, [L.Conv2D(3, 1), L.Dense(5)], 1),
    "dropout-identity": (IMG, [L.Conv2D(3, 1), L.Dropout(0.5), L.SpatialDropout2D(0.3),
                               L.GaussianNoise(1.0)], 0),
    "rescaling": (IMG, [L.Rescaling(1 / 127.5, offset=-1), L.Conv2D(3, 1)], 0),
}


@pytest.mark.parametrize("case", SHAPE.values(), ids=SHAPE.keys())
def test_shape_and_core(case):
    shape, layers, permutes = case
    assert_to_torch(chain(shape, *layers), max_permutes=permutes)


def test_normalization_layer_adapted():
    norm = L.Normalization()
    norm.adapt(keras.random.normal((16, 8, 8, 4), seed=1) * 3 + 2)
    assert_to_torch(chain(IMG, norm, L.Conv2D(3, 1)), live=False, max_permutes=0)


def test_embedding():
    model = chain((7,), L.Embedding(20, 6), L.Dense(3), dtype="int32")
    conv = assert_to_torch(model, int_high=20)
    assert "Embedding" in module_types(conv.module)


MORE = {
    "prelu-cnn": (IMG, [L.Conv2D(4, 1), L.PReLU()]),
    "prelu-shared-spatial": (IMG, [L.Conv2D(4, 1), L.PReLU(shared_axes=[1, 2])]),
    "resizing-bilinear-down": (IMG, [L.Conv2D(3, 1), L.Resizing(5, 6)]),
    "resizing-nearest-up": (IMG, [L.Conv2D(3, 1), L.Resizing(11, 13, "nearest")]),
    "resizing-bicubic-antialias": (IMG, [L.Conv2D(3, 1), L.Resizing(5, 3, "bicubic",
                                                                    antialias=True)]),
    "repeat-vector": ((5,), [L.Dense(3), L.RepeatVector(4), L.LSTM(2)]),
}


@pytest.mark.parametrize("case", MORE.values(), ids=MORE.keys())
def test_more_layers(case):
    shape, layers = case
    assert_to_torch(chain(shape, *layers), max_permutes=0)


@pytest.mark.parametrize("axes, normalize, shapes", [
    (1, False, [(6,), (6,)]),
    ((2, 2), False, [(4, 6), (5, 6)]),
    ((1, 1), True, [(4, 6), (4, 3)]),
])
def test_dot(axes, normalize, shapes):
    a, b = keras.Input(shapes[0]), keras.Input(shapes[1])
    assert_to_torch(keras.Model([a, b], L.Dot(axes, normalize=normalize)([a, b])))


@pytest.mark.parametrize("padding", ["valid", "same"])
def test_max_pooling_skips_nan_as_tf(padding):
    """TF's max pool skips NaN and gives -FLT_MAX for a window of NaN / -inf alone (torch's
    pools propagate NaN): NaN positions are parity."""
    model = chain((5, 6, 2), L.MaxPooling2D(2, padding=padding))
    x = np.random.default_rng(0).standard_normal((2, 5, 6, 2)).astype("float32")
    x[0, :2, :2] = np.nan
    x[0, 2:4, :2, 0], x[0, 2:4, :2, 1] = -np.inf, np.nan
    x[1, ::2, 1::2] = np.nan
    x[1, 4, :, 1] = np.inf
    net = crossport.to_torch(model, (torch.from_numpy(x),))
    got = net(torch.from_numpy(x)).detach().numpy()
    assert compare_outputs([np.asarray(model(x))], [got], names=REVERSE).passed(0.0)
