"""GroupedConv1D/2D: TF's own grouped convolution against torch and Keras' XLA route.

The layers change how TensorFlow runs a grouped convolution (no XLA call), never what it
computes: outputs and gradients must equal Keras' own Conv layer with the same weights,
the converted model must match torch, and gradients must work where TF's CPU has no grouped
backprop kernel (oneDNN off).
"""

from __future__ import annotations

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch

import crossport
from crossport.layers import GroupedConv1D, GroupedConv2D

CASES = [  # (layer class, Keras twin, input shape, filters, kernel, strides, padding, dilation, groups)
    (GroupedConv2D, keras.layers.Conv2D, (2, 11, 9, 12), 8, 3, 1, "valid", 1, 4),
    (GroupedConv2D, keras.layers.Conv2D, (1, 12, 12, 16), 16, 3, 2, "same", 1, 2),
    (GroupedConv2D, keras.layers.Conv2D, (1, 13, 10, 6), 9, (3, 2), 1, "valid", 2, 3),
    (GroupedConv1D, keras.layers.Conv1D, (2, 20, 8), 12, 5, 2, "valid", 1, 4),
    (GroupedConv1D, keras.layers.Conv1D, (1, 17, 6), 6, 3, 1, "same", 3, 6),
    (GroupedConv1D, keras.layers.Conv1D, (2, 15, 8), 4, 3, 1, "causal", 2, 2),
]


def _pair(case):
    cls, twin, shape, filters, kernel, strides, padding, dilation, groups = case
    args = dict(filters=filters, kernel_size=kernel, strides=strides, padding=padding,
                dilation_rate=dilation, groups=groups)
    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    ours, ref = cls(**args), twin(**args)
    ours(x), ref(x)
    ref.set_weights([w + np.float32(0.1) * i for i, w in enumerate(ours.get_weights())])
    ours.set_weights(ref.get_weights())
    return ours, ref, x


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].__name__}-{c[2]}-g{c[8]}")
def test_grouped_conv_equals_keras_conv_forward_and_gradient(case):
    ours, ref, x = _pair(case)
    xt = tf.constant(x)
    results = []
    for layer in (ours, ref):
        with tf.GradientTape() as tape:
            tape.watch(xt)
            y = layer(xt)
            loss = tf.reduce_sum(tf.sin(y))
        grads = tape.gradient(loss, [xt, *layer.trainable_variables])
        results.append([y.numpy()] + [g.numpy() for g in grads])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", [CASES[0], CASES[3]], ids=["2d", "1d"])
def test_grouped_conv_runs_without_xla(case):
    """The traced graph has TF's grouped convolution and no XLA-compiled call (the reason
    for the layer); Keras' own Conv compiles one."""
    ours, ref, x = _pair(case)

    def xla_calls(layer) -> int:
        graph = tf.function(lambda t: layer(t)).get_concrete_function(
            tf.TensorSpec(x.shape, tf.float32)).graph
        functions = graph.as_graph_def().library.function
        return sum(1 for f in functions if f.attr.get("_XlaMustCompile", None) is not None
                   and f.attr["_XlaMustCompile"].b)

    assert xla_calls(ref) >= 1
    assert xla_calls(ours) == 0


def test_grouped_conv_gradient_without_onednn():
    """TF's CPU kernels have no grouped-conv backprop without oneDNN: the gradient must come
    from the XLA route there, and equal Keras' Conv2D's."""
    code = """
import numpy as np, tensorflow as tf, keras
from crossport.layers import GroupedConv2D
x = tf.constant(np.random.default_rng(1).normal(size=(1, 8, 8, 6)).astype("float32"))
ours, ref = GroupedConv2D(6, 3, groups=3), keras.layers.Conv2D(6, 3, groups=3)
ours(x); ref(x); ref.set_weights(ours.get_weights())
out = []
for layer in (ours, ref):
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(layer(x) ** 2)
    out.append([g.numpy() for g in tape.gradient(loss, [x, layer.kernel])])
for a, b in zip(*out):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
print("ok")
"""
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0", TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("ok")


@pytest.mark.parametrize("dims", [1, 2])
def test_converted_grouped_conv_is_native_and_saves(tmp_path, dims):
    """A torch grouped conv converts to GroupedConv{1,2}D, matches torch, survives a
    ``.keras`` round trip and converts back to torch."""
    conv = (torch.nn.Conv1d if dims == 1 else torch.nn.Conv2d)(12, 8, 3, padding=1, groups=4)
    module = torch.nn.Sequential(conv, torch.nn.ReLU()).eval()
    x = torch.randn(2, 12, *([10] * dims))
    model = crossport.convert(module, (x,))
    kinds = [type(layer).__name__ for layer in model.layers]
    assert f"GroupedConv{dims}D" in kinds
    path = tmp_path / "m.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert type(reloaded.get_layer(model.layers[kinds.index(f"GroupedConv{dims}D")].name)
                ).__name__ == f"GroupedConv{dims}D"
    with torch.no_grad():
        want = module(x).numpy()
    np.testing.assert_allclose(np.asarray(reloaded(x.numpy())), want, rtol=1e-5, atol=1e-5)
    back = crossport.to_torch(reloaded, (x.numpy(),))
    with torch.no_grad():
        np.testing.assert_allclose(back(x).numpy(), want, rtol=1e-5, atol=1e-5)
