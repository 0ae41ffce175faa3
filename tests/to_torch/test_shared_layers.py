"""One Keras layer called on several tensors -> one torch module called several times.

The torch module is built at the layer's first call, for the rank and layout its tensor had
then (an NCHW conv output, a flatten of one); later calls of other layouts or ranks must
still compute what Keras computes with the same weights, or be refused by name."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch

import crossport
from tests.to_torch.harness import assert_to_torch

L = keras.layers


def _shared(layer, first, second, conv_first=True, conv_second=False):
    """``layer`` called on a (conv-fed) tensor of shape ``first`` and one of ``second``."""
    a, b = keras.Input(first), keras.Input(second)
    x = L.Conv2D(first[-1], 1)(a) if conv_first else a
    y = L.Conv2D(second[-1], 1)(b) if conv_second else b
    return keras.Model([a, b], [layer(x), layer(y)])


def _adapted_normalization():
    layer = L.Normalization()
    layer.adapt(np.random.default_rng(0).standard_normal((16, 4, 5, 6)).astype("float32"))
    return layer


# the same rank, held NCHW at the first call (after a conv) and NHWC at the second
SAME_RANK = {
    "layer-norm": L.LayerNormalization,
    "group-norm": lambda: L.GroupNormalization(groups=2),
    "group-norm-no-scale": lambda: L.GroupNormalization(groups=3, scale=False),
    "prelu": L.PReLU,
    "softmax-axis-1": lambda: L.Softmax(axis=1),
    "rescaling-per-channel": lambda: L.Rescaling(np.arange(1, 7, dtype="float32"), offset=0.5),
    "normalization": _adapted_normalization,
}


@pytest.mark.parametrize("make", SAME_RANK.values(), ids=SAME_RANK.keys())
def test_shared_layer_on_tensors_held_in_other_layouts(make):
    assert_to_torch(_shared(make(), (4, 5, 6), (4, 5, 6)))


RANKS = {
    "ln-rank3-then-conv-rank4": (L.LayerNormalization, (5, 6), (4, 5, 6), False, True),
    "ln-conv-rank4-then-rank3": (L.LayerNormalization, (4, 5, 6), (5, 6), True, False),
    "ln-no-center": (lambda: L.LayerNormalization(center=False), (4, 5, 6), (5, 6), True,
                     False),
    "ln-rms-scaling": (lambda: L.LayerNormalization(rms_scaling=True), (5, 6), (4, 5, 6), False,
                       True),
    "ln-axis-1-size-5": (lambda: L.LayerNormalization(axis=1), (5, 7, 6), (5, 6), True, False),
    "softmax-activation": (lambda: L.Activation("softmax"), (5, 6), (4, 5, 6), False, True),
    "rescaling-per-channel": (lambda: L.Rescaling(np.arange(1, 7, dtype="float32")), (5, 6),
                              (4, 5, 6), False, True),
}


@pytest.mark.parametrize("make, first, second, conv_first, conv_second", RANKS.values(),
                         ids=RANKS.keys())
def test_shared_layer_on_tensors_of_other_ranks(make, first, second, conv_first, conv_second):
    """``ln = LayerNormalization(); ln(rank3); ln(rank4)``: Keras keeps ``axis=-1`` and one
    gamma; the module normalizes each call over its own last Keras axis."""
    assert_to_torch(_shared(make(), first, second, conv_first, conv_second))


def test_shared_layer_norm_is_one_module_over_four_ranks():
    a, b, c = keras.Input((5, 6)), keras.Input((4, 5, 6)), keras.Input((3, 4, 5, 6))
    ln = L.LayerNormalization(axis=[-2, -1], name="ln")
    outs = [ln(L.Conv1D(6, 1)(a)), ln(L.Conv2D(6, 1)(b)), ln(c), ln(L.Conv3D(6, 1)(c))]
    conv = assert_to_torch(keras.Model([a, b, c], outs))
    assert [n for n, _ in conv.module.named_children()].count("ln") == 1
    assert conv.module.code.count("self.ln(") == 4
    # the calls share the weights: every call's output depends on the one gamma
    ln_module = conv.module.ln
    args = [torch.randn(2, *t.shape[1:]) for t in (a, b, c)]
    sum((o * torch.randn_like(o)).sum() for o in conv.module(*args)).backward()
    assert ln_module.weight.grad is not None and ln_module.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("first_is_flat", [True, False], ids=["flat-first", "plain-first"])
def test_shared_dense_on_a_flatten_of_nchw_and_a_plain_vector(first_is_flat):
    """The first call's Linear permutes its weight columns for a flatten of an NCHW block;
    the other call's features are laid out the same way (or the flatten undone)."""
    img, vec = keras.Input((4, 5, 6)), keras.Input((120,))
    dense = L.Dense(3)
    flat = L.Flatten()(L.Conv2D(6, 1)(img))
    outs = [dense(flat), dense(vec)] if first_is_flat else [dense(vec), dense(flat)]
    assert_to_torch(keras.Model([img, vec], outs))


