"""torch.special's ndtri, erfcx (and log_ndtr, which decomposes into it), the regularized
incomplete gamma functions (igamma / igammac: special.gammainc / gammaincc), Hurwitz' zeta,
nextafter and frexp (were "no converter") on the values random inputs miss: the domain's edges
(ndtri at 0 and 1 and past them; igamma at a = 0 and x = 0; zeta at x = 1, x < 1 and the
poles q = 0, -1, ...), +-inf and NaN in either argument, +-0.0, tiny and huge values; and
their accuracy against float64 next to torch's.

Left out on purpose: subnormal inputs and results, which TF's kernels flush to zero
(docs/parity.md).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from crossport.parity.verify import run_keras
from tests.harness import assert_converts
from tests.ops.opcases import Fn, case

NAN, INF = float("nan"), float("inf")
S = torch.special
UNARY = {  # name: (function, converter, special values, random domain)
    "ndtri": (S.ndtri, "aten_special_ndtri_default",
              [NAN, INF, -INF, 0.0, -0.0, 1.0, -1e-30, 1.0000001, 0.99999994, 1e-30, 0.5,
               0.1, 0.9, 0.135, 0.865, 2.0, -1.0, 5.96e-8, 1e-10, 0.25], torch.sigmoid),
    "erfcx": (S.erfcx, "aten_special_erfcx_default",
              [NAN, INF, -INF, 0.0, -0.0, 1e-30, 0.5, -0.5, 5.0, -5.0, 9.3, -9.3, -9.4, 24.9,
               25.0, 26.0, -26.7, 50.0, 1e4, 5e7, 1e10, 1e30, -1e30, 2.0], lambda x: x * 10),
    "log_ndtr": (S.log_ndtr, "aten_special_erfcx_default",
                 [NAN, INF, -INF, 0.0, -0.0, 1e-30, 0.5, -0.5, -1.0, -1.0000001, 5.0, -5.0,
                  -20.0, -100.0, -1e4, -1e19, 10.0, 1e10, -3e38, 3e38], lambda x: x * 10),
}
# the edges of the binary functions' arguments (every pair is tried)
EDGES = [NAN, INF, -INF, 0.0, -0.0, -1.0, 0.5, 1.0, 2.0, 1e-3, 20.0, -2.5, 7.0]
BINARY = {  # name: (function, converter)
    "gammainc": (S.gammainc, "aten_igamma_default"),
    "gammaincc": (S.gammaincc, "aten_igammac_default"),
    "zeta": (S.zeta, "aten_special_zeta_default"),
    "nextafter": (torch.nextafter, "aten_nextafter_default"),
}

CASES = [
    case(f"{name}-random", Fn(lambda x, f=f, domain=domain: f(domain(x))), (6, 40),
         expect_converters=(converter,))
    for name, (f, converter, _, domain) in UNARY.items()
] + [
    case("gammainc-gammaincc-random", Fn(lambda a, x: (
        S.gammainc(a.abs() * 10, x.abs() * 10), torch.igammac(a.abs() * 10, x.abs() * 10))),
         ((5, 40), (5, 40)), expect_converters=("aten_igamma_default",
                                                "aten_igammac_default")),
    case("zeta-random", Fn(lambda x, q: S.zeta(x.abs() * 5 + 1, q * 5)), ((5, 40), (5, 40)),
         expect_converters=("aten_special_zeta_default",)),
    case("nextafter-random", Fn(lambda x, y: (torch.nextafter(x, y), torch.nextafter(x, x),
                                              torch.nextafter(x.double(), y.double()))),
         ((5, 40), (5, 40)), expect_converters=("aten_nextafter_default",)),
    case("frexp-random", Fn(lambda x: (*torch.frexp(x * 1000), *torch.frexp(x.double() / 7),
                                       torch.frexp(x)[0] * 2 ** torch.frexp(x)[1])), (6, 40),
         expect_converters=("aten_frexp_tensor",)),
    case("broadcast-scalars-integers-float64", Fn(lambda x, n: (
        S.gammainc(x.abs(), n), S.gammaincc(n, x.abs().double()), S.zeta(x.abs() + 1, 2.0),
        S.zeta(3.0, x.abs()), S.zeta(n, n), S.ndtri(n), S.erfcx(n), S.log_ndtr(x.double()),
        S.ndtri(torch.sigmoid(x.double())), S.gammainc(x.abs()[:, :1], x.abs()))),
         lambda: (torch.randn(4, 8), torch.arange(-3, 5)),
         expect_converters=("aten_igamma_default", "aten_igammac_default",
                            "aten_special_zeta_default", "aten_special_ndtri_default",
                            "aten_special_erfcx_default")),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_special_functions_match_torch(module, shapes, kwargs):
    args = shapes() if callable(shapes) else tuple(torch.randn(s) for s in (
        shapes if isinstance(shapes[0], tuple) else (shapes,)))
    assert_converts(module, args, **kwargs)


def _assert_same_values(got, f, args):
    """NaN/inf positions and the sign of zeros as torch's; finite values as close to torch
    in float64 as 4x torch float32's own distance from it, or within 4e-7 relative."""
    want = f(*args).numpy()
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(got), test(want))
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))
    finite = np.isfinite(want)
    truth = f(*(a.double() for a in args)).numpy()[finite]
    allowed = np.maximum(4 * np.abs(want[finite] - truth), 4e-7 * np.abs(truth))
    distance = np.abs(got[finite] - truth)
    assert np.all(distance <= allowed), (got[finite][distance > allowed],
                                         want[finite][distance > allowed])


