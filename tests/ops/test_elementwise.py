"""Elementwise arithmetic with torch broadcasting, clamp, where, integer semantics.

Rows after a conv receive channels-last activations, so constants and [C, 1, 1] parameters
must be laid out to match (pitfall 8); integer division and remainder follow torch
(pitfall 15).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.harness import assert_converts
from tests.ops.opcases import Fn, case, inputs


def seeded_randn(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(7))


class SE(nn.Module):
    """Squeeze-and-excitation: x * sigmoid(fc(pool(x))) with a [N, C, 1, 1] gate."""

    def __init__(self, c=8):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, c, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(c, 2, 1), nn.Conv2d(2, c, 1)

    def forward(self, x):
        x = self.conv(x)
        gate = torch.sigmoid(self.fc2(torch.relu(self.fc1(self.pool(x)))))
        return x * gate


class SELinear(nn.Module):
    """SE with Linear layers: the gate goes through flatten / view(N, C, 1, 1)."""

    def __init__(self, c=6):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, c, 3)
        self.fc = nn.Linear(c, c)

    def forward(self, x):
        x = self.conv(x)
        s = torch.sigmoid(self.fc(x.mean((2, 3))))
        return x * s.view(x.shape[0], -1, 1, 1)


class ChannelScale(nn.Module):
    """A [C, 1, 1] parameter broadcast against an NCHW activation after a conv."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)
        self.scale = nn.Parameter(seeded_randn(4, 1, 1))
        self.shift = nn.Parameter(seeded_randn(1, 4, 1, 1))
        self.row = nn.Parameter(seeded_randn(4))  # broadcasts against W

    def forward(self, x):
        y = self.conv(x)
        return (y * self.scale + self.shift - self.row) / 2.0


def after_conv(fn):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), Fn(fn))


def intdiv(fn):
    """Integer inputs with negatives, from a float input (exact comparison)."""
    return Fn(lambda x: fn(torch.round(x * 5).to(torch.int64)))


