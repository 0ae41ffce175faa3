"""Custom (subclassed) Keras layers without a converter: their ``call`` is traced into the
Keras layers and keras.ops it runs and inlined (keras_hub's blocks are such layers), or
refused by name when the trace cannot be faithful. Plus keras.layers.ReversibleEmbedding."""

import keras
import numpy as np
import pytest
import torch

import crossport
from tests.to_torch.harness import assert_to_torch

L = keras.layers


class Block(L.Layer):
    """A residual block: sublayers, keras.ops, and a variable read by an op directly."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.dense = L.Dense(units, activation="gelu")
        self.norm = L.LayerNormalization(epsilon=1e-5)
        self.units = units

    def build(self, input_shape):
        self.gain = self.add_weight(shape=(self.units,), initializer="random_normal")

    def call(self, x, padding_mask=None):
        y = self.norm(x + self.dense(x))
        y = keras.ops.multiply(y, self.gain)
        if padding_mask is not None:
            y = y * keras.ops.cast(keras.ops.expand_dims(padding_mask, -1), y.dtype)
        return y


class Outer(L.Layer):
    """A custom layer calling a custom layer (traced recursively)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = Block(6)

    def call(self, x):
        return keras.ops.tanh(self.inner(x))


class Positions(L.Layer):
    """Reads the run-time sequence length (a None dim; tests/to_torch/test_runtime_sizes.py
    has more)."""

    def build(self, input_shape):
        self.table = self.add_weight(shape=(16, input_shape[-1]))

    def call(self, x):
        length = keras.ops.shape(x)[1]
        return x + keras.ops.slice(self.table, (0, 0), (length, x.shape[-1]))


def test_custom_layer_is_traced_and_inlined():
    x = keras.Input((5, 6))
    mask = keras.Input((5,))
    model = keras.Model([x, mask], Block(6, name="block")(x, padding_mask=mask))
    conv = assert_to_torch(model)
    trainable = sum(p.numel() for p in conv.module.parameters() if p.requires_grad)
    assert trainable == sum(int(np.prod(w.shape)) for w in model.trainable_weights)


def test_nested_custom_layers_and_shared_variable():
    x = keras.Input((4, 6))
    outer = Outer(name="outer")
    model = keras.Model(x, outer(outer(x)))  # called twice: one set of weights
    conv = assert_to_torch(model)
    trainable = sum(p.numel() for p in conv.module.parameters() if p.requires_grad)
    assert trainable == sum(int(np.prod(w.shape)) for w in model.trainable_weights)


def test_custom_layer_reading_a_runtime_size_converts():
    """Refused before run-time sizes were traced (ops.shape(x)[1] was None)."""
    x = keras.Input((None, 4))
    model = keras.Model(x, Positions(name="positions")(x))
    net = crossport.to_torch(model, (torch.randn(2, 5, 4),))
    for length in (3, 9, 16):
        a = np.random.default_rng(length).standard_normal((3, length, 4)).astype("float32")
        np.testing.assert_allclose(net(torch.from_numpy(a)).detach().numpy(),
                                   np.asarray(model(a)), atol=1e-6)


def test_custom_layer_with_static_sizes_converts():
    x = keras.Input((5, 4))
    assert_to_torch(keras.Model(x, Positions(name="positions")(x)))


def test_custom_layer_fed_a_keras_mask_is_refused():
    ids = keras.Input((5,), dtype="int32")
    h = L.Embedding(10, 6, mask_zero=True)(ids)
    model = keras.Model(ids, Block(6, name="block")(h))
    with pytest.raises(crossport.UnsupportedLayerError, match="carries a Keras mask"):
        crossport.to_torch(model, (torch.randint(0, 10, (2, 5)),))


@pytest.mark.parametrize("tie,cap", [(True, None), (False, None), (True, 2.0)],
                         ids=["tied", "untied", "softcap"])
def test_reversible_embedding(tie, cap):
    ids = keras.Input((5,), dtype="int32")
    embed = L.ReversibleEmbedding(12, 8, tie_weights=tie, logit_soft_cap=cap, name="embed")
    h = L.Dense(8)(embed(ids))
    model = keras.Model(ids, embed(h, reverse=True))
    assert_to_torch(model, int_high=12)


def test_reversible_embedding_mask_zero_is_refused():
    ids = keras.Input((5,), dtype="int32")
    model = keras.Model(ids, L.ReversibleEmbedding(12, 8, mask_zero=True)(ids))
    with pytest.raises(crossport.UnsupportedLayerError, match="mask_zero"):
        crossport.to_torch(model, (torch.randint(0, 12, (2, 5)),))


@pytest.mark.parametrize("target", [(None, 8), (2, None, 4)], ids=["lead", "middle"])
def test_reshape_with_a_none_target_size(target):
    """keras.layers.Reshape reads a None target size as -1 (inferred); MiT's attention
    builds one. The converter called int(None)."""
    x = keras.Input((6, 4))
    assert_to_torch(keras.Model(x, L.Reshape(target)(x)))


class BatchReshape(L.Layer):
    """Reads the batch with ops.shape (None when traced), as keras_hub's MiT attention does."""

    def __init__(self, newshape, **kwargs):
        super().__init__(**kwargs)
        self.newshape = newshape

    def call(self, x):
        batch = keras.ops.shape(x)[0]
        return keras.ops.reshape(x, (batch, *self.newshape))


def test_traced_reshape_with_a_runtime_batch():
    x = keras.Input((6, 4))
    assert_to_torch(keras.Model(x, BatchReshape((3, 8), name="r")(x)))


def test_traced_reshape_with_a_runtime_batch_and_minus_one():
    """Refused while the batch was None in the trace (two unknown sizes); now it is read
    at run time beside the -1 torch infers."""
    x = keras.Input((6, 4))
    assert_to_torch(keras.Model(x, BatchReshape((-1, 8), name="r")(x)))
