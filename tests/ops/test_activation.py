"""Activations (pitfalls.md item 14: GELU approximation, hard_sigmoid, softplus, prelu)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import crossport
from tests.harness import assert_converts
from tests.ops.opcases import Fn, case, inputs


def scaled(module, k=3.0):
    """Inputs spread over [-3k, 3k] so every branch (saturation, thresholds) is exercised."""
    return nn.Sequential(Fn(lambda x: x * k), module)


def prelu_after_conv(num_parameters):
    torch.manual_seed(0)
    prelu = nn.PReLU(num_parameters)
    with torch.no_grad():
        prelu.weight.copy_(torch.linspace(-0.5, 0.7, num_parameters))
    return nn.Sequential(nn.Conv2d(3, 4, 1), prelu)


CASES = [
    # a 1-D or 0-D input has one weight; Keras' PReLU wanted a weight of shape () and the
    # converter failed (OpInfo sweep)
    case("prelu-1d-input", nn.PReLU(init=0.3), (7,), expect_converters=("aten_prelu_default",)),
    case("prelu-0d-input", nn.PReLU(init=0.3), [()], expect_converters=("aten_prelu_default",)),
    case("relu", nn.ReLU(), (2, 3, 4, 5),
         expect_converters=("aten_relu_default",)),
    case("relu6", scaled(nn.ReLU6()), (2, 3, 4, 5), expect_converters=("aten_hardtanh_default", "aten_mul_tensor")),
    case("leaky-relu-default", nn.LeakyReLU(), (2, 3, 4, 5),
         expect_converters=("aten_leaky_relu_default",)),
    case("leaky-relu-slope", nn.LeakyReLU(0.2), (2, 11), expect_converters=("aten_leaky_relu_default",)),
    case("prelu-shared", prelu_after_conv(1), (1, 3, 5, 6), expect_converters=("aten_conv_nd", "aten_prelu_default")),
    case("prelu-per-channel-channels-last", prelu_after_conv(4), (1, 3, 5, 6), expect_converters=("aten_conv_nd", "aten_prelu_default")),
    case("prelu-2d-input", nn.PReLU(7), (3, 7), expect_converters=("aten_prelu_default",)),
    case("prelu-1d-per-channel", nn.PReLU(3), (2, 3, 8),
         expect_converters=("aten_prelu_default",)),
    case("elu", scaled(nn.ELU()), (2, 3, 4, 5),
         expect_converters=("aten_elu_default",)),
    case("elu-alpha", scaled(nn.ELU(alpha=0.5)), (2, 9), expect_converters=("aten_elu_default", "aten_mul_tensor")),
    case("celu", scaled(nn.CELU(alpha=1.5)), (2, 3, 4, 5),
         expect_converters=("aten_celu_default",)),
    case("selu", scaled(nn.SELU()), (2, 3, 4, 5),
         expect_converters=("aten_selu_default",)),
    case("pitfall14-gelu-exact", scaled(nn.GELU()), (2, 3, 4, 5),
         expect_converters=("aten_gelu_default",)),
    case("pitfall14-gelu-tanh", scaled(nn.GELU(approximate="tanh")), (2, 3, 4, 5), expect_converters=("aten_gelu_default", "aten_mul_tensor")),
    case("silu", scaled(nn.SiLU()), (2, 3, 4, 5),
         expect_converters=("aten_silu_default",)),
    case("mish", scaled(nn.Mish()), (2, 3, 4, 5),
         expect_converters=("aten_mish_default",)),
    case("hardswish", scaled(nn.Hardswish()), (2, 3, 4, 5),
         expect_converters=("aten_hardswish_default",)),
    case("pitfall14-hardsigmoid-relu6-form", scaled(nn.Hardsigmoid()), (2, 3, 4, 5),
         expect_converters=("aten_hardsigmoid_default",)),
    case("hardtanh-default", scaled(nn.Hardtanh()), (2, 3, 4, 5),
         expect_converters=("aten_hardtanh_default",)),
    case("hardtanh-range", scaled(nn.Hardtanh(-0.5, 2.0)), (2, 3, 4, 5), expect_converters=("aten_hardtanh_default", "aten_mul_tensor")),
    # integers: torch truncates the bounds into the dtype; Keras' Clip rejected int tensors
    case("hardtanh-int64-fractional-bounds", Fn(
        lambda x: nn.functional.hardtanh((x * 4).long(), -2.5, 3.7)), (2, 3, 4),
         expect_converters=("aten_hardtanh_default",)),
    case("sigmoid", scaled(nn.Sigmoid()), (2, 3, 4, 5),
         expect_converters=("aten_sigmoid_default",)),
    case("tanh", scaled(nn.Tanh()), (2, 3, 4, 5),
         expect_converters=("aten_tanh_default",)),
    case("pitfall14-softplus-default", scaled(nn.Softplus(), 10.0), (2, 3, 4, 5), expect_converters=("aten_mul_tensor", "aten_softplus_default")),
    case("pitfall14-softplus-beta-threshold", scaled(nn.Softplus(beta=2.0, threshold=3.0)),
         (2, 3, 4, 5),
         expect_converters=("aten_softplus_default",)),
    case("erf", Fn(torch.erf), (2, 3, 4, 5),
         expect_converters=("aten_erf_default",)),
    case("functional-relu-inplace", Fn(lambda x: F.relu(x + 0.0, inplace=True)), (2, 8), expect_converters=("aten_add_tensor", "aten_relu_default")),
    case("activation-after-conv-zero-transposes",
         nn.Sequential(nn.Conv2d(3, 4, 3), nn.Hardswish(), nn.Conv2d(4, 4, 1), nn.GELU()),
         (1, 3, 6, 6), expect_converters=("aten_conv_nd", "aten_gelu_default", "aten_hardswish_default")),
    case("prelu-after-conv1d", nn.Sequential(nn.Conv1d(3, 4, 3), nn.PReLU(4)), (2, 3, 9), expect_converters=("aten_conv_nd", "aten_prelu_default")),
    case("leaky-relu-after-flatten", nn.Sequential(nn.Conv2d(3, 2, 3), nn.Flatten(),
                                                   nn.LeakyReLU(0.3), nn.Linear(18, 2)),
         (2, 3, 5, 5), expect_converters=("aten_conv_nd", "aten_leaky_relu_default", "aten_linear_default", "aten_view_default")),
    # eval RReLU draws nothing: leaky_relu with the mean slope (was refused as random)
    case("rrelu-eval-after-conv-zero-transposes", nn.Sequential(nn.Conv2d(3, 4, 3), nn.RReLU(0.1, 0.3)),
         (2, 3, 6, 6), max_transposes=0, expect_converters=("aten_conv_nd", "aten_rrelu_default")),
    case("rrelu-eval-default-bounds", nn.RReLU(), (3, 7), expect_converters=("aten_rrelu_default",)),
]


class TrainingRReLU(nn.Module):
    def forward(self, x):
        return F.rrelu(x, training=True)


def test_rrelu_in_training_is_refused_with_the_eval_way_out():
    with pytest.raises(crossport.UnsupportedOpError, match=r"rrelu in training.*eval\(\)"):
        crossport.convert(TrainingRReLU(), (torch.randn(2, 5),))


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_activation(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), **kwargs)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_float16_gelu_stays_float16_and_rounds_like_torch(approximate):
    """torch computes a half GELU in float32 and rounds once; the converted layer too (it
    keeps its float16 input, no autocast to the model's float32 policy)."""
    x = (torch.randn(4, 64, generator=torch.Generator().manual_seed(0)) * 3).half()
    conversion = crossport.convert_with_report(torch.nn.GELU(approximate).eval(), (x,))
    out = conversion.model(x.numpy())
    assert out.dtype == "float16" and conversion.report.passed
    assert conversion.report.max_error <= 1e-3  # float16 rounding at most