CASES = [
    case("add-two-inputs", Fn(torch.add), [(2, 3, 4), (2, 3, 4)], expect_converters=("aten_add_tensor",)),
    case("add-alpha", Fn(lambda a, b: torch.add(a, b, alpha=2.5)), [(2, 5), (2, 5)],
         expect_converters=("aten_add_tensor",)),
    case("sub-broadcast-row", Fn(torch.sub), [(2, 3, 4), (4,)],
         expect_converters=("aten_sub_tensor",)),
    case("mul-broadcast-column", Fn(torch.mul), [(2, 3, 4), (3, 1)],
         expect_converters=("aten_mul_tensor",)),
    case("div-broadcast-both", Fn(torch.div), [(2, 1, 4), (3, 1)],
         expect_converters=("aten_div_tensor",)),
    case("scalar-arith", Fn(lambda x: (2 - x) * 3 / 4 + 1), (2, 3, 4), expect_converters=("aten_add_tensor", "aten_div_tensor", "aten_mul_tensor", "aten_rsub_scalar")),
    case("rsub-scalar", Fn(lambda x: 1 - x), (2, 3, 4),
         expect_converters=("aten_rsub_scalar",)),
    case("pow-square-sqrt", Fn(lambda x: x.pow(2) + x.abs().pow(0.5) + x.abs().pow(1.7)),
         (2, 3, 4),
         expect_converters=("aten_pow_tensor_scalar",)),
    case("unary-math", Fn(lambda x: torch.exp(x) + torch.log1p(x.abs()) + torch.rsqrt(x.abs() + 1)
                          + torch.sin(x) * torch.cos(x) - torch.floor(x) + torch.ceil(x)),
         (2, 3, 4),
         expect_converters=("aten_ceil_default", "aten_cos_default", "aten_exp_default",
                            "aten_floor_default", "aten_log1p_default", "aten_rsqrt_default",
                            "aten_sin_default")),
    case("maximum-minimum", Fn(lambda a, b: torch.maximum(a, b) - torch.minimum(a, b * 2)),
         [(2, 3, 4), (3, 4)],
         expect_converters=("aten_minimum_default",)),
    case("clamp-both", Fn(lambda x: torch.clamp(x, -0.5, 0.7)), (2, 3, 4),
         expect_converters=("aten_clamp_default",)),
    case("clamp-min-only", Fn(lambda x: x.clamp(min=0.1)), (2, 3, 4), expect_converters=("aten_clamp_default",)),
    case("clamp-max-only", Fn(lambda x: x.clamp(max=-0.2)), (2, 3, 4), expect_converters=("aten_clamp_default",)),
    case("clamp-min-greater-than-max", Fn(lambda x: torch.clamp(x, 0.5, -0.5)), (2, 3, 4), expect_converters=("aten_clamp_default",)),
    case("where-tensor-tensor", Fn(lambda a, b: torch.where(a > b, a, b * 2)),
         [(2, 3, 4), (2, 3, 4)],
         expect_converters=("aten_gt_Tensor",)),
    case("where-scalar-other", Fn(lambda x: torch.where(x > 0, x, 0.0)), (2, 3, 4),
         expect_converters=("aten_where_self",)),
    case("where-broadcast-cond", Fn(lambda a, b: torch.where(b > 0, a, -a)), [(2, 3, 4), (4,)], expect_converters=("aten_gt_Scalar", "aten_neg_default", "aten_where_self")),
    case("comparisons-bool-outputs", Fn(lambda a, b: (a > b, a <= b, a == a, (a > 0) & (b < 0))),
         [(2, 3), (2, 3)],
         expect_converters=("aten_eq_Tensor", "aten_le_Tensor")),
    case("pitfall15-floor-divide-negative-ints", intdiv(lambda x: torch.floor_divide(x, 3)),
         (3, 8), expect_converters=("aten_floor_divide_default", "aten_mul_tensor", "aten_round_default", "aten_to_copy_default")),
    case("pitfall15-remainder-negative-ints", intdiv(lambda x: x % 3 + torch.remainder(x, -4)),
         (3, 8), expect_converters=("aten_add_tensor", "aten_mul_tensor", "aten_remainder_tensor", "aten_round_default", "aten_to_copy_default")),
    case("pitfall15-fmod-negative-ints", intdiv(lambda x: torch.fmod(x, 3)), (3, 8), expect_converters=("aten_fmod_tensor", "aten_mul_tensor", "aten_round_default", "aten_to_copy_default")),
    case("pitfall15-div-trunc-ints", intdiv(lambda x: torch.div(x, 4, rounding_mode="trunc")),
         (3, 8), expect_converters=("aten_div_tensor_mode", "aten_mul_tensor", "aten_round_default", "aten_to_copy_default")),
    case("pitfall15-div-floor-floats", Fn(lambda x: torch.div(x * 5, 2, rounding_mode="floor")),
         (3, 8), expect_converters=("aten_div_tensor_mode", "aten_mul_tensor")),
    case("pitfall15-remainder-floats", Fn(lambda x: torch.remainder(x * 5, 1.5)), (3, 8), expect_converters=("aten_mul_tensor", "aten_remainder_tensor")),
    case("pitfall8-se-block-x-times-sigmoid-pooled", SE(), (2, 3, 6, 6), expect_converters=("aten_adaptive_avg_pool2d_default", "aten_conv_nd", "aten_mul_tensor", "aten_relu_default", "aten_sigmoid_default")),
    case("pitfall8-se-block-linear-view", SELinear(), (2, 3, 7, 7), expect_converters=("aten_conv_nd", "aten_linear_default", "aten_mean_dim", "aten_mul_tensor", "aten_sigmoid_default", "aten_view_default")),
    case("pitfall8-channel-parameter-c11-after-conv", ChannelScale(), (2, 3, 6, 6), expect_converters=("aten_add_tensor", "aten_conv_nd", "aten_div_tensor", "aten_mul_tensor", "aten_sub_tensor")),
    case("scalar-ops-after-conv", after_conv(lambda x: (x - 0.5) * 2.0 + x.abs()), (1, 3, 6, 6), expect_converters=("aten_abs_default", "aten_add_tensor", "aten_conv_nd", "aten_mul_tensor", "aten_sub_tensor")),
    case("broadcast-last-dim-param-after-conv",
         nn.Sequential(nn.Conv2d(3, 4, 3), Fn(lambda m, x: x * m.w, w=seeded_randn(5))),
         (1, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_mul_tensor")),
    case("arange-in-forward", after_conv(lambda x: x * torch.arange(5.0)), (1, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_mul_tensor")),
    case("broadcast-rank-lower-after-conv", after_conv(lambda x: x + x[0, :, :1, :]),
         (1, 3, 6, 7), max_transposes=None, expect_converters=("aten_add_tensor", "aten_conv_nd", "aten_select_int", "aten_slice_tensor")),
    case("bool-times-float-mask", Fn(lambda x: x * (x > 0)), (2, 3, 4), expect_converters=("aten_gt_Scalar", "aten_mul_tensor")),
    case("int-plus-float-promotion", Fn(lambda x: x + torch.round(x * 3).to(torch.int64)),
         (2, 3, 4), expect_converters=("aten_add_tensor", "aten_mul_tensor", "aten_round_default", "aten_to_copy_default")),
    case("int-true-division-to-float", intdiv(lambda x: x / 4), (3, 8), expect_converters=("aten_div_tensor", "aten_mul_tensor", "aten_round_default", "aten_to_copy_default")),
    case("pow-scalar-base", Fn(lambda x: 2.0 ** x), (2, 3, 4),
         expect_converters=("aten_pow_scalar",)),
    case("clamp-tensor-bounds", Fn(lambda a, b: torch.clamp(a, min=-b.abs(), max=b.abs())),
         [(2, 3, 4), (3, 4)], expect_converters=("aten_abs_default", "aten_clamp_default", "aten_neg_default")),
    case("where-after-conv-scalar", after_conv(lambda x: torch.where(x > 0.1, x, -1.0)),
         (1, 3, 6, 6), expect_converters=("aten_conv_nd", "aten_gt_Scalar", "aten_where_self")),
    case("mask-after-conv-channel-param", nn.Sequential(
        nn.Conv2d(3, 4, 3), Fn(lambda m, x: torch.where(m.mask > 0, x, x * 0.5),
                               mask=seeded_randn(4, 1, 1))),
         (1, 3, 6, 6), expect_converters=("aten_conv_nd", "aten_mul_tensor", "aten_where_self")),
    case("add-conv-output-to-permuted-branch", nn.Sequential(
        nn.Conv2d(3, 4, 3), Fn(lambda x: x + x.transpose(2, 3))), (1, 3, 6, 6),
         max_transposes=None, expect_converters=("aten_add_tensor", "aten_conv_nd", "aten_permute_default")),
    case("bool-and-or", Fn(lambda a, b: ((a > 0) & (b > 0)) | (a > 1)), [(2, 3), (2, 3)],
         expect_converters=("aten_bitwise_and_Tensor", "aten_bitwise_or_Tensor")),
    case("bool-plus-bool-is-or", Fn(lambda a, b: (a > 0) + (b > 0)), [(2, 3), (2, 3)],
         expect_converters=("aten_gt_Scalar",)),
    case("bool-times-bool-is-and", Fn(lambda a, b: (a > 0) * (b > 0)), [(2, 3), (2, 3)], expect_converters=("aten_gt_Scalar", "aten_mul_tensor")),
    case("float-times-bool-mask", Fn(lambda a: a * (a > 0)), (2, 3, 4), expect_converters=("aten_gt_Scalar", "aten_mul_tensor")),
    case("bool-plus-int", Fn(lambda a: (a > 0) + torch.ones_like(a, dtype=torch.int64)), (2, 3),
         expect_converters=("aten_full_like_default",)),
    # keras.ops.add on TF turns x + y into bias_add when y squeezes to a vector as long as
    # x's dim 1 or last dim, without checking which axis y runs along
    case("keras-biasadd-trap-param-along-height-square", nn.Sequential(
        nn.Conv2d(3, 4, 3), Fn(lambda m, x: x + m.p, p=seeded_randn(4, 1))), (1, 3, 6, 6), expect_converters=("aten_add_tensor", "aten_conv_nd")),
    case("keras-biasadd-trap-broadcasts-first-operand", Fn(lambda a, b: a + b),
         [(1, 4, 1), (1, 1, 4)], expect_converters=("aten_add_tensor",)),
    case("keras-biasadd-trap-channel-param-after-conv-c1", nn.Sequential(
        nn.Conv2d(3, 1, 3), Fn(lambda m, x: x + m.p, p=seeded_randn(4, 1, 1))), (1, 3, 6, 6), expect_converters=("aten_add_tensor", "aten_conv_nd")),
    # one row for each unary / binary converter the rows above do not reach
    case("unary-log-sqrt-square-reciprocal", Fn(
        lambda x: torch.log(x.abs() + 1) + torch.sqrt(x.abs()) + torch.square(x)
        + torch.reciprocal(x.abs() + 1)), (2, 3, 4),
         expect_converters=("aten_log_default", "aten_sqrt_default", "aten_square_default",
                            "aten_reciprocal_default")),
    case("unary-tan-atan-exp2-expm1-log2", Fn(
        lambda x: torch.tan(x * 0.5) + torch.atan(x) + torch.exp2(x) + torch.expm1(x)
        + torch.log2(x.abs() + 1)), (2, 3, 4),
         expect_converters=("aten_tan_default", "aten_atan_default", "aten_exp2_default",
                            "aten_expm1_default", "aten_log2_default")),
    case("unary-sign-trunc", Fn(lambda x: torch.sign(x) + torch.trunc(x * 3)), (2, 3, 4),
         expect_converters=("aten_sign_default", "aten_trunc_default")),
    case("atan2-quadrants", Fn(torch.atan2), [(2, 3, 4), (2, 3, 4)],
         expect_converters=("aten_atan2_default",)),
    case("logical-and-or-xor-not", Fn(lambda a, b: torch.logical_xor(
        torch.logical_and(a > 0, b > 0), torch.logical_or(a > 1, torch.logical_not(b > 0.5)))),
         [(2, 3), (2, 3)],
         expect_converters=("aten_logical_and_default", "aten_logical_or_default",
                            "aten_logical_xor_default", "aten_logical_not_default")),
    case("comparisons-tensor-and-scalar", Fn(
        lambda a, b: (a < b) | ((a != b) & (a >= 0.5)) | (b <= 0.1)), [(2, 3), (2, 3)],
         expect_converters=("aten_lt_Tensor", "aten_ne_Tensor", "aten_ge_Scalar",
                            "aten_le_Scalar")),
    case("bitwise-not-isnan", Fn(lambda x: ~(x > 0) | torch.isnan(torch.log(x))), (2, 3, 4),
         expect_converters=("aten_bitwise_not_default", "aten_isnan_default")),
    case("clamp-min-and-max-ops", Fn(lambda x: torch.clamp_min(x, -0.3) + torch.clamp_max(x, 0.4)),
         (2, 3, 4), expect_converters=("aten_clamp_min_default", "aten_clamp_max_default")),
    # TF has no bool Maximum/Minimum: the converted model failed at run time (OpInfo sweep)
    case("bool-clamp-min-max-tensors", Fn(lambda a, b: (torch.clamp_max(a > 0, b > 0),
                                                        torch.clamp_min(a > 0, b > 0))),
         [(2, 3), (2, 3)], expect_converters=("aten_clamp_default",)),
    # TF's Greater/Less and Maximum/Minimum have no bool kernels (False < True in torch)
    case("bool-ordering-comparisons", Fn(lambda a, b: ((a > 0) > (b > 0), (a > 0) <= (b > 0),
                                                       (a > 0) < True, (a > 0) >= (b > 0.5))),
         [(2, 3), (2, 3)], expect_converters=("aten_gt_Tensor", "aten_le_Tensor",
                                              "aten_lt_Scalar", "aten_ge_Tensor")),
    case("bool-fmax-fmin", Fn(lambda a, b: (torch.fmax(a > 0, b > 0), torch.fmin(a > 0, b > 0))),
         [(2, 3), (2, 3)], expect_converters=("aten_fmax_default", "aten_fmin_default")),
    # sign of bools is the bool (TF has no bool Sign); square of bools is int64 (not int32)
    case("bool-sign-square", Fn(lambda a: (torch.sign(a > 0), torch.square(a > 0))), (2, 3),
         expect_converters=("aten_sign_default", "aten_square_default")),
    # a 0-dim input was a Keras Input of shape (None,), which rejects a 0-dim array
    case("zero-dim-inputs", Fn(lambda a, b: a * b + a), [(), ()],
         expect_converters=("aten_mul_tensor", "aten_add_tensor")),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_elementwise(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), **kwargs)
