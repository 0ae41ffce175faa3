"""The one compare routine: shapes, exact dtypes, NaN/inf positions, exact integers.

Unit rows run it on arrays built here; the conversion rows show the check (and its report
and JSON) seeing a NaN difference on a second output of a real Keras model built by a
deliberately wrong converter.
"""

from __future__ import annotations

import json
import math

import keras
import numpy as np
import pytest
import torch

import crossport
from crossport.parity import compare_outputs
from tests.harness import random_inputs
from tests.parity.test_acceptance import wrong_converter

NAN, INF = float("nan"), float("inf")


def test_nan_at_different_positions_fails_with_a_count_and_a_finite_error():
    ref = [np.ones(3, np.float32), np.array([1.0, NAN, NAN, 2.0], np.float32)]
    got = [np.ones(3, np.float32), np.array([1.0, 5.0, NAN, NAN], np.float32)]
    result = compare_outputs(ref, got)
    assert result.mismatches == [
        "output 1: NaN at 1 of 4 position(s) in torch but not in Keras (first at (1,): Keras 5)",
        "output 1: NaN at 1 of 4 position(s) in Keras but not in torch (first at (3,): torch 2)"]
    assert math.isfinite(result.error) and result.error == 0.0
    assert not result.passed(atol=1e-4)


def test_nan_and_inf_at_the_same_positions_pass():
    a = np.array([NAN, INF, -INF, 1.0], np.float32)
    result = compare_outputs([a], [a + np.float32(1e-7)])
    assert result.mismatches == [] and result.passed(atol=1e-4)


def test_inf_of_the_other_sign_is_a_mismatch():
    result = compare_outputs([np.array([INF, 1.0], np.float32)],
                             [np.array([-INF, 1.0], np.float32)])
    assert result.mismatches == [
        "output 0: +inf at 1 of 2 position(s) in torch but not in Keras (first at (0,): "
        "Keras -inf)",
        "output 0: -inf at 1 of 2 position(s) in Keras but not in torch (first at (0,): "
        "torch inf)"]


def test_integers_compare_exactly_without_casting_keras_to_torch_dtype():
    ref = torch.tensor([2, -3, 4])
    result = compare_outputs([ref], [np.array([2.5, -3.0, 4.0], np.float32)])
    assert "output 0: dtype float32 in Keras, torch int64" in result.mismatches
    assert any("1 of 3 integer/bool value(s) differ" in m for m in result.mismatches)


@pytest.mark.parametrize("torch_dtype, keras_dtype", [
    (torch.int64, "int32"), (torch.bool, "int64"), (torch.float32, "float64"),
    (torch.float16, "float32"), (torch.bfloat16, "float32"),
])
def test_dtype_must_match_torch_exactly(torch_dtype, keras_dtype):
    ref = torch.ones(2, 3).to(torch_dtype)
    result = compare_outputs([ref], [np.ones((2, 3), keras_dtype)])
    torch_name = str(torch_dtype).split(".")[-1]
    assert result.mismatches == [f"output 0: dtype {keras_dtype} in Keras, torch {torch_name}"]


def test_bfloat16_compares_with_bfloat16():
    ref = torch.randn(4).to(torch.bfloat16)
    got = keras.ops.convert_to_numpy(keras.ops.cast(ref.float().numpy(), "bfloat16"))
    assert compare_outputs([ref], [got]).passed(atol=0.0)


def test_shape_and_output_count_mismatches():
    result = compare_outputs([np.ones((2, 3)), np.ones(2)], [np.ones((3, 2))])
    assert result.mismatches == ["torch returns 2 output tensor(s), Keras 1",
                                 "output 0: shape (3, 2) in Keras, torch (2, 3)"]
    assert result.outputs[0].error is None and result.error == 0.0
    json.dumps(result.to_dict(), allow_nan=False)


class TwoOutputs(torch.nn.Module):
    def forward(self, x):
        return x * 2, torch.log(x)


def log_of_abs_by_mistake(ctx, self):
    return keras.ops.log(keras.ops.abs(self))


def test_nan_difference_on_a_second_output_fails_the_check():
    """The bug this fixes: max(0.0, nan) == 0.0 let it pass."""
    with (wrong_converter(torch.ops.aten.log.default, log_of_abs_by_mistake),
          pytest.raises(crossport.ParityError) as info):
        crossport.convert(TwoOutputs().eval(), random_inputs((2, 8)))
    report = info.value.report
    assert not report.passed and math.isfinite(report.max_error)
    assert any(m.startswith("output 1: NaN at") for m in report.mismatches), report.mismatches
    assert "aten.log" in report.first_divergent.op
    assert "NaN" in str(info.value)
    json.dumps(report.to_dict(), allow_nan=False)


def test_matching_nans_pass_and_the_report_is_valid_json():
    conversion = crossport.convert_with_report(TwoOutputs().eval(), random_inputs((2, 8)))
    assert conversion.report.passed and conversion.report.mismatches == []
    json.dumps(conversion.report.to_dict(), allow_nan=False)


def test_export_recheck_fails_on_a_nan_difference_and_writes_nothing(tmp_path):
    with wrong_converter(torch.ops.aten.log.default, log_of_abs_by_mistake):
        conversion = crossport.convert_with_report(TwoOutputs().eval(), random_inputs((2, 8)),
                                                   check=False)
    with pytest.raises(crossport.ExportError, match="output 1: NaN at"):
        crossport.export(conversion, tmp_path / "m.keras")
    assert list(tmp_path.iterdir()) == []
