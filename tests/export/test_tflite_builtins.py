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


class ExpertOrder(torch.nn.Module):
    """The index arithmetic of transformers' default experts path: tokens sorted by their
    top-2 expert ids, the token of each sorted pair (``perm // 2``) and the inverse
    permutation (``inverse[perm] = arange``), all int64 as torch computes them."""

    def forward(self, x):
        ids = torch.topk(x, 2, dim=-1).indices.reshape(-1)
        _, perm = torch.sort(ids, stable=True)
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.numel())
        return x[perm // 2] * 2.0, inverse, perm // 2


def test_int64_index_arithmetic_that_sizes_bound_exports_as_int32_builtins(tmp_path):
    """TFLite has no int64 FLOOR_DIV or UNSORTED_SEGMENT_MAX/SUM: the file needed the Flex
    delegate (an ExportError). Indices of a sort are below its size, so the division and the
    inverse permutation run in int32 and are cast back: builtins, torch's int64 outputs."""
    torch.manual_seed(0)
    conversion = crossport.convert_with_report(ExpertOrder().eval(), (torch.randn(6, 8),))
    result = crossport.export(conversion, tmp_path / "m.tflite")
    assert result.passed, result.summary()
    names = tflite_op_names(tmp_path / "m.tflite")
    assert {"FLOOR_DIV", "UNSORTED_SEGMENT_MAX"} <= set(names) and "CUSTOM" not in names
    x = np.random.default_rng(2).standard_normal((6, 8)).astype(np.float32)
    got = load_tflite(tmp_path / "m.tflite", ["x"])([x])
    want = [t.numpy() for t in ExpertOrder()(torch.from_numpy(x))]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


class DividedInput(torch.nn.Module):
    def forward(self, x):
        return x // 3


def test_int64_arithmetic_on_inputs_stays_int64(tmp_path):
    """An int64 input bounds nothing (a value past int32 is valid): its division stays
    int64, so the TFLite export is refused by name, never narrowed."""
    x = torch.tensor([[2**40 + 7, -5, 9]])
    conversion = crossport.convert_with_report(DividedInput().eval(), (x,))
    np.testing.assert_array_equal(np.asarray(conversion.model(x.numpy())), (x // 3).numpy())
    with pytest.raises(crossport.ExportError, match="FloorDiv"):
        crossport.export(conversion, tmp_path / "m.tflite")
    assert not (tmp_path / "m.tflite").exists()


class BoundedExpertOrder(ExpertOrder):
    """``ExpertOrder`` with a run-time token count the model bounds (as the generative
    export's step bounds its chunk by the cache)."""

    def forward(self, x):
        torch._check(x.shape[0] <= 512)
        return super().forward(x)


def test_run_time_sizes_with_an_upper_bound_narrow_too(tmp_path):
    torch.manual_seed(0)
    conversion = crossport.convert_with_report(BoundedExpertOrder().eval(), (torch.randn(6, 8),),
                                               dynamic_dims={"x": {0: "tokens"}})
    result = crossport.export(conversion, tmp_path / "m.tflite")
    assert result.passed, result.summary()
    run = load_tflite(tmp_path / "m.tflite", ["x"])
    for rows in (3, 11):
        x = np.random.default_rng(rows).standard_normal((rows, 8)).astype(np.float32)
        want = [t.numpy() for t in ExpertOrder()(torch.from_numpy(x))]
        for g, w in zip(run([x]), want):
            np.testing.assert_array_equal(g, w)
