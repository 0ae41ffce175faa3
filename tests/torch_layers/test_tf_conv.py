"""TF/Keras convolutions and pooling ported to torch vs the real Keras layers (pitfalls 1, 4, 6,
10, 11).

Each example builds the Keras layer on a channels-last input, gives it random weights, ports
it with ``from_keras`` and runs the channels-first port on the transposed input.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from torch_layers_support import PROPERTY, TOL, nerr, randn, randomize, to_cf, to_cl, torch_run

from crossport.torch_layers import (
    TFAvgPool1d,
    TFAvgPool2d,
    TFAvgPool3d,
    TFConv1d,
    TFConv1dTranspose,
    TFConv2d,
    TFConv2dTranspose,
    TFConv3d,
    TFConv3dTranspose,
    TFDepthwiseConv1d,
    TFDepthwiseConv2d,
    TFMaxPool1d,
    TFMaxPool2d,
    TFMaxPool3d,
    TFSeparableConv2d,
)
from crossport.weights.rules import (
    conv_transpose_weight_to_keras,
    conv_weight_to_keras,
    depthwise_weight_to_keras,
)

CONV = {
    1: (keras.layers.Conv1D, TFConv1d),
    2: (keras.layers.Conv2D, TFConv2d),
    3: (keras.layers.Conv3D, TFConv3d),
}
CONV_T = {
    1: (keras.layers.Conv1DTranspose, TFConv1dTranspose),
    2: (keras.layers.Conv2DTranspose, TFConv2dTranspose),
    3: (keras.layers.Conv3DTranspose, TFConv3dTranspose),
}
POOL = {
    ("max", 1): (keras.layers.MaxPooling1D, TFMaxPool1d),
    ("max", 2): (keras.layers.MaxPooling2D, TFMaxPool2d),
    ("max", 3): (keras.layers.MaxPooling3D, TFMaxPool3d),
    ("avg", 1): (keras.layers.AveragePooling1D, TFAvgPool1d),
    ("avg", 2): (keras.layers.AveragePooling2D, TFAvgPool2d),
    ("avg", 3): (keras.layers.AveragePooling3D, TFAvgPool3d),
}


def _spatial(data, rank, lo=1, hi=9):
    hi = hi if rank < 3 else min(hi, 6)  # 3D inputs stay small (time) ...
    hi = max(hi, lo)  # ... but at least one dilated kernel wide (k=4, dilation 2: 7)
    return tuple(data.draw(st.integers(lo, hi)) for _ in range(rank))


def _compare(layer, port, x_cl, seed=0):
    ref = layer(x_cl).numpy() if not isinstance(layer, np.ndarray) else layer
    got = to_cl(torch_run(port, to_cf(x_cl)))
    return nerr(got, ref)


@PROPERTY
@given(rank=st.sampled_from([1, 2, 3]), data=st.data())
def test_conv_matches_keras(rank, data):
    k = data.draw(st.integers(1, 4))
    stride = data.draw(st.integers(1, 3))
    dilation = 1 if stride > 1 else data.draw(st.integers(1, 2))
    groups = data.draw(st.sampled_from([1, 2]))
    pads = ["valid", "same", "causal"] if rank == 1 else ["valid", "same"]
    padding = data.draw(st.sampled_from(pads))
    spatial = _spatial(data, rank, lo=(k - 1) * dilation + 1)
    activation = data.draw(st.sampled_from([None, "relu", "softmax"]))
    x = randn((2, *spatial, 2 * groups), seed=rank)
    keras_cls, port_cls = CONV[rank]
    layer = keras_cls(
        4,
        k,
        strides=stride,
        padding=padding,
        dilation_rate=dilation,
        groups=groups,
        activation=activation,
    )
    layer.build(x.shape)
    randomize(layer, seed=k)
    port = port_cls.from_keras(layer)
    assert _compare(layer, port, x) < TOL
    # weight round trip through the layout rule
    np.testing.assert_array_equal(
        conv_weight_to_keras(port.weight.detach().numpy()), layer.kernel.numpy()
    )


def test_conv_same_is_asymmetric_like_tf():
    # stride 2, 3x3 on 6x6: TF pads (0, 1); the symmetric torch port (padding=1) is off.
    x = randn((1, 6, 6, 2), 3)
    layer = keras.layers.Conv2D(3, 3, strides=2, padding="same")
    layer.build(x.shape)
    randomize(layer)
    assert _compare(layer, TFConv2d.from_keras(layer), x) < TOL


@PROPERTY
@given(rank=st.sampled_from([1, 2]), data=st.data())
def test_depthwise_matches_keras(rank, data):
    k = data.draw(st.integers(1, 4))
    stride = data.draw(st.integers(1, 3))
    dilation = 1 if stride > 1 else data.draw(st.integers(1, 2))
    mult = data.draw(st.integers(1, 3))
    padding = data.draw(st.sampled_from(["valid", "same"]))
    spatial = _spatial(data, rank, lo=(k - 1) * dilation + 1)
    x = randn((2, *spatial, 3), seed=mult)
    keras_cls = keras.layers.DepthwiseConv1D if rank == 1 else keras.layers.DepthwiseConv2D
    port_cls = TFDepthwiseConv1d if rank == 1 else TFDepthwiseConv2d
    layer = keras_cls(
        k, strides=stride, padding=padding, depth_multiplier=mult, dilation_rate=dilation
    )
    layer.build(x.shape)
    randomize(layer, seed=k)
    port = port_cls.from_keras(layer)
    assert _compare(layer, port, x) < TOL
    np.testing.assert_array_equal(
        depthwise_weight_to_keras(port.weight.detach().numpy(), 3), layer.kernel.numpy()
    )


@PROPERTY
@given(data=st.data())
def test_separable_matches_keras(data):
    k, stride = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 2))
    padding = data.draw(st.sampled_from(["valid", "same"]))
    spatial = _spatial(data, 2, lo=k)
    x = randn((2, *spatial, 3), seed=k)
    layer = keras.layers.SeparableConv2D(
        5, k, strides=stride, padding=padding, depth_multiplier=data.draw(st.integers(1, 2))
    )
    layer.build(x.shape)
    randomize(layer, seed=stride)
    assert _compare(layer, TFSeparableConv2d.from_keras(layer), x) < TOL


@PROPERTY
@given(rank=st.sampled_from([1, 2, 3]), data=st.data())
def test_conv_transpose_matches_keras(rank, data):
    k = data.draw(st.integers(1, 4))
    stride = data.draw(st.integers(1, 3))
    dilation = 1 if stride > 1 else data.draw(st.integers(1, 2))
    padding = data.draw(st.sampled_from(["valid", "same"]))
    output_padding = data.draw(st.one_of(st.none(), st.integers(0, stride - 1)))
    spatial = _spatial(data, rank, hi=6)
    x = randn((2, *spatial, 3), seed=k)
    keras_cls, port_cls = CONV_T[rank]
    layer = keras_cls(
        2, k, strides=stride, padding=padding, output_padding=output_padding, dilation_rate=dilation
    )
    try:
        layer.build(x.shape)
        randomize(layer, seed=stride)
        ref = layer(x).numpy()
    except Exception:  # configurations TF itself rejects (inconsistent output size)
        assume(False)
    port = port_cls.from_keras(layer)
    assert list(ref.shape[1:-1]) == port.output_size(spatial)
    assert _compare(ref, port, x) < TOL
    np.testing.assert_array_equal(
        conv_transpose_weight_to_keras(port.weight.detach().numpy()), layer.kernel.numpy()
    )


@PROPERTY
@given(kind=st.sampled_from(["max", "avg"]), rank=st.sampled_from([1, 2, 3]), data=st.data())
def test_pooling_matches_keras(kind, rank, data):
    pool = data.draw(st.integers(1, 4))
    stride = data.draw(st.one_of(st.none(), st.integers(1, 3)))
    padding = data.draw(st.sampled_from(["valid", "same"]))
    spatial = _spatial(data, rank, lo=pool)
    x = randn((2, *spatial, 3), seed=pool)
    keras_cls, port_cls = POOL[(kind, rank)]
    layer = keras_cls(pool, strides=stride, padding=padding)
    assert _compare(layer, port_cls.from_keras(layer), x) < TOL


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_same_pooling_of_negative_values(kind):
    # Max must pad -inf (not 0); average must ignore the padding (not count it).
    x = -np.abs(randn((1, 5, 5, 2), 4)) - 1.0
    keras_cls, port_cls = POOL[(kind, 2)]
    layer = keras_cls(3, strides=2, padding="same")
    assert _compare(layer, port_cls.from_keras(layer), x) < TOL


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_valid_average_pool_shorter_than_its_window_is_empty(rank):
    """TF returns an empty tensor where an axis is shorter than the window; torch raised."""
    x = randn((2, *([1] * rank), 3), 5)
    keras_cls, port_cls = POOL[("avg", rank)]
    layer = keras_cls(2)
    ref = layer(x).numpy()
    got = to_cl(torch_run(port_cls.from_keras(layer), to_cf(x)))
    assert got.shape == ref.shape == (2, *([0] * rank), 3)
