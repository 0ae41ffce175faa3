"""keras.layers.MultiHeadAttention -> torch: head sizes, cross attention, masks, causal masks,
and a small Embedding + attention text model (harness: tests/to_torch/harness.py)."""

import keras
import pytest

from tests.to_torch.harness import assert_to_torch

L = keras.layers


def _self_attention(layer, causal=False, seq=6, dim=8):
    x = keras.Input((seq, dim))
    return keras.Model(x, layer(x, x, use_causal_mask=causal))


CASES = {
    "heads2-keydim4": (L.MultiHeadAttention(2, 4), False),
    "keydim-not-dividing": (L.MultiHeadAttention(3, 5), False),
    "value-dim-output-shape": (L.MultiHeadAttention(2, 4, value_dim=3, output_shape=6), False),
    "no-bias": (L.MultiHeadAttention(2, 4, use_bias=False), False),
    "causal": (L.MultiHeadAttention(2, 4), True),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_self_attention(case):
    layer, causal = case
    assert_to_torch(_self_attention(layer, causal))


def test_cross_attention_with_key_and_mask():
    q, v, k = keras.Input((4, 8)), keras.Input((6, 5)), keras.Input((6, 7))
    mask = keras.Input((4, 6), dtype="int32")
    out = L.MultiHeadAttention(2, 3)(q, v, key=k, attention_mask=mask)
    # 0/1 masks drawn by the harness (seeded; no row of these draws is fully masked)
    assert_to_torch(keras.Model([q, v, k, mask], out), int_high=2, batch=3)


def test_transformer_block_text_model():
    tokens = keras.Input((10,), dtype="int32")
    x = L.Embedding(40, 16)(tokens)
    h = L.MultiHeadAttention(4, 4)(x, x, use_causal_mask=True)
    x = L.LayerNormalization(epsilon=1e-6)(L.Add()([x, h]))
    f = L.Dense(16)(L.Dense(32, activation="gelu")(x))
    x = L.LayerNormalization(epsilon=1e-6)(L.Add()([x, f]))
    out = L.Dense(5)(L.GlobalAveragePooling1D()(x))
    assert_to_torch(keras.Model(tokens, out), int_high=40, export=True)
