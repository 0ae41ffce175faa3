"""crossport.layers.GELU against torch.nn.GELU: same function, dtype and config."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch

from crossport.errors import InputError
from crossport.layers import GELU


def _grid(dtype: str) -> np.ndarray:
    x = np.concatenate([np.linspace(-12.0, 12.0, 20_001), [0.0, -0.0, -np.inf, np.nan]])
    return x.astype(dtype)


def test_gelu_of_inf_is_inf():
    """torch's own answer depends on where +inf sits: its vectorized float32 erf path gives
    NaN, its scalar tail and float64 give inf, the true limit. GELU gives inf."""
    x = np.array([np.inf, 1.0], "float32")
    assert np.asarray(GELU()(x))[0] == np.inf == torch.nn.GELU()(torch.from_numpy(x[:1]))[0]
    assert np.asarray(GELU("tanh")(x))[0] == np.inf


def _normalized(got: np.ndarray, ref: np.ndarray) -> float:
    """crossport's error measure, ``max|d| / max(1, |ref|)`` (per element here)."""
    ref = ref.astype("f8")
    return float((np.abs(got.astype("f8") - ref) / np.maximum(1.0, np.abs(ref))).max())


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_gelu_matches_torch(approximate, dtype):
    """Same dtype, NaN and inf positions, and as far from the float64 truth as torch's own
    kernel is (rounding: the two use different erf and tanh; float16 is computed in float32
    and rounded once, as torch does, but TF flushes float16 subnormals to zero)."""
    x = _grid(dtype)
    ours = np.asarray(GELU(approximate)(x))
    theirs = torch.nn.GELU(approximate)(torch.from_numpy(x)).numpy()
    assert ours.dtype == theirs.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))  # NaN in, NaN out
    finite = np.isfinite(theirs)
    np.testing.assert_array_equal(ours[~finite & ~np.isnan(theirs)],
                                  theirs[~finite & ~np.isnan(theirs)])
    truth = torch.nn.GELU(approximate)(torch.from_numpy(x[finite]).double()).numpy()
    rounding = {"float16": 1e-3, "float32": 1e-6, "float64": 1e-9}[dtype]
    assert _normalized(theirs[finite], truth) < rounding  # torch's own kernel
    assert _normalized(ours[finite], truth) < rounding


def test_gelu_config_round_trips_through_a_keras_file(tmp_path):
    model = keras.Sequential([keras.Input((5,)), GELU("tanh", name="act")])
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert loaded.get_layer("act").approximate == "tanh"
    x = np.random.default_rng(0).normal(size=(2, 5)).astype("float32")
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(model(x)))


def test_gelu_keeps_float16_symbolically_too():
    assert GELU()(keras.Input((4,), dtype="float16")).dtype == "float16"


def test_unknown_approximation_is_an_input_error():
    with pytest.raises(InputError, match="approximate must be 'none' or 'tanh'"):
        GELU("erf")
