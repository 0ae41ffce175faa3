"""Graph-level Keras -> torch: merges, multi-input/output, nested and shared layers, keras.ops
nodes, recurrent layers, and the clear errors (UnsupportedLayerError, ParityError)."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch

import crossport
from tests.to_torch.harness import assert_to_torch, chain, make_live, module_types

L = keras.layers


def _two_branch(merge):
    inp = keras.Input((8, 8, 3))
    a = L.Conv2D(4, 3, padding="same")(inp)
    b = L.Conv2D(4, 1)(inp)
    return keras.Model(inp, merge([a, b]))


MERGES = {
    "add": L.Add(), "subtract": L.Subtract(), "multiply": L.Multiply(),
    "average": L.Average(), "maximum": L.Maximum(), "minimum": L.Minimum(),
    "concat-channels": L.Concatenate(), "concat-width": L.Concatenate(axis=2),
}


@pytest.mark.parametrize("merge", MERGES.values(), ids=MERGES.keys())
def test_merge(merge):
    assert_to_torch(_two_branch(merge), max_permutes=0)


def test_broadcast_add_of_lower_rank_tensor():
    img, vec = keras.Input((6, 6, 4)), keras.Input((4,))
    x = L.Conv2D(4, 1)(img)
    y = L.Add()([x, L.Reshape((1, 1, 4))(L.Dense(4)(vec))])
    assert_to_torch(keras.Model([img, vec], L.Conv2D(2, 1)(y)))


def test_multi_input_multi_output_dict():
    a, b = keras.Input((8, 8, 3), name="image"), keras.Input((5,), name="meta")
    x = L.GlobalAveragePooling2D()(L.Conv2D(4, 3)(a))
    y = L.Concatenate()([x, L.Dense(4)(b)])
    model = keras.Model([a, b], {"logits": L.Dense(3)(y), "feature": x})
    assert_to_torch(model)


def _nesting(out):
    """An output structure with each tensor replaced by its shape (list and tuple alike,
    dicts by key): what a caller indexes into."""
    if isinstance(out, dict):
        return {k: _nesting(v) for k, v in out.items()}
    if isinstance(out, (list, tuple)):
        return [_nesting(o) for o in out]
    return tuple(out.shape)


OUTPUT_STRUCTURES = {
    "list-of-one": lambda o, p: [o],         # Keras' model(x): the tensor (unpack_singleton)
    "tuple-of-one": lambda o, p: (o,),
    "list-of-a-list-of-one": lambda o, p: [[o]],   # only the top level is unpacked
    "dict-of-one": lambda o, p: {"out": o},
    "list-of-two": lambda o, p: [o, p],
    "bare": lambda o, p: o,
}


@pytest.mark.parametrize("structure", OUTPUT_STRUCTURES.values(), ids=OUTPUT_STRUCTURES.keys())
def test_output_structure_is_what_keras_model_call_returns(structure):
    """Before: keras.Model(inp, [out]) gave a list of one in torch, the bare tensor in Keras."""
    inp = keras.Input((5,))
    hidden = L.Dense(4)(inp)
    model = keras.Model(inp, structure(L.Dense(3)(hidden), hidden))
    conv = assert_to_torch(model)
    x = np.random.default_rng(0).standard_normal((2, 5)).astype("float32")
    with torch.no_grad():
        got = conv.module(torch.from_numpy(x))
    assert _nesting(got) == _nesting(model(x)) == _nesting(model.predict(x, verbose=0))


def test_nested_models_and_shared_layers():
    inner = keras.Sequential([keras.Input((8, 8, 4)), L.Conv2D(4, 3, padding="same"),
                              L.BatchNormalization(), L.ReLU()], name="block")
    shared = L.Conv2D(4, 1, name="shared")
    inp = keras.Input((8, 8, 3))
    x = shared(L.Conv2D(4, 1)(inp))
    x = inner(x)
    x = shared(x)  # the same weights called twice
    conv = assert_to_torch(keras.Model(inp, L.GlobalMaxPooling2D()(x)), max_permutes=0)
    names = dict(conv.module.named_modules())
    assert "block.conv2d" in " ".join(names) or any(n.startswith("block.") for n in names)
    assert sum(1 for n in names if n == "shared") == 1
    assert conv.module.code.count("self.shared(") == 2


def test_nested_functional_model():
    sub_in = keras.Input((6,))
    sub = keras.Model(sub_in, L.Dense(4, activation="relu")(sub_in), name="sub")
    inp = keras.Input((6,))
    assert_to_torch(keras.Model(inp, L.Dense(2)(sub(inp))))


def test_keras_ops_inside_functional_graph():
    inp = keras.Input((8, 8, 3))
    x = L.Conv2D(4, 3, padding="same")(inp)
    x = keras.ops.relu(keras.ops.add(x, 1.0) * 0.5)
    x = keras.ops.mean(x, axis=[1, 2])
    x = keras.ops.softmax(keras.ops.concatenate([x, keras.ops.tanh(x)], axis=-1))
    assert_to_torch(keras.Model(inp, x), max_permutes=0)


def test_activation_layer_and_convert_to_tensor_on_a_scalar():
    """A gate computed from the whole input (a rank-0 tensor) through an Activation layer
    crashed: the layer's axis was read from the scalar's (empty) layout."""
    inp = keras.Input((5, 6), batch_size=2)
    gate = L.Activation("sigmoid")(keras.ops.mean(inp))
    gate = keras.ops.convert_to_tensor(gate, sparse=False)
    assert_to_torch(keras.Model(inp, L.Dense(3)(inp) * gate))


def test_keras_ops_transpose_reshape_matmul():
    inp = keras.Input((5, 6))
    x = L.Dense(6)(inp)
    t = keras.ops.transpose(x, (0, 2, 1))
    y = keras.ops.matmul(x, t)
    y = keras.ops.reshape(y, (-1, 25))
    assert_to_torch(keras.Model(inp, y))


RNN = {
    "lstm-last": L.LSTM(5),
    "lstm-seq": L.LSTM(5, return_sequences=True),
    "lstm-state": L.LSTM(5, return_state=True),
    "lstm-backwards": L.LSTM(5, return_sequences=True, go_backwards=True),
    "lstm-hard-sigmoid": L.LSTM(5, recurrent_activation="hard_sigmoid"),
    "gru-reset-after": L.GRU(5, return_sequences=True),
    "gru-reset-before": L.GRU(5, reset_after=False, return_sequences=True),
    "gru-state-backwards": L.GRU(5, return_state=True, go_backwards=True),
    "simplernn": L.SimpleRNN(5, return_sequences=True),
    "simplernn-relu-state": L.SimpleRNN(5, activation="relu", return_state=True),
    "bilstm-seq": L.Bidirectional(L.LSTM(4, return_sequences=True)),
    "bilstm-last": L.Bidirectional(L.LSTM(4)),
    "bilstm-state": L.Bidirectional(L.LSTM(4, return_state=True)),
    "bigru-seq": L.Bidirectional(L.GRU(4, return_sequences=True)),
}


@pytest.mark.parametrize("layer", RNN.values(), ids=RNN.keys())
def test_recurrent(layer):
    conv = assert_to_torch(chain((7, 6), layer))
    kind = type(getattr(layer, "forward_layer", layer)).__name__
    plain = {"LSTM": "LSTM", "GRU": "GRU", "SimpleRNN": "RNN"}[kind]
    config = str(layer.get_config())
    if "hard_sigmoid" not in config and "'reset_after': False" not in config:
        assert plain in module_types(conv.module)


GENERIC_RNN = {
    "lstmcell-last": L.RNN(L.LSTMCell(5)),
    "lstmcell-state-backwards": L.RNN(L.LSTMCell(5), return_state=True, go_backwards=True),
    "lstmcell-hard-sigmoid-seq": L.RNN(L.LSTMCell(5, recurrent_activation="hard_sigmoid"),
                                       return_sequences=True),
    "grucell-seq": L.RNN(L.GRUCell(5), return_sequences=True),
    "grucell-reset-before-state": L.RNN(L.GRUCell(5, reset_after=False), return_state=True),
    "simplernncell-relu-unrolled": L.RNN(L.SimpleRNNCell(5, activation="relu"),
                                         return_sequences=True, unroll=True),
    "simplernncell-no-bias-dropout": L.RNN(L.SimpleRNNCell(5, use_bias=False, dropout=0.3)),
    "stacked-lstm-gru-last": L.RNN([L.LSTMCell(4), L.GRUCell(3)]),
    "stacked-seq-state": L.RNN([L.GRUCell(4), L.LSTMCell(3), L.SimpleRNNCell(2)],
                               return_sequences=True, return_state=True),
    "stacked-backwards-seq": L.RNN(L.StackedRNNCells([L.LSTMCell(4), L.LSTMCell(3)]),
                                   go_backwards=True, return_sequences=True),
    "stacked-backwards-last-state": L.RNN([L.GRUCell(4, reset_after=False), L.GRUCell(3)],
                                          go_backwards=True, return_state=True),
}


@pytest.mark.parametrize("layer", GENERIC_RNN.values(), ids=GENERIC_RNN.keys())
def test_generic_rnn_over_a_builtin_cell(layer):
    """keras.layers.RNN(cell) is the LSTM / GRU / SimpleRNN layer of that cell."""
    assert_to_torch(chain((7, 6), layer))


def test_generic_rnn_at_run_time_lengths_with_initial_state():
    x, h, c = keras.Input((None, 6)), keras.Input((5,)), keras.Input((5,))
    out = L.RNN(L.LSTMCell(5), return_sequences=True)(x, initial_state=[h, c])
    model = make_live(keras.Model([x, h, c], out))
    conv = crossport.to_torch_with_report(
        model, (torch.randn(2, 7, 6), torch.randn(2, 5), torch.randn(2, 5)))
    assert len(conv.report.shapes) == 2, conv.report.summary()


def test_stacked_cells_with_initial_states():
    x, h1, c1, h2 = keras.Input((7, 6)), keras.Input((4,)), keras.Input((4,)), keras.Input((3,))
    out = L.RNN([L.LSTMCell(4), L.GRUCell(3)], return_sequences=True,
                go_backwards=True)(x, initial_state=[[h1, c1], h2])
    assert_to_torch(keras.Model([x, h1, c1, h2], out))


@pytest.mark.parametrize("cell", [lambda: [L.LSTMCell(4), _Cell()], lambda: _Cell()],
                         ids=["custom-cell-in-a-stack", "custom-cell"])
def test_generic_rnn_over_other_cells_is_refused(cell):
    with pytest.raises(crossport.UnsupportedLayerError, match="only Keras' LSTMCell"):
        crossport.to_torch(chain((7, 6), L.RNN(cell())), (torch.randn(2, 7, 6),))


class _Cell(L.Layer):
    state_size = 3

    def build(self, shape):
        self.kernel = self.add_weight(shape=(shape[-1], 3))

    def call(self, x, states):
        h = keras.ops.tanh(x @ self.kernel + states[0])
        return h, [h]


CONV_LSTM = {
    "2d-same-seq": ((4, 7, 6, 3), L.ConvLSTM2D(4, 3, padding="same", return_sequences=True)),
    "2d-valid-last": ((4, 7, 6, 3), L.ConvLSTM2D(4, 3)),
    # stride 2 over 7 x 6 with a 3 x 2 kernel: TF's SAME pads the odd pixel after
    "2d-same-stride2-state": ((4, 7, 6, 3), L.ConvLSTM2D(4, (3, 2), strides=2, padding="same",
                                                         return_state=True)),
    "2d-backwards-seq": ((4, 7, 6, 3), L.ConvLSTM2D(2, 3, padding="same", go_backwards=True,
                                                    return_sequences=True)),
    "2d-dilated-hard-sigmoid": ((3, 9, 9, 2), L.ConvLSTM2D(
        3, 3, dilation_rate=2, recurrent_activation="hard_sigmoid", padding="same")),
    "2d-channels-first": ((4, 3, 7, 6), L.ConvLSTM2D(4, 3, padding="same", return_sequences=True,
                                                     data_format="channels_first")),
    "1d-same-seq": ((5, 8, 3), L.ConvLSTM1D(4, 3, padding="same", return_sequences=True)),
    "3d-no-bias": ((3, 4, 5, 6, 2), L.ConvLSTM3D(2, 2, use_bias=False)),
}


@pytest.mark.parametrize("case", CONV_LSTM.values(), ids=CONV_LSTM.keys())
def test_conv_lstm(case):
    shape, layer = case
    assert_to_torch(chain(shape, layer))


def test_conv_lstm_at_run_time_lengths_with_initial_state():
    """None steps (Keras requires static spatial sizes), initial states, a conv after."""
    x, h, c = keras.Input((None, 7, 6, 3)), keras.Input((4, 3, 4)), keras.Input((4, 3, 4))
    y = L.ConvLSTM2D(4, 3, strides=2, padding="same")(x, initial_state=[h, c])
    model = make_live(keras.Model([x, h, c], L.Conv2D(2, 1)(y)))
    conv = crossport.to_torch_with_report(
        model, (torch.randn(2, 3, 7, 6, 3), torch.randn(2, 4, 3, 4), torch.randn(2, 4, 3, 4)))
    assert len(conv.report.shapes) == 2, conv.report.summary()  # a second length was checked
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32")
              for s in ((2, 5, 7, 6, 3), (2, 4, 3, 4), (2, 4, 3, 4))]
    np.testing.assert_allclose(conv.module(*map(torch.from_numpy, arrays)).detach().numpy(),
                               np.asarray(model(arrays)), atol=1e-5)


def test_lstm_initial_state():
    x, h, c = keras.Input((7, 6)), keras.Input((5,)), keras.Input((5,))
    out = L.LSTM(5, return_sequences=True)(x, initial_state=[h, c])
    assert_to_torch(keras.Model([x, h, c], out))


def test_text_model_embedding_bilstm():
    tokens = keras.Input((9,), dtype="int32")
    x = L.Embedding(30, 8)(tokens)
    x = L.Bidirectional(L.GRU(6, return_sequences=True))(x)
    x = L.LayerNormalization()(x)
    x = L.GlobalAveragePooling1D()(x)
    assert_to_torch(keras.Model(tokens, L.Dense(2)(x)), int_high=30, export=True)


def test_unsupported_layers_are_all_listed():
    inp = keras.Input((8, 8, 3))
    # Lambdas calling TF itself (a Lambda of keras.ops is traced and converts)
    x = L.Lambda(lambda t: tf.nn.relu6(t) * 2, name="times_two")(inp)
    x = L.Conv2D(4, 3, data_format="channels_last")(x)
    x = L.Lambda(lambda t: tf.math.softplus(t) + 1, name="plus_one")(x)
    x = L.Embedding(5, 2, mask_zero=True)(L.Flatten()(x))
    x = L.BatchNormalization(name="masked")(x)  # consumes the mask: not reproduced
    model = keras.Model(inp, x)
    with pytest.raises(crossport.UnsupportedLayerError) as err:
        crossport.to_torch(model, (torch.randn(1, 8, 8, 3),))
    paths = [p[0] for p in err.value.problems]
    assert paths == ["times_two", "plus_one", "masked"]
    assert "tf.nn.relu6" in str(err.value) and "Keras mask" in str(err.value)


def test_subclassed_model_is_unsupported():
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = L.Dense(2)

        def call(self, x):
            return self.dense(x)

    net = Net()
    net(np.zeros((1, 3), "float32"))
    with pytest.raises(crossport.UnsupportedLayerError, match="subclassed"):
        crossport.to_torch(net, (torch.randn(1, 3),))


def test_parity_error_names_first_divergent_layer(monkeypatch):
    model = chain((8, 8, 3), L.Conv2D(4, 3, name="first"), L.BatchNormalization(name="bn"),
                  L.Conv2D(2, 1, name="last"))
    from tests.to_torch.harness import make_live
    make_live(model)
    from crossport.to_torch.ops import norm

    real = norm.nn.BatchNorm2d

    def wrong_eps(channels, eps, momentum):  # the classic hand-port bug: torch's eps
        return real(channels, eps=0.5, momentum=momentum)

    monkeypatch.setitem(norm._BN, 4, wrong_eps)
    with pytest.raises(crossport.ParityError) as err:
        crossport.to_torch(model, (torch.randn(2, 8, 8, 3),))
    report = err.value.report
    assert report.first_divergent.node == "bn"
    assert report.verdict == "semantic"
    assert "bn" in str(err.value)


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_model_file_paths(tmp_path, suffix):
    model = keras.Sequential([keras.Input((6, 6, 2)), L.Conv2D(3, 3, padding="same"),
                              L.GlobalAveragePooling2D(), L.Dense(2)])
    path = tmp_path / f"model{suffix}"
    model.save(path)
    x = torch.randn(2, 6, 6, 2)
    net = crossport.to_torch(str(path), (x,))
    np.testing.assert_allclose(net(x).detach().numpy(), model(x.numpy()).numpy(), atol=1e-5)


def test_unloadable_file_is_an_input_error(tmp_path):
    path = tmp_path / "broken.keras"
    path.write_text("not a model")
    with pytest.raises(crossport.InputError, match="could not load"):
        crossport.to_torch(str(path), (torch.randn(1, 3),))


def test_nested_model_called_twice():
    """Each call of a nested model binds its inner tensors anew (chained and siamese)."""
    inner = keras.Sequential([keras.Input((4,)), L.Dense(4, activation="relu", name="dense")],
                             name="inner")
    x = keras.Input((4,))
    conv = assert_to_torch(keras.Model(x, inner(inner(x))))
    assert sum(1 for name, _m in conv.module.named_modules() if name == "inner.dense") == 1
    a, b = keras.Input((4,)), keras.Input((4,))
    assert_to_torch(keras.Model([a, b], [inner(a), inner(b)]))


def test_layer_names_that_clean_to_one_torch_name():
    """``a.b`` and ``a_b`` both clean to ``a_b``; ``forward`` and ``to`` are nn.Module's."""
    x = keras.Input((4,))
    y = L.Dense(4, name="a_b")(L.Dense(4, name="a.b")(x))
    y = L.Dense(3, name="to")(L.Dense(4, name="forward")(y))
    conv = assert_to_torch(keras.Model(x, y))
    names = [name for name, _m in conv.module.named_children()]
    assert len(set(names)) == 4 and "forward" not in names and "to" not in names, names


