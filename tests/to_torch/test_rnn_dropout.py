"""RNN dropout in train(): the converted module draws Keras' (3.15) ``dropout`` /
``recurrent_dropout`` masks.

The strongest check: the masks the torch module drew (recorded by wrapping
``keras_dropout_masks``, which still draws them) are handed to Keras' own cells through the
cache Keras reads them from (``_dropout_mask`` / ``_recurrent_dropout_mask``, kept by
``RNN.call``), and Keras' training call must then give the torch output. The masks' own
structure (one draw per call, per gate with ``implementation=1``, values ``0`` or
``1 / (1 - rate)``, the kept share) and the train-mode mean of a linear RNN are checked too;
eval stays the module it was.
"""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import pytest
import torch

import crossport
from crossport.torch_layers import conv_recurrent
from crossport.torch_layers import recurrent as twin_layers
from tests.to_torch.harness import chain

L = keras.layers


@contextlib.contextmanager
def recorded_masks():
    """Every mask list the torch modules draw, in order (the real draws, recorded)."""
    drawn, real = [], twin_layers.keras_dropout_masks

    def record(like, rate, count):
        masks = real(like, rate, count)
        drawn.append((rate, masks))
        return masks

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(twin_layers, "keras_dropout_masks", record)
        patch.setattr(conv_recurrent, "keras_dropout_masks", record)
        yield drawn


def _as_keras(masks, per_gate: bool, channels_last_rank: int = 0):
    """Torch masks as Keras caches them: one tensor, or a list of one per gate (ConvLSTM's
    torch masks are channels-first)."""
    arrays = [m.detach().numpy() for m in masks]
    if channels_last_rank:
        arrays = [np.moveaxis(a, 1, -1) for a in arrays]
    tensors = [keras.ops.convert_to_tensor(a) for a in arrays]
    return tensors if per_gate else tensors[0]


def _give_keras(cells, drawn) -> None:
    """Hand the torch masks to the Keras cells in the order the torch side drew them: per
    cell (direction / stack order) its input masks, then its recurrent masks."""
    drawn = list(drawn)
    for cell in cells:
        per_gate = getattr(cell, "dropout_mask_count", None) is not None
        rank = len(cell.kernel.shape) - 2 if type(cell).__name__ == "ConvLSTMCell" else 0
        for rate, attr, applies in (
                (cell.dropout, "_dropout_mask", _applies(cell, cell.dropout)),
                (cell.recurrent_dropout, "_recurrent_dropout_mask",
                 _applies(cell, cell.recurrent_dropout))):
            if not applies:
                continue
            drawn_rate, masks = drawn.pop(0)
            assert drawn_rate == rate
            setattr(cell, attr, _as_keras(masks, per_gate, rank))
    assert not drawn, "the torch module drew masks Keras does not"


def _applies(cell, rate: float) -> bool:
    if type(cell).__name__ == "SimpleRNNCell":
        return rate > 0.0
    return 0.0 < rate < 1.0


def _cells(layer) -> list:
    if isinstance(layer, L.Bidirectional):
        return _cells(layer.forward_layer) + _cells(layer.backward_layer)
    cell = layer.cell
    return list(cell.cells) if isinstance(cell, L.StackedRNNCells) else [cell]


def _flat(out) -> list[np.ndarray]:
    parts = out if isinstance(out, (list, tuple)) else [out]
    return [np.asarray(keras.ops.convert_to_numpy(p)) for p in parts]


