"""transfer_weights: torch -> Keras -> torch round trips are bit-exact, the Keras twin then
computes what torch computes, and any mismatch fails clearly with nothing changed."""

import keras
import numpy as np
import pytest
import torch
from torch import nn

import crossport
from crossport.parity.doctor import check
from crossport.weights import (
    gru_weights_from_keras,
    gru_weights_to_keras,
    lstm_weights_from_keras,
    lstm_weights_to_keras,
)

L = keras.layers


def _randomize(net: nn.Module, seed: int) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in list(net.parameters()) + [b for n, b in net.named_buffers()
                                           if "num_batches" not in n]:
            t.copy_(torch.randn(t.shape, generator=gen) * 0.3)
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
    return net.eval()


class _Vision(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 16, 3, padding=1, groups=8)  # depthwise, multiplier 2
        self.gn = nn.GroupNorm(4, 16)
        self.up = nn.ConvTranspose2d(16, 4, 2, stride=2)
        self.ln = nn.LayerNorm([4, 16, 16])
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(4 * 16 * 16, 6)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = self.up(self.gn(self.dw(x)))
        return self.fc(self.flatten(self.ln(x)))


def _vision_twin():
    return keras.Sequential([
        keras.Input((8, 8, 3)),
        L.Conv2D(8, 3, padding="same", name="conv"),
        L.BatchNormalization(epsilon=1e-5, name="bn"), L.ReLU(),
        L.DepthwiseConv2D(3, padding="same", depth_multiplier=2, name="dw"),
        L.GroupNormalization(4, epsilon=1e-5, name="gn"),
        L.Conv2DTranspose(4, 2, strides=2, name="up"),
        L.LayerNormalization(axis=[1, 2, 3], epsilon=1e-5, name="ln"),
        L.Flatten(), L.Dense(6, name="fc")])


def _state(net):
    return {k: v.clone() for k, v in net.state_dict().items()}


def test_vision_round_trip_is_bit_exact_and_computes_the_same(capsys):
    net = _randomize(_Vision(), 0)
    twin = _vision_twin()
    records = crossport.transfer_weights(net, twin)
    out = capsys.readouterr().out
    assert "transfer_weights" in out and "conv_weight_to_keras" in out
    assert [r.rule for r in records] == [
        "conv_weight_to_keras", "BN (incl. running stats)", "depthwise_weight_to_keras",
        "affine (channels-last)", "conv_transpose_weight_to_keras", "affine (channels-last)",
        "dense_weight_to_keras + flat_feature_order"]
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(5))
    report = check(net, twin, x)
    assert report.passed and report.output_error < 1e-5, report.summary()
    back = _randomize(_Vision(), 1)
    crossport.transfer_weights(twin, back, verbose=False)
    for name, value in _state(net).items():
        assert torch.equal(back.state_dict()[name], value), name


class _Seq(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.emb = nn.Embedding(20, 6)
        self.rnn = cell(6, 5, batch_first=True)

    def forward(self, ids):
        return self.rnn(self.emb(ids))[0]


@pytest.mark.parametrize("kind", ["GRU", "LSTM", "RNN"])
def test_embedding_and_recurrent(kind):
    net = _randomize(_Seq(getattr(nn, kind)), 2)
    keras_cell = getattr(L, "SimpleRNN" if kind == "RNN" else kind)(5, return_sequences=True,
                                                                     name="rnn")
    twin = keras.Sequential([keras.Input((7,), dtype="int64"), L.Embedding(20, 6, name="emb"),
                             keras_cell])
    crossport.transfer_weights(net, twin, verbose=False)
    ids = torch.randint(0, 20, (3, 7), generator=torch.Generator().manual_seed(1))
    report = check(net, twin, ids)
    assert report.passed and report.output_error < 1e-5, report.summary()
    back = _Seq(getattr(nn, kind))
    crossport.transfer_weights(twin, back, verbose=False)
    for name, value in _state(net).items():
        if kind in ("LSTM", "RNN") and "bias" in name:
            continue  # one Keras bias holds b_ih + b_hh: checked below
        assert torch.equal(back.state_dict()[name], value), name
    if kind in ("LSTM", "RNN"):
        s = _state(net)
        assert torch.equal(back.rnn.bias_ih_l0, s["rnn.bias_ih_l0"] + s["rnn.bias_hh_l0"])
        assert not back.rnn.bias_hh_l0.any()
        again = keras.models.clone_model(twin)
        crossport.transfer_weights(back, again, verbose=False)  # Keras -> torch -> Keras exact
        for a, b in zip(twin.get_weights(), again.get_weights()):
            assert np.array_equal(a, b)


def test_recurrent_rules_are_inverse():
    rng = np.random.default_rng(0)
    w_ih, w_hh = rng.normal(size=(15, 4)), rng.normal(size=(15, 5))
    b_ih, b_hh = rng.normal(size=15), rng.normal(size=15)
    back = gru_weights_from_keras(*gru_weights_to_keras(w_ih, w_hh, b_ih, b_hh))
    for a, b in zip(back, (w_ih, w_hh, b_ih, b_hh)):
        assert np.array_equal(a, b)
    kernel, rec, bias = lstm_weights_to_keras(w_ih[:12], w_hh[:12], b_ih[:12], b_hh[:12])
    again = lstm_weights_to_keras(*lstm_weights_from_keras(kernel, rec, bias))
    assert np.array_equal(bias, b_ih[:12] + b_hh[:12])
    for a, b in zip(again, (kernel, rec, bias)):
        assert np.array_equal(a, b)


def test_shape_mismatch_fails_and_changes_nothing():
    net = _randomize(nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Conv2d(8, 4, 1)), 3)
    twin = keras.Sequential([keras.Input((8, 8, 3)), L.Conv2D(8, 3), L.BatchNormalization(),
                             L.Conv2D(5, 1, name="wrong")])
    before = [w.copy() for w in twin.get_weights()]
    torch_before = _state(net)
    with pytest.raises(crossport.InputError) as info:
        crossport.transfer_weights(net, twin, verbose=False)
    assert "changed nothing" in str(info.value) and "wrong" in str(info.value)
    assert "(1, 1, 8, 5)" in str(info.value)
    assert all(np.array_equal(a, b) for a, b in zip(before, twin.get_weights()))
    with pytest.raises(crossport.InputError):
        crossport.transfer_weights(twin, net, verbose=False)
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in torch_before.items())


def test_count_mismatch_fails_clearly():
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(8, 8, 3))
    twin = keras.Sequential([keras.Input((8, 8, 3)), L.Conv2D(8, 3)])
    before = [w.copy() for w in twin.get_weights()]
    with pytest.raises(crossport.InputError, match="unpaired torch: \\['1'\\]"):
        crossport.transfer_weights(net, twin, verbose=False)
    assert all(np.array_equal(a, b) for a, b in zip(before, twin.get_weights()))


def test_unbuilt_keras_model_is_refused():
    with pytest.raises(crossport.InputError, match="not built"):
        crossport.transfer_weights(nn.Linear(3, 2), keras.Sequential([L.Dense(2)]),
                                   verbose=False)
