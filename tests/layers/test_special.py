"""crossport.layers.Erf against float64 erf: float32 rounding, not an approximation error."""

from __future__ import annotations

import numpy as np
import torch

from crossport.layers import Erf


def _grid() -> np.ndarray:
    dense = np.linspace(-6.0, 6.0, 400_001, dtype=np.float32)
    tiny = np.geomspace(1e-30, 1.0, 20_000).astype(np.float32)
    return np.concatenate([dense, tiny, -tiny, [0.0, np.inf, -np.inf]]).astype(np.float32)


def test_erf_is_within_float32_rounding_of_float64():
    x = _grid()
    truth = torch.erf(torch.from_numpy(x).double()).numpy()
    ours = np.asarray(Erf()(x), dtype=np.float64)
    torch32 = torch.erf(torch.from_numpy(x)).double().numpy()
    finite = np.isfinite(x)
    assert np.abs(ours - truth)[finite].max() < 5e-7  # ~4 ulps of 1; torch float32: 1 ulp
    assert np.abs(torch32 - truth)[finite].max() < 1e-7
    small = finite & (np.abs(x) < 1) & (x != 0)  # relative accuracy near 0 too (no 1 - ...)
    assert (np.abs(ours - truth)[small] / np.abs(truth[small])).max() < 1e-6
    assert ours[-2:].tolist() == [1.0, -1.0] and ours[-3] == 0.0


def test_erf_is_odd_and_bounded():
    x = _grid()
    y = np.asarray(Erf()(x))
    np.testing.assert_array_equal(np.asarray(Erf()(-x)), -y)
    assert np.abs(y).max() <= 1.0
    assert y.dtype == np.float32
