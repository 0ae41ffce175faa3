"""LSTM / GRU / RNN weight rules: bit-exact round trips and the gate mapping (pitfall 13)."""

from __future__ import annotations

import numpy as np
import pytest

from crossport.weights import (
    gru_weights_from_keras,
    gru_weights_to_keras,
    lstm_weights_from_keras,
    lstm_weights_to_keras,
    rnn_weights_from_keras,
    rnn_weights_to_keras,
)

RNG = np.random.default_rng(0)
F, H = 5, 3


def _torch_params(gates):
    return (RNG.standard_normal((gates * H, F)).astype("float32"),
            RNG.standard_normal((gates * H, H)).astype("float32"),
            RNG.standard_normal(gates * H).astype("float32"),
            RNG.standard_normal(gates * H).astype("float32"))


def _keras_params(gates, bias_shape):
    return (RNG.standard_normal((F, gates * H)).astype("float32"),
            RNG.standard_normal((H, gates * H)).astype("float32"),
            RNG.standard_normal(bias_shape).astype("float32"))


@pytest.mark.parametrize("to_keras, from_keras, gates, bias_shape", [
    (lstm_weights_to_keras, lstm_weights_from_keras, 4, (4 * H,)),
    (gru_weights_to_keras, gru_weights_from_keras, 3, (2, 3 * H)),
    (rnn_weights_to_keras, rnn_weights_from_keras, 1, (H,)),
], ids=["lstm", "gru", "rnn"])
def test_keras_round_trip_is_bit_exact(to_keras, from_keras, gates, bias_shape):
    keras_params = _keras_params(gates, bias_shape)
    back = to_keras(*from_keras(*keras_params))
    for a, b in zip(keras_params, back):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_gru_torch_round_trip_is_bit_exact():
    params = _torch_params(3)
    for a, b in zip(params, gru_weights_from_keras(*gru_weights_to_keras(*params))):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("to_keras, from_keras, gates", [
    (lstm_weights_to_keras, lstm_weights_from_keras, 4),
    (rnn_weights_to_keras, rnn_weights_from_keras, 1),
], ids=["lstm", "rnn"])
def test_torch_round_trip_keeps_weights_and_bias_sum(to_keras, from_keras, gates):
    w_ih, w_hh, b_ih, b_hh = _torch_params(gates)
    w_ih2, w_hh2, b_ih2, b_hh2 = from_keras(*to_keras(w_ih, w_hh, b_ih, b_hh))
    assert np.array_equal(w_ih, w_ih2) and np.array_equal(w_hh, w_hh2)
    assert np.array_equal(b_ih + b_hh, b_ih2 + b_hh2) and not b_hh2.any()


def test_gru_gate_order_swaps_reset_and_update():
    w_ih = np.repeat(np.arange(3, dtype="float32"), H)[:, None] * np.ones((1, F), "float32")
    kernel, _, bias = gru_weights_to_keras(w_ih, w_ih[:, :H], w_ih[:, 0], w_ih[:, 0] + 10)
    # torch blocks (r=0, z=1, n=2) -> Keras columns (z, r, h) = (1, 0, 2)
    assert list(kernel[0, ::H]) == [1, 0, 2]
    assert list(bias[0, ::H]) == [1, 0, 2] and list(bias[1, ::H]) == [11, 10, 12]


def test_lstm_without_biases():
    w_ih, w_hh, _, _ = _torch_params(4)
    kernel, recurrent, bias = lstm_weights_to_keras(w_ih, w_hh)
    assert bias is None and kernel.shape == (F, 4 * H) and recurrent.shape == (H, 4 * H)
