"""Custom Keras layers whose ``call()`` reads run-time sizes (``ops.shape(x)[1]`` of a None
dim): traced at the example's sizes, the converted module reads ``x.shape[d]`` at run time.
Each model is converted at one size and compared with Keras at several others; a size the
layer's Python fixes (``int(...)``) fails loudly at the second size of the self-check."""

import keras
import numpy as np
import pytest
import torch
from keras import ops

import crossport

L = keras.layers


def assert_at_sizes(model, example: tuple, others: list[tuple], atol: float = 1e-5):
    """Convert at ``example`` (torch tensors), then compare with Keras at each shape set in
    ``others`` (one shape per input; int inputs get ids in [0, 8))."""
    conv = crossport.to_torch_with_report(model, example)
    assert len(conv.report.shapes) == 2, conv.report.summary()  # a second size was checked
    rng = np.random.default_rng(0)
    for shapes in others:
        arrays = [rng.integers(0, 8, s).astype("int32") if not a.is_floating_point()
                  else rng.standard_normal(s).astype("float32")
                  for a, s in zip(example, shapes)]
        ref = model(arrays if len(arrays) > 1 else arrays[0])
        got = conv.module(*[torch.from_numpy(a) for a in arrays])
        for r, g in zip(keras.tree.flatten(ref), keras.tree.flatten(got)):
            r = np.asarray(r)
            assert r.shape == tuple(g.shape), (shapes, r.shape, g.shape)
            np.testing.assert_allclose(g.detach().numpy(), r, atol=atol, err_msg=str(shapes))
    return conv


class SlicedPositions(L.Layer):
    """Adds the first ``seq_len`` rows of a table: ops.slice of a variable (Keras would
    compute it eagerly, a constant of the example's length) and Python slicing of it."""

    def build(self, input_shape):
        self.table = self.add_weight(shape=(32, input_shape[-1]))
        self.other = self.add_weight(shape=(32, input_shape[-1]))

    def call(self, x):
        length = ops.shape(x)[1]
        sliced = ops.slice(self.table, (0, 0), (length, ops.shape(x)[-1]))
        return ops.broadcast_to(sliced, ops.shape(x)) + x * self.other[:length]


class Heads(L.Layer):
    """Self-attention with the heads split by reshapes to run-time sizes and a causal mask
    from ops.arange(seq_len); the scores scaled by a run-time size made a tensor."""

    def __init__(self, heads, **kwargs):
        super().__init__(**kwargs)
        self.heads = heads

    def build(self, input_shape):
        self.qkv = L.Dense(3 * input_shape[-1])
        self.qkv.build(input_shape)

    def call(self, x):
        batch, length, width = ops.shape(x)[0], ops.shape(x)[1], ops.shape(x)[2]
        q, k, v = ops.split(self.qkv(x), 3, axis=-1)

        def split(t):
            t = ops.reshape(t, (batch, length, self.heads, width // self.heads))
            return ops.transpose(t, (0, 2, 1, 3))

        q, k, v = split(q), split(k), split(v)
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))
        scores = scores / ops.sqrt(ops.cast(length, "float32"))
        i = ops.expand_dims(ops.arange(length), 1)
        causal = ops.expand_dims(i >= ops.arange(length), 0)
        scores = ops.where(causal, scores, -1e9)
        out = ops.matmul(ops.softmax(scores, axis=-1), v)
        return ops.reshape(ops.transpose(out, (0, 2, 1, 3)), (batch, length, width))


