"""Every claim of docs/pitfalls.md about porting between Keras/TF and torch, against the real
frameworks.

Keras/TF -> torch: each test computes the reference with TensorFlow/Keras, a naive torch port
(what a careful person writes without knowing the pitfall) and the ``crossport.torch_layers``
port, and shows the naive port is wrong (normalized error above 1e-3) while crossport's is right
(below 1e-5). torch -> Keras (``test_pitfall_*_torch_*_to_keras``): the reference is torch, the
naive port a stock Keras layer given torch's weights, the right one ``crossport.layers``.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
import torch.nn.functional as F
from torch import nn

import crossport.layers as CL
from crossport.torch_layers import (
    KerasActivation,
    KerasBatchNorm,
    KerasDense,
    KerasGELU,
    KerasGroupNorm,
    KerasGRU,
    KerasHardSigmoid,
    KerasLayerNorm,
    KerasLeakyReLU,
    KerasLSTM,
    TFAvgPool2d,
    TFContribLayerNorm,
    TFConv2d,
    TFConv2dTranspose,
    TFDepthwiseConv2d,
    TFMaxPool2d,
    TFPad,
    TFResize,
)
from crossport.weights.rules import dense_weight_from_keras

WRONG, RIGHT = 1e-3, 1e-5


def nerr(got, ref) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"shape {got.shape} != reference {ref.shape}"
    return float(np.max(np.abs(got - ref)) / max(1.0, float(np.max(np.abs(ref)))))


def randn(shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def cf(x):  # NHWC -> NCHW (numpy -> torch)
    return torch.from_numpy(np.ascontiguousarray(np.moveaxis(x, -1, 1)))


def cl(t):  # NCHW torch -> NHWC numpy
    return np.moveaxis(t.detach().numpy(), 1, -1)


def randomize(layer, seed=0):
    rng = np.random.default_rng(seed)
    layer.set_weights(
        [rng.standard_normal(w.shape).astype(np.float32) * 0.5 for w in layer.get_weights()]
    )


def check(naive, right, ref):
    """The naive port is wrong, crossport's is right."""
    assert nerr(naive, ref) > WRONG, f"naive port unexpectedly right ({nerr(naive, ref):.2e})"
    assert nerr(right, ref) < RIGHT, f"crossport port off by {nerr(right, ref):.2e}"


@torch.no_grad()
def test_pitfall_01_depthwise_channel_order():
    x = randn((2, 7, 7, 3), 1)
    layer = keras.layers.DepthwiseConv2D(3, depth_multiplier=2)
    layer.build(x.shape)
    randomize(layer, 1)
    kernel = layer.kernel.numpy()  # [kh, kw, in, mult]
    naive = nn.Conv2d(3, 6, 3, groups=3)
    naive.weight.copy_(
        torch.from_numpy(np.transpose(kernel, (3, 2, 0, 1)).reshape(6, 1, 3, 3))
    )  # m-major
    naive.bias.copy_(torch.from_numpy(layer.bias.numpy()))
    check(cl(naive(cf(x))), cl(TFDepthwiseConv2d.from_keras(layer)(cf(x))), layer(x).numpy())


@torch.no_grad()
def test_pitfall_03_keras_layernorm_eps():
    x = randn((2, 5, 8), 2, scale=0.03)  # small variance: eps 1e-3 vs 1e-5 matters
    layer = keras.layers.LayerNormalization()
    layer.build(x.shape)
    randomize(layer, 2)
    naive = nn.LayerNorm(8)
    naive.weight.copy_(torch.from_numpy(layer.gamma.numpy()))
    naive.bias.copy_(torch.from_numpy(layer.beta.numpy()))
    right = KerasLayerNorm.from_keras(layer, channels_first=False)
    xt = torch.from_numpy(x)
    check(naive(xt).numpy(), right(xt).numpy(), layer(x).numpy())


