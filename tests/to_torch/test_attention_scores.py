"""MultiHeadAttention(return_attention_scores=True), gated and sliding-window attention, and
keras.layers.GroupQueryAttention -> torch (both outputs compared; padding masks from
Embedding(mask_zero=True) with padded, interior and fully masked rows)."""


import keras
import numpy as np
import pytest
import torch

import crossport
from tests.to_torch.harness import assert_to_torch, load_written
from tests.to_torch.test_masks import VOCAB, T, _assert_converts, _ids

L = keras.layers


def _gqa(heads=4, kv=2, dim=3, **kwargs):
    return L.GroupQueryAttention(head_dim=dim, num_query_heads=heads, num_key_value_heads=kv,
                                 **kwargs)


def _self_attention(layer, seq=6, dim=8, **call):
    x = keras.Input((seq, dim))
    out = layer(x, x, **call)
    return keras.Model(x, list(out) if isinstance(out, tuple) else out)


CASES = {
    "mha-scores": (lambda: L.MultiHeadAttention(2, 4), {"return_attention_scores": True}),
    "mha-scores-causal": (lambda: L.MultiHeadAttention(3, 2, value_dim=5),
                          {"return_attention_scores": True, "use_causal_mask": True}),
    "mha-gate": (lambda: L.MultiHeadAttention(2, 4, use_gate=True), {}),
    "mha-sliding-window-causal": (lambda: L.MultiHeadAttention(2, 4, sliding_window=2),
                                  {"use_causal_mask": True}),
    "gqa": (lambda: _gqa(), {}),
    "gqa-one-kv-head-no-bias": (lambda: _gqa(6, 1, use_bias=False), {}),
    "gqa-causal": (lambda: _gqa(), {"use_causal_mask": True}),
    "gqa-scores": (lambda: _gqa(), {"return_attention_scores": True}),
    "gqa-scores-causal": (lambda: _gqa(4, 4), {"return_attention_scores": True,
                                               "use_causal_mask": True}),
    "gqa-gate-sliding-window": (lambda: _gqa(use_gate=True, sliding_window=3), {}),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_attention(case):
    build, call = case
    assert_to_torch(_self_attention(build(), **call))


@pytest.mark.parametrize("build, dims", [(lambda: L.MultiHeadAttention(2, 3), (8, 5, 7)),
                                         (lambda: _gqa(4, 2), (8, 8, 8))], ids=["mha", "gqa"])
def test_cross_attention_with_key_mask_and_scores(build, dims):
    """GQA takes query and value of one width (Keras checks it)."""
    q, v, k = keras.Input((4, dims[0])), keras.Input((6, dims[1])), keras.Input((6, dims[2]))
    mask = keras.Input((4, 6), dtype="int32")
    out, scores = build()(q, v, key=k, attention_mask=mask, return_attention_scores=True)
    # 0/1 masks drawn by the harness (seeded; no row of these draws is fully masked)
    assert_to_torch(keras.Model([q, v, k, mask], [out, scores]), int_high=2, batch=3)


@pytest.mark.parametrize("build", [
    lambda: L.MultiHeadAttention(2, 4), lambda: _gqa(4, 2, 4),
    lambda: _gqa(4, 2, 4, dropout=0.1)], ids=["mha", "gqa", "gqa-dropout"])
def test_padding_masks_with_scores(build):
    """Masked scores are zero in the scores Keras returns (its Softmax-layer path), a fully
    masked row too; without scores GQA's fully masked row is uniform unless dropout > 0."""
    tokens = keras.Input((T,), dtype="int32")
    x = L.Embedding(VOCAB, 8, mask_zero=True)(tokens)
    out, scores = build()(x, x, return_attention_scores=True)
    plain = _gqa(4, 2, 4)(x, x, use_causal_mask=True)
    _assert_converts(keras.Model(tokens, [out, scores, plain]), _ids)


def test_gqa_exports_and_writes_source(tmp_path):
    x = keras.Input((5, 8))
    out, scores = _gqa(use_gate=True, sliding_window=2)(x, x, return_attention_scores=True)
    conv = assert_to_torch(keras.Model(x, [out, scores]), export=True)
    path = crossport.to_torch_source(conv, tmp_path / "gqa.py")
    written = load_written(path)
    args = (torch.randn(3, 5, 8),)
    with torch.no_grad():
        torch.testing.assert_close(written.build_model()(*args), conv.module(*args), rtol=0,
                                   atol=0)


@pytest.mark.parametrize("build", [
    lambda: L.Attention(use_scale=True), lambda: L.Attention(score_mode="concat"),
    lambda: L.AdditiveAttention()], ids=["dot-scale", "concat", "additive"])
def test_keras_attention_layers_return_scores(build):
    """keras.layers.Attention / AdditiveAttention(return_attention_scores=True): the softmax
    weights, causal and padding masks included (a masked query's weight row is kept)."""
    q_ids, v_ids = keras.Input((T,), dtype="int32"), keras.Input((T,), dtype="int32")
    embed = L.Embedding(VOCAB, 4, mask_zero=True)
    layer = build()
    out, scores = layer([embed(q_ids), embed(v_ids)], return_attention_scores=True,
                        use_causal_mask=True)
    model = keras.Model([q_ids, v_ids], [out, scores])
    for var in layer.weights:  # scale / concat weight start at 1: not an identity
        var.assign(var.numpy() * 0 + 0.7)
    _assert_converts(model, _ids)


CAUSAL_AT_RUN_TIME = {
    "mha": lambda q, v: L.MultiHeadAttention(2, 4)(q, v, use_causal_mask=True,
                                                   return_attention_scores=True),
    "gqa": lambda q, v: _gqa(4, 2, 4)(q, v, use_causal_mask=True,
                                      return_attention_scores=True),
    "attention": lambda q, v: L.Attention()([q, v], use_causal_mask=True,
                                            return_attention_scores=True),
    "additive": lambda q, v: L.AdditiveAttention()([q, v], use_causal_mask=True,
                                                   return_attention_scores=True),
}


@pytest.mark.parametrize("attend", CAUSAL_AT_RUN_TIME.values(), ids=CAUSAL_AT_RUN_TIME.keys())
def test_causal_scores_at_run_time_lengths(attend):
    """Causal attention with its scores, query and key lengths both run-time (None) and
    unequal, padding masks on both: converted at one length, run at others (1 included)
    against Keras. A regression row of the audit's probe (it passed before)."""
    q_ids, v_ids = keras.Input((None,), dtype="int32"), keras.Input((None,), dtype="int32")
    embed = L.Embedding(VOCAB, 8, mask_zero=True)
    out = attend(embed(q_ids), embed(v_ids))
    model = keras.Model([q_ids, v_ids], list(out))

    def ids(length, seed):
        rng = np.random.default_rng(seed)
        x = rng.integers(1, VOCAB, (3, length)).astype("int32")
        x[0, -1:] = 0   # padded
        x[1, :] = 0     # fully masked
        return x

    conv = crossport.to_torch_with_report(model, (torch.from_numpy(ids(6, 0)),
                                                  torch.from_numpy(ids(6, 1))))
    for q_len, v_len in ((1, 1), (3, 5), (5, 3), (1, 4), (4, 1), (7, 7)):
        q, v = ids(q_len, q_len), ids(v_len, 10 + v_len)
        want = [np.asarray(w) for w in model([q, v])]
        with torch.no_grad():
            got = conv.module(torch.from_numpy(q), torch.from_numpy(v))
        for w, g in zip(want, got, strict=True):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)
