"""Ops whose Keras form used TF ops without a TFLite builtin export to builtin-only files."""

import numpy as np
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
