"""The exported .tflite file on NaN, +-inf and signed zeros, run by LiteRT (XNNPACK).

The export's re-check draws finite inputs only, so each row here exports a small module
and runs the written file on special values against torch: NaN and inf positions (and the
sign of inf) exactly, the sign of zero results where torch defines it, and the rest to
float32 rounding. Each row failed before its fix (found by
``benchmarks/tflite_special_values.py``, docs/parity.md).

Subnormal inputs are left out: XNNPACK flushes them to zero, as TF's CPU kernels do.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import crossport
from crossport.export.formats import load_tflite

NAN, INF = float("nan"), float("inf")
# no subnormals (flushed); no |x| near exp's overflow or above 2**126 (docs/parity.md)
SPECIALS = [NAN, -NAN, INF, -INF, 0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 1.0, -1.0, 2.0, -3.0,
            10.0, -20.0, 80.0, -80.0, 1e20, -1e20]


def specials() -> torch.Tensor:
    return torch.tensor(SPECIALS, dtype=torch.float32)


def pairs() -> tuple[torch.Tensor, torch.Tensor]:
    """Every special against every special, as two [n, n] tensors."""
    s = specials()
    n = len(s)
    return s.repeat_interleave(n).reshape(n, n), s.repeat(n).reshape(n, n)


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def exported_outputs(module, args, tmp_path, example=None) -> list[np.ndarray]:
    """Export ``module`` (converted and re-checked on finite ``example`` inputs) and run
    the written file on ``args``."""
    example = example or tuple(torch.randn(a.shape) for a in args)
    conversion = crossport.convert_with_report(module.eval(), example)
    path = tmp_path / "m.tflite"
    crossport.export(conversion, path)
    names = [t.name.split(":")[0] for t in conversion.model.inputs]
    return load_tflite(path, names)([a.numpy() for a in args])


TINY = float(np.finfo(np.float32).tiny)  # results below it: XNNPACK flushes them to zero


def assert_matches(got: np.ndarray, want: torch.Tensor, signed_zeros: bool = True,
                   atol: float = TINY) -> None:
    want = want.numpy()
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)
        return
    # NaN and inf positions (and inf signs) exactly; finite values to float32 rounding
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=atol)
    if signed_zeros:
        zeros = want == 0
        assert (np.signbit(got[zeros]) == np.signbit(want[zeros])).all(), (
            f"zero of the wrong sign at {np.nonzero(zeros & (np.signbit(got) != np.signbit(want)))}")


def check(module, args, tmp_path, signed_zeros=True, atol=TINY, example=None):
    got = exported_outputs(module, args, tmp_path, example)
    with torch.no_grad():
        want = module(*args)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_matches(g, w, signed_zeros, atol)


def _infinite_constants(x):
    mask = x > 1.0
    return (x.masked_fill(mask, -INF), torch.where(mask, x, INF), x.clamp(-INF, 5.0),
            torch.isposinf(x), torch.isneginf(x), torch.isfinite(x), x == INF, x != -INF,
            torch.nan_to_num(x), x + torch.full_like(x, -INF))


def test_infinite_constants_stay_infinite(tmp_path):
    """The TFLite converter rewrote every infinite constant to +-FLT_MAX: masked_fill with
    -inf wrote -3.4e38, ``x == inf`` and isposinf were False at inf, nan_to_num kept inf."""
    check(Fn(_infinite_constants), (specials(),), tmp_path, signed_zeros=False)


class MaskedLinear(torch.nn.Module):
    """A weight large enough for dynamic-range quantisation, then an infinite constant."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 64)

    def forward(self, x):
        y = self.linear(x).masked_fill(x > 1.0, -INF)
        return torch.isinf(y).float() + y.clamp(min=-5.0)


