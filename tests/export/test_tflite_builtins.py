"""Ops whose Keras form used TF ops without a TFLite builtin export to builtin-only files."""

import numpy as np
import pytest
import torch

import crossport
from crossport.export.formats import load_tflite, tflite_op_names


class Indices(torch.nn.Module):
    def forward(self, x):
        return (x.argmax(-1), x.argmin(1), x.max(1).indices, x.min(-1)[1], torch.sign(x),
                torch.isnan(x))


def test_argmax_sign_and_isnan_export_to_tflite_and_match_torch_on_nan_and_signed_zero(
        tmp_path):
    """keras.ops.argmax/argmin (a sign-bit test for -0.0) and keras.ops.isnan lower to TF's
    BitwiseAnd: the export was an ExportError asking for the Flex delegate."""
    conversion = crossport.convert_with_report(Indices().eval(), (torch.randn(3, 8),))
    result = crossport.export(conversion, tmp_path / "m.tflite")
    assert result.passed
    assert "CUSTOM" not in tflite_op_names(tmp_path / "m.tflite")
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    x[0, 2] = x[0, 5] = np.nan            # first NaN is the extreme in torch
    x[1] = [-0.0, 0.0, -1, -2, -0.0, -3, -4, -5]  # max: -0.0 == 0.0, the first wins
    x[2] = [0.0, -0.0, 1, 2, 3, 4, 5, 0.0]       # min: 0.0 == -0.0, the first wins
    got = load_tflite(tmp_path / "m.tflite", ["x"])([x])
    want = [t.numpy() for t in Indices()(torch.from_numpy(x))]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


class Extremes(torch.nn.Module):
    def forward(self, x):
        return (x.amax(-1), x.amin(1, keepdim=True), x.max(), x.min(), x.max(1).values,
                x.min(-1)[0], torch.linalg.vector_norm(x, float("inf"), dim=-1))


def test_max_and_min_reductions_propagate_nan_on_litert(tmp_path):
    """TFLite's REDUCE_MAX/REDUCE_MIN skip NaN where TF's kernels (and torch) propagate it:
    the exported amax of a row holding NaN was its largest finite entry, unseen by the
    re-check's finite inputs."""
    conversion = crossport.convert_with_report(Extremes().eval(), (torch.randn(4, 6),))
    crossport.export(conversion, tmp_path / "m.tflite")
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    x[0, 3] = np.nan
    x[1] = [np.inf, -np.inf, np.nan, 1, 2, 3]
    x[2, 0] = np.inf                          # no NaN: inf is the max
    x[3] = -np.inf
    got = load_tflite(tmp_path / "m.tflite", ["x"])([x])
    want = [t.numpy() for t in Extremes()(torch.from_numpy(x))]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


class FloatFunctions(torch.nn.Module):
    def forward(self, a, b):
        return (torch.hypot(a, b), torch.fmax(a, b) + 0.0, torch.fmin(a, b) + 0.0,
                torch.copysign(a, b), torch.log10(a))


def test_c99_float_functions_match_torch_on_litert_at_special_values(tmp_path):
    """hypot/fmax/fmin/copysign/log10 avoid infinite constants (the converter saturates
    them) and use builtins only: the file gives torch's values on every special pair."""
    specials = torch.tensor([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -3.0, 1e-30, 100.0, 1e30])
    n = len(specials)
    a, b = specials.repeat_interleave(n).reshape(n, n), specials.repeat(n).reshape(n, n)
    conversion = crossport.convert_with_report(FloatFunctions().eval(),
                                               (torch.randn(n, n), torch.randn(n, n)))
    crossport.export(conversion, tmp_path / "m.tflite")
    assert "CUSTOM" not in tflite_op_names(tmp_path / "m.tflite")
    got = load_tflite(tmp_path / "m.tflite", ["a", "b"])([a.numpy(), b.numpy()])
    for g, w in zip(got, FloatFunctions()(a, b)):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-6, atol=0)  # NaN/inf by position


class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.up = torch.nn.Upsample(scale_factor=2, mode="bilinear")

    def forward(self, x):
        return self.up(self.conv(x))


def test_a_flex_op_error_names_the_torch_module(tmp_path):
    """A bilinear resize on a dynamic H/W computes its taps in float64 (no TFLite builtin):
    the error named the TF ops only (float64 Mul, Sub, AddV2...), not where they came from."""
    conversion = crossport.convert_with_report(
        Decoder().eval(), (torch.randn(1, 3, 16, 16),), dynamic_dims={0: {2: "h", 3: "w"}})
    with pytest.raises(crossport.ExportError, match=r"no TFLite builtin: .*Mul.* in module "
                                                    r"up\. They only run with the Flex"):
        crossport.export(conversion, tmp_path / "m.tflite")
    assert list(tmp_path.iterdir()) == []