@torch.no_grad()
def test_pitfall_03_contrib_layer_norm_is_not_a_last_dim_layernorm():
    tf_slim = pytest.importorskip("tf_slim")
    x = randn((2, 4, 4, 6), 3, scale=2.0) + 1.0
    gamma, beta = randn((6,), 4), randn((6,), 5)
    graph = tf.Graph()
    with graph.as_default():
        y = tf_slim.layers.layer_norm(tf.constant(x))  # begin_norm_axis=1, begin_params_axis=-1
        gvars = {v.name.split("/")[-1].split(":")[0]: v for v in tf.compat.v1.global_variables()}
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            gvars["gamma"].load(gamma, sess)
            gvars["beta"].load(beta, sess)
            ref = sess.run(y)
    naive = nn.LayerNorm(6, eps=1e-12)  # "layer norm with params [C]" over the last dim
    right = TFContribLayerNorm(6)
    for m in (naive, right):
        m.weight.copy_(torch.from_numpy(gamma))
        m.bias.copy_(torch.from_numpy(beta))
    check(naive(torch.from_numpy(x)).numpy(), cl(right(cf(x))), ref)


@torch.no_grad()
def test_pitfall_04_same_padding_is_asymmetric():
    x = randn((1, 6, 6, 2), 6)
    layer = keras.layers.Conv2D(3, 3, strides=2, padding="same")
    layer.build(x.shape)
    randomize(layer, 6)
    port = TFConv2d.from_keras(layer)
    naive = nn.Conv2d(2, 3, 3, stride=2, padding=1)  # symmetric
    naive.load_state_dict(port.state_dict())
    check(cl(naive(cf(x))), cl(port(cf(x))), layer(x).numpy())


def _bn_layer(x, seed, **kwargs):
    layer = keras.layers.BatchNormalization(**kwargs)
    layer.build(x.shape)
    rng = np.random.default_rng(seed)
    gamma, beta, mean = (rng.standard_normal(x.shape[-1]).astype(np.float32) for _ in range(3))
    var = (rng.uniform(0.002, 0.02, x.shape[-1])).astype(np.float32)  # small running variance
    layer.set_weights([gamma, beta, mean, var])
    return layer


@torch.no_grad()
def test_pitfall_05_batchnorm_eps():
    x = randn((2, 4, 4, 3), 7)
    layer = _bn_layer(x, 7)
    naive = nn.BatchNorm2d(3).eval()  # eps 1e-5
    right = KerasBatchNorm.from_keras(layer).eval()
    naive.load_state_dict(right.state_dict(), strict=False)
    check(cl(naive(cf(x))), cl(right(cf(x))), layer(x, training=False).numpy())


@torch.no_grad()
def test_pitfall_05_batchnorm_training_updates_with_biased_variance():
    x = randn((2, 1, 1, 3), 8)  # two values per channel: unbiased = 2 x biased variance
    layer = _bn_layer(x, 8)
    right = KerasBatchNorm.from_keras(layer).train()
    naive = nn.BatchNorm2d(3, eps=1e-3, momentum=0.01).train()  # eps and momentum already fixed
    naive.load_state_dict(right.state_dict(), strict=False)
    layer(x, training=True)
    naive(cf(x))
    right(cf(x))
    check(naive.running_var.numpy(), right.running_var.numpy(), layer.moving_variance.numpy())


@torch.no_grad()
def test_pitfall_06_conv_transpose_same_crops_at_the_end():
    x = randn((1, 5, 5, 2), 9)
    layer = keras.layers.Conv2DTranspose(3, 3, strides=2, padding="same")  # output 10x10
    layer.build(x.shape)
    randomize(layer, 9)
    port = TFConv2dTranspose.from_keras(layer)
    naive = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, output_padding=1)  # also 10x10
    naive.load_state_dict(port.state_dict())
    check(cl(naive(cf(x))), cl(port(cf(x))), layer(x).numpy())


@torch.no_grad()
def test_pitfall_07_tf_pad_order_and_symmetric_mode():
    x = randn((2, 3, 5, 4), 10)
    paddings = [[0, 0], [0, 0], [1, 2], [3, 0]]
    ref = tf.pad(x, paddings).numpy()
    flat = [v for pair in paddings for v in pair]
    naive = F.pad(torch.from_numpy(x), flat[4:])  # the last two TF pairs, read as F.pad order
    check(naive.numpy(), TFPad(paddings)(torch.from_numpy(x)).numpy(), ref)
    ref = tf.pad(x, paddings, mode="SYMMETRIC").numpy()
    naive = F.pad(torch.from_numpy(x), (3, 0, 1, 2), mode="reflect")  # right order, wrong mode
    check(naive.numpy(), TFPad(paddings, "SYMMETRIC")(torch.from_numpy(x)).numpy(), ref)


