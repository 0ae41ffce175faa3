"""Keras' regularization losses on the converted module (``module.regularization_loss()``).

Each row is a real Keras model with regularizers. After ``model(x, training=True)`` and the
module's train-mode forward on the same input, ``regularization_loss()`` equals Keras'
``sum(model.losses)``; for ``mse + regularization`` the gradient of every weight equals
TF's GradientTape gradient, and after one SGD step in both frameworks the module's weights
equal those of a fresh conversion of the stepped Keras model (the existing weight-transfer
layout, independent of how the penalties locate their weights). Rows of the layout the
penalty sees (``OrthogonalRegularizer`` rows/columns of the Keras kernel, a Flatten ->
Dense's permuted columns, NCHW-held activations), a tuple output, a shared layer, pickling,
the generated source, and the refusals.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch

import crossport
from crossport.errors import UnsupportedLayerError
from crossport.to_torch import penalties
from tests.to_torch.harness import make_live, reloaded

L, R = keras.layers, keras.regularizers
LR = 0.1


def _dense():
    inp = keras.Input((6,))
    x = L.Dense(5, kernel_regularizer=R.L1(0.03), bias_regularizer=R.L2(0.2), name="d1")(inp)
    return keras.Model(inp, L.Dense(3, kernel_regularizer=R.L1L2(0.01, 0.05), name="d2")(x))


def _orthogonal(mode):
    def build():
        inp = keras.Input((6,))
        x = L.Dense(5, kernel_regularizer=R.OrthogonalRegularizer(0.5, mode), name="d1")(inp)
        return keras.Model(inp, L.Dense(4, kernel_regularizer=R.OrthogonalRegularizer(
            0.3, "rows" if mode == "columns" else "columns"), name="d2")(x))
    return build


def _flatten_dense_orthogonal():
    """Conv (NCHW-held) -> Flatten -> Dense: the Linear weight's columns are permuted; the
    orthogonal penalty on the kernel's rows must see Keras' row order."""
    inp = keras.Input((4, 4, 3))
    x = L.Conv2D(2, 3, padding="same", name="conv")(inp)
    x = L.Flatten()(x)
    out = L.Dense(4, kernel_regularizer=R.OrthogonalRegularizer(0.7, "rows"), name="fc")(x)
    return keras.Model(inp, out)


def _conv():
    inp = keras.Input((7, 7, 3))
    x = L.Conv2D(4, 3, kernel_regularizer=R.L2(0.05), bias_regularizer=R.L1(0.1),
                 name="conv")(inp)
    return keras.Model(inp, L.Conv2D(2, 1, strides=2, kernel_regularizer=R.L1L2(0.02, 0.02),
                                     padding="same", name="conv2")(x))


def _depthwise():
    inp = keras.Input((7, 7, 3))
    x = L.DepthwiseConv2D(3, depth_multiplier=2, depthwise_regularizer=R.L1(0.05),
                          bias_regularizer=R.L2(0.1), name="dw")(inp)
    return keras.Model(inp, x)


def _separable():
    inp = keras.Input((7, 7, 3))
    x = L.SeparableConv2D(4, 3, depth_multiplier=2, depthwise_regularizer=R.L2(0.05),
                          pointwise_regularizer=R.L1(0.03), bias_regularizer=R.L1(0.2),
                          name="sep")(inp)
    return keras.Model(inp, x)


def _conv_transpose():
    inp = keras.Input((5, 5, 3))
    x = L.Conv2DTranspose(4, 3, strides=2, padding="same", kernel_regularizer=R.L1L2(0.02, 0.1),
                          bias_regularizer=R.L2(0.3), name="convt")(inp)
    x = L.Conv1DTranspose(2, 3, kernel_regularizer=R.L1(0.05), name="convt1")(
        L.Reshape((10 * 10, 4))(x))
    return keras.Model(inp, x)


def _embedding():
    inp = keras.Input((5,), dtype="int32")
    x = L.Embedding(11, 4, embeddings_regularizer=R.L2(0.05), name="emb")(inp)
    y = L.Embedding(11, 4, embeddings_regularizer=R.OrthogonalRegularizer(0.4, "columns"),
                    name="emb2")(inp)
    return keras.Model(inp, L.Add()([x, y]))


def _lstm():
    # not Keras' default orthogonal recurrent kernel: its rows' off-diagonal products are 0
    # up to rounding, where the orthogonal penalty's |.| has no gradient (the sign is noise)
    inp = keras.Input((5, 3))
    x = L.LSTM(4, return_sequences=True, kernel_regularizer=R.L1(0.02),
               recurrent_initializer="glorot_uniform",
               recurrent_regularizer=R.OrthogonalRegularizer(0.3, "rows"),
               bias_regularizer=R.L2(0.1), name="lstm")(inp)
    return keras.Model(inp, x)


def _gru():
    inp = keras.Input((5, 3))
    x = L.GRU(4, kernel_regularizer=R.L2(0.05), recurrent_regularizer=R.L1(0.02),
              bias_regularizer=R.L1L2(0.1, 0.1), name="gru")(inp)
    return keras.Model(inp, x)


def _bidirectional():
    inp = keras.Input((5, 3))
    x = L.Bidirectional(L.LSTM(3, kernel_regularizer=R.L2(0.05),
                               recurrent_regularizer=R.OrthogonalRegularizer(0.2, "columns")),
                        name="bi")(inp)
    return keras.Model(inp, x)


def _batchnorm():
    inp = keras.Input((5, 5, 3))
    x = L.Conv2D(4, 3, name="conv")(inp)
    x = L.BatchNormalization(gamma_regularizer=R.L2(0.3), beta_regularizer=R.L1(0.2),
                             name="bn")(x)
    return keras.Model(inp, x)


def _activity():
    """Activity penalties on an NCHW-held conv output, a Dense output and a scalar-free
    ActivityRegularization layer, divided by the batch as Keras does."""
    inp = keras.Input((6, 6, 3))
    x = L.Conv2D(4, 3, activity_regularizer=R.L2(0.01), name="conv")(inp)
    x = L.ActivityRegularization(l1=0.02, l2=0.03, name="act")(x)
    x = L.GlobalAveragePooling2D()(x)
    x = L.Dense(5, activity_regularizer=R.L1L2(0.05, 0.1), name="fc")(x)
    return keras.Model(inp, L.Dense(4, activity_regularizer=R.OrthogonalRegularizer(
        0.2, "columns"), name="fc2")(x))


def _activity_tuple_output():
    """An LSTM returning (sequences, h, c): Keras penalises each of its outputs."""
    inp = keras.Input((5, 3))
    seq, h, c = L.LSTM(4, return_sequences=True, return_state=True,
                       activity_regularizer=R.L1L2(0.02, 0.05), name="lstm")(inp)
    return keras.Model(inp, [seq, L.Add()([h, c])])


def _activity_shared():
    """A shared layer called twice: one penalty per call."""
    a, b = keras.Input((4,)), keras.Input((4,))
    shared = L.Dense(3, activity_regularizer=R.L2(0.1), kernel_regularizer=R.L1(0.05),
                     name="shared")
    return keras.Model([a, b], L.Add()([shared(a), shared(L.Dense(4, name="pre")(b))]))


def _frozen():
    """A frozen layer's regularizer is not in model.losses (trainable weights only)."""
    inp = keras.Input((6,))
    frozen = L.Dense(5, kernel_regularizer=R.L2(0.5), name="frozen")
    x = frozen(inp)
    frozen.trainable = False
    return keras.Model(inp, L.Dense(3, kernel_regularizer=R.L2(0.1), name="fc")(x))


