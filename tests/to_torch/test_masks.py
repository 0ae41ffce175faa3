"""Keras masks (Embedding(mask_zero=True), Masking) consumed by RNNs, Bidirectional,
GlobalAveragePooling1D, MultiHeadAttention and Attention: Keras' masked semantics on TF
(masked steps keep the states and repeat the previous output, or zeros where Keras zeroes
them; masked keys get no attention) reproduced in torch, on inputs with padded, interior and
fully masked rows."""

import keras
import numpy as np
import pytest
import torch

import crossport
from tests.to_torch.harness import load_written, make_live

L = keras.layers
T, VOCAB = 7, 12


def _ids(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, (4, T))
    ids[0, 4:] = 0          # right padding
    ids[1, :2] = 0          # left padding
    ids[2, [1, 3, 4]] = 0   # interior holes
    ids[3, :] = 0           # fully masked
    return ids


def _frames(seed: int, features: int = 3) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((4, T, features)).astype("float32")
    x[0, 5:] = 0.0
    x[1, :3] = 0.0
    x[2, 2] = 0.0
    x[3, :] = 0.0
    return x


def _assert_converts(model, make_inputs):
    make_live(model)
    example = tuple(torch.from_numpy(make_inputs(0)) for _ in model.inputs)
    conv = crossport.to_torch_with_report(model, example)
    for seed in (1, 2):
        arrays = [make_inputs(seed) for _ in model.inputs]
        ref = keras.tree.flatten(model(arrays[0] if len(arrays) == 1 else arrays))
        with torch.no_grad():
            got = keras.tree.flatten(conv.module(*(torch.from_numpy(a) for a in arrays)))
        assert len(ref) == len(got)
        for r, g in zip(ref, got):
            r = np.asarray(r)
            np.testing.assert_allclose(g.numpy(), r, rtol=1e-4, atol=1e-5 * max(1, abs(r).max()))
    return conv


def _embedded(*layers):
    tokens = keras.Input((T,), dtype="int32")
    x = L.Embedding(VOCAB, 5, mask_zero=True)(tokens)
    for layer in layers:
        x = layer(x)
    return keras.Model(tokens, x)


def _masked_frames(*layers):
    frames = keras.Input((T, 3))
    x = L.Masking(0.0)(frames)
    for layer in layers:
        x = layer(x)
    return keras.Model(frames, x)


RNNS = {
    "lstm-last": [L.LSTM(4)],
    "lstm-sequences": [L.LSTM(4, return_sequences=True)],
    "gru-sequences-backwards": [L.GRU(4, return_sequences=True, go_backwards=True)],
    "gru-reset-before-last": [L.GRU(4, reset_after=False)],
    "simplernn-last-backwards": [L.SimpleRNN(4, go_backwards=True)],
    "lstm-state": [L.LSTM(4, return_state=True)],
    "stacked-lstm-gru": [L.LSTM(4, return_sequences=True), L.GRU(3)],
    "lstm-zero-output-for-mask": [L.LSTM(4, return_sequences=True, zero_output_for_mask=True)],
    "rnn-lstmcell-sequences": [L.RNN(L.LSTMCell(4), return_sequences=True)],
    "rnn-grucell-last-backwards": [L.RNN(L.GRUCell(4), go_backwards=True)],
    "rnn-stacked-sequences-backwards": [L.RNN([L.LSTMCell(4), L.GRUCell(3)], go_backwards=True,
                                              return_sequences=True)],
    "rnn-stacked-last-state": [L.RNN([L.GRUCell(4), L.SimpleRNNCell(3)], return_state=True)],
    "bi-lstm-sequences": [L.Bidirectional(L.LSTM(3, return_sequences=True))],
    "bi-gru-last": [L.Bidirectional(L.GRU(3))],
    "bi-lstm-state": [L.Bidirectional(L.LSTM(3, return_state=True))],
    "bi-then-pool": [L.Bidirectional(L.GRU(3, return_sequences=True)),
                     L.GlobalAveragePooling1D()],
    "pool": [L.GlobalAveragePooling1D()],
    "pool-keepdims": [L.GlobalAveragePooling1D(keepdims=True)],
}


@pytest.mark.parametrize("layers", RNNS.values(), ids=RNNS.keys())
def test_embedding_mask_zero(layers):
    _assert_converts(_embedded(*layers), _ids)


MASKING = {
    "lstm-sequences": lambda: [L.LSTM(4, return_sequences=True)],
    "bi-gru-last": lambda: [L.Bidirectional(L.GRU(3))],
    "pool": lambda: [L.GlobalAveragePooling1D()],
    "dense-passes-mask": lambda: [L.Dense(4), L.SimpleRNN(3)],
}


