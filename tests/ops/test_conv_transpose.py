"""Transposed convolutions 1d/2d/3d: padding, output_padding, groups, dilation (pitfall 6)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tests.harness import assert_converts
from tests.ops.opcases import Fn, case, inputs
from tests.ops.test_conv import Modulated


def seeded(factory):
    torch.manual_seed(0)
    return factory()


T1, T2, T3 = nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d


def _gated(fn):
    """``fn(x, w * g(x), b)``: a weight scaled by a gate computed from the input."""
    return lambda m, x: fn(x, m.w * torch.sigmoid(x.mean()), getattr(m, "b", None))


CASES = [
    case("convtranspose1d-basic-keras-exact", seeded(lambda: T1(4, 3, 3)), (2, 4, 7),
         expect_layers=("Conv1DTranspose",),
         expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose1d-stride2-pad1-outpad1", seeded(lambda: T1(4, 3, 3, stride=2, padding=1,
                                                                   output_padding=1)), (1, 4, 6),
         expect_layers=("ConvTranspose1d",), expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose1d-kernel-smaller-than-stride", seeded(lambda: T1(3, 2, 2, stride=3)),
         (1, 3, 5), expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose2d-basic-keras-exact", seeded(lambda: T2(4, 3, 3, stride=2)),
         (1, 4, 5, 6), expect_layers=("Conv2DTranspose",), expect_converters=("aten_conv_transpose2d_input",)),
    case("pitfall6-convtranspose2d-padding-crops-both-ends",
         seeded(lambda: T2(4, 3, 4, stride=2, padding=1)), (1, 4, 5, 6),
         expect_layers=("ConvTranspose2d",), expect_converters=("aten_conv_transpose2d_input",)),
    case("pitfall6-convtranspose2d-output-padding-end-only",
         seeded(lambda: T2(4, 3, 3, stride=2, padding=1, output_padding=1)), (1, 4, 5, 6), expect_converters=("aten_conv_transpose2d_input",)),
    case("pitfall6-convtranspose2d-output-padding-no-padding",
         seeded(lambda: T2(4, 3, 3, stride=3, output_padding=(2, 1))), (1, 4, 4, 5), expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose2d-rect-kernel-stride-pad", seeded(lambda: T2(3, 5, (2, 3), stride=(2, 1),
                                                                     padding=(0, 1))),
         (1, 3, 5, 4), expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose2d-groups2", seeded(lambda: T2(4, 6, 3, stride=2, groups=2)), (1, 4, 4, 5), expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose2d-depthwise-groups", seeded(lambda: T2(4, 4, 3, groups=4, padding=1)),
         (1, 4, 5, 5), expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose2d-dilation2", seeded(lambda: T2(3, 4, 3, dilation=2)), (1, 3, 5, 5), expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose2d-dilation-stride-outpad", seeded(lambda: T2(3, 4, 3, stride=2, dilation=3,
                                                                     padding=2,
                                                                     output_padding=2)),
         (1, 3, 4, 5), expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose2d-nobias", seeded(lambda: T2(3, 4, 2, stride=2, bias=False)),
         (1, 3, 4, 4), expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose2d-after-conv-zero-transposes",
         seeded(lambda: nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.ReLU(),
                                      T2(4, 3, 3, stride=2, padding=1, output_padding=1))),
         (1, 3, 8, 8), expect_converters=("aten_conv_nd", "aten_conv_transpose2d_input", "aten_relu_default")),
    case("convtranspose3d-basic", seeded(lambda: T3(2, 3, 2, stride=2)), (1, 2, 3, 4, 3), expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose3d-pad-outpad-groups", seeded(lambda: T3(4, 2, 3, stride=2, padding=1,
                                                                output_padding=1, groups=2)),
         (1, 4, 3, 3, 4), expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose3d-dilation", seeded(lambda: T3(2, 2, 2, dilation=(1, 2, 1))),
         (1, 2, 3, 3, 3), expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose2d-dynamic-batch", seeded(lambda: T2(4, 3, 3, stride=2, padding=1,
                                                            output_padding=1)), (2, 4, 5, 6),
         dynamic_batch=True, expect_converters=("aten_conv_transpose2d_input",)),
    # weights computed in forward: crossport.layers.FunctionalConvTranspose (one transpose
    # for the weight's layout; groups=batch folds the batch into channels: more)
    case("convtranspose2d-modulated-groups-batch", seeded(lambda: Modulated(transposed=True)),
         [(2, 4, 5, 6), (2, 5)], expect_layers=("FunctionalConvTranspose",),
         max_transposes=3, expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose1d-computed-dilation-padding-bias", seeded(lambda: Fn(
        _gated(lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=2, dilation=2,
                                                  output_padding=1)),
        w=torch.randn(3, 4, 3), b=torch.randn(4))), (2, 3, 7),
         max_transposes=1, expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose3d-computed-groups2", seeded(lambda: Fn(
        _gated(lambda x, w, b: F.conv_transpose3d(x, w, b, stride=(1, 2, 2), groups=2)),
        w=torch.randn(4, 1, 2, 3, 3))), (1, 4, 3, 4, 5),
         max_transposes=1, expect_converters=("aten_conv_transpose2d_input",)),
    case("convtranspose2d-weight-as-model-input",
         Fn(lambda x, w: F.conv_transpose2d(x, w, stride=2)), [(1, 3, 5, 5), (3, 2, 3, 3)],
         max_transposes=1, expect_converters=("aten_conv_transpose2d_input",)),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_conv_transpose(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), **kwargs)
