"""Error metrics and the rounding-versus-semantics verdict (see docs/parity.md)."""

from __future__ import annotations

import numpy as np

# TF's CPU kernels round up to ~6x worse than torch per layer and the gap compounds with
# depth (parity.md: deep nets 0.6-1.7e-4 vs torch fp32 while torch fp32 is ~1e-6 from
# fp64). An error counts as rounding when the Keras model is no further from the float64
# truth than this factor times torch fp32's own distance, and below SEMANTIC_FLOOR, the
# size from which a wrong eps, padding or layout shows up in practice.
ROUNDING_FACTOR = 100.0
ROUNDING_ABS = 1e-5
SEMANTIC_FLOOR = 1e-3


def normalized_error(ref, got) -> float:
    """``max|ref - got| / max(1, max|ref|)``; integer and bool arrays must match exactly."""
    ref, got = np.asarray(ref), np.asarray(got)
    if ref.shape != got.shape:
        return float("inf")
    if ref.size == 0:
        return 0.0
    if ref.dtype.kind in "biu" or ref.dtype == bool:
        return 0.0 if np.array_equal(ref, got.astype(ref.dtype)) else float("inf")
    ref64, got64 = ref.astype(np.float64), got.astype(np.float64)
    if np.array_equal(np.isnan(ref64), np.isnan(got64)):
        mask = ~np.isnan(ref64)
        ref64, got64 = ref64[mask], got64[mask]
        if ref64.size == 0:
            return 0.0
    with np.errstate(invalid="ignore"):
        diff = np.abs(ref64 - got64)
    diff = np.where(ref64 == got64, 0.0, diff)  # equal infinities
    scale = max(1.0, float(np.max(np.abs(ref64[np.isfinite(ref64)]), initial=0.0)))
    return float(np.max(diff)) / scale


def rounding_verdict(keras_vs_fp64: float, torch_vs_fp64: float) -> str:
    """'rounding' when the Keras error is explained by float32 arithmetic, else 'semantic'."""
    bound = max(ROUNDING_FACTOR * torch_vs_fp64, ROUNDING_ABS)
    if keras_vs_fp64 <= bound and keras_vs_fp64 < SEMANTIC_FLOOR:
        return "rounding"
    return "semantic"
