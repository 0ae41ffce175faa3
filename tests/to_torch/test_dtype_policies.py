"""Dtype policies in Keras -> PyTorch: ``Layer.__call__`` casts float inputs to a layer's
compute dtype, and under a mixed policy every variable read too. A traced custom layer
(``call()`` run directly) gets the input casts as ops of its trace and converts at float32
and float64 compute; float16 / bfloat16 compute (mixed or not, traced or converted) and
keras.ops on half-precision values are refused with one line per kind; bfloat16 tensors
cross the boundary (example inputs, casts) without a crash; uint16/32/64, which torch cannot
compute on, are refused."""

import copy

import keras
import numpy as np
import pytest
import torch
from keras import ops

import crossport
from tests.to_torch.harness import assert_to_torch, make_live, random_inputs

L = keras.layers


class Scale(L.Layer):
    """exp(x * w) / 3 with a weight of the layer's variable dtype."""

    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1],), initializer="random_normal")

    def call(self, x):
        return ops.exp(x * self.w) / 3.0


class Twice(L.Layer):
    def call(self, x):
        return ops.multiply(x, 2.0)


class CallsTwice(L.Layer):
    """A float32 custom layer calling a custom sublayer of another policy (inlined)."""

    def __init__(self, inner_dtype, **kwargs):
        super().__init__(**kwargs)
        self.inner = Twice(dtype=inner_dtype)

    def call(self, x):
        return self.inner(x) + 1.0


def _convert_and_compare(model, x):
    conv = crossport.to_torch_with_report(model, (x,))
    ref = np.asarray(model(x))
    got = conv.module(torch.from_numpy(x)).detach().numpy()
    assert got.dtype == ref.dtype
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)


def _x(dtype="float32"):
    return np.random.default_rng(0).standard_normal((2, 5, 3)).astype(dtype)


def test_a_float64_input_is_cast_to_the_traced_layers_float32():
    """Keras casts the float64 input to float32 before call(); the trace did not (the
    module returned float64)."""
    inputs = keras.Input((None, 3), dtype="float64")
    _convert_and_compare(keras.Model(inputs, Scale()(inputs)), _x("float64"))


def test_a_traced_layer_computing_in_float64():
    """A float64 policy: the float32 input cast to float64 as in Keras (the module
    returned float32)."""
    inputs = keras.Input((None, 3))
    _convert_and_compare(keras.Model(inputs, Twice(dtype="float64")(inputs)), _x())


def test_an_inlined_sublayer_casts_its_inputs_to_its_own_dtype():
    inputs = keras.Input((None, 3))
    _convert_and_compare(keras.Model(inputs, CallsTwice("float64")(inputs)), _x())


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16", "float16", "bfloat16"])
def test_half_precision_traced_layer_is_refused(policy):
    """Before: a ParityError (float32 computed) or a crash (bfloat16 constants)."""
    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, Scale(dtype=policy, name="scale")(inputs))
    with pytest.raises(crossport.UnsupportedLayerError,
                       match=rf"computes in \w*float16.*'{policy}'\): scale; only float32"):
        crossport.to_torch(model, (_x(),))


def test_a_mixed_sublayer_of_a_traced_layer_is_refused():
    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, CallsTwice("mixed_float16", name="outer")(inputs))
    with pytest.raises(crossport.UnsupportedLayerError,
                       match="its sublayer 'twice.*' \\(Twice\\) computes in float16"):
        crossport.to_torch(model, (_x(),))


def test_a_mixed_precision_model_is_one_line():
    """Every layer of a model built under a global mixed policy, traced or converted, on
    one line naming the policy."""
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        inputs = keras.Input((None, 3))
        model = keras.Model(inputs, L.Dense(2)(Scale()(L.Dense(3)(inputs))))
    finally:
        keras.config.set_dtype_policy("float32")
    with pytest.raises(crossport.UnsupportedLayerError) as info:
        crossport.to_torch(model, (_x(),))
    lines = [line for line in str(info.value).splitlines() if line.startswith("  - ")]
    assert len(lines) == 1 and "3 layer(s)/op(s) compute in bfloat16 with float32 " \
        "variables (dtype policy 'mixed_bfloat16')" in lines[0], str(info.value)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_keras_ops_on_half_precision_values_are_refused(dtype):
    """TF's half arithmetic is its own (float16: a ParityError before; bfloat16 crashed
    converting the example to numpy)."""
    inputs = keras.Input((5, 3), dtype=dtype)
    model = keras.Model(inputs, ops.sum(ops.exp(inputs), axis=1))
    x = torch.from_numpy(_x()).to(getattr(torch, dtype))
    with pytest.raises(crossport.UnsupportedLayerError,
                       match=f"2 layer\\(s\\)/op\\(s\\) compute on {dtype} values: exp\\w*, sum"):
        crossport.to_torch(model, (x,))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_inputs_of_float32_layers_and_casts(dtype):
    """A float32 layer autocasts a half input (exact); casts to and from half precision
    round the same way in TF and torch. bfloat16 example inputs crashed before."""
    inputs = keras.Input((5, 3), dtype=dtype)
    y = L.Dense(4)(inputs)
    model = keras.Model(inputs, [y, ops.cast(ops.cast(y, dtype), "float32"),
                                 ops.cast(y, dtype)])
    x = torch.from_numpy(_x()).to(getattr(torch, dtype))
    conv = crossport.to_torch_with_report(model, (x,))
    assert conv.report.passed
    assert [o.dtype for o in conv.module(x)] == [torch.float32, torch.float32,
                                                 getattr(torch, dtype)]