def test_integer_reductions_keep_keras_dtypes():
    """Keras keeps an int32 sum int32 (torch would widen it to int64) and gives the mean of
    ints as float32 (torch refuses it)."""
    x = keras.Input((6,), dtype="int32")
    model = keras.Model(x, [keras.ops.sum(x, axis=1), keras.ops.mean(x, axis=1)])
    assert_to_torch(model, live=False)


def test_check_compares_dtypes(monkeypatch):
    """A module right in value but not in dtype fails the check, saying so."""
    from crossport.to_torch.context import Context

    monkeypatch.setattr(Context, "output_dtype", lambda self, index=0: torch.int64)
    x = keras.Input((6,), dtype="int32")
    with pytest.raises(crossport.ParityError, match="dtype int64 in torch, Keras int32"):
        crossport.to_torch(keras.Model(x, keras.ops.sum(x, axis=1)),
                           (torch.randint(0, 9, (2, 6), dtype=torch.int32),))


def test_torch_failure_names_the_keras_layer(monkeypatch):
    """A converted module that fails in torch is a ConversionError naming the Keras layer
    (an int32 input reaching nn.Linear once integer promotion is switched off)."""
    from crossport.to_torch import emit

    monkeypatch.setattr(emit, "_as_layer_computes",
                        lambda ctx, knode, tensor, value, data: value)
    x = keras.Input((6,), dtype="int32")
    model = keras.Model(x, L.Dense(2, name="head")(x))
    with pytest.raises(crossport.ConversionError, match="Keras layer 'head'"):
        crossport.to_torch(model, (torch.randint(0, 9, (2, 6), dtype=torch.int32),))