class _Scale(L.Layer):
    """A custom layer (traced: no converter) whose own weight has a regularizer."""

    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], 3), regularizer=R.L1L2(0.05, 0.1),
                                 name="w")

    def call(self, x):
        return keras.ops.matmul(x, self.w)


def _custom_layer():
    inp = keras.Input((6,))
    return keras.Model(inp, _Scale(name="scale")(L.Dense(4, name="pre")(inp)))


def _nested():
    """A nested Sequential (dotted module paths) with regularized layers and activity."""
    inner = keras.Sequential([keras.Input((6,)), L.Dense(5, kernel_regularizer=R.L2(0.2),
                                                          activity_regularizer=R.L1(0.05),
                                                          name="inner_dense")], name="inner")
    inp = keras.Input((6,))
    return keras.Model(inp, L.Dense(2, bias_regularizer=R.L1(0.3), name="head")(inner(inp)))


ROWS = {
    "dense_l1_l2_l1l2": (_dense, (4, 6)),
    "dense_orthogonal_rows": (_orthogonal("rows"), (4, 6)),
    "dense_orthogonal_columns": (_orthogonal("columns"), (4, 6)),
    "flatten_dense_orthogonal": (_flatten_dense_orthogonal, (3, 4, 4, 3)),
    "conv2d": (_conv, (2, 7, 7, 3)),
    "depthwise_conv2d": (_depthwise, (2, 7, 7, 3)),
    "separable_conv2d": (_separable, (2, 7, 7, 3)),
    "conv_transpose": (_conv_transpose, (2, 5, 5, 3)),
    "embedding": (_embedding, (3, 5)),
    "lstm_recurrent_orthogonal": (_lstm, (3, 5, 3)),
    "gru": (_gru, (3, 5, 3)),
    "bidirectional_lstm": (_bidirectional, (3, 5, 3)),
    "batchnorm_gamma_beta": (_batchnorm, (3, 5, 5, 3)),
    "activity": (_activity, (3, 6, 6, 3)),
    "activity_tuple_output": (_activity_tuple_output, (3, 5, 3)),
    "activity_shared_layer": (_activity_shared, None),
    "frozen_layer": (_frozen, (4, 6)),
    "custom_layer_weight": (_custom_layer, (4, 6)),
    "nested_model": (_nested, (4, 6)),
}