@torch.no_grad()
def test_pitfall_08_axis_ops_follow_the_layout():
    x = randn((2, 3, 3, 4), 11)
    layer = keras.layers.Activation("softmax")
    naive = torch.softmax(cf(x), dim=-1)  # Keras' "last axis", on the NCHW port
    check(cl(naive), cl(KerasActivation.from_keras(layer)(cf(x))), layer(x).numpy())


@torch.no_grad()
def test_pitfall_09_flatten_before_dense():
    x = randn((2, 3, 3, 4), 12)
    dense = keras.layers.Dense(5)
    dense.build((None, 36))
    randomize(dense, 12)
    ref = dense(keras.layers.Flatten()(x)).numpy()
    port = KerasDense.from_keras(dense)
    naive = port(torch.flatten(cf(x), 1))  # C-major features
    right = port(torch.flatten(cf(x).permute(0, 2, 3, 1), 1))  # H, W, C like Keras
    check(naive.numpy(), right.numpy(), ref)


@torch.no_grad()
def test_pitfall_10_kernel_layout():
    x = randn((1, 6, 6, 2), 13)
    layer = keras.layers.Conv2D(3, 3, use_bias=False)
    layer.build(x.shape)
    randomize(layer, 13)
    naive = nn.Conv2d(2, 3, 3, bias=False)
    naive.weight.copy_(
        torch.from_numpy(np.transpose(layer.kernel.numpy(), (3, 2, 1, 0)).copy())
    )  # kh/kw swapped
    check(cl(naive(cf(x))), cl(TFConv2d.from_keras(layer)(cf(x))), layer(x).numpy())
    # Dense: a square kernel loads without a shape error but must be transposed.
    dense = keras.layers.Dense(4)
    dense.build((None, 4))
    randomize(dense, 14)
    xs = randn((3, 4), 14)
    linear = nn.Linear(4, 4)
    linear.weight.copy_(torch.from_numpy(dense.kernel.numpy()))
    linear.bias.copy_(torch.from_numpy(dense.bias.numpy()))
    right = nn.Linear(4, 4)
    right.weight.copy_(torch.from_numpy(dense_weight_from_keras(dense.kernel.numpy())))
    right.bias.copy_(linear.bias)
    check(
        linear(torch.from_numpy(xs)).numpy(), right(torch.from_numpy(xs)).numpy(), dense(xs).numpy()
    )


@torch.no_grad()
def test_pitfall_11_same_pooling():
    x = randn((1, 6, 6, 2), 15) + 2.0
    layer = keras.layers.AveragePooling2D(3, strides=1, padding="same")
    naive = nn.AvgPool2d(3, 1, padding=1)  # count_include_pad=True
    check(cl(naive(cf(x))), cl(TFAvgPool2d.from_keras(layer)(cf(x))), layer(x).numpy())
    layer = keras.layers.MaxPooling2D(3, strides=2, padding="same")
    naive = nn.MaxPool2d(3, 2, padding=1)  # symmetric
    check(cl(naive(cf(x))), cl(TFMaxPool2d.from_keras(layer)(cf(x))), layer(x).numpy())


@torch.no_grad()
@pytest.mark.parametrize(
    "method,size,torch_mode", [("nearest", (3, 3), "nearest"), ("bicubic", (9, 7), "bicubic")]
)
def test_pitfall_12_resize(method, size, torch_mode):
    x = randn((1, 4, 4, 2), 16)
    ref = tf.image.resize(x, size, method=method).numpy()
    kwargs = {"align_corners": False} if torch_mode == "bicubic" else {}
    naive = F.interpolate(cf(x), size, mode=torch_mode, **kwargs)
    check(cl(naive), cl(TFResize(size, method)(cf(x))), ref)


