"""Keras ``data_format='channels_first'`` layers: their tensors are already N, C, spatial...,
so they convert to the same torch ops with no permute (one op table through the harness)."""

import keras
import pytest

from tests.to_torch.harness import assert_to_torch, chain, module_types

L = keras.layers
CF = {"data_format": "channels_first"}
# TF on CPU runs NCHW convolutions through oneDNN, and there a conv whose output width equals
# its filter count gets its bias added along the width axis (a TF bug, found by these rows:
# the parity check raises ParityError). The shapes below keep the widths off the filters.
IMG = (3, 9, 7)        # C, H, W
SEQ = (3, 10)          # C, L
VOL = (2, 5, 6, 7)     # C, D, H, W

ROWS = {
    "conv2d-valid": (IMG, [L.Conv2D(4, 3, **CF)]),
    "conv2d-same-stride2": (IMG, [L.Conv2D(5, 3, 2, padding="same", activation="relu", **CF)]),
    "conv2d-same-odd": (IMG, [L.Conv2D(4, 3, padding="same", **CF)]),
    "conv2d-dilated-groups": (IMG, [L.Conv2D(6, 3, 1, padding="same", dilation_rate=2,
                                             **CF), L.Conv2D(4, 1, groups=2, **CF)]),
    "conv1d-same-stride2": (SEQ, [L.Conv1D(4, 3, 2, padding="same", **CF)]),
    "conv1d-causal": (SEQ, [L.Conv1D(4, 3, padding="causal", dilation_rate=2, **CF)]),
    "conv3d-same": (VOL, [L.Conv3D(3, 3, 2, padding="same", **CF)]),
    "depthwise2d": (IMG, [L.DepthwiseConv2D(3, 2, padding="same", depth_multiplier=2, **CF)]),
    "separable2d": (IMG, [L.SeparableConv2D(5, 3, padding="same", **CF)]),
    "conv2d-transpose-same": (IMG, [L.Conv2DTranspose(4, 3, 2, padding="same", **CF)]),
    "conv2d-transpose-valid-outpad": (IMG, [L.Conv2DTranspose(2, 3, 2, output_padding=1,
                                                              **CF)]),
    "maxpool2d-same": (IMG, [L.MaxPooling2D(3, 2, padding="same", **CF)]),
    "avgpool2d-same": (IMG, [L.AveragePooling2D(3, 2, padding="same", **CF)]),
    "maxpool1d": (SEQ, [L.MaxPooling1D(2, **CF)]),
    "avgpool3d": (VOL, [L.AveragePooling3D(2, **CF)]),
    "global-avg2d": (IMG, [L.Conv2D(4, 1, **CF), L.GlobalAveragePooling2D(**CF)]),
    "global-max2d-keepdims": (IMG, [L.GlobalMaxPooling2D(keepdims=True, **CF)]),
    "global-avg1d": (SEQ, [L.GlobalAveragePooling1D(**CF)]),
    "bn-axis1": (IMG, [L.Conv2D(4, 1, **CF), L.BatchNormalization(axis=1)]),
    "upsampling2d-nearest": (IMG, [L.UpSampling2D(2, **CF)]),
    "upsampling2d-bilinear": (IMG, [L.UpSampling2D((2, 3), interpolation="bilinear", **CF)]),
    "zeropadding2d": (IMG, [L.ZeroPadding2D(((1, 2), (0, 3)), **CF)]),
    "cropping2d": (IMG, [L.Cropping2D(((1, 2), (2, 1)), **CF)]),
    "zeropadding3d": (VOL, [L.ZeroPadding3D(1, **CF)]),
    "zeropadding1d": (SEQ, [L.ZeroPadding1D((1, 2), **CF)]),
    "cropping3d": (VOL, [L.Cropping3D(1, **CF)]),
    "resizing-bilinear": (IMG, [L.Resizing(5, 11, **CF)]),
    "resizing-nearest": (IMG, [L.Resizing(13, 4, interpolation="nearest", **CF)]),
    # Flatten(channels_first) moves C last before flattening: the Dense weight is permuted
    "flatten-cf-dense": (IMG, [L.Conv2D(4, 3, **CF), L.Flatten(**CF), L.Dense(5)]),
    "flatten-cl-dense": (IMG, [L.Conv2D(4, 3, **CF), L.Flatten(), L.Dense(5)]),
}


@pytest.mark.parametrize("case", ROWS.values(), ids=ROWS.keys())
def test_channels_first_layer(case):
    shape, layers = case
    assert_to_torch(chain(shape, *layers), max_permutes=0)


def test_channels_first_cnn_is_plain_torch():
    model = chain(IMG, L.Conv2D(8, 3, padding="same", **CF), L.BatchNormalization(axis=1),
                  L.ReLU(), L.MaxPooling2D(2, **CF), L.Conv2D(4, 3, **CF),
                  L.GlobalAveragePooling2D(**CF), L.Dense(3))
    conv = assert_to_torch(model, max_permutes=0)
    assert {"Conv2d", "KerasBatchNorm2d", "MaxPool2d", "Linear"} <= module_types(conv.module)
    assert conv.boundary_permutes == 0