def _inputs(model, shape, seed=0):
    rng = np.random.default_rng(seed)
    if shape is None:
        return [rng.standard_normal((3, *t.shape[1:])).astype("float32") for t in model.inputs]
    if "int" in str(model.inputs[0].dtype):
        return [rng.integers(0, 11, shape).astype("int32")]
    return [rng.standard_normal(shape).astype("float32")]


def _keras_args(xs):
    """The model's call argument: one tensor, or the list of them."""
    tensors = [tf.constant(x) for x in xs]
    return tensors[0] if len(tensors) == 1 else tensors


def _keras_step(model, xs, targets):
    """Keras' loss value, regularization and gradients for mse + sum(model.losses), then
    one SGD step on the model's trainable weights."""
    with tf.GradientTape() as tape:
        outs = keras.tree.flatten(model(_keras_args(xs), training=True))
        mse = tf.add_n([tf.reduce_mean(tf.square(o - t)) for o, t in zip(outs, targets)])
        reg = tf.add_n(model.losses)
        loss = mse + reg
    grads = tape.gradient(loss, model.trainable_weights)
    for variable, grad in zip(model.trainable_weights, grads):
        variable.assign(variable - LR * grad)
    return float(reg)


def _torch_step(module, xs, targets):
    module.train()
    outs = torch.utils._pytree.tree_leaves(module(*(torch.from_numpy(x) for x in xs)))
    mse = sum(((o - torch.from_numpy(t)) ** 2).mean() for o, t in zip(outs, targets))
    reg = module.regularization_loss()
    (mse + reg).backward()
    grads = {n: p.grad.clone() for n, p in module.named_parameters() if p.requires_grad}
    with torch.no_grad():
        for p in module.parameters():
            if p.requires_grad:
                p -= LR * p.grad
    return float(reg.detach()), grads


def _close(a, b, what, tol=1e-4):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = max(1.0, float(np.abs(a).max(initial=0.0)))
    err = float(np.abs(a - b).max(initial=0.0)) / scale
    assert err < tol, f"{what}: {err:.2e}"


@pytest.mark.parametrize("row", sorted(ROWS))
def test_regularization_loss_gradients_and_sgd_step_match_keras(row):
    build, shape = ROWS[row]
    model = make_live(build())
    xs = _inputs(model, shape)
    net = crossport.to_torch(model, tuple(torch.from_numpy(x) for x in xs))
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    outs = keras.tree.flatten(model(_keras_args(xs), training=False))
    rng = np.random.default_rng(1)
    targets = [rng.standard_normal(tuple(o.shape)).astype("float32") for o in outs]

    keras_reg = _keras_step(model, xs, targets)
    torch_reg, grads = _torch_step(net, xs, targets)
    assert keras_reg > 1e-3 or row == "frozen_layer"
    _close(keras_reg, torch_reg, "regularization loss", 1e-5)

    # the stepped Keras model converted afresh: the existing weight layout, Keras' new weights
    stepped = crossport.to_torch(model, tuple(torch.from_numpy(x) for x in xs))
    want = dict(stepped.named_parameters())
    for name, grad in grads.items():
        _close((before[name] - want[name].detach()) / LR, grad, f"gradient of {name}")
        _close(want[name].detach(), dict(net.named_parameters())[name].detach(),
               f"{name} after one SGD step")
    for name, buffer in stepped.named_buffers():  # BN moving statistics, penalty indices
        if not name.endswith("num_batches_tracked"):  # (torch's count, not a Keras weight)
            _close(buffer, dict(net.named_buffers())[name], name)


@pytest.mark.parametrize("row", ["lstm_recurrent_orthogonal", "separable_conv2d"])
def test_variables_larger_than_one_coding_pass_are_located_in_pieces(row, monkeypatch):
    """A variable of more elements than one pair of coded conversions takes (2^23) is coded
    in pieces over several pairs: the same gathers as in one pass, the same loss."""
    build, shape = ROWS[row]
    model = make_live(build())
    xs = tuple(torch.from_numpy(x) for x in _inputs(model, shape))
    whole = crossport.to_torch(model, xs)
    monkeypatch.setattr(penalties, "_CHUNK", 7)
    pieces = crossport.to_torch(model, xs)
    want = dict(whole.keras_weight_penalties.named_buffers())
    assert want and len(want) == len(dict(pieces.keras_weight_penalties.named_buffers()))
    for name, index in pieces.keras_weight_penalties.named_buffers():
        assert torch.equal(index, want[name]), name
    assert pieces.keras_weight_penalties.entries == whole.keras_weight_penalties.entries
    model(_keras_args(_inputs(model, shape)), training=True)
    pieces(*xs)
    _close(float(keras.ops.sum(model.losses)), float(pieces.regularization_loss().detach()),
           "loss", 1e-5)