@torch.no_grad()
def test_pitfall_13_recurrent_gates_and_biases():
    x = randn((2, 5, 3), 17)
    gru = keras.layers.GRU(4, return_sequences=True)
    gru.build(x.shape)
    randomize(gru, 17)
    naive = nn.GRU(3, 4, batch_first=True)  # weights copied without the (z, r, h) -> (r, z, n) swap
    naive.weight_ih_l0.copy_(torch.from_numpy(gru.cell.kernel.numpy().T))
    naive.weight_hh_l0.copy_(torch.from_numpy(gru.cell.recurrent_kernel.numpy().T))
    naive.bias_ih_l0.copy_(torch.from_numpy(gru.cell.bias.numpy()[0]))
    naive.bias_hh_l0.copy_(torch.from_numpy(gru.cell.bias.numpy()[1]))
    xt = torch.from_numpy(x)
    check(naive(xt)[0].numpy(), KerasGRU.from_keras(gru)(xt).numpy(), gru(x).numpy())

    lstm = keras.layers.LSTM(4, return_sequences=True)
    lstm.build(x.shape)
    randomize(lstm, 18)
    naive = nn.LSTM(3, 4, batch_first=True)  # the one Keras bias copied into both torch biases
    naive.weight_ih_l0.copy_(torch.from_numpy(lstm.cell.kernel.numpy().T))
    naive.weight_hh_l0.copy_(torch.from_numpy(lstm.cell.recurrent_kernel.numpy().T))
    naive.bias_ih_l0.copy_(torch.from_numpy(lstm.cell.bias.numpy()))
    naive.bias_hh_l0.copy_(torch.from_numpy(lstm.cell.bias.numpy()))
    check(naive(xt)[0].numpy(), KerasLSTM.from_keras(lstm)(xt).numpy(), lstm(x).numpy())


@torch.no_grad()
def test_pitfall_14_defaults_that_look_alike():
    x = randn((2, 4, 4, 6), 19, scale=3.0)
    layer = keras.layers.LeakyReLU()
    check(
        nn.LeakyReLU()(torch.from_numpy(x)).numpy(),
        KerasLeakyReLU.from_keras(layer)(torch.from_numpy(x)).numpy(),
        layer(x).numpy(),
    )

    xs = randn((2, 4, 4, 6), 20, scale=0.03)
    gn = keras.layers.GroupNormalization(groups=3)
    gn.build(xs.shape)
    naive = nn.GroupNorm(3, 6)  # eps 1e-5
    check(cl(naive(cf(xs))), cl(KerasGroupNorm.from_keras(gn)(cf(xs))), gn(xs).numpy())


@torch.no_grad()
def test_pitfall_14_keras2_hard_sigmoid():
    tf_keras = pytest.importorskip("tf_keras")
    x = randn((50,), 21, scale=3.0)
    ref = tf_keras.activations.hard_sigmoid(tf.constant(x)).numpy()
    xt = torch.from_numpy(x)
    check(nn.Hardsigmoid()(xt).numpy(), KerasHardSigmoid(legacy=True)(xt).numpy(), ref)


@torch.no_grad()
def test_pitfall_14_keras_ops_gelu_default_is_tanh():
    # Below the 1e-3 bar (max absolute difference 4.7e-4 on [-6, 6]) but systematic.
    x = np.linspace(-6, 6, 4001).astype(np.float32)
    ref = keras.ops.gelu(x).numpy()
    xt = torch.from_numpy(x)
    assert np.max(np.abs(nn.GELU()(xt).numpy() - ref)) > 4e-4
    assert nerr(KerasGELU(approximate=True)(xt).numpy(), ref) < RIGHT