@pytest.mark.parametrize("layers", MASKING.values(), ids=MASKING.keys())
def test_masking_layer(layers):
    _assert_converts(_masked_frames(*layers()), _frames)


def test_mha_with_padding_masks():
    tokens = keras.Input((T,), dtype="int32")
    x = L.Embedding(VOCAB, 8, mask_zero=True)(tokens)
    y = L.MultiHeadAttention(2, 4)(x, x)
    z = L.MultiHeadAttention(2, 4)(y, x, use_causal_mask=True)
    _assert_converts(keras.Model(tokens, L.GlobalAveragePooling1D()(z)), _ids)


def test_attention_with_masks():
    q_ids, v_ids = keras.Input((T,), dtype="int32"), keras.Input((T,), dtype="int32")
    embed = L.Embedding(VOCAB, 4, mask_zero=True)
    out = L.Attention(use_scale=True)([embed(q_ids), embed(v_ids)])
    _assert_converts(keras.Model([q_ids, v_ids], out), _ids)


def test_mask_consumer_without_masked_converter_is_refused():
    model = _embedded(L.BatchNormalization(name="sm"))   # takes a mask, not reproduced
    with pytest.raises(crossport.UnsupportedLayerError, match="sm.*Keras mask"):
        crossport.to_torch(model, (torch.from_numpy(_ids(0)),))


def test_time_distributed_drops_a_mask_its_layer_does_not_take():
    """Keras' TimeDistributed passes the mask on only to an inner layer whose call takes
    one; a Dense computes each step as without it, and the mask still reaches the LSTM."""
    _assert_converts(_embedded(L.TimeDistributed(L.Dense(3)), L.LSTM(4)), _ids)


def test_mha_with_dropout_zeroes_fully_masked_rows():
    """dropout > 0 sends Keras through its Softmax-layer path (masked probabilities zeroed)
    even in inference: a fully masked query row differs from the dropout-free path."""
    tokens = keras.Input((T,), dtype="int32")
    x = L.Embedding(VOCAB, 8, mask_zero=True)(tokens)
    y = L.MultiHeadAttention(2, 4, dropout=0.1)(x, x)
    _assert_converts(keras.Model(tokens, y), _ids)


def test_mask_derived_from_a_cleared_mask_is_refused():
    """MultiHeadAttention clears its inputs' masks at run time; a mask Keras derives from
    such a tensor afterwards is not reproduced, and the conversion says so."""
    tokens = keras.Input((T,), dtype="int32")
    x = L.Embedding(VOCAB, 8, mask_zero=True)(tokens)
    y = L.MultiHeadAttention(2, 4)(x, x)
    z = L.Add()([x, y])
    out = L.MultiHeadAttention(2, 4, name="second")(z, z)
    with pytest.raises(crossport.UnsupportedLayerError, match="second.*MultiHeadAttention"):
        crossport.to_torch(keras.Model(tokens, out), (torch.from_numpy(_ids(0)),))


def test_transformer_block_with_padding_mask():
    """Embedding(mask_zero) -> MHA -> residual + LayerNorm -> Dense -> masked mean pool."""
    tokens = keras.Input((T,), dtype="int32")
    x = L.Embedding(VOCAB, 8, mask_zero=True)(tokens)
    h = L.MultiHeadAttention(2, 4)(x, x)
    h = L.LayerNormalization()(h)
    h = L.Dense(8, activation="relu")(h)
    out = L.GlobalAveragePooling1D()(h)
    _assert_converts(keras.Model(tokens, out), _ids)


def test_masked_model_exports_and_writes_source(tmp_path):
    """The masked conversion is an ordinary module: torch.export and to_torch_source work."""
    model = _embedded(L.Bidirectional(L.LSTM(3, return_sequences=True)),
                      L.GlobalAveragePooling1D())
    conv = _assert_converts(model, _ids)
    ids = torch.from_numpy(_ids(5))
    program = torch.export.export(conv.module, (ids,))
    path = crossport.to_torch_source(conv, tmp_path / "masked.py")
    written = load_written(path)
    with torch.no_grad():  # the fully masked row's mean is 0/0 = NaN, as in Keras
        want = conv.module(ids)
        assert torch.isnan(want[3]).all() and not torch.isnan(want[:3]).any()
        torch.testing.assert_close(program.module()(ids), want, equal_nan=True)
        torch.testing.assert_close(written.build_model()(ids), want, rtol=0, atol=0,
                                   equal_nan=True)
