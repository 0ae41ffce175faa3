"""Error metrics and the rounding-versus-semantics verdict (see docs/parity.md)."""

from __future__ import annotations

import numpy as np

from crossport.parity.compare import compare_output

# TF's CPU kernels round up to ~6x worse than torch per layer and the gap compounds with
# depth (parity.md: deep nets 0.6-1.7e-4 vs torch fp32 while torch fp32 is ~1e-6 from
# fp64). An error counts as rounding when the Keras model is no further from the float64
# truth than this factor times torch fp32's own distance, and below SEMANTIC_FLOOR, the
# size from which a wrong eps, padding or layout shows up in practice.
ROUNDING_FACTOR = 100.0
ROUNDING_ABS = 1e-5
SEMANTIC_FLOOR = 1e-3
FLOAT32_EPS = float(np.finfo(np.float32).eps)


def precision_of(*arrays) -> float:
    """The machine epsilon of the least precise float among ``arrays`` (float32's when none
    is coarser): a float16 model's own rounding reaches SEMANTIC_FLOOR."""
    eps = [float(np.finfo(a.dtype).eps) for a in arrays
           if isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating)]
    return max([FLOAT32_EPS, *eps])


def normalized_error(ref, got) -> float:
    """``max|ref - got| / max(1, max|ref|)``; ``inf`` on any mismatch, never NaN.

    A mismatch is a different shape, NaN/inf at different positions, or integer/bool values
    that differ (compared exactly). Dtypes are not compared here; use
    :func:`crossport.parity.compare.compare_outputs` for the reasons and the dtype rule.
    """
    result = compare_output(ref, got, check_dtype=False)
    return float("inf") if result.mismatches else result.error


def rounding_verdict(keras_vs_fp64: float, torch_vs_fp64: float,
                     eps: float = FLOAT32_EPS) -> str:
    """'rounding' when the Keras error is explained by float arithmetic, else 'semantic'.

    ``eps``: the outputs' precision. In float16 (eps ~1e-3) torch's own distance from
    float64 is about SEMANTIC_FLOOR, so the floor becomes 10 half-precision ulps there.
    """
    bound = max(ROUNDING_FACTOR * torch_vs_fp64, ROUNDING_ABS)
    if keras_vs_fp64 <= bound and keras_vs_fp64 < max(SEMANTIC_FLOOR, 10 * eps):
        return "rounding"
    return "semantic"