def test_pitfall_15_integer_division_and_modulo():
    a = np.array([-7, 7, -8, 5, 6], np.int64)
    b = np.array([2, -2, 3, -3, 4], np.int64)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    # TF truncating ops are torch's rounding_mode="trunc" / fmod, not // or %.
    ref_div, ref_mod = tf.truncatediv(a, b).numpy(), tf.truncatemod(a, b).numpy()
    assert not np.array_equal((ta // tb).numpy(), ref_div)
    np.testing.assert_array_equal(torch.div(ta, tb, rounding_mode="trunc").numpy(), ref_div)
    assert not np.array_equal((ta % tb).numpy(), ref_mod)
    np.testing.assert_array_equal(torch.fmod(ta, tb).numpy(), ref_mod)
    # Flooring ops agree: tf.math.floordiv / floormod == torch // and %.
    np.testing.assert_array_equal((ta // tb).numpy(), tf.math.floordiv(a, b).numpy())
    np.testing.assert_array_equal((ta % tb).numpy(), tf.math.floormod(a, b).numpy())
    # Integer true division: TF returns float64, torch float32.
    assert (tf.constant(a) / tf.constant(b)).dtype == tf.float64
    assert (ta / tb).dtype == torch.float32
    # Argmax index dtype: torch and tf int64, keras.ops int32; ties pick the first index in all.
    t = np.array([[1, 3, 3, 0], [2, 2, 1, 2]], np.float32)
    assert keras.ops.argmax(t, 1).dtype == "int32"
    assert tf.argmax(t, 1).dtype == tf.int64
    np.testing.assert_array_equal(
        torch.argmax(torch.from_numpy(t), 1).numpy(), tf.argmax(t, 1).numpy()
    )


# --- torch -> Keras: the reference is torch, the naive port a stock Keras layer given torch's
# weights, the right port the crossport.layers class (channels-last, from_torch).


def _torch_randomize(module, seed, var_range=None):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in list(module.named_parameters()) + list(module.named_buffers()):
            if name == "running_var":
                lo, hi = var_range or (0.5, 1.5)
                p.copy_(torch.rand(p.shape, generator=g) * (hi - lo) + lo)
            elif p.dtype.is_floating_point:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return module.eval()


def _np(t):
    return t.detach().numpy()


@torch.no_grad()
def test_pitfall_03_torch_layernorm_to_keras():
    x = randn((2, 5, 8), 31, scale=0.03)  # small variance: eps 1e-5 vs 1e-3 matters
    module = _torch_randomize(nn.LayerNorm(8), 31)
    naive = keras.layers.LayerNormalization()  # eps 1e-3
    naive.build(x.shape)
    naive.set_weights([_np(module.weight), _np(module.bias)])
    right = CL.LayerNorm.from_torch(module)
    check(naive(x).numpy(), right(x).numpy(), module(torch.from_numpy(x)).numpy())


@torch.no_grad()
def test_pitfall_05_torch_batchnorm_to_keras():
    x = randn((2, 4, 4, 3), 32)  # NHWC for Keras; torch sees its NCHW port
    module = _torch_randomize(nn.BatchNorm2d(3), 32, var_range=(0.002, 0.02))
    naive = keras.layers.BatchNormalization()  # eps 1e-3
    naive.build(x.shape)
    naive.set_weights([_np(module.weight), _np(module.bias), _np(module.running_mean),
                       _np(module.running_var)])
    right = CL.BatchNorm2d.from_torch(module)
    check(naive(x, training=False).numpy(), right(x, training=False).numpy(),
          cl(module(cf(x))))


@torch.no_grad()
@pytest.mark.parametrize("mode,size", [("nearest", (3, 3)), ("bicubic", (9, 7))])
def test_pitfall_12_torch_interpolate_to_keras(mode, size):
    x = randn((1, 4, 4, 2), 33)
    module = nn.Upsample(size=size, mode=mode)
    naive = tf.image.resize(x, size, method=mode).numpy()  # TF rounds / uses a = -0.5
    right = CL.Interpolate.from_torch(module)
    check(naive, right(x).numpy(), cl(module(cf(x))))


@torch.no_grad()
def test_pitfall_13_torch_recurrent_to_keras():
    x = randn((2, 5, 3), 34)
    xt = torch.from_numpy(x)
    gru = _torch_randomize(nn.GRU(3, 4, batch_first=True), 34)
    naive = keras.layers.GRU(4, return_sequences=True)  # (r, z, n) copied without the swap
    naive.build(x.shape)
    naive.set_weights([_np(gru.weight_ih_l0).T, _np(gru.weight_hh_l0).T,
                       np.stack([_np(gru.bias_ih_l0), _np(gru.bias_hh_l0)])])
    check(naive(x).numpy(), CL.GRU.from_torch(gru)(x)[0].numpy(), gru(xt)[0].numpy())

    lstm = _torch_randomize(nn.LSTM(3, 4, batch_first=True), 35)
    naive = keras.layers.LSTM(4, return_sequences=True)  # only bias_ih kept
    naive.build(x.shape)
    naive.set_weights([_np(lstm.weight_ih_l0).T, _np(lstm.weight_hh_l0).T,
                       _np(lstm.bias_ih_l0)])
    check(naive(x).numpy(), CL.LSTM.from_torch(lstm)(x)[0].numpy(), lstm(xt)[0].numpy())


@torch.no_grad()
def test_pitfall_14_torch_groupnorm_to_keras():
    x = randn((2, 4, 4, 6), 36, scale=0.03)
    module = _torch_randomize(nn.GroupNorm(3, 6), 36)
    naive = keras.layers.GroupNormalization(groups=3)  # eps 1e-3
    naive.build(x.shape)
    naive.set_weights([_np(module.weight), _np(module.bias)])
    right = CL.GroupNorm.from_torch(module)
    check(naive(x).numpy(), right(x).numpy(), cl(module(cf(x))))
