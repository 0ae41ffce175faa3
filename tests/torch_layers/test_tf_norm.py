"""Keras / TF1 normalization ported to torch vs the real layers (pitfalls 3, 5, 14)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_layers_support import PROPERTY, TOL, nerr, randn, to_cf, to_cl, torch_run

from crossport.torch_layers import (
    KerasBatchNorm,
    KerasGroupNorm,
    KerasLayerNorm,
    TFContribLayerNorm,
    keras_axis_to_torch,
)


def _random_bn(layer, seed):
    rng = np.random.default_rng(seed)
    values = []
    for w in layer.weights:
        v = rng.standard_normal(w.shape).astype(np.float32)
        values.append(np.abs(v) + 0.05 if "variance" in w.path else v)
    layer.set_weights(values)


@PROPERTY
@given(
    rank=st.sampled_from([2, 3, 4, 5]),
    center=st.booleans(),
    scale=st.booleans(),
    eps=st.sampled_from([1e-3, 1e-5, 0.1]),
    seed=st.integers(0, 99),
)
def test_batchnorm_inference_matches_keras(rank, center, scale, eps, seed):
    x = randn((3, *([4] * (rank - 2)), 5), seed)
    layer = keras.layers.BatchNormalization(epsilon=eps, center=center, scale=scale)
    layer.build(x.shape)
    _random_bn(layer, seed)
    port = KerasBatchNorm.from_keras(layer).eval()
    ref = layer(x, training=False).numpy()
    got = torch_run(port, to_cf(x) if rank > 2 else x)
    assert nerr(to_cl(got) if rank > 2 else got.numpy(), ref) < TOL


@pytest.mark.parametrize("momentum", [0.99, 0.9])
def test_batchnorm_training_step_matches_keras(momentum):
    # Output with batch statistics and the moving-statistics update (biased variance in Keras).
    x = randn((4, 3, 5, 6), 1, scale=2.0) + 1.0
    layer = keras.layers.BatchNormalization(momentum=momentum)
    layer.build(x.shape)
    _random_bn(layer, 2)
    port = KerasBatchNorm.from_keras(layer).train()
    assert port.momentum == pytest.approx(1 - momentum)
    ref = layer(x, training=True).numpy()
    got = to_cl(torch_run(port, to_cf(x)))
    assert nerr(got, ref) < TOL
    assert nerr(port.running_mean.numpy(), layer.moving_mean.numpy()) < TOL
    assert nerr(port.running_var.numpy(), layer.moving_variance.numpy()) < TOL


def test_batchnorm_axis_of_a_channels_first_keras_layer():
    x = randn((2, 4, 3, 3), 5)  # Keras channels_first, axis=1: no layout change for torch
    layer = keras.layers.BatchNormalization(axis=1)
    layer.build(x.shape)
    _random_bn(layer, 5)
    port = KerasBatchNorm.from_keras(layer, channels_first=False).eval()
    assert nerr(torch_run(port, x).numpy(), layer(x, training=False).numpy()) < TOL


AXES_4D = [-1, 1, 2, [1, 2], [2, 3], [1, 2, 3], [-3, -2, -1], [1, 3]]


@PROPERTY
@given(
    axis=st.sampled_from(AXES_4D),
    center=st.booleans(),
    scale=st.booleans(),
    eps=st.sampled_from([1e-3, 1e-6]),
    seed=st.integers(0, 99),
)
def test_layernorm_nhwc_port_matches_keras(axis, center, scale, eps, seed):
    x = randn((2, 3, 4, 5), seed, scale=3.0) + 2.0
    layer = keras.layers.LayerNormalization(axis=axis, epsilon=eps, center=center, scale=scale)
    layer.build(x.shape)
    layer.set_weights([randn(w.shape, seed + i) for i, w in enumerate(layer.weights)])
    ref = layer(x).numpy()
    port = KerasLayerNorm.from_keras(layer, channels_first=True)
    assert nerr(to_cl(torch_run(port, to_cf(x))), ref) < TOL


@pytest.mark.parametrize("axis", [-1, [1, 2], 1])
def test_layernorm_sequence_layout_kept(axis):
    x = randn((2, 6, 8), 3)
    layer = keras.layers.LayerNormalization(axis=axis)
    layer.build(x.shape)
    layer.set_weights([randn(w.shape, i) for i, w in enumerate(layer.weights)])
    port = KerasLayerNorm.from_keras(layer, channels_first=False)
    assert nerr(torch_run(port, x).numpy(), layer(x).numpy()) < TOL


def test_layernorm_rms_scaling_matches_keras():
    x = randn((2, 5, 7), 4)
    with pytest.warns(UserWarning):
        layer = keras.layers.LayerNormalization(rms_scaling=True)
        layer.build(x.shape)
        layer.set_weights([randn(w.shape, 9) for w in layer.weights])
        ref = layer(x).numpy()
    port = KerasLayerNorm.from_keras(layer, channels_first=False)
    assert nerr(torch_run(port, x).numpy(), ref) < TOL


@PROPERTY
@given(
    groups=st.sampled_from([1, 2, 3, 6, -1]),
    rank=st.sampled_from([3, 4, 5]),
    center=st.booleans(),
    scale=st.booleans(),
    seed=st.integers(0, 99),
)
def test_groupnorm_matches_keras(groups, rank, center, scale, seed):
    x = randn((2, *([3] * (rank - 2)), 6), seed)
    layer = keras.layers.GroupNormalization(groups=groups, center=center, scale=scale)
    layer.build(x.shape)
    layer.set_weights([randn(w.shape, seed + i) for i, w in enumerate(layer.weights)])
    port = KerasGroupNorm.from_keras(layer)
    assert nerr(to_cl(torch_run(port, to_cf(x))), layer(x).numpy()) < TOL


def test_keras_axis_translation():
    assert [keras_axis_to_torch(a, 4) for a in (0, 1, 2, 3, -1)] == [0, 2, 3, 1, 1]
    assert keras_axis_to_torch(-1, 3, channels_first=False) == 2


def _tf_slim_layer_norm(x, begin_norm_axis, begin_params_axis, gamma, beta):
    tf_slim = pytest.importorskip("tf_slim")
    graph = tf.Graph()
    with graph.as_default():
        y = tf_slim.layers.layer_norm(
            tf.constant(x), begin_norm_axis=begin_norm_axis, begin_params_axis=begin_params_axis
        )
        variables = {
            v.name.split("/")[-1].split(":")[0]: v for v in tf.compat.v1.global_variables()
        }
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            variables["gamma"].load(gamma, sess)
            variables["beta"].load(beta, sess)
            return sess.run(y)


@pytest.mark.parametrize(
    "begin_norm_axis,begin_params_axis", [(1, -1), (-1, -1), (2, 1), (1, 2), (-2, -1)]
)
def test_contrib_layer_norm_matches_tf_slim(begin_norm_axis, begin_params_axis):
    x = randn((2, 3, 4, 5), 11, scale=2.0) + 1.0
    params_shape = x.shape[begin_params_axis:]
    gamma, beta = randn(params_shape, 1), randn(params_shape, 2)
    ref = _tf_slim_layer_norm(x, begin_norm_axis, begin_params_axis, gamma, beta)
    port = TFContribLayerNorm(params_shape, begin_norm_axis, begin_params_axis)
    with torch.no_grad():
        port.weight.copy_(torch.from_numpy(gamma))
        port.bias.copy_(torch.from_numpy(beta))
    assert nerr(to_cl(torch_run(port, to_cf(x))), ref) < TOL


def test_contrib_layer_norm_default_is_groupnorm_1():
    # The torch equivalent of the TF1 default on an image is GroupNorm(1, C) with eps 1e-12.
    x = randn((2, 6, 4, 4), 13)
    port = TFContribLayerNorm(6)
    gn = torch.nn.GroupNorm(1, 6, eps=1e-12)
    with torch.no_grad():
        for p in (port.weight, port.bias):
            p.copy_(torch.randn(6))
        gn.weight.copy_(port.weight)
        gn.bias.copy_(port.bias)
    assert nerr(torch_run(port, x).numpy(), torch_run(gn, x).numpy()) < TOL
