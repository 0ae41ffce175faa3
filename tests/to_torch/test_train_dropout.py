"""Layers whose Keras training call drops something inside them: attention layers' dropout
(MultiHeadAttention, GroupedQueryAttention, Attention, AdditiveAttention) is drawn by the
module in train(), checked against Keras' own training=True outputs (the dropped probabilities
read off exactly, their share within binomial bounds). RNN layers' dropout /
recurrent_dropout masks: tests/to_torch/test_rnn_dropout.py. eval() parity is checked for
every model."""

import keras
import numpy as np
import pytest
import torch

import crossport
from tests.to_torch.harness import assert_to_torch, chain

L = keras.layers
S = 6  # source positions = one-hot value features = output features


def _assert_fraction(count: int, total: int, p: float) -> None:
    """A Binomial(total, p) count within 6 standard deviations of its mean."""
    assert abs(count - p * total) < 6 * np.sqrt(total * p * (1 - p)) + 1, (count, total, p)


def _probability_reader(layer, scores: bool, causal: bool) -> keras.Model:
    """A one-head attention model whose output is its (dropped) attention probabilities:
    the value input is one-hot per source position and the value / output projections are
    identities, so ``output[b, t] = dropped(probs[b, t]) @ I``."""
    q, v = keras.Input((5, S)), keras.Input((S, S))
    result = layer(q, v, return_attention_scores=scores, use_causal_mask=causal)
    model = keras.Model([q, v], list(result) if scores else result)
    eye = np.eye(S, dtype="float32")
    layer._value_dense.kernel.assign(eye.reshape(layer._value_dense.kernel.shape))
    layer._output_dense.kernel.assign(eye.reshape(layer._output_dense.kernel.shape))
    return model


def _inputs(batch: int, seed: int) -> list[np.ndarray]:
    q = np.random.default_rng(seed).standard_normal((batch, 5, S)).astype("float32")
    return [q, np.broadcast_to(np.eye(S, dtype="float32"), (batch, S, S)).copy()]


def _run(model, module, x, training: bool):
    """Keras' and the module's outputs (a list) at ``training``."""
    keras_out = model(x, training=training)
    keras_out = [np.asarray(o) for o in (keras_out if isinstance(keras_out, list) else [keras_out])]
    module.train(training)
    with torch.no_grad():
        torch_out = module(*[torch.from_numpy(a) for a in x])
    torch_out = [o.numpy() for o in (torch_out if isinstance(torch_out, (list, tuple))
                                     else [torch_out])]
    return keras_out, torch_out


def _assert_dropped_like_keras(model, module, x, rate, scale_atol=1e-5):
    """Per framework: every training output entry is 0 or the inference one times
    float32(1 / (1 - rate)); the share of zeroed (positive) probabilities is ~rate; the
    returned scores (when returned) are the undropped inference ones, as Keras returns."""
    scale = np.float32(1 / (1 - rate))
    (k_plain, t_plain), (k_train, t_train) = [
        _run(model, module, x, training) for training in (False, True)]
    for plain, train in ((k_plain, k_train), (t_plain, t_train)):
        probs, out = plain[0], train[0]
        positive = probs > 1e-6
        dropped = np.abs(out) < 1e-7
        np.testing.assert_allclose(out[~dropped], probs[~dropped] * scale, rtol=1e-4,
                                   atol=scale_atol)
        assert not np.any(out[~positive] > 1e-6)
        _assert_fraction(int((dropped & positive).sum()), int(positive.sum()), rate)
        if len(train) > 1:
            np.testing.assert_allclose(train[1], plain[1], atol=1e-6)


def _mha(dropout, **kwargs):
    return L.MultiHeadAttention(1, 4, value_dim=S, use_bias=False, dropout=dropout, **kwargs)


def _gqa(dropout):
    return L.GroupQueryAttention(S, 1, 1, use_bias=False, dropout=dropout)


ATTENTION = {
    "mha": (lambda: _mha(0.3), False, False),
    "mha-scores": (lambda: _mha(0.3), True, False),
    "mha-causal": (lambda: _mha(0.6), False, True),
    "gqa": (lambda: _gqa(0.4), False, False),
    "gqa-scores-causal": (lambda: _gqa(0.4), True, True),
}


@pytest.mark.parametrize("case", ATTENTION.values(), ids=ATTENTION.keys())
def test_attention_dropout_in_train_mode_is_keras(case):
    """Before: train() returned the inference output (no probability dropped)."""
    make, scores, causal = case
    layer = make()
    model = _probability_reader(layer, scores, causal)
    assert_to_torch(model, live=False)  # eval parity unchanged
    module = crossport.to_torch(model, tuple(torch.from_numpy(a) for a in _inputs(2, 0)))
    torch.manual_seed(0)
    _assert_dropped_like_keras(model, module, _inputs(300, 1), layer.dropout)


def test_attention_without_dropout_is_unchanged_in_train_mode():
    layer = _mha(0.0)
    model = _probability_reader(layer, False, False)
    module = crossport.to_torch(model, tuple(torch.from_numpy(a) for a in _inputs(2, 0)))
    (k_plain, t_plain), (k_train, t_train) = [
        _run(model, module, _inputs(4, 2), training) for training in (False, True)]
    np.testing.assert_array_equal(t_train[0], t_plain[0])
    np.testing.assert_allclose(t_train[0], k_train[0], atol=1e-5)


def _luong(layer, key=False):
    q, v = keras.Input((5, 4)), keras.Input((7, 4))
    inputs = [q, v] + ([keras.Input((7, 4))] if key else [])
    return keras.Model(inputs, list(layer(inputs, return_attention_scores=True)))


@pytest.mark.parametrize("layer", [lambda: L.Attention(dropout=0.3),
                                   lambda: L.Attention(score_mode="concat", dropout=0.5),
                                   lambda: L.AdditiveAttention(dropout=0.3)],
                         ids=["dot", "concat", "additive"])
def test_luong_bahdanau_dropout_in_train_mode_is_keras(layer):
    """keras.layers.Attention drops its softmax weights in training and returns them dropped:
    each weight is 0 or the inference weight times 1 / (1 - rate) (share ~rate), and the
    output is the dropped weights times the value, in Keras and in the module alike."""
    layer = layer()
    model = _luong(layer)
    assert_to_torch(model)
    rng = np.random.default_rng(3)
    x = [rng.standard_normal((300, t, 4)).astype("float32") for t in (5, 7)]
    module = crossport.to_torch(model, tuple(torch.from_numpy(a[:2]) for a in x))
    torch.manual_seed(0)
    scale = np.float32(1 / (1 - layer.dropout))
    (k_plain, t_plain), (k_train, t_train) = [
        _run(model, module, x, training) for training in (False, True)]
    for plain, train in ((k_plain, k_train), (t_plain, t_train)):
        weights = train[1]
        dropped = weights == 0
        np.testing.assert_allclose(weights[~dropped], plain[1][~dropped] * scale, rtol=1e-5)
        _assert_fraction(int(dropped.sum()), dropped.size, layer.dropout)
        np.testing.assert_allclose(train[0], weights @ x[1], atol=1e-4)


def test_rnn_without_dropout_trains():
    model = chain((6, 3), L.LSTM(4))
    module = crossport.to_torch(model, (torch.rand(2, 6, 3),))
    x = torch.rand(3, 6, 3)
    with torch.no_grad():
        torch.testing.assert_close(module.train()(x), module.eval()(x))