def test_dynamic_range_int8_files_keep_infinite_constants(tmp_path):
    """``tflite-int8`` quantises weights only (its activations are float), yet the
    converter's rewrite of -inf to -FLT_MAX stayed on for it: isinf of the masked value was
    False in the file and the export refused it (re-check error 0.25 > 0.1)."""
    torch.manual_seed(0)
    module, x = MaskedLinear().eval(), torch.randn(4, 64)
    conversion = crossport.convert_with_report(module, (x,))
    path = tmp_path / "m.tflite"
    assert crossport.export(conversion, path, format="tflite-int8").passed
    [got] = load_tflite(path, [t.name.split(":")[0] for t in conversion.model.inputs])(
        [x.numpy()])
    with torch.no_grad():
        want = module(x).numpy()
    assert (want == -4.0).any()  # masked positions: isinf(-inf) + clamp(-inf, min=-5) = 1 - 5
    np.testing.assert_array_equal(got == -4.0, want == -4.0)


def test_a_fully_masked_softmax_row_is_nan_as_in_torch(tmp_path):
    """With -inf saturated to -FLT_MAX a fully masked row came out uniform (1/n), not NaN;
    a row with some -inf entries gives exactly 0 there either way."""
    x = torch.randn(4, 6)
    x[1, :3] = -5.0
    x[2] = -5.0  # fully masked
    x[3, 0] = NAN

    def masked(x):
        return F.softmax(x.masked_fill(x < -1.0, -INF), -1)
    check(Fn(masked), (x,), tmp_path)


# elu/selu/softplus: values to 1e-6 absolute (``exp(x) - 1`` is 0 at x = -1e-30, torch's
# expm1 is not; both are what the converted Keras model gives too) and which zero elu(-0.0)
# is, torch leaves open
LOOSE = {"signed_zeros": False, "atol": 1e-6}
UNARY_CASES = [
    # XNNPACK's EXP maps NaN to 0
    pytest.param(torch.exp, {}, id="exp"),
    pytest.param(torch.expm1, {}, id="expm1"),  # also -0.0 and 1e-30 (exp - 1: +0.0 and 0)
    pytest.param(F.elu, LOOSE, id="elu"),
    pytest.param(F.selu, LOOSE, id="selu"),
    pytest.param(F.softplus, LOOSE, id="softplus"),
    # XNNPACK's NEG is 0 - x: -(0.0) came out +0.0
    pytest.param(torch.neg, {}, id="neg"),
    # XNNPACK's RSQRT gives NaN at +-0.0 (torch: +-inf)
    pytest.param(torch.rsqrt, {}, id="rsqrt"),
    pytest.param(lambda x: x ** -0.5, {}, id="pow-minus-half"),
    # TFLite's POW saturates an overflow to +-FLT_MAX (inf ** 3 was 3.4e38)
    pytest.param(lambda x: x ** 3, {}, id="pow-3"),
    pytest.param(lambda x: x ** -2, {}, id="pow-minus-2"),  # a regression row (POW was right)
    # POW with any constant integer exponent above 1 saturates: x ** 4 of 1e20 or inf was
    # 3.4e38, -inf ** 7 and (-20) ** 31 -3.4e38
    pytest.param(lambda x: x ** 4, {}, id="pow-4"),
    pytest.param(lambda x: x ** 7, {}, id="pow-7"),
    pytest.param(lambda x: x ** 31, {}, id="pow-31"),
    # regression rows: other exponents overflow to inf in POW itself
    pytest.param(lambda x: x ** 2.5, {}, id="pow-2.5"),
    pytest.param(lambda x: x ** -5, {}, id="pow-minus-5"),
    pytest.param(lambda x: 3.0 ** x, {}, id="scalar-pow"),
]


@pytest.mark.parametrize("fn, tolerances", UNARY_CASES)
def test_unary_ops_on_special_values(fn, tolerances, tmp_path):
    check(Fn(fn), (specials(),), tmp_path, **tolerances)


BINARY_CASES = [
    # the sign of a zero magnitude: NEG lost it
    pytest.param(torch.copysign, id="copysign"),
    # XNNPACK's two-tensor MAXIMUM/MINIMUM return the second operand where the first is NaN
    pytest.param(torch.maximum, id="maximum"),
    pytest.param(torch.minimum, id="minimum"),
    pytest.param(lambda a, b: torch.clamp(a, min=b), id="clamp-min-tensor"),
    # a regression row: POW of two tensors overflows to inf (1e20 ** 2, 80 ** 80)
    pytest.param(torch.pow, id="pow-tensors"),
]