CASES = {
    "lstm-dropout": ((7, 3), lambda: L.LSTM(5, dropout=0.3, return_sequences=True)),
    "lstm-both": ((7, 3), lambda: L.LSTM(5, dropout=0.3, recurrent_dropout=0.4,
                                         return_sequences=True)),
    "lstm-recurrent-state": ((6, 3), lambda: L.LSTM(4, recurrent_dropout=0.5,
                                                    return_state=True)),
    "lstm-backwards": ((6, 3), lambda: L.LSTM(4, dropout=0.2, recurrent_dropout=0.2,
                                              go_backwards=True, return_sequences=True)),
    "lstm-twin": ((6, 3), lambda: L.LSTM(4, activation="relu", dropout=0.25,
                                         recurrent_dropout=0.25, return_sequences=True)),
    "gru-dropout": ((7, 3), lambda: L.GRU(5, dropout=0.3, return_sequences=True)),
    "gru-both": ((7, 3), lambda: L.GRU(5, dropout=0.3, recurrent_dropout=0.4,
                                       return_sequences=True)),
    "gru-reset-before": ((6, 3), lambda: L.GRU(4, reset_after=False, dropout=0.2,
                                               recurrent_dropout=0.3, return_sequences=True)),
    "gru-no-bias": ((6, 3), lambda: L.GRU(4, use_bias=False, recurrent_dropout=0.3)),
    "simple-rnn": ((6, 3), lambda: L.SimpleRNN(4, dropout=0.3, recurrent_dropout=0.4,
                                               return_sequences=True)),
    "simple-rnn-rate-1": ((6, 3), lambda: L.SimpleRNN(4, activation="sigmoid", dropout=1.0,
                                                      recurrent_dropout=0.5)),
    "lstm-recurrent-rate-1": ((6, 3), lambda: L.LSTM(4, dropout=0.3, recurrent_dropout=1.0)),
    "rnn-cell-implementation-1": ((6, 3), lambda: L.RNN(
        L.LSTMCell(4, implementation=1, dropout=0.3), return_sequences=True)),
    "rnn-stacked": ((6, 3), lambda: L.RNN([L.LSTMCell(4, dropout=0.2),
                                           L.GRUCell(3, dropout=0.3, recurrent_dropout=0.2),
                                           L.SimpleRNNCell(2, recurrent_dropout=0.5)],
                                          return_sequences=True)),
    "rnn-stacked-backwards": ((6, 3), lambda: L.RNN(
        [L.LSTMCell(4, dropout=0.3), L.GRUCell(3, recurrent_dropout=0.4)], go_backwards=True,
        return_sequences=True)),
    "bidirectional-lstm": ((6, 3), lambda: L.Bidirectional(
        L.LSTM(4, dropout=0.3, recurrent_dropout=0.2, return_sequences=True))),
    "bidirectional-gru-last": ((6, 3), lambda: L.Bidirectional(L.GRU(4, dropout=0.4))),
    "conv-lstm-2d": ((3, 5, 5, 2), lambda: L.ConvLSTM2D(3, 3, padding="same", dropout=0.3,
                                                        recurrent_dropout=0.2,
                                                        return_sequences=True)),
    "conv-lstm-1d-valid": ((3, 6, 2), lambda: L.ConvLSTM1D(2, 3, dropout=0.4,
                                                           return_state=True)),
}


def _convert(shape, make, batch: int = 3):
    layer = make()
    model = chain(shape, layer)
    x = np.random.default_rng(0).normal(size=(batch, *shape)).astype("float32")
    module = crossport.to_torch(model, (torch.from_numpy(x),))
    return layer, module, x


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_train_output_is_keras_cell_with_the_drawn_masks(case):
    """Keras' own training call, given the masks torch drew, computes the torch output
    (before: train() raised TrainingModeError)."""
    layer, module, x = _convert(*case)
    for seed in range(3):
        torch.manual_seed(seed)
        with recorded_masks() as drawn, torch.no_grad():
            got = module.train()(torch.from_numpy(x))
        assert drawn, "no dropout mask was drawn in train()"
        _give_keras(_cells(layer), drawn)
        want = layer(x, training=True)
        for g, w in zip(_flat(got), _flat(want), strict=True):
            np.testing.assert_allclose(g.detach().numpy() if torch.is_tensor(g) else g, w,
                                       rtol=1e-5, atol=1e-5)