class Windows(L.Layer):
    """Swin-style windowing: the image cut into ``w x w`` windows with ``//`` of run-time
    sizes, a per-window mean subtracted, and put back together."""

    def __init__(self, window, **kwargs):
        super().__init__(**kwargs)
        self.window = window

    def call(self, x):
        batch, height, width, channels = (ops.shape(x)[i] for i in range(4))
        w = self.window
        t = ops.reshape(x, (batch, height // w, w, width // w, w, channels))
        t = ops.transpose(t, (0, 1, 3, 2, 4, 5))
        t = ops.reshape(t, (-1, w * w, channels))
        t = t - ops.mean(t, axis=1, keepdims=True)
        t = ops.reshape(t, (batch, height // w, width // w, w, w, channels))
        t = ops.transpose(t, (0, 1, 3, 2, 4, 5))
        return ops.reshape(t, (batch, height, width, channels))


class Padded(L.Layer):
    """A token mask from ops.ones of run-time sizes, and the last position taken by a
    run-time index (``x[:, n - 1]``)."""

    def call(self, x):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        weights = ops.ones((batch, length, 1)) * 0.5
        last = x[:, length - 1]
        return x * weights + ops.expand_dims(last, 1)


def test_positional_slice_by_sequence_length():
    x = keras.Input((None, 4))
    model = keras.Model(x, SlicedPositions(name="positions")(x))
    assert_at_sizes(model, (torch.randn(2, 5, 4),), [[(3, 2, 4)], [(1, 9, 4)], [(2, 32, 4)]])


def test_heads_reshaped_with_ops_shape():
    x = keras.Input((None, 8))
    model = keras.Model(x, Heads(2, name="attention")(x))
    assert_at_sizes(model, (torch.randn(2, 6, 8),), [[(3, 4, 8)], [(1, 11, 8)]])


def test_windows_by_floor_division():
    x = keras.Input((None, None, 3))
    model = keras.Model(x, Windows(2, name="windows")(x))
    assert_at_sizes(model, (torch.randn(2, 4, 6, 3),), [[(1, 8, 4, 3)], [(3, 2, 10, 3)]])


def test_ones_of_runtime_sizes_and_runtime_index():
    x = keras.Input((None, 3))
    model = keras.Model(x, Padded(name="padded")(x))
    assert_at_sizes(model, (torch.randn(2, 5, 3),), [[(4, 2, 3)], [(1, 7, 3)]])


def test_module_source_reads_runtime_sizes(tmp_path):
    """to_torch_source writes the run-time sizes as ``x.size(d)`` expressions."""
    from tests.to_torch.harness import load_written

    x = keras.Input((None, 8))
    model = keras.Model(x, Heads(2, name="attention")(x))
    conv = crossport.to_torch_with_report(model, (torch.randn(2, 6, 8),))
    written = load_written(crossport.to_torch_source(conv, tmp_path / "heads.py")).build_model()
    source = (tmp_path / "heads.py").read_text()
    assert ".size(1)" in source and ".reshape(size" in source
    a = np.random.default_rng(1).standard_normal((3, 10, 8)).astype("float32")
    np.testing.assert_allclose(written(torch.from_numpy(a)).detach().numpy(),
                               np.asarray(model(a)), atol=1e-5)


class Baked(L.Layer):
    """Turns the run-time length into a plain number (``int``) and builds a numpy constant
    from it: a size crossport cannot follow."""

    def call(self, x):
        length = int(ops.shape(x)[1])
        return x + np.arange(length, dtype="float32")[:, None]

    def compute_output_shape(self, input_shape):
        return input_shape


def test_a_size_fixed_by_python_fails_loudly_at_the_second_size():
    x = keras.Input((None, 3))
    model = keras.Model(x, Baked(name="baked")(x))
    with pytest.raises(crossport.CrossportError, match="fails at 4x10x3"):
        crossport.to_torch(model, (torch.randn(2, 5, 3),))


def test_the_second_size_moves_every_none_dim_together():
    """Token ids and their padding mask share the sequence length: it moves for both."""
    ids = keras.Input((None,), dtype="int32")
    mask = keras.Input((None,), dtype="int32")
    h = L.Embedding(8, 4)(ids)
    out = Heads(2, name="attention")(h) * ops.expand_dims(ops.cast(mask, "float32"), -1)
    model = keras.Model([ids, mask], out)
    example = (torch.randint(0, 8, (2, 5)), torch.ones(2, 5, dtype=torch.int64))
    conv = assert_at_sizes(model, example, [[(3, 7), (3, 7)]])
    assert conv.report.shape_sets[1] == [(4, 10), (4, 10)]


def gelu_tanh(x):
    """A user activation function (not one of Keras' own): traced into keras.ops."""
    return keras.activations.gelu(x, approximate=True)


@pytest.mark.parametrize("activation", [gelu_tanh, lambda x: ops.tanh(x) * 2.0],
                         ids=["function", "lambda"])
def test_custom_activation_is_traced(activation):
    x = keras.Input((None, 4))
    h = L.Dense(6, activation=activation, name="dense")(x)
    model = keras.Model(x, L.Activation(activation, name="act")(h))
    assert_at_sizes(model, (torch.randn(2, 5, 4),), [[(3, 2, 4)]])


def test_untraceable_activation_is_refused_by_name():
    x = keras.Input((4,))
    model = keras.Model(x, L.Dense(3, activation=lambda t: np.tanh(t), name="dense")(x))
    with pytest.raises(crossport.UnsupportedLayerError, match=r"dense \(Dense\).*activation"):
        crossport.to_torch(model, (torch.randn(2, 4),))


@pytest.mark.parametrize("causal", [False, True])
def test_dot_product_attention_op(causal):
    """Grouped queries (4 query heads, 2 key heads), a mask, the causal mask."""
    q = keras.Input((None, 4, 4))
    k = keras.Input((None, 2, 4))
    mask = keras.Input((None, None), dtype="bool")
    out = ops.dot_product_attention(q, k, k * 2.0, mask=mask[:, None], is_causal=causal)
    model = keras.Model([q, k, mask], out)
    rng = np.random.default_rng(0)
    example = (torch.randn(2, 5, 4, 4), torch.randn(2, 5, 2, 4),
               torch.from_numpy(rng.random((2, 5, 5)) > 0.3))
    crossport.to_torch_with_report(model, example)


def test_softmax_layer_with_a_positional_mask():
    """keras_hub's attention calls ``self._softmax(scores, mask)``: the mask was dropped."""
    x = keras.Input((3, 5))
    mask = keras.Input((3, 5), dtype="int32")
    model = keras.Model([x, mask], L.Softmax()(x, mask))
    example = (torch.randn(2, 3, 5), torch.randint(0, 2, (2, 3, 5)))
    crossport.to_torch_with_report(model, example)


class Pair(L.Layer):
    """A sublayer returning ``(y, None)`` (an optional output): Keras' functional graph
    cannot record it; the trace inlines it."""

    def build(self, input_shape):
        self.dense = L.Dense(input_shape[-1])
        self.dense.build(input_shape)

    def call(self, x):
        return self.dense(x), None


class UsesPair(L.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.pair = Pair()

    def build(self, input_shape):
        self.pair.build(input_shape)

    def call(self, x):
        y, extra = self.pair(x)
        return y if extra is None else y + extra

    def compute_output_shape(self, input_shape):
        return input_shape


def test_sublayer_returning_none_is_inlined():
    x = keras.Input((None, 4))
    model = keras.Model(x, UsesPair(name="uses")(x))
    assert_at_sizes(model, (torch.randn(2, 3, 4),), [[(1, 6, 4)]])


class Rotary(L.Layer):
    """RoPE as keras_hub computes it: positions ``arange(seq_len) + cast(start)`` (an
    eager 0-d constant), an einsum with the inverse frequencies, cos/sin, rotate half."""

    def call(self, x):
        length, width = ops.shape(x)[1], x.shape[-1]
        positions = ops.arange(length, dtype="float32") + ops.cast(0, "float32")
        inverse = 1.0 / (10000 ** (np.arange(0, width, 2, dtype="float32") / width))
        freq = ops.einsum("bi,j->bij", ops.expand_dims(positions, 0), inverse)
        angles = ops.reshape(ops.stack((freq, freq), axis=-2),
                             (*ops.shape(freq)[:-1], ops.shape(freq)[-1] * 2))
        x1, x2 = ops.split(x, 2, axis=-1)
        rotated = ops.reshape(ops.stack((-x2, x1), axis=-2), ops.shape(x))
        return x * ops.cos(angles) + rotated * ops.sin(angles)


def test_rotary_embedding_with_einsum_and_scalar_constant():
    """A 0-d constant became a 1-d buffer (np.ascontiguousarray), and einsum's shape
    inference dropped the run-time length (a reshape fixed it at the example's)."""
    x = keras.Input((None, 8))
    model = keras.Model(x, Rotary(name="rotary")(x))
    assert_at_sizes(model, (torch.randn(2, 5, 8),), [[(3, 9, 8)], [(1, 2, 8)]])


class Dense(L.Layer):
    """Shares the name of keras.layers.Dense, computes something else."""

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(input_shape[-1],))

    def call(self, x):
        return x * self.scale + 1.0


def test_a_custom_class_sharing_a_keras_name_is_traced_not_converted_as_keras():
    """keras_hub's RMSNormalization shares Keras' name: Keras' converter crashed on it."""
    x = keras.Input((None, 4))
    model = keras.Model(x, Dense(name="lookalike")(x))
    assert_at_sizes(model, (torch.randn(2, 3, 4),), [[(1, 5, 4)]])


class ScaleFirst(L.Layer):
    """T5's layer norm: ``self.weight * x`` (a Variable's operator, which TF refused with a
    KerasTensor), ``ops.ndim`` (symbolic in Keras), a sublayer whose call takes no
    ``training`` called with it (Layer.__call__ drops it; an inlined call must too)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = Dense()

    def build(self, input_shape):
        self.weight = self.add_weight(shape=(input_shape[-1],))
        self.inner.build(input_shape)

    def call(self, x, training=None):
        x = self.inner(x, training=training)
        rank = ops.ndim(x)
        return self.weight * x if rank == 3 else x


def test_variable_operator_ndim_and_dropped_training_kwarg():
    x = keras.Input((None, 4))
    model = keras.Model(x, ScaleFirst(name="scale")(x))
    assert_at_sizes(model, (torch.randn(2, 3, 4),), [[(1, 5, 4)]])


def test_unstack_and_outer_ops():
    x = keras.Input((3, 4))
    a, b, c = ops.unstack(x, axis=1)
    model = keras.Model(x, [a * c, ops.outer(b[:1, :], c[:1, :])])
    crossport.to_torch_with_report(model, (torch.randn(2, 3, 4),))


def test_unstack_along_a_runtime_size_is_refused():
    x = keras.Input((None, 4))
    model = keras.Model(x, UnstackRows(name="rows")(x))
    with pytest.raises(crossport.UnsupportedLayerError, match="unstack.*run time"):
        crossport.to_torch(model, (torch.randn(2, 3, 4),))


class UnstackRows(L.Layer):
    def call(self, x):
        return ops.sum(ops.stack(ops.unstack(x, axis=1)[:2], axis=1), axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2])


@pytest.mark.parametrize("axis", [(-1,), (1, 2)], ids=["one-tuple", "two-axes"])
def test_softmax_layer_over_axis_tuples(axis):
    """MultiHeadAttention with dropout builds Softmax(axis=(-1,)): it was refused."""
    x = keras.Input((3, 4, 5))
    model = keras.Model(x, L.Softmax(axis=axis)(x))
    crossport.to_torch_with_report(model, (torch.randn(2, 3, 4, 5),))


def test_where_with_an_integer_condition_and_a_list_key():
    """Keras casts where's condition to bool (GPT-OSS), and reads a list key as a tuple
    (RoformerV2's ``x[[..., 0]]``-style indexing)."""
    x = keras.Input((3, 4))
    flags = keras.Input((3, 4), dtype="int32")
    model = keras.Model([x, flags], ops.where(flags, x, -x)[[slice(None), 0]])
    crossport.to_torch_with_report(model, (torch.randn(2, 3, 4), torch.randint(0, 2, (2, 3, 4))))


def test_recurrent_layer_with_a_user_activation_is_refused():
    """The activation of an LSTM runs inside each step: it is not split off and traced
    (it was, before the split was limited to layers applying it last: a parity failure)."""
    x = keras.Input((5, 3))
    model = keras.Model(x, L.LSTM(4, activation=gelu_tanh, name="lstm")(x))
    with pytest.raises(crossport.CrossportError, match="not one of Keras' own"):
        crossport.to_torch(model, (torch.randn(2, 5, 3),))


class _Block(keras.layers.Layer):
    """A custom layer whose sublayers Keras records no nodes for in the functional graph."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.proj = keras.layers.Dense(8, name="proj")
        self.norm = keras.layers.LayerNormalization(name="norm")

    def call(self, x):
        return self.norm(self.proj(x))


def _graph_state(model) -> dict:
    layers = [model, *model._flatten_layers(include_self=False, recursive=True)]
    return {layer.name: (len(layer._inbound_nodes), len(layer._outbound_nodes))
            for layer in layers}


def test_tracing_leaves_the_users_layers_graph_as_it_was():
    """Tracing calls a custom layer's sublayers on stand-ins, which Keras recorded on the
    user's layers: `proj.output` then named crossport's trace, and after a second
    conversion it raised (two inbound nodes)."""
    inputs = keras.Input((None, 8))
    model = keras.Model(inputs, keras.layers.Dense(4, name="head")(_Block(name="block")(inputs)))
    before = _graph_state(model)
    x = np.random.default_rng(0).random((2, 5, 8), dtype=np.float32)
    for _ in range(2):
        crossport.to_torch(model, (x,))
        assert _graph_state(model) == before
    with pytest.raises(AttributeError):  # as before: called only inside the block's call()
        model.get_layer("block").proj.output


@pytest.mark.parametrize("axis, shape, weights", [
    ([1, 2, 3], (6, 5, 4), True), ([1, 2], (5, 6), True), ([1, 2], (5, 6), False)],
    ids=["image-three-axes", "sequence-two-axes", "no-gamma-no-beta"])
def test_layer_norm_built_on_fixed_sizes_then_called_on_none_dims(axis, shape, weights):
    """A LayerNormalization built on fixed sizes and reused in a model with None dims: its
    gamma fixes the normalized sizes, so the module is right at those (any batch) and
    refuses others rather than reinterpreting gamma as Keras' reshape would."""
    layer = L.LayerNormalization(axis=axis, center=weights, scale=weights)
    layer(keras.Input(shape))  # built here, at fixed sizes
    if weights:
        layer.set_weights([np.random.default_rng(1).standard_normal(w.shape) for w in
                           layer.weights])
    inp = keras.Input((None,) * (len(shape) - 1) + shape[-1:])
    model = keras.Model(inp, layer(inp))
    x = np.random.default_rng(0).standard_normal((3, *shape)).astype("float32")
    module = crossport.to_torch(model, torch.from_numpy(x[:2]))
    got = module(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, np.asarray(model(x)), atol=1e-5)
    other = np.random.default_rng(2).standard_normal(
        (1, *(s + 1 for s in shape[:-1]), shape[-1])).astype("float32")  # other None dims
    if weights:
        with pytest.raises(RuntimeError):
            module(torch.from_numpy(other))
    else:  # nothing fixes the sizes: right at every size
        np.testing.assert_allclose(module(torch.from_numpy(other)).detach().numpy(),
                                   np.asarray(model(other)), atol=1e-5)
