"""Bidirectional with every Keras merge_mode ('concat', 'sum', 'mul', 'ave', None -> the two
outputs as a list): with and without return_sequences, with return_state (None: both outputs
first, then the states, flat), with initial states, under an Embedding(mask_zero=True) mask
(masked steps, the backward direction's go_backwards order) and with a downstream consumer of
each output. Compared with Keras 3 (TF) on seeded inputs, output structure included."""

import keras
import numpy as np
import pytest
import torch

import crossport
from tests.to_torch.harness import assert_to_torch, chain, make_live
from tests.to_torch.test_masks import _embedded, _ids

L = keras.layers
MODES = ["sum", "mul", "ave", None]
RNNS = {"lstm": L.LSTM, "gru": L.GRU, "simplernn": L.SimpleRNN}


def _bi(kind: str, mode, **options):
    return L.Bidirectional(RNNS[kind](4, **options), merge_mode=mode)


def _shapes(out):
    """The output nesting with each tensor as its shape (lists and tuples alike)."""
    if isinstance(out, (list, tuple)):
        return [_shapes(o) for o in out]
    return tuple(out.shape)


def _assert_same_structure(model, conv, inputs):
    ref = model(inputs[0] if len(inputs) == 1 else list(inputs))
    with torch.no_grad():
        got = conv.module(*(torch.from_numpy(np.asarray(a)) for a in inputs))
    assert _shapes(got) == _shapes(ref)


@pytest.mark.parametrize("mode", MODES, ids=str)
@pytest.mark.parametrize("kind", RNNS)
@pytest.mark.parametrize("sequences", [False, True], ids=["last", "sequences"])
def test_merge_modes(kind, mode, sequences):
    model = chain((6, 3), _bi(kind, mode, return_sequences=sequences))
    conv = assert_to_torch(model)
    _assert_same_structure(model, conv, [np.random.default_rng(3).normal(
        size=(2, 6, 3)).astype("float32")])


@pytest.mark.parametrize("mode", MODES, ids=str)
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_merge_modes_with_states(kind, mode):
    model = chain((5, 3), _bi(kind, mode, return_sequences=True, return_state=True))
    conv = assert_to_torch(model)
    _assert_same_structure(model, conv, [np.random.default_rng(4).normal(
        size=(2, 5, 3)).astype("float32")])


@pytest.mark.parametrize("mode", MODES, ids=str)
def test_merge_modes_with_initial_states(mode):
    x, h = keras.Input((5, 3)), [keras.Input((4,)) for _ in range(4)]
    out = L.Bidirectional(L.LSTM(4, return_state=True), merge_mode=mode)(x, initial_state=h)
    assert_to_torch(keras.Model([x, *h], out))


@pytest.mark.parametrize("mode", MODES, ids=str)
@pytest.mark.parametrize("sequences", [False, True], ids=["last", "sequences"])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_merge_modes_under_a_mask(kind, mode, sequences):
    """The masked twins: padded, interior and fully masked rows; the backward direction
    runs the kept steps from the end, its sequence flipped back before the merge."""
    model = make_live(_embedded(_bi(kind, mode, return_sequences=sequences,
                                    return_state=kind == "lstm")))
    conv = crossport.to_torch_with_report(model, (torch.from_numpy(_ids(0)),))
    for seed in (1, 2):
        ids = _ids(seed)
        ref = keras.tree.flatten(model(ids))
        with torch.no_grad():
            got = keras.tree.flatten(conv.module(torch.from_numpy(ids)))
        assert len(ref) == len(got)
        for r, g in zip(ref, got):
            np.testing.assert_allclose(g.numpy(), np.asarray(r), rtol=1e-4, atol=1e-5)
    _assert_same_structure(model, conv, [_ids(5)])


def test_unmerged_masked_sequences_each_carry_the_mask():
    """merge_mode=None with return_sequences: Keras gives both outputs the mask, so an LSTM
    on each skips the masked steps."""
    tokens = keras.Input((7,), dtype="int32")
    x = L.Embedding(12, 5, mask_zero=True)(tokens)
    fwd, bwd = L.Bidirectional(L.GRU(3, return_sequences=True), merge_mode=None)(x)
    out = L.Concatenate()([L.LSTM(2)(fwd), L.SimpleRNN(2, go_backwards=True)(bwd)])
    model = make_live(keras.Model(tokens, out))
    conv = crossport.to_torch_with_report(model, (torch.from_numpy(_ids(0)),))
    with torch.no_grad():
        got = conv.module(torch.from_numpy(_ids(1))).numpy()
    np.testing.assert_allclose(got, np.asarray(model(_ids(1))), rtol=1e-4, atol=1e-5)


def test_unknown_merge_mode_is_still_refused():
    layer = L.Bidirectional(L.GRU(3), merge_mode="concat", name="bi")
    model = chain((4, 2), layer)
    layer.merge_mode = "max"  # what a custom subclass might set; Keras itself rejects it
    with pytest.raises(crossport.UnsupportedLayerError, match="merge_mode='max'"):
        crossport.to_torch(model, (torch.zeros(1, 4, 2),))
