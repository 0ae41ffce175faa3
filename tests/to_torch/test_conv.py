"""Keras convolutions -> torch: SAME at every stride/dilation/parity, depthwise, separable,
causal, transposed (pitfalls 1, 4, 6, 10), through tests/to_torch/harness.py."""

import keras
import pytest

from tests.to_torch.harness import assert_to_torch, chain, module_types

L = keras.layers

CASES = {
    "conv2d-valid": ((9, 9, 3), L.Conv2D(4, 3), "Conv2d"),
    "conv2d-same-stride1-odd": ((9, 9, 3), L.Conv2D(4, 3, padding="same"), "Conv2d"),
    "conv2d-same-stride2-odd": ((9, 9, 3), L.Conv2D(4, 3, 2, padding="same"), "TFConv2d"),
    "conv2d-same-stride2-evenin": ((8, 8, 3), L.Conv2D(4, 3, 2, padding="same"), "TFConv2d"),
    "conv2d-same-evenkernel": ((7, 7, 3), L.Conv2D(4, 2, padding="same"), "TFConv2d"),
    "conv2d-same-dilation2": ((9, 9, 3), L.Conv2D(4, 3, dilation_rate=2, padding="same"),
                              "Conv2d"),
    "conv2d-same-stride-rect": ((10, 7, 3), L.Conv2D(4, (3, 4), (2, 3), padding="same"),
                                "TFConv2d"),
    "conv2d-groups": ((8, 8, 4), L.Conv2D(6, 3, groups=2, padding="same"), "Conv2d"),
    "conv2d-activation": ((8, 8, 3), L.Conv2D(4, 3, activation="swish"), "SiLU"),
    "conv2d-nobias": ((8, 8, 3), L.Conv2D(4, 1, use_bias=False), "Conv2d"),
    "conv1d-same-stride2": ((11, 3), L.Conv1D(4, 4, 2, padding="same"), "TFConv1d"),
    "conv1d-causal": ((11, 3), L.Conv1D(4, 3, padding="causal", dilation_rate=2), "TFConv1d"),
    "conv1d-valid": ((11, 3), L.Conv1D(4, 3), "Conv1d"),
    "conv3d-same-stride2": ((5, 6, 7, 2), L.Conv3D(3, 3, 2, padding="same"), "TFConv3d"),
    "conv3d-valid": ((5, 6, 7, 2), L.Conv3D(3, 2), "Conv3d"),
    "depthwise-mult2-same": ((8, 8, 3), L.DepthwiseConv2D(3, depth_multiplier=2,
                                                          padding="same"), "Conv2d"),
    "depthwise-stride2-same": ((8, 8, 3), L.DepthwiseConv2D(3, 2, padding="same"),
                               "TFDepthwiseConv2d"),
    "depthwise-valid-relu6": ((8, 8, 3), L.DepthwiseConv2D(3, activation="relu6"), "ReLU6"),
    "depthwise1d": ((9, 3), L.DepthwiseConv1D(3, padding="same"), "Conv1d"),
    "separable2d-same": ((8, 8, 3), L.SeparableConv2D(5, 3, padding="same",
                                                      depth_multiplier=2), "Conv2d"),
    "separable2d-stride2": ((8, 8, 3), L.SeparableConv2D(5, 3, 2, padding="same"),
                            "TFDepthwiseConv2d"),
    "separable1d": ((9, 3), L.SeparableConv1D(5, 3), "Conv1d"),
    # TF crops the odd extra element at the end only: no torch padding does that
    "convT2d-same-stride2": ((5, 5, 3), L.Conv2DTranspose(4, 3, 2, padding="same"),
                             "TFConv2dTranspose"),
    "convT2d-same-stride2-evenk": ((5, 5, 3), L.Conv2DTranspose(4, 4, 2, padding="same"),
                                   "ConvTranspose2d"),
    "convT2d-valid-stride2": ((5, 5, 3), L.Conv2DTranspose(4, 3, 2), "ConvTranspose2d"),
    "convT2d-valid-k1-stride3": ((5, 5, 3), L.Conv2DTranspose(4, 1, 3), None),
    "convT2d-outpad": ((5, 5, 3), L.Conv2DTranspose(4, 3, 2, padding="same",
                                                    output_padding=1), None),
    "convT2d-valid-outpad": ((5, 5, 3), L.Conv2DTranspose(4, 3, 3, output_padding=2), None),
    "convT1d-same": ((6, 3), L.Conv1DTranspose(4, 4, 2, padding="same"), "ConvTranspose1d"),
    "convT3d-same": ((3, 4, 5, 2), L.Conv3DTranspose(3, 3, 2, padding="same"),
                     "TFConv3dTranspose"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_conv(case):
    shape, layer, expected = case
    conv = assert_to_torch(chain(shape, layer), max_permutes=0)
    if expected:
        assert expected in module_types(conv.module)


def test_conv_stack_is_exportable_and_permute_free():
    model = chain((16, 16, 3), L.Conv2D(8, 3, 2, padding="same", activation="relu"),
                  L.BatchNormalization(), L.DepthwiseConv2D(3, padding="same"),
                  L.Conv2D(4, 1), L.Flatten(), L.Dense(3))
    conv = assert_to_torch(model, max_permutes=0, export=True)
    assert conv.boundary_permutes == 1


def test_channels_first_io_has_no_boundary_permute():
    model = chain((8, 8, 3), L.Conv2D(4, 3, padding="same"), L.ReLU())
    conv = assert_to_torch(model, channels_first_io=True, max_permutes=0)
    assert conv.boundary_permutes == 0