def relu(x):  # a user function that only shares Keras' name
    return keras.activations.leaky_relu(x, negative_slope=0.3)


@pytest.mark.parametrize("activation", [relu, lambda x: x * 2], ids=["named-relu", "lambda"])
def test_user_activation_functions_convert_as_what_they_compute(activation):
    """An activation is identified by the function itself, not by its name: a user
    function is traced into the keras.ops it runs (``relu`` here is a leaky relu)."""
    x = keras.Input((6,))
    for layer in (L.Activation(activation), L.Dense(3, activation=activation)):
        model = keras.Model(x, layer(x))
        net = crossport.to_torch(model, (torch.randn(2, 6),))
        a = np.random.default_rng(0).standard_normal((4, 6)).astype("float32")
        np.testing.assert_allclose(net(torch.from_numpy(a)).detach().numpy(),
                                   np.asarray(model(a)), atol=1e-6)


@pytest.mark.parametrize("option", [{"atol": -1.0}, {"atol": float("nan")}, {"check_inputs": -1},
                                    {"check": "yes"}], ids=["atol-negative", "atol-nan",
                                                            "check-inputs-negative", "check-str"])
def test_bad_options_are_input_errors(option):
    model = keras.Sequential([keras.Input((4,)), L.Dense(2)])
    with pytest.raises(crossport.InputError, match=f"option {next(iter(option))}="):
        crossport.to_torch(model, (torch.randn(2, 4),), **option)