def test_activity_penalties_follow_the_last_forward_in_eval_too():
    """Keras adds activity penalties at inference too (Layer.__call__), from the last call."""
    model = make_live(_activity())
    net = crossport.to_torch(model, (torch.randn(3, 6, 6, 3),))
    for batch in (2, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 6, 6, 3)).astype("float32")
        model(x, training=False)
        with torch.no_grad():
            net.eval()(torch.from_numpy(x))
        _close(float(keras.ops.sum(model.losses)), float(net.regularization_loss()),
               f"batch {batch}", 1e-5)


def test_activity_regularization_layer_trains():
    """ActivityRegularization raised TrainingModeError in train(); now its term is kept."""
    model = keras.Sequential([keras.Input((4,)), L.ActivityRegularization(0.1, 0.2)])
    net = crossport.to_torch(model, (torch.randn(2, 4),)).train()
    x = torch.randn(3, 4, requires_grad=True)
    out = net(x)
    assert torch.equal(out, x)
    want = (0.1 * x.abs().sum() + 0.2 * x.square().sum()) / 3
    torch.testing.assert_close(net.regularization_loss(), want)


def test_activity_regularization_of_ids_casts_its_factors_as_keras():
    """On an int input Keras casts l1/l2 to int (0.1 -> 0, 2.5 -> 2); the loss is float32."""
    inp = keras.Input((4,), dtype="int32")
    model = keras.Model(inp, L.ActivityRegularization(0.1, 2.5)(inp))
    x = np.array([[1, -2, 3, 4], [5, 6, 7, -8]], "int32")
    net = crossport.to_torch(model, (torch.from_numpy(x),)).train()
    model(x, training=True)
    assert torch.equal(net(torch.from_numpy(x)), torch.from_numpy(x))
    loss = net.regularization_loss()
    assert loss.dtype == torch.float32
    _close(float(keras.ops.sum(model.losses)), float(loss), "int activity", 1e-6)


def test_module_without_regularizers_returns_zero():
    net = crossport.to_torch(keras.Sequential([keras.Input((4,)), L.Dense(2)]),
                             (torch.randn(2, 4),))
    loss = net.regularization_loss()
    assert loss.shape == () and float(loss) == 0.0


def test_pickled_copied_and_written_modules_keep_the_penalties(tmp_path):
    import copy

    model = make_live(_activity_shared())
    xs = _inputs(model, None)
    conv = crossport.to_torch_with_report(model, tuple(torch.from_numpy(x) for x in xs))
    model(_keras_args(xs), training=True)
    want = float(keras.ops.sum(model.losses))
    pickled, written = reloaded(conv, tmp_path / "m.py")
    for net in (conv.module, pickled, written.build_model(), copy.deepcopy(conv.module),
                copy.copy(conv.module)):
        net.train()(*(torch.from_numpy(x) for x in xs))
        _close(want, float(net.regularization_loss().detach()), type(net).__name__, 1e-5)
    assert "def regularization_loss" in (tmp_path / "m.py").read_text()


class _Custom(R.Regularizer):
    def __call__(self, x):
        return 0.1 * keras.ops.sum(x)

    def get_config(self):
        return {}


@pytest.mark.parametrize("build, match", [
    (lambda: keras.Sequential([keras.Input((4,)), L.Dense(2, kernel_regularizer=_Custom(),
                                                          name="custom_dense")]),
     "'custom_dense' \\(Dense\\): its regularizer _Custom"),
    (lambda: keras.Sequential([keras.Input((4,)), L.Dense(2, activity_regularizer=_Custom(),
                                                          name="custom_act")]),
     "'custom_act' \\(Dense\\): its regularizer _Custom"),
    (lambda: keras.Sequential([keras.Input((4, 4, 2)), L.Conv2D(
        2, 3, kernel_regularizer=R.OrthogonalRegularizer(), name="orth_conv")]),
     "'orth_conv' \\(Conv2D\\): OrthogonalRegularizer on a rank-4"),
    (lambda: keras.Sequential([keras.Input((3, 4)), L.TimeDistributed(L.Dense(
        2, activity_regularizer=R.L2(0.1), name="inner"))]),
     "'inner' \\(Dense\\): its activity_regularizer applies to a call crossport does not"),
])
def test_regularizers_crossport_cannot_reproduce_are_refused(build, match):
    model = build()
    with pytest.raises(UnsupportedLayerError, match=match):
        crossport.to_torch(model, (torch.randn(2, *model.inputs[0].shape[1:]),))
