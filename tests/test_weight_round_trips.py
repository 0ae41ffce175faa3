"""Weight round trips torch -> Keras -> torch through both hand-porting toolkits.

For each layer family that exists in both directions: a torch module ->
``crossport.layers.X.from_torch`` -> the Keras layer(s) holding the weights ->
``crossport.torch_layers.Y.from_keras`` -> the recovered torch parameters are compared with the
original ones bit-exactly (``torch.equal``). The torch module is configured so that both sides
describe the same function (e.g. ``Conv2d(padding=0)`` vs Keras ``padding="valid"``), and each
test also checks the recovered module computes what the original computes.

The spatial ``crossport.layers`` (convolutions, norms) keep their weights as their own variables
rather than in a stock Keras layer: the stock Keras layer of the same function is built and
given those variables' values (a copy, no arithmetic), checked to compute what the crossport
layer computes, and handed to ``from_keras``. The recurrent layers hold stock
``keras.layers.LSTM``/``GRU``/``SimpleRNN`` instances (``layer.cells``), used directly.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
import pytest
import torch

import crossport.layers as L
import crossport.torch_layers as T
from crossport.weights import (
    dense_weight_to_keras,
    gru_weights_from_keras,
    lstm_weights_from_keras,
    rnn_weights_from_keras,
)

TOL = 1e-5


def _randn(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _close(got, want, tol: float = TOL) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= tol, f"normalized error {err:.3g}"


def _randomize(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in list(module.named_parameters()) + list(module.named_buffers()):
            if name == "running_var":
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif p.dtype.is_floating_point:
                p.copy_(torch.randn(p.shape, generator=g))
    return module.eval()


def _assert_equal_tensors(recovered: torch.nn.Module, original: torch.nn.Module,
                          names: list[str]) -> None:
    for name in names:
        got, want = getattr(recovered, name), getattr(original, name)
        assert got.dtype == want.dtype and torch.equal(got.detach(), want.detach()), name


def _stock(stock: keras.layers.Layer, crossport_layer, values: list, x_last: np.ndarray):
    """``stock`` built and given ``values``; checked to compute what ``crossport_layer`` does."""
    stock.build(x_last.shape)
    stock.set_weights([np.asarray(keras.ops.convert_to_numpy(v)) for v in values])
    _close(stock(x_last), crossport_layer(x_last))
    return stock


def _nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(x, 1, -1))


def _run(module, x: np.ndarray, *args):
    with torch.no_grad():
        return module(torch.from_numpy(x), *args)


@pytest.mark.parametrize("groups,dilation,stride,bias", [(1, 1, 1, True), (2, 2, 1, False), (1, 1, 2, True)])
def test_conv2d(groups, dilation, stride, bias):
    module = _randomize(torch.nn.Conv2d(4, 6, (3, 2), stride, 0, dilation, groups, bias), 0)
    layer = L.Conv2d.from_torch(module)
    x = _randn(1, 2, 4, 9, 8)
    stock = keras.layers.Conv2D(6, (3, 2), stride, "valid", dilation_rate=dilation,
                                groups=groups, use_bias=bias)
    stock = _stock(stock, layer, [layer.kernel] + ([layer.bias] if bias else []), _nhwc(x))
    back = T.TFConv2d.from_keras(stock)
    _assert_equal_tensors(back, module, ["weight"] + (["bias"] if bias else []))
    assert back.bias is None if not bias else True
    _close(_run(back, x), _run(module, x))


@pytest.mark.parametrize("mult", [1, 2])
def test_depthwise_conv2d(mult):
    module = _randomize(torch.nn.Conv2d(3, 3 * mult, 3, 1, 0, groups=3), 1)
    layer = L.Conv2d.from_torch(module)
    assert layer.depthwise
    x = _randn(2, 2, 3, 7, 6)
    stock = keras.layers.DepthwiseConv2D(3, 1, "valid", depth_multiplier=mult)
    stock = _stock(stock, layer, [layer.kernel, layer.bias], _nhwc(x))
    back = T.TFDepthwiseConv2d.from_keras(stock)
    _assert_equal_tensors(back, module, ["weight", "bias"])
    _close(_run(back, x), _run(module, x))


@pytest.mark.parametrize("kernel,stride", [(3, 2), (2, 2), (3, 1)])
def test_conv_transpose2d(kernel, stride):
    """Torch ``padding=0, output_padding=0`` = Keras ``valid`` when ``kernel >= stride``."""
    module = _randomize(torch.nn.ConvTranspose2d(4, 5, kernel, stride), 2)
    layer = L.ConvTranspose2d.from_torch(module)
    x = _randn(3, 2, 4, 5, 6)
    stock = keras.layers.Conv2DTranspose(5, kernel, stride, "valid")
    stock = _stock(stock, layer, [layer.kernel, layer.bias], _nhwc(x))
    back = T.TFConv2dTranspose.from_keras(stock)
    _assert_equal_tensors(back, module, ["weight", "bias"])
    _close(_run(back, x), _run(module, x))


def test_batch_norm2d():
    """Torch momentum ``m`` is Keras ``1 - m``; compared in eval mode (running statistics)."""
    module = _randomize(torch.nn.BatchNorm2d(5, eps=1e-5, momentum=0.1), 3)
    layer = L.BatchNorm2d.from_torch(module)
    x = _randn(4, 2, 5, 4, 3)
    stock = keras.layers.BatchNormalization(axis=-1, epsilon=module.eps,
                                            momentum=1 - module.momentum)
    values = [layer.weight, layer.bias, layer.running_mean, layer.running_var]
    stock = _stock(stock, layer, values, _nhwc(x))
    back = T.KerasBatchNorm.from_keras(stock, channels_first=True, input_rank=4).eval()
    _assert_equal_tensors(back, module, ["weight", "bias", "running_mean", "running_var"])
    assert back.axis == 1 and back.eps == module.eps
    _close(_run(back, x), _run(module, x))


@pytest.mark.parametrize("shape", [(6,), (4, 6)])
def test_layer_norm(shape):
    """A ``[N, T, D]`` sequence keeps its layout: Keras axes = torch's trailing dims."""
    module = _randomize(torch.nn.LayerNorm(shape), 4)
    layer = L.LayerNorm.from_torch(module)
    x = _randn(5, 2, 4, 6)
    axes = list(range(3 - len(shape), 3))
    stock = keras.layers.LayerNormalization(axis=axes, epsilon=module.eps)
    stock = _stock(stock, layer, [layer.weight, layer.bias], x)
    back = T.KerasLayerNorm.from_keras(stock, channels_first=False, input_rank=3)
    _assert_equal_tensors(back, module, ["weight", "bias"])
    _close(_run(back, x), _run(module, x))


