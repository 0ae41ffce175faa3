"""crossport.layers.Constant: returns its array, serialises it through the weights file."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from crossport.layers import Constant

VALUES = {
    "float32_matrix": np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32),
    "int64_vector": np.random.default_rng(1).integers(-5, 5, size=7),
    "int32_scalar": np.int32(-3),
    "bool_mask": np.random.default_rng(2).random((2, 5)) > 0.5,
    "float64_becomes_float32": np.random.default_rng(3).standard_normal(4),
}


@pytest.mark.parametrize("name", list(VALUES))
def test_returns_value_whatever_the_input(name):
    value = VALUES[name]
    out = keras.ops.convert_to_numpy(Constant(value)(np.zeros((5, 2), np.float32)))
    expected_dtype = np.float32 if np.asarray(value).dtype == np.float64 else np.asarray(value).dtype
    assert out.dtype == expected_dtype
    np.testing.assert_array_equal(out, np.asarray(value).astype(expected_dtype))


@pytest.mark.parametrize("name", list(VALUES))
def test_keras_roundtrip_restores_value_from_weights(name, tmp_path):
    value = VALUES[name]
    inp = keras.Input((2,))
    layer = Constant(value, name="buffer")
    model = keras.Model(inp, [keras.layers.Identity()(inp), layer(inp)])
    config = layer.get_config()
    assert "value" not in config and len(json.dumps(config)) < 1000  # no array in the JSON
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    for run in (lambda x: loaded(x)[1], lambda x: loaded.predict(x, verbose=0)[1]):
        out = keras.ops.convert_to_numpy(run(np.ones((3, 2), np.float32)))
        np.testing.assert_array_equal(out, keras.ops.convert_to_numpy(layer(None)))


def test_trainable_flag():
    value = VALUES["float32_matrix"]
    assert Constant(value).trainable_weights == []
    layer = Constant(value, trainable=True)
    assert len(layer.trainable_weights) == 1
    assert Constant.from_config(layer.get_config()).trainable


def test_large_buffer_not_in_config():
    layer = Constant(np.random.default_rng(4).standard_normal((64, 64)).astype(np.float32))
    assert len(json.dumps(layer.get_config())) < 1000
