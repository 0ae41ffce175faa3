"""Helpers of the crossport.layers tests: layouts, the parity metric, .keras round trips."""

from __future__ import annotations

import copy
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from types import SimpleNamespace

import keras
import numpy as np
import pytest
import torch

TOL = 1e-5
FORMATS = ("channels_last", "channels_first")


def normalized_error(out, ref) -> float:
    """``max|out - ref| / max(1, max|ref|)``, the project's parity metric."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert out.shape == ref.shape, f"shape {out.shape} != torch {ref.shape}"
    if out.size == 0:
        return 0.0
    same = out == ref  # equal infinities (a max-pool window of padding only) are a match
    diff = np.where(same, 0.0, np.abs(out - ref))
    if np.isnan(diff).any():
        return float("inf")
    finite = np.abs(ref[np.isfinite(ref)])
    return float(diff.max() / max(1.0, finite.max() if finite.size else 1.0))


def assert_close(out, ref, tol: float = TOL) -> None:
    err = normalized_error(out, ref)
    assert err <= tol, f"normalized error {err:.3g} > {tol}"


def randn(seed: int, *shape: int) -> np.ndarray:
    """Seeded standard-normal float32 input (never all-ones)."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def to_keras(x: np.ndarray, data_format: str) -> np.ndarray:
    """A torch-layout (N, C, *s) array in the Keras layout of ``data_format``."""
    return np.moveaxis(x, 1, -1) if data_format == "channels_last" and x.ndim > 2 else x


def from_keras(y, data_format: str) -> np.ndarray:
    y = keras.ops.convert_to_numpy(y)
    return np.moveaxis(y, -1, 1) if data_format == "channels_last" and y.ndim > 2 else y


def torch_run(module_or_fn, x: np.ndarray, *args, **kwargs) -> np.ndarray:
    with torch.no_grad():
        return module_or_fn(torch.from_numpy(x), *args, **kwargs).numpy()


def torch_run64(module, x: np.ndarray, *args, **kwargs) -> np.ndarray:
    """``module`` run in float64 on a copy: the reference for convolutions.

    torch's float32 CPU conv (oneDNN) returns garbage for some shapes (one input channel, a
    strided last axis of output length 1); the float64 path computes the true result.
    """
    module = copy.deepcopy(module).double()
    with torch.no_grad():
        return module(torch.from_numpy(x).double(), *args, **kwargs).numpy()


def keras_run(layer, x: np.ndarray, data_format: str, **call_kwargs) -> np.ndarray:
    """Run ``layer`` on the torch-layout ``x`` held in ``data_format``; torch layout back."""
    return from_keras(layer(to_keras(x, data_format), **call_kwargs), data_format)


def roundtrip(layer, x: np.ndarray, tmp_path, dynamic: tuple[int, ...] = (0,)) -> None:
    """Save ``layer`` in a Model with ``None`` dims, reload, and compare on two batch sizes.

    ``x`` is already in the Keras layout. Also runs the graph path (``predict``).
    """
    shape = [None if i in dynamic else s for i, s in enumerate(x.shape)]
    inp = keras.Input(batch_shape=shape, dtype=str(x.dtype))
    model = keras.Model(inp, layer(inp))
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    for batch in (x, np.concatenate([x, x[:1] * 0.5], axis=0)):
        expected = keras.ops.convert_to_numpy(layer(batch))
        np.testing.assert_allclose(keras.ops.convert_to_numpy(model(batch)), expected, atol=1e-6)
        np.testing.assert_allclose(loaded.predict(batch, verbose=0), expected, atol=1e-6)
    restored = loaded.layers[-1]
    assert type(restored) is type(layer)
    assert restored.get_config() == {**layer.get_config(), "name": restored.name}


@pytest.fixture(params=FORMATS)
def data_format(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def lt() -> SimpleNamespace:
    """The helpers above, as a fixture (test modules do not import conftest)."""
    return SimpleNamespace(
        TOL=TOL,
        FORMATS=FORMATS,
        normalized_error=normalized_error,
        assert_close=assert_close,
        randn=randn,
        to_keras=to_keras,
        from_keras=from_keras,
        torch_run=torch_run,
        torch_run64=torch_run64,
        keras_run=keras_run,
        roundtrip=roundtrip,
    )
