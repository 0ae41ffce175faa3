"""keras.layers.Attention (dot/concat scores, use_scale, causal, key input) and EinsumDense
(general equations, bias axes, activations) -> torch, through the harness."""

import keras
import numpy as np
import pytest

from tests.to_torch.harness import assert_to_torch, chain, make_live

L = keras.layers


def _attention(layer, causal=False, key=False, tq=5, tv=7, dim=4):
    q, v = keras.Input((tq, dim)), keras.Input((tv, dim))
    inputs = [q, v]
    if key:
        inputs.append(keras.Input((tv, dim)))
    return keras.Model(inputs, layer(inputs, use_causal_mask=causal))


ATTENTION = {
    "dot": (L.Attention(), {}),
    "dot-scale": (L.Attention(use_scale=True), {}),
    "concat": (L.Attention(score_mode="concat"), {}),
    "concat-scale": (L.Attention(use_scale=True, score_mode="concat"), {}),
    "dot-causal": (L.Attention(), {"causal": True, "tv": 5}),
    "concat-causal-scale": (L.Attention(use_scale=True, score_mode="concat"),
                            {"causal": True, "tv": 5}),
    "dot-with-key": (L.Attention(use_scale=True), {"key": True}),
    "additive": (L.AdditiveAttention(), {}),
    "additive-no-scale": (L.AdditiveAttention(use_scale=False), {}),
    "additive-causal-key": (L.AdditiveAttention(), {"causal": True, "tv": 5, "key": True}),
}


@pytest.mark.parametrize("case", ATTENTION.values(), ids=ATTENTION.keys())
def test_attention(case):
    layer, kwargs = case
    model = make_live(_attention(layer, **kwargs))
    for var in layer.weights:  # scale / concat weight start at 1: not an identity
        var.assign(var.numpy() * 0 + 0.7 + 0.1 * np.arange(var.numpy().size).reshape(var.shape))
    assert_to_torch(model, live=False)


EINSUM = {
    "dense-like": ((6,), L.EinsumDense("ab,bc->ac", output_shape=4, bias_axes="c")),
    "sequence": ((5, 6), L.EinsumDense("abc,cd->abd", output_shape=(None, 4), bias_axes="d",
                                       activation="gelu")),
    "split-heads": ((5, 6), L.EinsumDense("abc,cde->abde", output_shape=(None, 2, 3),
                                          bias_axes="de")),
    "merge-heads": ((5, 2, 3), L.EinsumDense("abcd,cde->abe", output_shape=(None, 4),
                                             bias_axes="e")),
    "contract-time": ((5, 6), L.EinsumDense("abc,bd->adc", output_shape=(4, 6),
                                            bias_axes="d")),
    "ellipsis": ((3, 5, 6), L.EinsumDense("...b,bc->...c", output_shape=4, bias_axes="c")),
    "no-bias-relu": ((5, 6), L.EinsumDense("abc,cd->abd", output_shape=(None, 4),
                                           activation="relu")),
}


@pytest.mark.parametrize("case", EINSUM.values(), ids=EINSUM.keys())
def test_einsum_dense(case):
    shape, layer = case
    conv = assert_to_torch(chain(shape, layer), export=True)
    params = sum(p.numel() for p in conv.module.parameters() if p.requires_grad)
    assert params == sum(int(w.numpy().size) for w in layer.trainable_weights)


def test_additive_attention_with_masks_from_embeddings():
    """Keras passes [query_mask, value_mask] from mask_zero embeddings implicitly."""
    q, v = keras.Input((5,), dtype="int32"), keras.Input((6,), dtype="int32")
    embed = L.Embedding(10, 4, mask_zero=True)
    assert_to_torch(keras.Model([q, v], L.AdditiveAttention()([embed(q), embed(v)])))
