"""Convolutions 1d/2d/3d: padding forms and modes, stride, dilation, groups, depthwise.

pitfalls.md items 1 (grouped/depthwise), 4 (TF SAME is asymmetric), 8 (NCHW vs NHWC) and
10 (kernel layouts). CNN-shaped rows keep zero transposes inside the model.
"""

from __future__ import annotations

import keras
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tests.harness import assert_converts
from tests.ops.opcases import Fn, case, inputs


def seeded(factory):
    torch.manual_seed(0)
    return factory()


C1, C2, C3 = nn.Conv1d, nn.Conv2d, nn.Conv3d


class Modulated(nn.Module):
    """StyleGAN2's modulated conv: a per-sample weight (style-scaled, demodulated), run as
    one conv with ``groups=batch`` on the batch folded into the channels."""

    def __init__(self, transposed: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(6, 4, 3, 3))
        self.affine = nn.Linear(5, 4)
        self.transposed = transposed

    def forward(self, x, style):
        batch = x.shape[0]
        w = self.weight[None] * self.affine(style)[:, None, :, None, None]
        w = w * torch.rsqrt(w.pow(2).sum([2, 3, 4], keepdim=True) + 1e-8)
        x = x.reshape(1, -1, *x.shape[2:])
        if self.transposed:  # the upsampling layer: [in, out] per sample
            w = w.transpose(1, 2).reshape(-1, 6, 3, 3)
            y = F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1, groups=batch)
        else:
            y = F.conv2d(x, w.reshape(-1, 4, 3, 3), padding=1, groups=batch)
        return y.reshape(batch, 6, *y.shape[2:])


class CondConv(nn.Module):
    """A per-sample mixture of expert kernels (CondConv), batched with ``groups=batch``."""

    def __init__(self):
        super().__init__()
        self.experts = nn.Parameter(torch.randn(3, 6, 6, 3, 3) * 0.2)
        self.route = nn.Linear(6, 3)

    def forward(self, x):
        batch, channels, h, w = x.shape
        weights = torch.einsum("be,eoikl->boikl", torch.sigmoid(self.route(x.mean([2, 3]))),
                               self.experts)
        y = F.conv2d(x.reshape(1, batch * channels, h, w), weights.reshape(-1, 6, 3, 3),
                     stride=2, groups=batch)
        return y.reshape(batch, 6, *y.shape[2:])


def _gated(fn):
    """``fn(x, w * g(x), b)``: a weight scaled by a gate computed from the input."""
    return lambda m, x: fn(x, m.w * torch.sigmoid(x.mean()), getattr(m, "b", None))

# A padding_mode conv on the model input: the layout analysis looks through the pad
# (keeps_layout), so the input is laid out channels-last at the boundary: no inner transpose.
PAD_INPUT_TRANSPOSE = 0