def test_half_precision_compute_is_refused():
    """A mixed_float16 layer computes in float16: refused up front, naming the policy."""
    x = keras.Input((4,))
    model = keras.Model(x, L.Dense(2, dtype="float32")(L.Dense(4, dtype="mixed_float16")(x)))
    with pytest.raises(crossport.UnsupportedLayerError, match="mixed_float16"):
        crossport.to_torch(model, (torch.randn(2, 4),))


def test_numpy_constants_in_keras_ops():
    """numpy scalars and arrays as operands: numbers and buffers, laid out like tensors
    (a per-channel array times a channels-first conv output)."""
    x = keras.Input((8, 8, 3))
    y = L.Conv2D(4, 3)(x) * np.arange(1, 5, dtype="float32")
    y = y / np.sqrt(np.float32(4.0)) + np.full((6, 1, 4), 0.5)
    assert_to_torch(keras.Model(x, L.Conv2D(2, 1)(y)))


def test_dict_inputs_in_any_insertion_order():
    """Keras flattens a dict of inputs in sorted key order; the check feeds it a dict."""
    a, b = keras.Input((4,), name="a"), keras.Input((3,), name="b")
    model = keras.Model({"b": b, "a": a}, L.Dense(2)(L.Concatenate()([a, b])))
    assert_to_torch(model)