@pytest.mark.parametrize("fn", BINARY_CASES)
def test_binary_ops_on_special_values(fn, tmp_path):
    signed = fn is torch.copysign  # which zero maximum(0.0, -0.0) is, torch leaves open
    check(Fn(fn), pairs(), tmp_path, signed_zeros=signed)


def test_clamp_by_constant_tensors_keeps_nan(tmp_path):
    """A constant tensor operand is put second: MAXIMUM(x, c) dropped x's NaN."""
    low, high = torch.linspace(-2, 0, len(SPECIALS)), torch.linspace(0.5, 3, len(SPECIALS))
    check(Fn(lambda x: torch.clamp(x, low, high)), (specials(),), tmp_path,
          signed_zeros=False)


class Pools(torch.nn.Module):
    def forward(self, x):
        return F.max_pool2d(x, 2), F.avg_pool2d(x, 2), x.exp()


def test_the_export_reports_where_the_file_differs_from_torch_on_nan(tmp_path):
    """What LiteRT still computes differently on NaN (max pooling skips it, as TF's kernel
    does; XNNPACK's average pooling turns it into -inf) was invisible: the re-check's
    inputs are finite. The export now runs the file on inputs holding NaN and ±inf too and
    reports each output whose NaN/inf positions differ from torch, and whether the
    converted Keras model differs there as well."""
    conversion = crossport.convert_with_report(Pools().eval(), (torch.randn(1, 2, 8, 8),))
    result = crossport.export(conversion, tmp_path / "m.tflite")
    assert result.passed
    special = result.special_values
    assert not special.agrees
    [max_pool, avg_pool] = special.file
    assert max_pool.startswith("with NaN in the inputs, output 0: NaN at ")
    assert "position(s) in torch but not in the file (first at (0, " in max_pool
    assert max_pool.endswith("(the converted Keras model differs there too)")
    assert avg_pool.startswith("with NaN in the inputs, output 1: NaN at ")
    assert "-inf at " in avg_pool and "in the file but not in torch (first at " in avg_pool
    assert avg_pool.endswith("the TFLite runtime's)")
    assert "warning: on inputs holding NaN or ±inf the file differs" in result.summary()


def test_a_file_that_agrees_with_torch_on_special_values_says_so(tmp_path):
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ELU(), torch.nn.Flatten(),
                                 torch.nn.Linear(144, 5), torch.nn.Softmax(-1))
    conversion = crossport.convert_with_report(module.eval(), (torch.randn(2, 3, 8, 8),))
    result = crossport.export(conversion, tmp_path / "m.tflite")
    assert result.special_values.agrees and "warning" not in result.summary()
    assert "special values" in result.stages


class RejectsNaN(torch.nn.Module):
    def forward(self, x):
        torch._assert_async(~torch.isnan(x).any())  # a value assertion: dropped in the graph
        return x * 2


def test_a_model_rejecting_nan_inputs_still_exports_and_says_what_was_not_checked(tmp_path):
    """The special-value inputs are the export's own; a model validating its inputs made the
    whole export fail."""
    conversion = crossport.convert_with_report(RejectsNaN().eval(), (torch.randn(2, 3),))
    result = crossport.export(conversion, tmp_path / "m.tflite")
    assert result.passed and (tmp_path / "m.tflite").exists()
    [skipped] = result.special_values.skipped
    assert skipped.startswith("the torch module rejects inputs with NaN (RuntimeError")
    assert "not checked on special values" in result.special_values.describe()


def test_integer_inputs_only_are_not_special_value_checked(tmp_path):
    module = torch.nn.Embedding(10, 4)
    conversion = crossport.convert_with_report(module.eval(), (torch.tensor([[1, 2, 3]]),))
    assert crossport.export(conversion, tmp_path / "m.tflite").special_values is None


def test_inputs_smaller_than_the_special_values_are_filled_with_the_first_ones():
    """A [2, 1] input has fewer elements than (inf, -inf, -0.0): the export crashed."""
    from crossport.export.special_values import special_inputs

    nan_set, inf_set = special_inputs((torch.randn(2, 1), torch.randn(3, 4)), seed=0)
    assert torch.isnan(nan_set[0]).sum() == 1 and torch.isinf(inf_set[0]).all()
    assert torch.isinf(inf_set[1]).sum() == 2 and (inf_set[1] == 0).sum() == 1
