"""Keras LSTM / GRU / SimpleRNN ported to torch vs the real layers (pitfall 13)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_layers_support import PROPERTY, TOL, nerr, randn, randomize

from crossport.torch_layers import KerasGRU, KerasLSTM, KerasSimpleRNN

KINDS = {
    "lstm": (keras.layers.LSTM, KerasLSTM, 2),
    "gru": (keras.layers.GRU, KerasGRU, 1),
    "gru_reset_before": (keras.layers.GRU, KerasGRU, 1),
    "simple": (keras.layers.SimpleRNN, KerasSimpleRNN, 1),
}


def _outputs(result):
    return [
        r.detach().numpy() if isinstance(r, torch.Tensor) else np.asarray(r)
        for r in (result if isinstance(result, (list, tuple)) else [result])
    ]


@PROPERTY
@given(
    kind=st.sampled_from(sorted(KINDS)),
    return_sequences=st.booleans(),
    return_state=st.booleans(),
    go_backwards=st.booleans(),
    use_bias=st.booleans(),
    with_state=st.booleans(),
    steps=st.integers(1, 6),
    units=st.integers(1, 5),
    seed=st.integers(0, 99),
)
def test_rnn_matches_keras(
    kind, return_sequences, return_state, go_backwards, use_bias, with_state, steps, units, seed
):
    keras_cls, port_cls, n_states = KINDS[kind]
    extra = {"reset_after": False} if kind == "gru_reset_before" else {}
    layer = keras_cls(
        units,
        return_sequences=return_sequences,
        return_state=return_state,
        go_backwards=go_backwards,
        use_bias=use_bias,
        **extra,
    )
    x = randn((3, steps, 4), seed)
    layer.build(x.shape)
    randomize(layer, seed)
    states = [randn((3, units), seed + 1 + i) for i in range(n_states)] if with_state else None
    ref = _outputs(layer(x, initial_state=states))
    port = port_cls.from_keras(layer)
    torch_states = None if states is None else [torch.from_numpy(s) for s in states]
    with torch.no_grad():
        got = _outputs(port(torch.from_numpy(x), initial_state=torch_states))
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert nerr(g, r) < TOL


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize(
    "activation,recurrent_activation", [("relu", "hard_sigmoid"), ("softsign", "sigmoid")]
)
def test_rnn_activations_match_keras(kind, activation, recurrent_activation):
    keras_cls, port_cls, _ = KINDS[kind]
    layer = keras_cls(
        3, activation=activation, recurrent_activation=recurrent_activation, return_sequences=True
    )
    x = randn((2, 5, 4), 3)
    layer.build(x.shape)
    randomize(layer, 3)
    port = port_cls.from_keras(layer)
    with torch.no_grad():
        got = port(torch.from_numpy(x)).numpy()
    assert nerr(got, layer(x).numpy()) < TOL


def test_keras_lstm_weights_load_into_torch_lstm():
    # Documented mapping: same gate order (i, f, c/g, o), bias_ih = bias, bias_hh = 0.
    layer = keras.layers.LSTM(4, return_sequences=True)
    x = randn((2, 5, 3), 8)
    layer.build(x.shape)
    randomize(layer, 8)
    port = KerasLSTM.from_keras(layer)
    lstm = torch.nn.LSTM(3, 4, batch_first=True)
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(port.kernel.T)
        lstm.weight_hh_l0.copy_(port.recurrent_kernel.T)
        lstm.bias_ih_l0.copy_(port.bias)
        lstm.bias_hh_l0.zero_()
        got = lstm(torch.from_numpy(x))[0].numpy()
    assert nerr(got, layer(x).numpy()) < TOL


def test_keras_gru_weights_load_into_torch_gru():
    # Documented mapping: (z, r, h) -> (r, z, n), transposed; rows of the bias are ih and hh.
    layer = keras.layers.GRU(4, return_sequences=True)
    x = randn((2, 5, 3), 9)
    layer.build(x.shape)
    randomize(layer, 9)
    port = KerasGRU.from_keras(layer)

    def reorder(m):  # columns z, r, h -> r, z, h
        z, r, h = m.split(4, dim=-1)
        return torch.cat([r, z, h], dim=-1)

    gru = torch.nn.GRU(3, 4, batch_first=True)
    with torch.no_grad():
        gru.weight_ih_l0.copy_(reorder(port.kernel).T)
        gru.weight_hh_l0.copy_(reorder(port.recurrent_kernel).T)
        gru.bias_ih_l0.copy_(reorder(port.bias[0]))
        gru.bias_hh_l0.copy_(reorder(port.bias[1]))
        got = gru(torch.from_numpy(x))[0].numpy()
    assert nerr(got, layer(x).numpy()) < TOL