def test_masks_are_keras_draws():
    """One draw per call and dropout kind (the same mask at every step), one mask per gate
    with recurrent dropout, values 0 or float32(1 / (1 - rate)), kept share ~ 1 - rate."""
    _, module, x = _convert((5, 3), lambda: L.LSTM(8, dropout=0.3, recurrent_dropout=0.6),
                            batch=400)
    with recorded_masks() as drawn:
        module.train()(torch.from_numpy(x))
    assert [(rate, len(m), tuple(m[0].shape)) for rate, m in drawn] == [
        (0.3, 4, (400, 3)), (0.6, 4, (400, 8))]
    for rate, masks in drawn:
        values = torch.stack(masks)
        scale = np.float32(1 / (1 - rate))
        assert set(values.unique().tolist()) == {0.0, float(scale)}
        kept = int((values != 0).sum())
        n = values.numel()
        assert abs(kept - n * (1 - rate)) < 5 * np.sqrt(n * rate * (1 - rate))
        assert not torch.equal(masks[0], masks[1])  # each gate its own draw


def test_linear_rnn_train_mean_is_eval():
    """A linear SimpleRNN with input dropout only is linear in the dropped input: Keras' mean
    over training calls is the inference output (inverted scaling)."""
    _, module, x = _convert((4, 3), lambda: L.SimpleRNN(2, activation="linear", dropout=0.5),
                            batch=2)
    xt = torch.from_numpy(x)
    torch.manual_seed(0)
    with torch.no_grad():
        runs = torch.stack([module.train()(xt) for _ in range(4000)])
        want = module.eval()(xt)
    spread = runs.std(0) / np.sqrt(len(runs))
    assert (runs.mean(0) - want).abs().le(5 * spread + 1e-6).all()
    assert not torch.allclose(runs[0], want)


def test_recurrent_mask_is_held_across_steps():
    """With a recurrent mask drawn once, a linear SimpleRNN's train mean is *not* the
    inference output: the same mask multiplies h at every step, so E[m^2] = 1 / (1 - rate)
    enters. A fresh mask per step would give the eval mean."""
    shape, make = (6, 1), lambda: L.SimpleRNN(1, activation="linear", recurrent_dropout=0.5,
                                              use_bias=False)
    layer, module, x = _convert(shape, make, batch=1)
    layer.set_weights([np.ones((1, 1), "float32"), np.ones((1, 1), "float32")])
    module = crossport.to_torch(chain(shape, layer), (torch.from_numpy(x),))
    xt = torch.ones(1, 6, 1)
    torch.manual_seed(1)
    with torch.no_grad():
        runs = torch.stack([module.train()(xt) for _ in range(2000)])
    # h_t = x_t + m * h_{t-1}, m in {0, 2} held: either all steps' sum (m = 2 geometric) or x_T
    assert set(runs.flatten().tolist()) == {1.0, 63.0}


def test_eval_is_the_module_without_dropout():
    """Eval is bit for bit the conversion of the same layer without dropout (nn.LSTM's
    kernel), and train() trains its parameters."""
    x = torch.randn(3, 7, 3)
    plain = L.LSTM(5)
    chain((7, 3), plain)
    drop = L.LSTM(5, dropout=0.3, recurrent_dropout=0.3)
    chain((7, 3), drop)
    drop.set_weights(plain.get_weights())
    a = crossport.to_torch(chain((7, 3), plain), (x,))
    b = crossport.to_torch(chain((7, 3), drop), (x,))
    with torch.no_grad():
        assert torch.equal(a.eval()(x), b.eval()(x))
    b.train()(x).sum().backward()
    grads = [p.grad for p in b.parameters()]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)



def test_the_first_training_call_draws_only_the_masks():
    """The module builds its Keras-math twin at the first training call; the twin's
    initializers drew from torch's global generator, so the same seed gave other masks
    on that call than on later ones (found by review)."""
    x = torch.randn(3, 7, 3)
    model = chain((7, 3), L.LSTM(5, dropout=0.3, recurrent_dropout=0.3))
    fresh, warmed = crossport.to_torch(model, (x,)), crossport.to_torch(model, (x,))
    warmed.train()(x)  # its twin exists now
    torch.manual_seed(3)
    first = fresh.train()(x)
    torch.manual_seed(3)
    assert torch.equal(first, warmed.train()(x))