def test_gru_initial_state_as_one_tensor():
    x, h = keras.Input((5, 3)), keras.Input((4,))
    assert_to_torch(keras.Model([x, h], L.GRU(4)(x, initial_state=h)))


def _mixed_rank_dot():
    a, b = keras.Input((4,)), keras.Input((3, 4))
    return keras.Model([a, b], L.Dot(axes=(1, 2))([a, b]))


def _mha_over_axis_1_of_rank_4():
    q = keras.Input((3, 2, 8))
    return keras.Model(q, L.MultiHeadAttention(2, 4, attention_axes=(1,))(q, q))


def _bidirectional_with_other_backward_layer():
    x = keras.Input((5, 3))
    layer = L.Bidirectional(L.LSTM(4), backward_layer=L.GRU(4, go_backwards=True))
    return keras.Model(x, layer(x))


@pytest.mark.parametrize("build, reason", [
    (_mixed_rank_dot, "ranks"), (_mha_over_axis_1_of_rank_4, "rank 4"),
    (_bidirectional_with_other_backward_layer, "backward layer")],
    ids=["dot-mixed-ranks", "mha-rank-4-query", "bidirectional-lstm-gru"])
def test_layers_used_beyond_their_converter_are_refused(build, reason):
    model = build()
    example = tuple(torch.randn(2, *t.shape[1:]) for t in model.inputs)
    with pytest.raises(crossport.UnsupportedLayerError, match=reason):
        crossport.to_torch(model, example)