def _permuted_call():
    a = keras.Input((4, 5, 6))
    ln = L.LayerNormalization(axis=[1, 2])
    return keras.Model(a, [ln(a), ln(L.Permute((2, 1, 3))(a))])


def _other_size_call():
    a, b = keras.Input((4, 5, 6)), keras.Input((5, 6))
    ln = L.LayerNormalization(axis=1)
    return keras.Model([a, b], [ln(a), ln(b)])


@pytest.mark.parametrize("build, match", [
    (_permuted_call, "does not match the sizes"),       # Keras reinterprets gamma's entries
    (_other_size_call, "Keras itself fails")],          # Keras' reshape of gamma fails
    ids=["same-size-other-shape", "other-size"])
def test_shared_layer_norm_on_other_normalized_sizes_is_refused(build, match):
    model = build()
    example = tuple(torch.randn(2, *t.shape[1:]) for t in model.inputs)
    with pytest.raises(crossport.UnsupportedLayerError, match=match):
        crossport.to_torch(model, example)


def test_unsupported_shared_layer_is_listed_once():
    a, b = keras.Input((5, 6)), keras.Input((5, 6))
    lam = L.Lambda(lambda t: tf.nn.relu6(t))  # TF itself: not traced
    with pytest.raises(crossport.UnsupportedLayerError) as err:
        crossport.to_torch(keras.Model([a, b], [lam(a), lam(b)]),
                           (torch.randn(2, 5, 6), torch.randn(2, 5, 6)))
    assert len(err.value.problems) == 1


def _masked_and_plain_calls(make, masked_first):
    a, b = keras.Input((6, 3)), keras.Input((6, 3))
    layer = make()
    masked = layer(L.Masking()(a))
    plain = layer(b)
    return keras.Model([a, b], [masked, plain] if masked_first else [plain, masked])


RNNS = {"lstm": lambda: L.LSTM(4, return_sequences=True), "gru-last": lambda: L.GRU(4),
        "bidirectional-gru": lambda: L.Bidirectional(L.GRU(3, return_sequences=True))}


@pytest.mark.parametrize("masked_first", [True, False], ids=["masked-first", "plain-first"])
@pytest.mark.parametrize("make", RNNS.values(), ids=RNNS.keys())
def test_shared_rnn_on_a_masked_and_an_unmasked_tensor(make, masked_first):
    """One call with a Keras mask (Masking upstream), one without: one module serves both
    (the masked twin; torch's nn.LSTM was given the mask or ran the masked call unmasked)."""
    model = _masked_and_plain_calls(make, masked_first)
    conv = assert_to_torch(model)
    # the weights stay shared: one set, as in Keras (not one module per kind of call)
    assert sum(p.numel() for p in conv.module.parameters()) == model.count_params()
    x = np.random.default_rng(3).standard_normal((3, 6, 3)).astype("float32")
    x[0, 4:] = 0.0     # masked steps
    x[1, :2] = 0.0
    want = [np.asarray(t) for t in model([x, x])]
    with torch.no_grad():
        got = [t.numpy() for t in conv.module(torch.from_numpy(x), torch.from_numpy(x))]
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, atol=1e-5)
