"""Training parity: gradients of a loss w.r.t. inputs and every weight match TF's GradientTape,
and the trainable parameter count equals Keras'."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch

import crossport
from crossport.weights import conv_weight_from_keras, dense_weight_from_keras
from tests.to_torch.harness import make_live

L = keras.layers


class _Suffixes(dict):
    """Look variables up by the end of their path (the model's name prefixes it)."""

    def __getitem__(self, suffix):
        (hit,) = [v for k, v in self.items() if k == suffix or k.endswith("/" + suffix)]
        return hit


def _grads(model, module, x):
    xt = tf.constant(x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(xt)
        loss = tf.reduce_sum(tf.square(model(xt, training=False)))
    keras_grads = _Suffixes({v.path: g.numpy() for v, g in zip(
        model.trainable_weights, tape.gradient(loss, model.trainable_weights))})
    keras_dx = tape.gradient(loss, xt).numpy()
    xs = torch.from_numpy(x).requires_grad_(True)
    module.zero_grad()
    (module(xs) ** 2).sum().backward()
    torch_grads = {n: p.grad.numpy() for n, p in module.named_parameters() if p.requires_grad}
    return keras_grads, keras_dx, torch_grads, xs.grad.numpy()


def _close(a, b):
    scale = max(1.0, float(np.abs(a).max()))
    assert np.abs(a - b).max() / scale < 1e-4, np.abs(a - b).max() / scale


def test_cnn_gradients_match_gradient_tape():
    model = keras.Sequential([keras.Input((8, 8, 3)),
                              L.Conv2D(4, 3, 2, padding="same", name="conv"),
                              L.BatchNormalization(name="bn"), L.ReLU(),
                              L.Flatten(), L.Dense(3, name="fc")])
    make_live(model)
    x = np.random.default_rng(0).standard_normal((2, 8, 8, 3)).astype("float32")
    module = crossport.to_torch(model, (torch.from_numpy(x),))
    kg, kdx, tg, tdx = _grads(model, module, x)
    _close(kdx, tdx)
    _close(conv_weight_from_keras(kg["conv/kernel"]), tg["conv.weight"])
    _close(kg["conv/bias"], tg["conv.bias"])
    _close(kg["bn/gamma"], tg["bn.weight"])
    _close(kg["bn/beta"], tg["bn.bias"])
    # Flatten -> Dense: the Linear weight's columns are in NCHW order (pitfall 9)
    order = np.arange(4 * 4 * 4).reshape(4, 4, 4).transpose(2, 0, 1).ravel()
    _close(dense_weight_from_keras(kg["fc/kernel"])[:, order], tg["fc.weight"])
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    assert trainable == sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    # every non-trainable Keras weight is a buffer (torch BN adds its num_batches_tracked)
    buffers = sum(b.numel() for n, b in module.named_buffers() if "num_batches" not in n)
    assert buffers == sum(int(np.prod(w.shape)) for w in model.non_trainable_weights)


def test_lstm_gradients_match_gradient_tape():
    model = keras.Sequential([keras.Input((5, 4)), L.LSTM(6, name="lstm"), L.Dense(2)])
    make_live(model)
    x = np.random.default_rng(1).standard_normal((3, 5, 4)).astype("float32")
    module = crossport.to_torch(model, (torch.from_numpy(x),))
    kg, kdx, tg, tdx = _grads(model, module, x)
    _close(kdx, tdx)
    _close(kg["lstm/lstm_cell/kernel"].T, tg["lstm.weight_ih_l0"])
    _close(kg["lstm/lstm_cell/recurrent_kernel"].T, tg["lstm.weight_hh_l0"])
    # Keras' one bias is bias_ih; bias_hh is torch's zero stand-in, frozen (not trained)
    _close(kg["lstm/lstm_cell/bias"], tg["lstm.bias_ih_l0"])
    assert "lstm.bias_hh_l0" not in tg


def _keras_sgd_step(model, x, lr):
    """One training step in Keras on TF: forward with training=True (moving statistics
    update), loss sum(y^2), plain SGD on the trainable weights."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(model(tf.constant(x), training=True)))
    grads = tape.gradient(loss, model.trainable_weights)
    for var, grad in zip(model.trainable_weights, grads):
        var.assign_sub(lr * tf.convert_to_tensor(grad))  # (Embedding: IndexedSlices)
    return float(loss)


def _torch_sgd_step(module, x, lr):
    module.train()
    optimizer = torch.optim.SGD(module.parameters(), lr=lr)
    optimizer.zero_grad()
    loss = (module(torch.from_numpy(x)) ** 2).sum()
    loss.backward()
    optimizer.step()
    return loss.item()


@pytest.mark.parametrize("momentum", [0.99, 0.5])
@pytest.mark.parametrize("rank", [2, 4])
def test_batchnorm_training_step_matches_keras(rank, momentum):
    """Keras folds the biased batch variance into moving_variance (torch's BatchNorm: the
    unbiased one); Keras momentum m is torch momentum 1 - m. A small batch makes the
    n/(n-1) difference large."""
    keras.utils.set_random_seed(0)  # kernels from Keras' RNG, not from whatever ran before
    first = L.Conv2D(3, 1, name="first") if rank == 4 else L.Dense(3, name="first")
    shape = (4, 4, 2) if rank == 4 else (5,)
    model = keras.Sequential([keras.Input(shape), first,
                              L.BatchNormalization(momentum=momentum, name="bn")])
    make_live(model)
    x = np.random.default_rng(3).standard_normal((2, *shape)).astype("float32") * 2 + 1
    module = crossport.to_torch(model, (torch.from_numpy(x),))
    bn = module.bn
    assert isinstance(bn, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d))
    assert bn.momentum == pytest.approx(1 - momentum)
    keras_loss = _keras_sgd_step(model, x, 0.01)
    torch_loss = _torch_sgd_step(module, x, 0.01)
    assert abs(keras_loss - torch_loss) <= 1e-4 * abs(keras_loss)
    keras_bn = model.get_layer("bn")
    _close(np.asarray(keras_bn.moving_mean.numpy()), bn.running_mean.numpy())
    _close(np.asarray(keras_bn.moving_variance.numpy()), bn.running_var.numpy())
    _close(np.asarray(keras_bn.gamma.numpy()), bn.weight.detach().numpy())
    _close(np.asarray(keras_bn.beta.numpy()), bn.bias.detach().numpy())
    # after the step, both run inference with the updated statistics and weights
    module.eval()
    with torch.no_grad():
        _close(np.asarray(model(x, training=False)), module(torch.from_numpy(x)).numpy())


def _after_step_close(model, module, x, lr=0.05):
    """One SGD step in each framework, then both run inference on x: same outputs."""
    keras_loss = _keras_sgd_step(model, x, lr)
    torch_loss = _torch_sgd_step(module, x, lr)
    assert abs(keras_loss - torch_loss) <= 1e-4 * max(1.0, abs(keras_loss))
    module.eval()
    with torch.no_grad():
        _close(np.asarray(model(x, training=False)), module(torch.from_numpy(x)).numpy())


def _trainable_count(module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


@pytest.mark.parametrize("rnn", [lambda: L.LSTM(4, name="rnn"),
                                 lambda: L.SimpleRNN(4, name="rnn"),
                                 lambda: L.GRU(4, name="rnn"),
                                 lambda: L.Bidirectional(L.LSTM(3), name="rnn")],
                         ids=["lstm", "simple_rnn", "gru", "bidirectional_lstm"])
def test_rnn_training_step_matches_keras(rnn):
    """Keras' LSTM/SimpleRNN have one bias; torch's nn.LSTM/nn.RNN add bias_hh, converted as
    zero. Both get the same gradient, so an optimizer stepping both moved the Keras bias
    twice (found by an adversarial audit: one SGD step, then outputs 1e-2 apart). bias_hh is
    frozen: the trainable count is Keras' and one step lands on Keras' weights."""
    model = keras.Sequential([keras.Input((5, 3)), rnn(), L.Dense(2)])
    make_live(model)
    x = np.random.default_rng(4).standard_normal((3, 5, 3)).astype("float32")
    module = crossport.to_torch(model, (torch.from_numpy(x),))
    assert _trainable_count(module) == sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    _after_step_close(model, module, x)


def _frozen_dense():
    model = keras.Sequential([keras.Input((5,)), L.Dense(6, name="frozen"), L.Dense(2)])
    model.get_layer("frozen").trainable = False
    return model, (4, 5)


def _frozen_nested():
    inner = keras.Sequential([keras.Input((6, 6, 3)), L.Conv2D(4, 3), L.Conv2D(4, 1)],
                             name="backbone")
    inner.trainable = False  # the fine-tuning idiom: a frozen backbone under a new head
    inp = keras.Input((6, 6, 3))
    return keras.Model(inp, L.Dense(2)(L.Flatten()(inner(inp)))), (3, 6, 6, 3)


def _frozen_wrapped():
    inp = keras.Input((4, 5))
    wrapped = L.TimeDistributed(L.Dense(3))
    out = L.LSTM(2)(wrapped(inp))
    wrapped.trainable = False
    return keras.Model(inp, out), (3, 4, 5)


@pytest.mark.parametrize("build", [_frozen_dense, _frozen_nested, _frozen_wrapped],
                         ids=["dense", "nested_model", "time_distributed"])
def test_frozen_layers_are_not_trained(build):
    """A layer with trainable=False (or inside a frozen nested model) has no trainable
    weights in Keras; its torch parameters came back with requires_grad=True, so an
    optimizer trained what Keras keeps fixed (found by the adversarial audit: one SGD step,
    then outputs 0.8 apart). They are frozen: Keras' trainable count, Keras' step."""
    model, shape = build()
    make_live(model)
    x = np.random.default_rng(5).standard_normal(shape).astype("float32")
    module = crossport.to_torch(model, (torch.from_numpy(x),))
    assert _trainable_count(module) == sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    _after_step_close(model, module, x)


@pytest.mark.parametrize("rank", [2, 4])
@pytest.mark.parametrize("center", [True, False])
def test_frozen_batchnorm_normalizes_with_moving_statistics_in_training(rank, center):
    """Keras' BatchNormalization with trainable=False normalizes with its moving statistics
    even when called with training=True (the fine-tuning rule) and leaves them; the torch
    module used the batch's statistics in train() and updated its running ones (found by the
    adversarial audit: one SGD step, losses 2.04 vs 2.30). center=False is the
    torch_layers.KerasBatchNorm path."""
    keras.utils.set_random_seed(0)
    first = L.Conv2D(3, 1, name="first") if rank == 4 else L.Dense(3, name="first")
    shape = (4, 4, 2) if rank == 4 else (5,)
    bn = L.BatchNormalization(center=center, name="bn")
    model = keras.Sequential([keras.Input(shape), first, bn, L.Flatten(), L.Dense(2)])
    bn.trainable = False
    make_live(model)
    x = np.random.default_rng(6).standard_normal((3, *shape)).astype("float32") * 2 + 1
    module = crossport.to_torch(model, (torch.from_numpy(x),))
    assert _trainable_count(module) == sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    _after_step_close(model, module, x)
    _close(np.asarray(bn.moving_mean.numpy()), module.bn.running_mean.numpy())
    _close(np.asarray(bn.moving_variance.numpy()), module.bn.running_var.numpy())


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked"])
@pytest.mark.parametrize("direction", ["forward_layer", "backward_layer"])
def test_a_frozen_direction_of_a_bidirectional_is_not_trained(direction, masked):
    """Freezing one direction of a Bidirectional (layer.forward_layer.trainable = False)
    left the whole torch RNN trainable: 168 trainable parameters for Keras' 84 (found by
    the adversarial audit). That direction's half of torch's bidirectional RNN (or its
    masked twin) is frozen."""
    ids = keras.Input((6,), dtype="int32")
    embedded = L.Embedding(10, 3, mask_zero=masked)(ids)
    wrapper = L.Bidirectional(L.LSTM(3), name="rnn")
    model = keras.Model(ids, L.Dense(2)(wrapper(embedded)))
    getattr(wrapper, direction).trainable = False
    make_live(model)
    x = np.random.default_rng(7).integers(1, 10, (3, 6)).astype("int32")
    x[0, 4:] = 0
    module = crossport.to_torch(model, (torch.from_numpy(x),))
    assert _trainable_count(module) == sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    _after_step_close(model, module, x)