def test_keras_ops_abs():
    """keras.ops.abs builds an ``Absolute`` op (not ``Abs``)."""
    x = keras.Input((5,))
    assert_to_torch(keras.Model(x, keras.ops.abs(x) - 0.5))


def test_flatten_over_a_dynamic_dim_is_refused():
    x = keras.Input((None, 2))
    with pytest.raises(crossport.UnsupportedLayerError, match="needs static sizes"):
        crossport.to_torch(keras.Model(x, L.Flatten()(x) * 2.0), (torch.randn(2, 4, 2),))


def test_integer_inputs_to_float_layers():
    """Keras' ops promote an int input of Dense or a global pool to float; torch's modules
    refuse it, so the module casts it first (Embedding keeps its ids)."""
    ids = keras.Input((6,), dtype="int32")
    counts = keras.Input((4, 4, 3), dtype="int32")
    pooled = L.GlobalAveragePooling2D()(counts)
    out = L.Concatenate()([L.Dense(3)(ids), pooled, L.Flatten()(L.Embedding(10, 2)(ids))])
    assert_to_torch(keras.Model([ids, counts], out), int_high=9)


NUMBER_OPERANDS = {
    "minimum-float": (lambda x: keras.ops.minimum(x, 0.5), "float32"),
    "maximum-number-first": (lambda x: keras.ops.maximum(0.25, x), "float32"),
    "maximum-int-keeps-int32": (lambda x: keras.ops.maximum(x, 3), "int32"),
    "maximum-float-of-int-is-float": (lambda x: keras.ops.minimum(x, 3.5), "int32"),
    "not-equal-number-first": (lambda x: keras.ops.not_equal(3, x), "int32"),
    "greater-number-first": (lambda x: keras.ops.greater(0.0, x), "float32"),
    "logical-and-true": (lambda x: keras.ops.logical_and(x > 0, True), "float32"),
}


@pytest.mark.parametrize("fn, dtype", NUMBER_OPERANDS.values(), ids=NUMBER_OPERANDS.keys())
def test_keras_ops_with_a_python_number_operand(fn, dtype):
    """torch.maximum / torch.gt ... take tensors only: the number becomes a 0-d tensor that
    keeps Keras' result dtype (int32 stays int32, a float number with ints is float32)."""
    x = keras.Input((4, 5), dtype=dtype)
    assert_to_torch(keras.Model(x, fn(x)))


def test_softmax_op_over_several_axes_is_refused():
    """Keras' own Softmax op fails on a tuple axis in a functional graph (TF's softmax takes
    one axis); the converter used to flatten the whole tensor, batch included."""
    x = keras.Input((4, 5, 3))
    model = keras.Model(x, keras.ops.softmax(x, axis=(1, 2)))
    with pytest.raises(crossport.UnsupportedLayerError, match="over axes"):
        crossport.to_torch(model, (torch.randn(2, 4, 5, 3),))


def test_keras_failing_on_the_example_is_an_input_error():
    """An id out of the Embedding's range: TF's gather raises; the check cannot run Keras, which
    is one InputError quoting Keras, not a raw TF exception."""
    ids = keras.Input((3,), dtype="int32")
    model = keras.Model(ids, L.Embedding(4, 2)(ids))
    with pytest.raises(crossport.InputError, match="Keras itself fails .*not in"):
        crossport.to_torch(model, (torch.tensor([[0, 1, 9]], dtype=torch.int32),))


def test_inputs_are_cast_to_the_keras_input_dtype():
    """Keras casts each input to its Input's dtype (torch's default int64 ids to int32,
    float64 to float32); the module does too, so its outputs keep Keras' dtypes."""
    ids, values = keras.Input((4,), dtype="int32"), keras.Input((4,))
    model = keras.Model([ids, values], [ids * 2, L.Dense(3)(values * 2.0)])
    net = crossport.to_torch(model, (torch.arange(8, dtype=torch.int32).reshape(2, 4),
                                     torch.randn(2, 4)))
    wide = (torch.arange(8).reshape(2, 4), torch.randn(2, 4, dtype=torch.float64))
    want = model([t.numpy() for t in wide])
    with torch.no_grad():
        got = net(*wide)
    for w, g in zip(want, got):
        assert str(g.dtype).replace("torch.", "") == w.dtype.name
        np.testing.assert_allclose(g.numpy(), np.asarray(w), rtol=1e-5, atol=1e-5)


