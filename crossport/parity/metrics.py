"""Error metrics and the rounding-versus-semantics verdict (see docs/parity.md)."""

from __future__ import annotations

from crossport.parity.compare import compare_output

# TF's CPU kernels round up to ~6x worse than torch per layer and the gap compounds with
# depth (parity.md: deep nets 0.6-1.7e-4 vs torch fp32 while torch fp32 is ~1e-6 from
# fp64). An error counts as rounding when the Keras model is no further from the float64
# truth than this factor times torch fp32's own distance, and below SEMANTIC_FLOOR, the
# size from which a wrong eps, padding or layout shows up in practice.
ROUNDING_FACTOR = 100.0
ROUNDING_ABS = 1e-5
SEMANTIC_FLOOR = 1e-3


def normalized_error(ref, got) -> float:
    """``max|ref - got| / max(1, max|ref|)``; ``inf`` on any mismatch, never NaN.

    A mismatch is a different shape, NaN/inf at different positions, or integer/bool values
    that differ (compared exactly). Dtypes are not compared here; use
    :func:`crossport.parity.compare.compare_outputs` for the reasons and the dtype rule.
    """
    result = compare_output(ref, got, check_dtype=False)
    return float("inf") if result.mismatches else result.error


def rounding_verdict(keras_vs_fp64: float, torch_vs_fp64: float) -> str:
    """'rounding' when the Keras error is explained by float32 arithmetic, else 'semantic'."""
    bound = max(ROUNDING_FACTOR * torch_vs_fp64, ROUNDING_ABS)
    if keras_vs_fp64 <= bound and keras_vs_fp64 < SEMANTIC_FLOOR:
        return "rounding"
    return "semantic"