def test_group_norm():
    module = _randomize(torch.nn.GroupNorm(3, 6), 5)
    layer = L.GroupNorm.from_torch(module)
    x = _randn(6, 2, 6, 4, 3) * 3 + 2
    stock = keras.layers.GroupNormalization(3, axis=-1, epsilon=module.eps)
    stock = _stock(stock, layer, [layer.weight, layer.bias], _nhwc(x))
    back = T.KerasGroupNorm.from_keras(stock, channels_first=True, input_rank=4)
    _assert_equal_tensors(back, module, ["weight", "bias"])
    _close(_run(back, x), _run(module, x))


def test_dense():
    """No ``crossport.layers.Linear`` exists (the converter emits ``keras.layers.Dense``):
    ``nn.Linear`` -> ``dense_weight_to_keras`` -> ``keras.layers.Dense`` -> ``KerasDense``."""
    module = _randomize(torch.nn.Linear(5, 3), 6)
    stock = keras.layers.Dense(3)
    stock.build((None, 5))
    stock.set_weights([dense_weight_to_keras(module.weight.detach().numpy()),
                       module.bias.detach().numpy()])
    back = T.KerasDense.from_keras(stock)
    _assert_equal_tensors(back, module, ["weight", "bias"])
    x = _randn(7, 2, 5)
    _close(_run(back, x), _run(module, x))


def _cells(module, layer):
    """``(suffix, keras_layer)`` per (layer, direction) in torch's parameter naming."""
    d = layer.num_directions
    return [(f"l{i // d}{'_reverse' if i % d else ''}", cell)
            for i, cell in enumerate(layer.cells)]


def _torch_params(module, suffix):
    return [getattr(module, f"{p}_{suffix}") for p in ("weight_ih", "weight_hh", "bias_ih",
                                                        "bias_hh")]


