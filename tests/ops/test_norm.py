"""Normalisation in eval mode: batch, group, instance and layer norm (pitfalls 3, 5, 14).

Every norm gets non-trivial affine parameters and running statistics, so a wrong eps,
a mirrored momentum taken as eps, or an affine applied on the wrong axis shows.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.harness import assert_converts
from tests.ops.opcases import Fn, case, inputs


def randomized(module, seed=0):
    """Random affine parameters and running statistics (variance well away from 1)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
            if tensor.dtype != torch.float32:
                continue
            if name.endswith("running_var"):
                tensor.copy_(torch.rand(tensor.shape, generator=gen) * 0.05 + 0.001)
            else:
                tensor.copy_(torch.randn(tensor.shape, generator=gen))
    return module.eval()


def conv_then(norm, c=4):
    torch.manual_seed(0)
    return randomized(nn.Sequential(nn.Conv2d(3, c, 3), norm, nn.ReLU(), nn.Conv2d(c, 2, 1)))


def _relu_first_channels(y):
    y[:, :2].relu_()
    return y


class TF1LayerNorm(nn.Module):
    """TF1 contrib layer_norm: statistics over C,H,W, affine per channel = GroupNorm(1, C)."""

    def __init__(self, c=4):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, c, 3)
        self.norm = nn.GroupNorm(1, c)

    def forward(self, x):
        return self.norm(self.conv(x))