@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_unary_special_values_match_torch(name, dtype):
    """ndtri: -inf at 0, +inf at 1, NaN past; erfcx: inf below ~-9.4 (float32), 0 at +inf;
    log_ndtr: 0 at +inf, -inf at -inf."""
    f, converter, values, _ = UNARY[name]
    x = torch.tensor(values, dtype=dtype)
    conversion = assert_converts(Fn(f), (x,), expect_converters=(converter,))
    got = np.asarray(run_keras(conversion.model, (x,), False, like=f(x))[0])
    _assert_same_values(got, f, (x,))


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_binary_special_values_match_torch(name, dtype):
    """Every pair of EDGES: igamma's and igammac's early returns (a or x < 0: NaN; a = 0:
    1 / 0 for x > 0, NaN at x = 0; x = 0: 0 / 1; a = inf: NaN at x = inf; x = inf: 1 / 0),
    zeta's (x = 1: inf; x < 1: NaN; q = 0, -1, ...: inf; q = inf or x = inf with q > 1:
    NaN), nextafter's exact steps. (igammac: torch's float32 is 5e-5 relative off float64
    at a = 1e-3, the model's float64 kernel is not.)"""
    f, converter = BINARY[name]
    pairs = list(itertools.product(EDGES, EDGES))
    a = torch.tensor([p[0] for p in pairs], dtype=dtype)
    x = torch.tensor([p[1] for p in pairs], dtype=dtype)
    conversion = assert_converts(Fn(f), (a, x), expect_converters=(converter,))
    got = np.asarray(run_keras(conversion.model, (a, x), False, like=f(a, x))[0])
    if name == "nextafter":  # exact
        np.testing.assert_array_equal(got, f(a, x).numpy())
    else:
        _assert_same_values(got, f, (a, x))


def _inputs(name):
    g = torch.Generator().manual_seed(0)
    first, second = torch.rand(2, 100000, generator=g)
    if name == "zeta":
        return (first * 20 + 1.01, second * 20 + 0.05)
    if name in ("gammainc", "gammaincc"):
        return (first * 30, second * 30)
    return ((first * 2 - 1) * 27,) if name != "ndtri" else (first,)


@pytest.mark.parametrize("name", ["ndtri", "erfcx", "log_ndtr", "gammainc", "gammaincc",
                                  "zeta"])
def test_accuracy_against_float64_is_torchs(name):
    """On 100000 random points, the Keras model is within 4x torch float32's own distance
    from float64 (relative, floored at 1e-6)."""
    f = UNARY[name][0] if name in UNARY else BINARY[name][0]
    args = _inputs(name)
    conversion = assert_converts(Fn(f), args)
    truth = f(*(a.double() for a in args)).numpy()
    got = np.asarray(run_keras(conversion.model, args, False, like=f(*args))[0], np.float64)
    mine = f(*args).double().numpy()
    finite = np.isfinite(truth) & np.isfinite(mine)
    scale = np.maximum(np.abs(truth[finite]), 1e-6)
    torch_distance = np.max(np.abs(mine[finite] - truth[finite]) / scale)
    keras_distance = np.max(np.abs(got[finite] - truth[finite]) / scale)
    assert keras_distance <= 4 * torch_distance, (keras_distance, torch_distance)


FREXP_VALUES = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, 0.75, 3.0, -3e38, 3e38, 1e-30,
                -1e-37, 1.1754944e-38, 123.456, -0.1, 1e10, 7.0, -0.99999994]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_frexp_matches_torch_exactly(dtype):
    """Mantissa and int32 exponent bit for bit: +-0.0, +-inf and NaN are their own mantissa
    with exponent 0 (C's frexp), the largest and smallest normal floats, negative values."""
    x = torch.tensor(FREXP_VALUES, dtype=dtype)
    conversion = assert_converts(Fn(torch.frexp), (x,), expect_converters=("aten_frexp_tensor",))
    mantissa, exponent = torch.frexp(x)
    got = run_keras(conversion.model, (x,), False, like=(mantissa, exponent))
    got_mantissa, got_exponent = (np.asarray(t) for t in got)
    np.testing.assert_array_equal(got_mantissa, mantissa.numpy())  # NaN == NaN here
    np.testing.assert_array_equal(np.signbit(got_mantissa), np.signbit(mantissa.numpy()))
    assert got_exponent.dtype == np.int32
    np.testing.assert_array_equal(got_exponent, exponent.numpy())
