"""crossport.layers LSTM / GRU / RNN against torch.nn.LSTM / GRU / RNN (eval mode)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import crossport.layers as L
from crossport.errors import InputError
from crossport.weights import gru_weights_to_keras, lstm_weights_to_keras

HYP = settings(max_examples=15, deadline=None, derandomize=True)
FAMILIES = {"LSTM": (L.LSTM, torch.nn.LSTM), "GRU": (L.GRU, torch.nn.GRU),
            "RNN": (L.RNN, torch.nn.RNN)}


def _torch_module(name: str, seed: int, *args, **kwargs):
    torch.manual_seed(seed)
    return FAMILIES[name][1](*args, **kwargs).eval()


def _states(name: str, seed: int, shape: tuple[int, ...], lt):
    h = lt.randn(seed + 1, *shape)
    return (h, lt.randn(seed + 2, *shape)) if name == "LSTM" else h


def _flat(result) -> list[np.ndarray]:
    """``(output, h_n)`` / ``(output, (h_n, c_n))`` -> a flat list of numpy arrays."""
    output, states = result
    states = list(states) if isinstance(states, (tuple, list)) else [states]
    return [np.asarray(keras.ops.convert_to_numpy(t)) for t in [output, *states]]


def _compare(name, module, layer, x, hx, lt) -> None:
    with torch.no_grad():
        thx = None if hx is None else (
            tuple(torch.from_numpy(h) for h in hx) if name == "LSTM" else torch.from_numpy(hx))
        expected = _flat(module(torch.from_numpy(x), thx))
    got = _flat(layer(x) if hx is None else layer(x, hx=hx))
    assert len(got) == len(expected) == (3 if name == "LSTM" else 2)
    for g, e in zip(got, expected):
        lt.assert_close(g, e)


@pytest.mark.parametrize("name", sorted(FAMILIES))
@HYP
@given(num_layers=st.integers(1, 2), bidirectional=st.booleans(), batch_first=st.booleans(),
       with_hx=st.booleans(), bias=st.booleans(), t=st.integers(1, 6), n=st.integers(1, 3),
       features=st.integers(1, 4), hidden=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_matches_torch(name, num_layers, bidirectional, batch_first, with_hx, bias, t, n,
                       features, hidden, seed, lt):
    module = _torch_module(name, seed, features, hidden, num_layers=num_layers, bias=bias,
                           batch_first=batch_first, bidirectional=bidirectional)
    layer = FAMILIES[name][0].from_torch(module)
    x = lt.randn(seed, *((n, t, features) if batch_first else (t, n, features)))
    d = 2 if bidirectional else 1
    hx = _states(name, seed, (d * num_layers, n, hidden), lt) if with_hx else None
    _compare(name, module, layer, x, hx, lt)


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("with_hx", [False, True])
def test_unbatched(name, with_hx, lt):
    module = _torch_module(name, 3, 3, 4, num_layers=2, bidirectional=True)
    layer = FAMILIES[name][0].from_torch(module)
    hx = _states(name, 5, (4, 4), lt) if with_hx else None
    _compare(name, module, layer, lt.randn(7, 6, 3), hx, lt)


def test_relu_rnn_and_dropout_is_identity_at_inference(lt):
    module = _torch_module("RNN", 1, 3, 4, num_layers=2, nonlinearity="relu", dropout=0.5)
    layer = L.RNN.from_torch(module)
    assert layer.nonlinearity == "relu" and layer.dropout == 0.5
    _compare("RNN", module, layer, lt.randn(2, 5, 2, 3), None, lt)


def test_from_torch_uses_the_weight_rules():
    module = _torch_module("LSTM", 0, 3, 4, bidirectional=True)
    layer = L.LSTM.from_torch(module)
    reverse = layer.cells[1]
    expected = lstm_weights_to_keras(*(getattr(module, f"{p}_l0_reverse").detach().numpy()
                                       for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")))
    for got, want in zip(reverse.get_weights(), expected):
        np.testing.assert_array_equal(got, want)
    gru = _torch_module("GRU", 0, 3, 4)
    cell = L.GRU.from_torch(gru).cells[0]
    assert isinstance(cell, keras.layers.GRU) and cell.get_config()["reset_after"]
    expected = gru_weights_to_keras(*(getattr(gru, f"{p}_l0").detach().numpy()
                                      for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")))
    for got, want in zip(cell.get_weights(), expected):
        np.testing.assert_array_equal(got, want)


def _torch_hx(name, hs):
    return tuple(torch.from_numpy(h) for h in hs) if name == "LSTM" else torch.from_numpy(hs[0])


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
@pytest.mark.parametrize("with_hx", [False, True])
def test_keras_round_trip(name, with_hx, tmp_path, lt):
    """Saved in a Model with a dynamic batch and time (initial states as inputs), reloaded.

    ``hx`` is ``[D*L, N, H]`` (not batch-major), so that model is called directly; the one
    without initial states also runs through ``predict``.
    """
    module = _torch_module(name, 2, 3, 4, num_layers=2, bidirectional=True, batch_first=True)
    layer = FAMILIES[name][0].from_torch(module)
    x_in = keras.Input(batch_shape=(None, None, 3))
    n_states = 2 if name == "LSTM" else 1
    h_in = [keras.Input(batch_shape=(4, None, 4)) for _ in range(n_states)] if with_hx else []
    hx = None if not with_hx else (tuple(h_in) if name == "LSTM" else h_in[0])
    out, states = layer(x_in, hx=hx)
    states = list(states) if name == "LSTM" else [states]
    model = keras.Model([x_in, *h_in], [out, *states])
    path = tmp_path / "rnn.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    restored = next(lyr for lyr in loaded.layers if isinstance(lyr, type(layer)))
    assert restored.get_config() == {**layer.get_config(), "name": restored.name}
    for n, t in ((2, 5), (3, 2)):
        x = lt.randn(n + t, n, t, 3)
        hs = [lt.randn(n + t + k, 4, n, 4) for k in range(n_states)] if with_hx else []
        with torch.no_grad():
            expected = _flat(module(torch.from_numpy(x), _torch_hx(name, hs) if hs else None))
        runs = [loaded([x, *hs])] + ([] if with_hx else [loaded.predict(x, verbose=0)])
        for got in runs:
            assert len(got) == len(expected)
            for g, e in zip(got, expected):
                lt.assert_close(keras.ops.convert_to_numpy(g), e)


def test_config_and_errors():
    layer = L.GRU(3, 4, num_layers=2, batch_first=True, bidirectional=True)
    assert L.GRU.from_config(layer.get_config()).get_config() == layer.get_config()
    assert len(layer.cells) == 4 and layer.cells[3].name == "l1_reverse"
    with pytest.raises(InputError):
        L.LSTM.from_torch(torch.nn.LSTM(3, 4, proj_size=2))
    with pytest.raises(InputError):
        L.GRU.from_torch(torch.nn.LSTM(3, 4))
    with pytest.raises(InputError):
        L.RNN(3, 4, nonlinearity="gelu")
    with pytest.raises(InputError):
        L.LSTM(3, 4)(np.zeros((2, 5, 2), "float32"))
    with pytest.raises(InputError):
        L.LSTM(3, 4)(np.zeros((5, 2, 3), "float32"), hx=np.zeros((1, 2, 4), "float32"))