REFUSED = {
    "lstm-rate-1": (lambda: L.LSTM(4, dropout=1.0), r"dropout=1.*cuDNN"),
    "gru-implementation-1": (lambda: L.GRU(4, implementation=1, dropout=0.2),
                             r"implementation=1.*fails"),
    "bidirectional-unequal": (lambda: L.Bidirectional(
        L.LSTM(4, dropout=0.2), backward_layer=L.LSTM(4, dropout=0.3, go_backwards=True)),
        "different forward and backward"),
}


@pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED.keys())
def test_unreproducible_dropout_refuses_train_mode(case):
    make, why = case
    layer = make()
    model = chain((6, 3), layer)
    x = torch.rand(2, 6, 3)
    module = crossport.to_torch(model, (x,))
    with pytest.raises(crossport.TrainingModeError, match=why):
        module.train()(x)
    module.eval()(x)


MASKED = {
    "lstm": lambda: L.LSTM(4, dropout=0.2, recurrent_dropout=0.3, return_sequences=True),
    "bidirectional-gru": lambda: L.Bidirectional(
        L.GRU(4, dropout=0.3, recurrent_dropout=0.2, return_sequences=True)),
}


@pytest.mark.parametrize("make", MASKED.values(), ids=MASKED.keys())
def test_masked_sequence_trains_with_keras_masks(make):
    """A Keras mask (mask_zero) runs the twins: masked steps hold the state, the dropout
    masks still come from the one draw per call (and direction)."""
    emb, rnn = L.Embedding(12, 3, mask_zero=True), make()
    model = chain((6,), emb, rnn, dtype="int32")
    x = np.array([[3, 5, 0, 0, 7, 1], [2, 0, 9, 4, 4, 0]], "int32")
    module = crossport.to_torch(model, (torch.from_numpy(x),))
    torch.manual_seed(3)
    with recorded_masks() as drawn, torch.no_grad():
        got = module.train()(torch.from_numpy(x))
    _give_keras(_cells(rnn), drawn)
    np.testing.assert_allclose(got.numpy(), _flat(model(x, training=True))[0], atol=1e-5)


def test_source_keeps_the_dropout_settings(tmp_path):
    """to_torch_source writes the modules with their Keras dropout settings (eval equal bit
    for bit, train() drawing the same rates / per-gate masks)."""
    from tests.to_torch.harness import load_written

    inp = keras.Input((6, 3))
    x = L.LSTM(4, dropout=0.2, recurrent_dropout=0.3, return_sequences=True)(inp)
    x = L.Bidirectional(L.GRU(3, dropout=0.4, return_sequences=True))(x)
    x = L.SimpleRNN(3, activation="sigmoid", dropout=0.1, return_sequences=True)(x)
    x = L.RNN([L.GRUCell(2, reset_after=False, recurrent_dropout=0.2)])(x)
    frames = keras.Input((3, 5, 5, 2))
    y = L.ConvLSTM2D(2, 3, padding="same", recurrent_dropout=0.3)(frames)
    model = keras.Model([inp, frames], [x, L.Flatten()(y)])
    args = (torch.randn(2, 6, 3), torch.randn(2, 3, 5, 5, 2))
    conv = crossport.to_torch_with_report(model, args)
    rebuilt = load_written(crossport.to_torch_source(conv, tmp_path / "m.py")).build_model()
    with torch.no_grad():
        for got, want in zip(rebuilt.eval()(*args), conv.module.eval()(*args), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    keys = ("dropout", "recurrent_dropout", "keras_dropout", "keras_recurrent_dropout",
            "per_gate")
    written, seen = dict(rebuilt.named_modules()), 0
    for name, want in conv.module.named_modules():
        settings = {k: getattr(want, k) for k in keys if hasattr(want, k)}
        if settings.get("recurrent_dropout") or settings.get("keras_dropout") or \
                settings.get("dropout") and not isinstance(want, torch.nn.RNNBase):
            assert type(written[name]) is type(want), name
            assert {k: getattr(written[name], k) for k in settings} == settings, name
            seen += 1
    assert seen == 5
    torch.manual_seed(0)
    with torch.no_grad():
        for got in rebuilt.train()(*args):
            assert torch.isfinite(got).all()
