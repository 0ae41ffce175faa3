"""Shared helpers of the torch_layers tests: seeded data, layout moves, the error measure."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import torch
from hypothesis import HealthCheck, settings

TOL = 1e-5

# Few examples: every example builds and runs a real Keras layer on a shared 2-core machine.
PROPERTY = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))


def nerr(got, ref) -> float:
    """Normalized max error ``max|got - ref| / max(1, max|ref|)``."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"shape {got.shape} != reference {ref.shape}"
    if ref.size == 0:
        return 0.0
    return float(np.max(np.abs(got - ref)) / max(1.0, float(np.max(np.abs(ref)))))


def randn(shape, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def to_cf(x: np.ndarray) -> np.ndarray:
    """Channels-last -> channels-first (NHWC -> NCHW, any rank >= 3)."""
    return np.ascontiguousarray(np.moveaxis(x, -1, 1))


def to_cl(x) -> np.ndarray:
    """Channels-first -> channels-last."""
    x = x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    return np.ascontiguousarray(np.moveaxis(x, 1, -1))


def randomize(layer, seed: int = 0) -> None:
    """Give every weight of a built Keras layer seeded random values (no zeros/ones)."""
    rng = np.random.default_rng(seed)
    values = []
    for w in layer.get_weights():
        v = rng.standard_normal(w.shape).astype(np.float32) * 0.5
        values.append(v)
    layer.set_weights(values)


def torch_run(module, x: np.ndarray, **kwargs):
    with torch.no_grad():
        return module(torch.from_numpy(x), **kwargs)