def _conv(x):
    return L.Conv2D(3, 1)(x)   # held NCHW: the op's Keras axes are remapped


MORE_OPS = {
    "cast-bool-to-float": ((4, 5), "float32", lambda x: keras.ops.cast(x > 0, "float32")),
    "cast-float-to-int": ((4, 5), "float32", lambda x: keras.ops.cast(x * 3.0, "int32")),
    "where": ((4, 5), "float32", lambda x: keras.ops.where(x > 0, x, x * 0.1)),
    "where-int-and-float": ((4, 5), "int32", lambda x: keras.ops.where(x > 3, x, 0.5)),
    "clip": ((4, 5), "float32", lambda x: keras.ops.clip(x, -0.5, 0.5)),
    "clip-int": ((4, 5), "int32", lambda x: keras.ops.clip(x, 2, 6)),
    "cumsum-conv-channels": ((4, 5, 3), "float32", lambda x: keras.ops.cumsum(_conv(x), -1)),
    "cumsum-int32-stays-int32": ((4, 5), "int32", lambda x: keras.ops.cumsum(x, axis=1)),
    "cumprod": ((4, 5), "float32", lambda x: keras.ops.cumprod(x, axis=-1)),
    "cumsum-long-row": ((1500,), "float32", lambda x: keras.ops.cumsum(x, axis=-1)),
    "cumprod-long-row-underflows": ((1500,), "float32", lambda x: keras.ops.cumprod(x, -1)),
    "cumsum-int-as-float32": ((4, 5), "int32", lambda x: keras.ops.cumsum(x, 1, "float32")),
    "cumsum-flat": ((4, 5), "float32", lambda x: keras.ops.cumsum(x)),
    "cumprod-flat-conv-channels": ((4, 5, 3), "float32",
                                   lambda x: keras.ops.cumprod(_conv(x) * 0.2 + 1.0)),
    "argmax-keepdims": ((4, 5), "float32", lambda x: keras.ops.argmax(x, -1, keepdims=True)),
    "argmax-conv-channels": ((4, 5, 3), "float32", lambda x: keras.ops.argmax(_conv(x), -1)),
    "expand-dims-squeeze": ((4, 5), "float32",
                            lambda x: keras.ops.squeeze(keras.ops.expand_dims(x, 1), 1) + 1.0),
    "squeeze-conv": ((4, 1, 3), "float32", lambda x: keras.ops.squeeze(_conv(x), 2)),
    "erf": ((4, 5), "float32", lambda x: keras.ops.erf(x)),
    "ones-zeros-like": ((4, 5), "float32",
                        lambda x: keras.ops.ones_like(x) * 2.0 + keras.ops.zeros_like(x)),
}


@pytest.mark.parametrize("shape, dtype, fn", MORE_OPS.values(), ids=MORE_OPS.keys())
def test_more_keras_ops(shape, dtype, fn):
    x = keras.Input(shape, dtype=dtype)
    assert_to_torch(keras.Model(x, fn(x)))


def test_argmax_reads_negative_zero_below_zero():
    """Keras' TF backend maps -0.0 to -tiny before argmax (its flush-to-zero fix)."""
    x = keras.Input((4,))
    model = keras.Model(x, keras.ops.argmax(x, axis=-1))
    net = crossport.to_torch(model, (torch.randn(2, 4),))
    values = torch.tensor([[-0.0, 0.0, -1.0, -0.0], [-0.0, -0.0, -2.0, -0.0]])
    assert net(values).tolist() == np.asarray(model(values.numpy())).tolist()


@pytest.mark.parametrize("length", [3, 64, 1000])
def test_argmax_and_argmin_never_pick_nan_or_an_extreme_as_tf(length):
    """TF's arg reducer starts from index 0 holding the lowest (highest) float and moves on
    a strictly greater (smaller) value: NaN, -inf and -FLT_MAX are never picked (an all-NaN
    row is 0). torch.argmax picks the first NaN; the module gave another index on 57 of 212
    rows of length 3 holding NaN/inf (found by the adversarial audit's special-value probe).
    Rows mix NaN, ±inf, ±0.0 and ±FLT_MAX at several densities, over both axes."""
    x = keras.Input((None, length))
    model = keras.Model(x, [keras.ops.argmax(x, axis=-1), keras.ops.argmin(x, axis=-1),
                            keras.ops.argmax(x, axis=1), keras.ops.argmin(x, axis=1)])
    net = crossport.to_torch(model, (torch.randn(2, 4, length),))
    rng = np.random.default_rng(length)
    values = rng.standard_normal((4, 50, length)).astype("float32")
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4028235e38, -3.4028235e38],
                       "float32")
    mask = rng.random(values.shape) < rng.choice([0.1, 0.5, 0.95], values.shape[:2])[..., None]
    values[mask] = rng.choice(special, mask.sum())
    values[0, 0], values[0, 1] = np.nan, -np.inf  # all-NaN and all -inf rows
    values[0, 2, :], values[0, 2, -1] = np.nan, -np.inf
    with torch.no_grad():
        got = net(torch.from_numpy(values))
    for want, have in zip(model(values), got):
        np.testing.assert_array_equal(have.numpy(), np.asarray(want))