CASES = [
    # 1d
    case("conv1d-basic", seeded(lambda: C1(3, 5, 3)), (2, 3, 11),
         expect_converters=("aten_conv_nd",)),
    case("conv1d-stride2-pad2", seeded(lambda: C1(3, 4, 5, stride=2, padding=2)), (1, 3, 12), expect_converters=("aten_conv_nd",)),
    case("conv1d-same-evenkernel", seeded(lambda: C1(3, 4, 4, padding="same")), (1, 3, 9), expect_converters=("aten_conv_nd",)),
    case("conv1d-dilation2-valid", seeded(lambda: C1(3, 4, 3, dilation=2, padding="valid")),
         (1, 3, 13), expect_converters=("aten_conv_nd",)),
    case("conv1d-groups3-nobias", seeded(lambda: C1(6, 9, 3, groups=3, bias=False)), (1, 6, 10), expect_converters=("aten_conv_nd",)),
    case("pitfall1-conv1d-depthwise", seeded(lambda: C1(4, 8, 3, groups=4, padding=1)), (1, 4, 10),
         expect_layers=("DepthwiseConv1D",), expect_converters=("aten_conv_nd",)),
    case("conv1d-padmode-reflect", seeded(lambda: C1(3, 4, 3, padding=2, padding_mode="reflect")),
         (1, 3, 9), max_transposes=PAD_INPUT_TRANSPOSE, expect_converters=("aten_conv_nd", "aten_pad_default")),
    case("conv1d-padmode-circular", seeded(lambda: C1(3, 4, 3, padding=1, padding_mode="circular")),
         (1, 3, 9), max_transposes=PAD_INPUT_TRANSPOSE, expect_converters=("aten_conv_nd", "aten_pad_default")),
    # 2d
    case("pitfall10-conv2d-basic", seeded(lambda: C2(3, 8, 3)), (2, 3, 9, 10), expect_converters=("aten_conv_nd",)),
    case("conv2d-int-padding", seeded(lambda: C2(3, 8, 3, padding=1)), (1, 3, 8, 8), expect_converters=("aten_conv_nd",)),
    case("conv2d-tuple-padding-rect-kernel", seeded(lambda: C2(3, 6, (3, 5), padding=(2, 1))),
         (1, 3, 7, 9), expect_converters=("aten_conv_nd",)),
    case("conv2d-same-oddkernel", seeded(lambda: C2(3, 6, 3, padding="same")), (1, 3, 7, 8), expect_converters=("aten_conv_nd",)),
    case("pitfall4-conv2d-same-evenkernel-asym", seeded(lambda: C2(3, 6, 4, padding="same")),
         (1, 3, 7, 8), expect_converters=("aten_conv_nd",)),
    case("conv2d-same-dilation2", seeded(lambda: C2(3, 6, 3, padding="same", dilation=2)),
         (1, 3, 9, 8), expect_converters=("aten_conv_nd",)),
    case("conv2d-valid", seeded(lambda: C2(3, 6, 3, padding="valid")), (1, 3, 7, 8), expect_converters=("aten_conv_nd",)),
    case("pitfall4-conv2d-stride2-pad1-evensize", seeded(lambda: C2(3, 6, 3, stride=2, padding=1)),
         (1, 3, 8, 8), expect_converters=("aten_conv_nd",)),
    case("pitfall4-conv2d-stride2-evenkernel", seeded(lambda: C2(3, 6, 4, stride=2, padding=1)),
         (1, 3, 9, 10), expect_converters=("aten_conv_nd",)),
    case("conv2d-stride-tuple", seeded(lambda: C2(3, 6, 3, stride=(1, 2))), (1, 3, 8, 9), expect_converters=("aten_conv_nd",)),
    case("conv2d-dilation-tuple", seeded(lambda: C2(3, 6, 3, dilation=(2, 1), padding=(2, 1))),
         (1, 3, 9, 9), expect_converters=("aten_conv_nd",)),
    case("pitfall1-conv2d-groups2", seeded(lambda: C2(4, 6, 3, groups=2, padding=1)), (1, 4, 7, 7), expect_converters=("aten_conv_nd",)),
    case("pitfall1-conv2d-groups4-stride2", seeded(lambda: C2(8, 8, 3, groups=4, stride=2)),
         (1, 8, 9, 9), expect_converters=("aten_conv_nd",)),
    case("pitfall1-conv2d-depthwise", seeded(lambda: C2(4, 4, 3, groups=4, padding=1)),
         (2, 4, 8, 8), expect_layers=("DepthwiseConv2D",), expect_converters=("aten_conv_nd",)),
    case("pitfall1-conv2d-depthwise-multiplier2", seeded(lambda: C2(3, 6, 3, groups=3, stride=2)),
         (1, 3, 9, 9), expect_layers=("DepthwiseConv2D",), expect_converters=("aten_conv_nd",)),
    case("pitfall1-conv2d-depthwise-dilation2", seeded(lambda: C2(4, 4, 3, groups=4, dilation=2)),
         (1, 4, 9, 9), expect_layers=("DepthwiseConv2D",), expect_converters=("aten_conv_nd",)),
    case("pitfall1-conv2d-depthwise-unequal-strides",
         seeded(lambda: C2(4, 8, 3, groups=4, stride=(1, 2), padding=1)), (2, 4, 9, 10),
         expect_layers=("DepthwiseConv2D",), expect_converters=("aten_conv_nd",)),
    case("pitfall1-conv2d-depthwise-strides-2-3-dilation2",
         seeded(lambda: C2(4, 4, 3, groups=4, stride=(2, 3), dilation=2)), (1, 4, 13, 14),
         expect_layers=("DepthwiseConv2D",), expect_converters=("aten_conv_nd",)),
    case("conv2d-padmode-zeros-explicit", seeded(lambda: C2(3, 4, 3, padding=1,
                                                           padding_mode="zeros")), (1, 3, 6, 7), expect_converters=("aten_conv_nd",)),
    case("conv2d-padmode-reflect", seeded(lambda: C2(3, 4, 3, padding=1, padding_mode="reflect")),
         (1, 3, 6, 7), max_transposes=PAD_INPUT_TRANSPOSE, expect_converters=("aten_conv_nd", "aten_pad_default")),
    case("conv2d-padmode-replicate", seeded(lambda: C2(3, 4, 3, padding=(2, 1),
                                                       padding_mode="replicate")),
         (1, 3, 6, 7), max_transposes=PAD_INPUT_TRANSPOSE, expect_converters=("aten_conv_nd", "aten_pad_default")),
    case("conv2d-padmode-circular", seeded(lambda: C2(3, 4, 3, padding=1, padding_mode="circular")),
         (1, 3, 6, 7), max_transposes=PAD_INPUT_TRANSPOSE, expect_converters=("aten_conv_nd", "aten_pad_default")),
    case("conv2d-padmode-reflect-same", seeded(lambda: C2(3, 4, 4, padding="same",
                                                          padding_mode="reflect")),
         (1, 3, 6, 7), max_transposes=PAD_INPUT_TRANSPOSE, expect_converters=("aten_conv_nd", "aten_pad_default")),
    case("conv2d-stride2-dilation2", seeded(lambda: C2(3, 4, 3, stride=2, dilation=2)),
         (1, 3, 11, 11), expect_converters=("aten_conv_nd",)),
    case("pitfall1-conv2d-depthwise-stride2-dilation2",
         seeded(lambda: C2(4, 4, 3, groups=4, stride=2, dilation=2, padding=2)), (1, 4, 11, 11),
         expect_layers=("DepthwiseConv2D",), expect_converters=("aten_conv_nd",)),
    case("conv1d-stride3-dilation2-same-size", seeded(lambda: C1(3, 4, 4, stride=3, dilation=2,
                                                                 padding=3)), (1, 3, 14), expect_converters=("aten_conv_nd",)),
    case("pitfall8-conv2d-stack-zero-transposes",
         seeded(lambda: nn.Sequential(C2(3, 8, 3, padding=1), nn.ReLU(), C2(8, 8, 3, groups=8),
                                      C2(8, 4, 1))), (1, 3, 10, 10), expect_converters=("aten_conv_nd", "aten_relu_default")),
    case("conv2d-padmode-reflect-on-input-zero-transposes",
         seeded(lambda: C2(3, 4, 3, padding=1, padding_mode="reflect")), (1, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_pad_default")),
    case("conv2d-padmode-reflect-midnetwork", seeded(lambda: nn.Sequential(
        C2(3, 4, 1), C2(4, 4, 3, padding=1, padding_mode="reflect"))), (1, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_pad_default")),
    # 3d
    case("conv3d-basic", seeded(lambda: C3(2, 4, 3)), (1, 2, 5, 6, 7), expect_converters=("aten_conv_nd",)),
    case("conv3d-stride2-padding", seeded(lambda: C3(2, 4, 3, stride=2, padding=1)),
         (1, 2, 6, 6, 7), expect_converters=("aten_conv_nd",)),
    case("conv3d-same-evenkernel", seeded(lambda: C3(2, 4, (2, 3, 4), padding="same")),
         (1, 2, 5, 6, 7), expect_converters=("aten_conv_nd",)),
    case("conv3d-groups2-dilation", seeded(lambda: C3(4, 4, 2, groups=2, dilation=(1, 2, 1))),
         (1, 4, 5, 6, 5), expect_converters=("aten_conv_nd",)),
    case("conv3d-depthwise", seeded(lambda: C3(3, 3, 3, groups=3, padding=1)), (1, 3, 4, 5, 5), expect_converters=("aten_conv_nd",)),
    case("conv3d-padmode-replicate", seeded(lambda: C3(2, 3, 3, padding=1,
                                                       padding_mode="replicate")),
         (1, 2, 4, 5, 5), max_transposes=PAD_INPUT_TRANSPOSE, expect_converters=("aten_conv_nd", "aten_pad_default")),
    case("conv2d-dynamic-batch", seeded(lambda: C2(3, 6, 4, stride=2, padding=1)),
         (2, 3, 9, 10), dynamic_batch=True, expect_converters=("aten_conv_nd",)),
    case("conv2d-channels-last-io", seeded(lambda: nn.Sequential(
        C2(3, 6, 3, padding=1), C2(6, 6, 3, groups=6))), (1, 3, 8, 8), channels_last_io=True, expect_converters=("aten_conv_nd",)),
    case("aten-convolution-called-directly", seeded(lambda: Fn(
        lambda m, x: torch.convolution(x, m.w, m.b, [2, 1], [1, 0], [1, 1], False, [0, 0], 1),
        w=torch.randn(4, 3, 3, 3), b=torch.randn(4))), (1, 3, 7, 6),
         expect_converters=("aten_convolution_default",)),
    # weights computed in forward: crossport.layers.FunctionalConv on the run-time kernel.
    # Moving the weight to Keras' kernel layout is one transpose (of the weight, not the
    # activations); folding the batch into channels (groups=batch) costs one more each way.
    case("conv2d-computed-weight-and-bias", seeded(lambda: Fn(
        _gated(lambda x, w, b: F.conv2d(x, w, b * 2, padding=1)), w=torch.randn(5, 3, 3, 3),
        b=torch.randn(5))), (2, 3, 8, 9), expect_layers=("FunctionalConv",),
         max_transposes=1, expect_converters=("aten_conv_nd",)),
    case("conv2d-modulated-groups-batch", seeded(lambda: Modulated()), [(2, 4, 7, 8), (2, 5)],
         expect_layers=("FunctionalConv",), max_transposes=2, expect_converters=("aten_conv_nd",)),
    case("conv2d-condconv-per-sample-experts", seeded(CondConv), (3, 6, 9, 9),
         expect_layers=("FunctionalConv",), max_transposes=2, expect_converters=("aten_conv_nd",)),
    case("conv2d-computed-depthwise-stride2-dilation2", seeded(lambda: Fn(
        _gated(lambda x, w, b: F.conv2d(x, w, b, stride=2, dilation=2, padding=2, groups=4)),
        w=torch.randn(8, 1, 3, 3))), (1, 4, 11, 10), max_transposes=1, expect_converters=("aten_conv_nd",)),
    case("conv2d-computed-same-even-kernel", seeded(lambda: Fn(
        _gated(lambda x, w, b: F.conv2d(x, w, b, padding="same")), w=torch.randn(4, 3, 4, 4))),
         (1, 3, 7, 8), max_transposes=1, expect_converters=("aten_conv_nd",)),
    case("conv1d-computed-weight-stride2", seeded(lambda: Fn(
        _gated(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1)), w=torch.randn(4, 3, 3),
        b=torch.randn(4))), (2, 3, 11), max_transposes=1, expect_converters=("aten_conv_nd",)),
    case("conv3d-computed-weight-groups2", seeded(lambda: Fn(
        _gated(lambda x, w, b: F.conv3d(x, w, b, padding=1, groups=2)),
        w=torch.randn(4, 2, 3, 3, 3))), (1, 4, 4, 5, 6), max_transposes=1, expect_converters=("aten_conv_nd",)),
    case("conv2d-weight-as-model-input", Fn(lambda x, w: F.conv2d(x, w, padding=1)),
         [(1, 3, 6, 7), (4, 3, 3, 3)], max_transposes=1, expect_converters=("aten_conv_nd",)),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_conv(module, shapes, kwargs):
    conversion = assert_converts(module, inputs(shapes), **kwargs)
    for layer in conversion.model.layers:  # TF's depthwise kernel without oneDNN needs them equal
        if isinstance(layer, keras.layers.DepthwiseConv2D):
            assert len(set(layer.strides)) == 1, f"{layer.name}: strides {layer.strides}"