def test_float32_custom_layer_with_a_dense_still_converts():
    class Block(L.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.dense = L.Dense(3)

        def call(self, x):
            return self.dense(x) * 2.0

    inputs = keras.Input((5, 3), dtype="float64")
    assert_to_torch(keras.Model(inputs, Block()(inputs)), live=False)


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_wide_unsigned_values_are_refused_by_name(dtype):
    """torch stores uint16/32/64 but has no CPU kernels computing on them: a model holding
    them is refused naming its ops, an example of that dtype is an InputError (both raised
    NotImplementedError "min_all" from the check before)."""
    inputs = keras.Input((3,), dtype="int32")
    wide = ops.cast(inputs, dtype)
    model = keras.Model(inputs, ops.cast(ops.cumsum(wide, axis=1), "float32"))
    with pytest.raises(crossport.UnsupportedLayerError,
                       match=rf"cumsum\w* \(Cumsum\): holds {dtype} values, which torch "
                             r"stores but cannot compute on"):
        crossport.to_torch(model, (np.arange(6, dtype="int32").reshape(2, 3),))
    with pytest.raises(crossport.InputError, match=rf"example input 0 is torch\.{dtype}"):
        crossport.to_torch(model, (np.arange(6, dtype=dtype).reshape(2, 3),))


@pytest.mark.parametrize("example", [np.array([["a b"], ["c"]]), np.array([[b"a"]]),
                                     np.array([[{"a": 1}]], dtype=object)],
                         ids=["str", "bytes", "object"])
def test_string_examples_are_an_input_error(example):
    """A model taking strings (TextVectorization in front) given its numpy strings as the
    example: torch.from_numpy raised a raw TypeError (found by the adversarial audit). One
    InputError says torch has no string tensors and what to convert instead."""
    vectorize = L.TextVectorization(max_tokens=10, output_sequence_length=4)
    vectorize.adapt(["a b c", "b c d"])
    text = keras.Input((1,), dtype="string")
    model = keras.Model(text, L.Embedding(10, 2)(vectorize(text)))
    with pytest.raises(crossport.InputError, match=r"example input 0 is a numpy array of "
                                                   r".*torch has no tensors for"):
        crossport.to_torch(model, (example,))


def _cnn():
    x = keras.Input((8, 8, 3))
    h = L.BatchNormalization()(L.Conv2D(4, 3, strides=2, padding="same")(x))
    return keras.Model(x, L.Dense(2)(L.Flatten()(L.MaxPooling2D()(h))))


def _sequence():
    x = keras.Input((7, 4))
    h = L.LSTM(5, return_sequences=True)(L.Conv1D(6, 3, padding="same")(x))
    h = L.LayerNormalization()(L.MultiHeadAttention(2, 3)(h, h))
    return keras.Model(x, L.Dense(2, activation="softmax")(L.GRU(3)(h)))


def _ids_and_counts():
    ids, counts = keras.Input((5,), dtype="int32"), keras.Input((3,), dtype="int32")
    h = L.GlobalAveragePooling1D()(L.Embedding(10, 4)(ids))
    return keras.Model([ids, counts], L.Dense(2)(L.Concatenate()([h, L.Dense(4)(counts)])))


@pytest.mark.parametrize("build", [_cnn, _sequence, _ids_and_counts],
                         ids=["cnn", "sequence", "ids_and_int_features"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_the_module_follows_double_and_half(build, dtype):
    """net.double() / net.half(), the torch idioms for a float64 check or a float16 run,
    failed with torch's 'Input type (float) and bias type (double)': the module cast every
    float input (and an int tensor fed to a float layer) to float32, whatever its weights'
    dtype (found by the adversarial audit). Those casts follow the module's float dtype now
    (an empty non-persistent buffer .to() converts), so outputs are float64/float16 and
    agree with Keras; the default module still casts to Keras' float32."""
    model = make_live(build())
    args = random_inputs(model, 3, 0)
    module = crossport.to_torch(model, args)
    want = keras.tree.flatten(model([a.numpy() for a in args]))
    assert "float_dtype" not in module.state_dict()
    moved = copy.deepcopy(module).to(dtype)
    with torch.no_grad():
        got = moved(*[a.to(dtype) if a.is_floating_point() else a for a in args])
        got32 = module(*[a.double() if a.is_floating_point() else a for a in args])
    assert got.dtype == dtype and got32.dtype == torch.float32
    scale = max(1.0, float(np.abs(np.asarray(want[0])).max()))
    atol = 1e-5 if dtype == torch.float64 else 2e-2
    assert np.abs(got.float().numpy() - np.asarray(want[0])).max() / scale < atol
