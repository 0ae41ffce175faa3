"""Keras activations and Dense ported to torch vs Keras (pitfall 14)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch
from torch_layers_support import TOL, nerr, randn, randomize, to_cf, to_cl, torch_run

from crossport.torch_layers import (
    KerasActivation,
    KerasDense,
    KerasGELU,
    KerasHardSigmoid,
    KerasLeakyReLU,
    KerasPReLU,
    keras_activation,
)
from crossport.torch_layers.activation import _ELEMENTWISE

X = randn((3, 4, 5, 6), 1, scale=4.0)


@pytest.mark.parametrize("name", sorted(_ELEMENTWISE))
def test_elementwise_activation_matches_keras(name):
    ref = keras.ops.convert_to_numpy(keras.activations.get(name)(X))
    assert nerr(keras_activation(name)(torch.from_numpy(X)).numpy(), ref) < TOL


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "glu"])
def test_axis_activation_on_channels_first_port(name):
    layer = keras.layers.Activation(name)
    got = to_cl(torch_run(KerasActivation.from_keras(layer), to_cf(X)))
    assert nerr(got, layer(X).numpy()) < TOL


def test_softmax_layer_axis():
    layer = keras.layers.Softmax(axis=-1)
    got = to_cl(torch_run(KerasActivation.from_keras(layer), to_cf(X)))
    assert nerr(got, layer(X).numpy()) < TOL


def test_hard_sigmoid_keras3_and_legacy():
    assert (
        nerr(torch_run(KerasHardSigmoid(), X).numpy(), keras.activations.hard_sigmoid(X).numpy())
        < TOL
    )
    tf_keras = pytest.importorskip("tf_keras")  # Keras 2: clip(0.2x + 0.5)
    ref = tf_keras.activations.hard_sigmoid(tf_keras.backend.constant(X)).numpy()
    assert nerr(torch_run(KerasHardSigmoid(legacy=True), X).numpy(), ref) < TOL


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_flag(approximate):
    ref = keras.ops.gelu(X, approximate=approximate).numpy()
    assert nerr(torch_run(KerasGELU(approximate), X).numpy(), ref) < TOL


def test_keras_ops_gelu_default_is_tanh_approximation():
    ref = keras.ops.gelu(X).numpy()
    assert nerr(torch_run(KerasGELU(approximate=True), X).numpy(), ref) < TOL
    assert nerr(torch_run(torch.nn.GELU(), X).numpy(), ref) > 1e-6  # torch default is erf


@pytest.mark.parametrize("kwargs", [{}, {"negative_slope": 0.05}])
def test_leaky_relu_layer(kwargs):
    layer = keras.layers.LeakyReLU(**kwargs)
    assert nerr(torch_run(KerasLeakyReLU.from_keras(layer), X).numpy(), layer(X).numpy()) < TOL


@pytest.mark.parametrize("shared_axes", [None, [1, 2], [1]])
def test_prelu_layer_on_channels_first_port(shared_axes):
    layer = keras.layers.PReLU(shared_axes=shared_axes)
    layer.build(X.shape)
    randomize(layer, 4)
    got = to_cl(torch_run(KerasPReLU.from_keras(layer), to_cf(X)))
    assert nerr(got, layer(X).numpy()) < TOL


@pytest.mark.parametrize("activation", [None, "relu", "softmax", "gelu"])
def test_dense_matches_keras(activation):
    layer = keras.layers.Dense(7, activation=activation)
    layer.build(X.shape)
    randomize(layer, 5)
    port = KerasDense.from_keras(layer)
    assert nerr(torch_run(port, X).numpy(), layer(X).numpy()) < TOL
    np.testing.assert_array_equal(port.weight.detach().numpy().T, layer.kernel.numpy())