def test_concatenate_of_a_masked_and_an_unmasked_tensor_feeds_an_rnn():
    """Concatenate builds its output mask from ones_like / expand_dims ops of each input."""
    a, b = keras.Input((6, 3)), keras.Input((6, 3))
    x = L.Concatenate()([L.Masking()(a), b])
    assert_to_torch(keras.Model([a, b], L.GRU(4)(x)))


@pytest.mark.parametrize("merge", [L.Add, L.Subtract, L.Multiply, L.Maximum, L.Average],
                         ids=["add", "subtract", "multiply", "maximum", "average"])
def test_merge_layer_expands_a_lower_rank_input_after_the_batch(merge):
    """Keras' merge layers expand ``[N, C]`` at axis 1 to ``[N, 1, 1, C]`` (keras.ops would
    broadcast from the right, the batch against W); the conv output is held NCHW."""
    img, vec, seq = keras.Input((4, 5, 3)), keras.Input((3,)), keras.Input((5, 3))
    x = L.Conv2D(3, 1)(img)
    model = keras.Model([img, vec, seq], [merge()([x, vec]), merge()([vec, seq]),
                                          merge()([x, seq])])
    assert_to_torch(model)


def test_dict_examples_are_taken_by_input_name():
    """A dict-input model (every keras_hub backbone) flattens its inputs in sorted key order,
    which is the module's positional order; the dict a user passes to Keras was refused with
    'example inputs must be torch tensors or numpy arrays, got str' (found by the adversarial
    audit on a BERT backbone). A dict keyed by the input keys is taken by name, whatever its
    order; wrong keys are an InputError naming the model's inputs in positional order."""
    tokens = keras.Input((4,), dtype="int32", name="tokens")
    scale = keras.Input((1,), name="scale")
    model = keras.Model({"tokens": tokens, "scale": scale},
                        L.Dense(2)(L.Flatten()(L.Embedding(9, 3)(tokens))) * scale)
    example = {"tokens": torch.randint(0, 9, (2, 4), dtype=torch.int32),
               "scale": torch.rand(2, 1) + 1}
    net = crossport.to_torch(model, example)
    assert [n.target for n in net.graph.nodes if n.op == "placeholder"] == ["scale", "tokens"]
    with torch.no_grad():
        got = net(example["scale"], example["tokens"])
    want = model({k: v.numpy() for k, v in example.items()})
    np.testing.assert_allclose(got.numpy(), np.asarray(want), rtol=1e-5, atol=1e-6)
    with pytest.raises(crossport.InputError, match=r"inputs are \['scale', 'tokens'\]"):
        crossport.to_torch(model, {"tokens": example["tokens"]})


def test_dict_examples_of_a_list_input_model_are_keyed_by_input_name():
    first, second = keras.Input((3,), name="first"), keras.Input((2,), name="second")
    model = keras.Model([first, second], L.Concatenate()([first, second * 2.0]))
    example = {"second": torch.randn(2, 2), "first": torch.randn(2, 3)}
    net = crossport.to_torch(model, example)
    with torch.no_grad():
        got = net(example["first"], example["second"])
    torch.testing.assert_close(got[:, 3:], example["second"] * 2)


def test_lambda_layers_of_keras_ops_are_traced():
    """A Lambda's function (extra arguments too) is recorded like a custom layer's call():
    it converts to the torch ops of its keras.ops (it was refused as arbitrary Python)."""

    def gated(t, scale):
        a, b = keras.ops.split(t, 2, axis=-1)
        return a * keras.ops.sigmoid(b) * scale

    inp = keras.Input((6,))
    y = L.Lambda(lambda t: keras.ops.tanh(t) * 2 + keras.ops.mean(t, -1, keepdims=True))(inp)
    z = L.Lambda(gated, arguments={"scale": 3.0})(L.Dense(6)(y))
    model = keras.Model(inp, [y, z])
    conversion = crossport.to_torch_with_report(model, (torch.randn(3, 6),))
    assert conversion.report.passed
    x = torch.randn(5, 6)
    with torch.no_grad():
        got = conversion.module(x)
    for g, w in zip(got, model(x.numpy())):
        np.testing.assert_allclose(g.numpy(), np.asarray(w), rtol=1e-5, atol=1e-6)
