"""torch.special.airy_ai (was "no converter") on what random inputs miss: each region's
edges (x = +-2.09 and their float neighbours, 8.3203353, 103.892, float32's underflow to
0 past 25.77), +-0.0, NaN, +-inf, huge |x|, integer and float64 inputs; the power series bit
for bit (its stopping rule included); the sin/cos and exp regions against float64 next
to torch's own error.

Left out on purpose: float32 results in the subnormal range (x in ~(25.38, 25.77); 0 past
it in both), which TF's kernels flush to zero (docs/parity.md).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import crossport
from crossport.parity.verify import run_keras
from tests.harness import assert_converts
from tests.ops.opcases import Fn, case

NAN, INF = float("nan"), float("inf")
AIRY = "aten_special_airy_ai_default"
# the region edges and their float32 neighbours come from _edges()
EDGES = [NAN, INF, -INF, 0.0, -0.0, 1e-30, -1e-30, 1.0, -1.0, 2.0, -2.0, 5.0, 8.3203353,
         8.33, 20.0, 25.77, 26.5, 50.0, 103.0, 103.892, 104.0, 1e5, 3e38, -3.0, -10.0, -100.0,
         -1e4, -1e6]


def _edges(dtype):
    """EDGES plus the float neighbours of +-2.09 and 103.892 in ``dtype`` (ATen compares
    with the constants rounded to it)."""
    points = torch.tensor([2.09, -2.09, 103.892], dtype=dtype)
    up = torch.nextafter(points, torch.full_like(points, INF))
    down = torch.nextafter(points, torch.full_like(points, -INF))
    return torch.cat([torch.tensor(EDGES, dtype=dtype), points, up, down])


CASES = [
    case("airy-ai-random", Fn(lambda x: torch.special.airy_ai(x * 6)), (6, 40),
         expect_converters=(AIRY,)),
    case("airy-ai-float64-and-integers", Fn(lambda x, n: (
        torch.special.airy_ai(x.double() * 6), torch.special.airy_ai(n))),
         lambda: (torch.randn(4, 30), torch.arange(-5, 5).reshape(2, 5)),
         expect_converters=(AIRY,)),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_airy_ai_matches_torch(module, shapes, kwargs):
    args = shapes() if callable(shapes) else (torch.randn(shapes),)
    assert_converts(module, args, **kwargs)


def _keras_and_torch(x):
    f = torch.special.airy_ai
    conversion = assert_converts(Fn(f), (x,), expect_converters=(AIRY,))
    got = np.asarray(run_keras(conversion.model, (x,), False, like=f(x))[0])
    return got, f(x).numpy()


def _keras_and_torch_in_chunks(x, size: int = 10_000):
    """One conversion at ``size`` points, run chunk by chunk: the 100000-200000 points at
    once peaked at 5.5-10 GB, which the CI worker running them kept for the rest of the
    suite."""
    f = torch.special.airy_ai
    chunks = x.split(size)
    conversion = assert_converts(Fn(f), (chunks[0],), expect_converters=(AIRY,))
    got = [np.asarray(run_keras(conversion.model, (c,), False, like=f(c))[0]) for c in chunks]
    return np.concatenate(got), f(x).numpy()


def _series(x):
    """Where ATen's power series gives the value: -2.09 <= x < 2.09 in x's dtype."""
    bound = torch.tensor(2.09, dtype=x.dtype)
    return ((x >= -bound) & (x < bound)).numpy()


def _normal(want):
    """Results out of float32's subnormal range (TF flushes those to zero)."""
    return (want == 0) | (np.abs(want) >= np.finfo(want.dtype).tiny)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_special_values_match_torch(dtype):
    """NaN at NaN and +-inf, 0 past 103.892 (and past float32's underflow), the series
    bit-equal at +-0.0 and up to the region edges; elsewhere within the kernels' rounding
    (relative 4e-6 float32 / 1e-14 float64, measured below)."""
    x = _edges(dtype)
    got, want = _keras_and_torch(x)
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(got), test(want))
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))
    series = _series(x)
    np.testing.assert_array_equal(got[series], want[series])
    kept = np.isfinite(want) & _normal(want)
    rtol = 4e-6 if dtype == torch.float32 else 1e-14
    np.testing.assert_allclose(got[kept], want[kept], rtol=rtol, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_power_series_bit_equal(dtype):
    """200000 seeded points of [-2.1, 2.1]: ATen's series, its loop stopping per element
    once ``|m / f| <= epsilon``, and the FMA of ``c1 f - c2 g``, bit for bit."""
    generator = torch.Generator().manual_seed(11)
    x = torch.rand(200000, generator=generator, dtype=dtype) * 4.2 - 2.1
    got, want = _keras_and_torch_in_chunks(x)
    series = _series(x)
    np.testing.assert_array_equal(got[series], want[series])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_accuracy_against_float64_is_torchs(dtype):
    """On seeded points of [-60, 30], the Keras model is within 2x torch's own distance from
    float64 (float64: from itself, i.e. equal to an ulp: 4 eps), relative to Ai's envelope
    (Ai oscillates below -2.09 with amplitude ~ (-x)**-0.25 / sqrt(pi)). The difference is
    TF's sin/cos/exp against the C library's: in float64 with the C library's three the
    model is bit-equal to torch (measured while porting)."""
    generator = torch.Generator().manual_seed(5)
    x = torch.rand(100000, generator=generator, dtype=torch.float64) * 90 - 60
    x = x.to(dtype)
    got, want = _keras_and_torch_in_chunks(x)
    truth = torch.special.airy_ai(x.double()).numpy()
    scale = np.where(x.numpy() < 0, np.abs(x.double().numpy()) ** -0.25 / np.sqrt(np.pi),
                     np.abs(truth))
    kept = _normal(want) & (scale > 0)
    keras_distance = np.max(np.abs(got.astype(np.float64) - truth)[kept] / scale[kept])
    if dtype == torch.float64:
        assert keras_distance <= 4 * np.finfo(np.float64).eps, keras_distance
        return
    torch_distance = np.max(np.abs(want.astype(np.float64) - truth)[kept] / scale[kept])
    assert keras_distance <= 2 * torch_distance, (keras_distance, torch_distance)


def test_airy_ai_exports_to_tflite(tmp_path):
    """SIN, COS, EXP, SQRT, SELECT and the FMA's float32 emulation are TFLite builtins: the
    file re-checks against torch."""
    module = Fn(lambda x: torch.special.airy_ai(x * 6)).eval()
    conversion = crossport.convert_with_report(module, (torch.randn(4, 50),))
    result = crossport.export(conversion, tmp_path / "airy.tflite")
    assert result.max_error <= 1e-5, result