CASES = [
    # batch norm
    case("pitfall5-batchnorm2d-eps1e-5-small-var", randomized(nn.BatchNorm2d(4)), (2, 4, 5, 6),
         expect_layers=("BatchNormalization",), expect_converters=("aten_batch_norm_default",)),
    # TF folds its fused BN only into a conv the BN alone reads (not a depthwise one)
    case("batchnorm2d-after-conv-is-fused", conv_then(nn.BatchNorm2d(4)), (2, 3, 8, 8),
         expect_layers=("FusedBatchNormalization",), expect_converters=("aten_batch_norm_default",)),
    case("batchnorm2d-after-grouped-conv-is-fused", randomized(nn.Sequential(
        nn.Conv2d(4, 6, 3, groups=2), nn.BatchNorm2d(6))), (1, 4, 7, 7),
         expect_layers=("FusedBatchNormalization",), expect_converters=("aten_batch_norm_default",)),
    case("batchnorm2d-after-depthwise-is-keras", randomized(nn.Sequential(
        nn.Conv2d(4, 4, 3, groups=4), nn.BatchNorm2d(4), nn.ReLU6())), (1, 4, 7, 7),
         expect_layers=("BatchNormalization",), expect_converters=("aten_batch_norm_default",)),
    case("batchnorm2d-after-shared-conv-is-keras", randomized(nn.Sequential(
        nn.Conv2d(3, 4, 3), Fn(lambda y: torch.nn.functional.batch_norm(
            y, torch.arange(4.0), torch.arange(1.0, 5.0)) + y))), (1, 3, 7, 7),
         expect_layers=("BatchNormalization",), expect_converters=("aten_batch_norm_default",)),
    case("batchnorm2d-custom-eps-momentum", randomized(nn.BatchNorm2d(4, eps=1e-3, momentum=0.3)),
         (2, 4, 5, 6), expect_converters=("aten_batch_norm_default",)),
    case("batchnorm1d-2d-input", randomized(nn.BatchNorm1d(5)), (3, 5),
         expect_converters=("aten_batch_norm_default",)),
    case("batchnorm1d-3d-input", randomized(nn.BatchNorm1d(5)), (2, 5, 7), expect_converters=("aten_batch_norm_default",)),
    case("batchnorm3d", randomized(nn.BatchNorm3d(3)), (1, 3, 4, 5, 6), expect_converters=("aten_batch_norm_default",)),
    case("batchnorm2d-no-affine", randomized(nn.BatchNorm2d(4, affine=False)), (2, 4, 5, 6), expect_converters=("aten_batch_norm_default",)),
    # an in-place write through a view keeps the full decomposition (capture/functional.py)
    case("batchnorm2d-then-inplace-on-a-view",
         nn.Sequential(randomized(nn.BatchNorm2d(4)), Fn(_relu_first_channels)),
         (2, 4, 5, 6), expect_converters=("aten_native_batch_norm_legit_no_training",)),
    case("pitfall5-conv-bn-relu-chain", conv_then(nn.BatchNorm2d(4)), (2, 3, 8, 8), expect_converters=("aten_conv_nd", "aten_batch_norm_default", "aten_relu_default")),
    # group norm
    case("groupnorm-2groups", randomized(nn.GroupNorm(2, 6)), (2, 6, 5, 4),
         expect_layers=("GroupNorm",), expect_converters=("aten_group_norm_default",)),
    case("groupnorm-eps-no-affine", randomized(nn.GroupNorm(3, 6, eps=1e-3, affine=False)),
         (2, 6, 5, 4), expect_converters=("aten_group_norm_default",)),
    case("groupnorm-1d", randomized(nn.GroupNorm(2, 4)), (2, 4, 9),
         expect_converters=("aten_group_norm_default",)),
    case("groupnorm-2d-input", randomized(nn.GroupNorm(2, 4)), (3, 4), expect_converters=("aten_group_norm_default",)),
    case("groupnorm-after-conv", conv_then(nn.GroupNorm(2, 4)), (2, 3, 8, 8), expect_converters=("aten_conv_nd", "aten_group_norm_default", "aten_relu_default")),
    case("pitfall3-tf1-layer-norm-is-groupnorm1", randomized(TF1LayerNorm()), (2, 3, 7, 6), expect_converters=("aten_conv_nd", "aten_group_norm_default")),
    case("pitfall14-groupnorm-eps-default", nn.GroupNorm(4, 4), (1, 4, 1, 2), expect_converters=("aten_group_norm_default",)),
    # instance norm
    case("pitfall14-instancenorm2d-default", nn.InstanceNorm2d(4), (2, 4, 5, 6),
         expect_layers=("GroupNorm",), expect_converters=("aten_instance_norm_default",)),
    case("instancenorm2d-affine", randomized(nn.InstanceNorm2d(4, affine=True)), (2, 4, 5, 6), expect_converters=("aten_instance_norm_default",)),
    case("instancenorm1d", nn.InstanceNorm1d(3), (2, 3, 9),
         expect_converters=("aten_instance_norm_default",)),
    case("instancenorm3d-affine", randomized(nn.InstanceNorm3d(2, affine=True)), (1, 2, 3, 4, 5), expect_converters=("aten_instance_norm_default",)),
    case("instancenorm2d-running-stats-eval",
         randomized(nn.InstanceNorm2d(4, affine=True, track_running_stats=True)), (2, 4, 5, 6), expect_converters=("aten_instance_norm_default",)),
    case("instancenorm-after-conv", conv_then(nn.InstanceNorm2d(4, affine=True)), (2, 3, 8, 8), expect_converters=("aten_conv_nd", "aten_instance_norm_default", "aten_relu_default")),
    # layer norm
    case("layernorm-last-dim", randomized(nn.LayerNorm(8)), (2, 5, 8),
         expect_layers=("StableLayerNormalization",), expect_converters=("aten_layer_norm_default",)),
    case("layernorm-2d-input", randomized(nn.LayerNorm(6)), (3, 6),
         expect_converters=("aten_layer_norm_default",)),
    case("layernorm-no-bias", randomized(nn.LayerNorm(8, bias=False)), (2, 5, 8), expect_converters=("aten_layer_norm_default",)),
    case("layernorm-no-affine-eps", nn.LayerNorm(8, eps=1e-3, elementwise_affine=False),
         (2, 5, 8), expect_converters=("aten_layer_norm_default",)),
    case("pitfall3-layernorm-last-two-dims", randomized(nn.LayerNorm([5, 8])), (2, 3, 5, 8), expect_converters=("aten_layer_norm_default",)),
    case("pitfall3-layernorm-chw-on-nchw", randomized(nn.LayerNorm([4, 5, 6])), (2, 4, 5, 6), expect_converters=("aten_layer_norm_default",)),
    case("pitfall3-layernorm-chw-after-conv", conv_then(nn.LayerNorm([4, 6, 6])), (2, 3, 8, 8), expect_converters=("aten_conv_nd", "aten_layer_norm_default", "aten_relu_default")),
    case("layernorm-width-after-conv", conv_then(nn.LayerNorm(6)), (2, 3, 8, 8), expect_converters=("aten_conv_nd", "aten_layer_norm_default", "aten_relu_default")),
    case("layernorm-channels-after-permute", randomized(nn.Sequential(
        nn.Conv2d(3, 4, 3), Fn(lambda x: x.permute(0, 2, 3, 1)), nn.LayerNorm(4),
        Fn(lambda x: x.permute(0, 3, 1, 2)), nn.Conv2d(4, 2, 1))), (1, 3, 7, 7), expect_converters=("aten_conv_nd", "aten_layer_norm_default", "aten_permute_default")),
    case("pitfall9-layernorm-after-flatten", randomized(nn.Sequential(
        nn.Conv2d(3, 2, 3), nn.Flatten(), nn.LayerNorm(2 * 3 * 4), nn.Linear(24, 3))),
         (2, 3, 5, 6), expect_converters=("aten_conv_nd", "aten_layer_norm_default", "aten_linear_default", "aten_view_default")),
    case("layernorm-tiny-eps-constant-rows", nn.LayerNorm(4, eps=1e-5), (3, 4), expect_converters=("aten_layer_norm_default",)),
    case("layernorm-chw-dynamic-batch", conv_then(nn.LayerNorm([4, 6, 6])), (2, 3, 8, 8),
         dynamic_batch=True, expect_converters=("aten_conv_nd", "aten_layer_norm_default", "aten_relu_default")),
    case("groupnorm-channels-last-io", conv_then(nn.GroupNorm(2, 4)), (2, 3, 8, 8),
         channels_last_io=True, expect_converters=("aten_conv_nd", "aten_group_norm_default", "aten_relu_default")),
    case("groupnorm-dynamic-batch", conv_then(nn.GroupNorm(2, 4)), (2, 3, 8, 8),
         dynamic_batch=True, expect_converters=("aten_conv_nd", "aten_group_norm_default", "aten_relu_default")),
    case("instancenorm-dynamic-batch", conv_then(nn.InstanceNorm2d(4, affine=True)),
         (2, 3, 8, 8), dynamic_batch=True, expect_converters=("aten_conv_nd", "aten_instance_norm_default", "aten_relu_default")),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_norm(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), **kwargs)