def _run_direction(module, suffix: str, x: np.ndarray, h0):
    """A one-layer, one-direction batch-first torch module with ``suffix``'s weights, run on
    ``x [N, T, F]`` (for ``_reverse``: on reversed time, outputs flipped back, as torch's
    reverse direction); the reference for one Keras cell."""
    cls = type(module)
    single = cls(x.shape[-1], module.hidden_size, batch_first=True, **(
        {"nonlinearity": module.nonlinearity} if cls is torch.nn.RNN else {})).eval()
    with torch.no_grad():
        for name, p in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"),
                           _torch_params(module, suffix)):
            getattr(single, name).copy_(p)
    reverse = suffix.endswith("_reverse")
    out, state = _run(single, x[:, ::-1].copy() if reverse else x, h0)
    return (out.flip(1) if reverse else out), state


@pytest.mark.parametrize("kind", ["LSTM", "RNN"])
def test_lstm_and_simple_rnn(kind):
    """Not bit-exact by layout: torch's two biases merge into Keras' one (``bias_ih +
    bias_hh``), so the split cannot come back (``from_keras`` puts the sum in ``bias_ih`` and
    zeros in ``bias_hh``). Asserted instead: ``weight_ih``/``weight_hh`` bit-exact, the merged
    bias bit-exact (the same float32 sum), and the recovered ``KerasLSTM``/``KerasSimpleRNN``
    computes what the original torch direction computes (outputs and states, 1e-5)."""
    tcls, xcls, tlcls, from_keras = {
        "LSTM": (torch.nn.LSTM, L.LSTM, T.KerasLSTM, lstm_weights_from_keras),
        "RNN": (torch.nn.RNN, L.RNN, T.KerasSimpleRNN, rnn_weights_from_keras),
    }[kind]
    module = _randomize(tcls(3, 4, num_layers=2, bidirectional=True), 7)
    layer = xcls.from_torch(module)
    x = _randn(8, 2, 5, 3)
    for suffix, cell in _cells(module, layer):
        back = tlcls.from_keras(cell)
        w_ih, w_hh, b_ih, b_hh = _torch_params(module, suffix)
        r_ih, r_hh, r_b, r_zero = from_keras(back.kernel.detach().numpy(),
                                             back.recurrent_kernel.detach().numpy(),
                                             back.bias.detach().numpy())
        assert torch.equal(torch.from_numpy(r_ih), w_ih.detach())
        assert torch.equal(torch.from_numpy(r_hh), w_hh.detach())
        assert torch.equal(torch.from_numpy(r_b), (b_ih + b_hh).detach())
        assert not r_zero.any()
        xin = x if suffix.startswith("l0") else _randn(9, 2, 5, 8)
        n_states = 2 if kind == "LSTM" else 1
        h0 = [_randn(10 + k, 2, 4) for k in range(n_states)]
        got = back(torch.from_numpy(xin), [torch.from_numpy(h) for h in h0])
        want_out, want_state = _run_direction(
            module, suffix, xin,
            tuple(torch.from_numpy(h)[None] for h in h0) if kind == "LSTM"
            else torch.from_numpy(h0[0])[None])
        got_out, *got_states = got
        if suffix.endswith("_reverse"):  # Keras go_backwards returns reversed time order
            got_out = got_out.flip(1)
        _close(got_out.detach(), want_out)
        want_states = want_state if kind == "LSTM" else (want_state,)
        for g, w in zip(got_states, want_states):
            _close(g.detach(), w[0])


def test_gru():
    """Bit-exact: Keras' GRU(reset_after=True) keeps both biases (``[2, 3H]``)."""
    module = _randomize(torch.nn.GRU(3, 4, num_layers=2, bidirectional=True), 8)
    layer = L.GRU.from_torch(module)
    x = _randn(11, 2, 5, 3)
    for suffix, cell in _cells(module, layer):
        back = T.KerasGRU.from_keras(cell)
        assert back.reset_after
        recovered = gru_weights_from_keras(back.kernel.detach().numpy(),
                                           back.recurrent_kernel.detach().numpy(),
                                           back.bias.detach().numpy())
        for got, want in zip(recovered, _torch_params(module, suffix)):
            assert torch.equal(torch.from_numpy(np.ascontiguousarray(got)), want.detach())
        xin = x if suffix.startswith("l0") else _randn(12, 2, 5, 8)
        h0 = _randn(13, 2, 4)
        got_out, got_h = back(torch.from_numpy(xin), torch.from_numpy(h0))
        want_out, want_h = _run_direction(module, suffix, xin, torch.from_numpy(h0)[None])
        if suffix.endswith("_reverse"):
            got_out = got_out.flip(1)
        _close(got_out.detach(), want_out)
        _close(got_h.detach(), want_h[0])
