"""Max/avg pooling 1d/2d/3d and adaptive pooling (pitfalls.md items 2 and 11)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.harness import assert_converts
from tests.ops.opcases import Fn, case, inputs

CASES = [
    # max
    case("maxpool1d-basic", nn.MaxPool1d(2), (2, 3, 9),
         expect_converters=("aten_max_pool2d_default",)),
    case("maxpool1d-stride1-pad1", nn.MaxPool1d(3, stride=1, padding=1), (1, 3, 8), expect_converters=("aten_max_pool2d_default",)),
    case("maxpool1d-ceil", nn.MaxPool1d(3, stride=2, ceil_mode=True), (1, 3, 10), expect_converters=("aten_max_pool2d_default",)),
    case("maxpool2d-basic", nn.MaxPool2d(2), (2, 3, 8, 8), expect_converters=("aten_max_pool2d_default",)),
    case("maxpool2d-odd-floor", nn.MaxPool2d(3, stride=2), (1, 3, 10, 9), expect_converters=("aten_max_pool2d_default",)),
    case("pitfall11-maxpool2d-pad-minus-inf", nn.MaxPool2d(3, stride=2, padding=1), (1, 3, 8, 8), expect_converters=("aten_max_pool2d_default",)),
    case("pitfall11-maxpool2d-ceil-partial-window", nn.MaxPool2d(3, stride=2, ceil_mode=True),
         (1, 3, 8, 10), expect_converters=("aten_max_pool2d_default",)),
    case("maxpool2d-ceil-exact-fit", nn.MaxPool2d(2, ceil_mode=True), (1, 3, 8, 8), expect_converters=("aten_max_pool2d_default",)),
    case("maxpool2d-ceil-pad", nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
         (1, 3, 9, 10), expect_converters=("aten_max_pool2d_default",)),
    case("maxpool2d-dilation2", nn.MaxPool2d(3, stride=1, dilation=2), (1, 3, 9, 9), expect_converters=("aten_max_pool2d_default",)),
    case("maxpool2d-dilation-pad-ceil", nn.MaxPool2d(2, stride=2, padding=1, dilation=2,
                                                     ceil_mode=True), (1, 2, 9, 8), expect_converters=("aten_max_pool2d_default",)),
    case("maxpool2d-rect-kernel-stride", nn.MaxPool2d((2, 3), stride=(1, 2)), (1, 3, 7, 9), expect_converters=("aten_max_pool2d_default",)),
    case("maxpool2d-negative-inputs-pad", Fn(lambda x: F.max_pool2d(-x.abs() - 1, 3, 1, 1)),
         (1, 2, 5, 5), expect_converters=("aten_abs_default", "aten_max_pool2d_default", "aten_neg_default", "aten_sub_tensor")),
    # after a ReLU torch's -inf padding can be zeros (ResNet's stem): a Keras pad + pool
    case("maxpool2d-after-relu-zero-pad", nn.Sequential(nn.ReLU(), nn.MaxPool2d(3, 2, 1)),
         (1, 3, 9, 10), expect_layers=("ZeroPadding2D", "MaxPooling2D"),
         expect_converters=("aten_max_pool2d_default",)),
    case("maxpool1d-after-relu6-zero-pad", nn.Sequential(nn.ReLU6(), nn.MaxPool1d(3, 2, 1)),
         (1, 3, 11), expect_layers=("ZeroPadding1D", "MaxPooling1D"),
         expect_converters=("aten_max_pool2d_default",)),
    case("maxpool2d-after-relu-ceil-exact-zero-pad",
         nn.Sequential(nn.ReLU(), nn.MaxPool2d(3, 2, 1, ceil_mode=True)), (1, 3, 9, 9),
         expect_layers=("ZeroPadding2D",), expect_converters=("aten_max_pool2d_default",)),
    case("maxpool2d-after-relu-ceil-partial", nn.Sequential(nn.ReLU(), nn.MaxPool2d(
        3, 2, 1, ceil_mode=True)), (1, 3, 10, 10), expect_layers=("MaxPool2d",),
         expect_converters=("aten_max_pool2d_default",)),
    # a ReLU then a shift is negative at the edges: -inf padding stays (zeros would win)
    case("maxpool2d-after-shifted-relu-pad", nn.Sequential(nn.ReLU(), Fn(lambda x: x - 3),
                                                            nn.MaxPool2d(3, 1, 1)),
         (1, 2, 6, 7), expect_layers=("MaxPool2d",), expect_converters=("aten_max_pool2d_default",)),
    case("maxpool3d-basic", nn.MaxPool3d(2), (1, 2, 4, 6, 6), expect_converters=("aten_max_pool2d_default",)),
    case("maxpool3d-pad-ceil", nn.MaxPool3d(3, stride=2, padding=1, ceil_mode=True),
         (1, 2, 5, 6, 7), expect_converters=("aten_max_pool2d_default",)),
    case("maxpool3d-dilation", nn.MaxPool3d(2, stride=1, dilation=(1, 2, 2)), (1, 2, 4, 6, 6), expect_converters=("aten_max_pool2d_default",)),
    # average
    case("avgpool1d-basic", nn.AvgPool1d(2), (2, 3, 9),
         expect_converters=("aten_avg_pool2d_default",)),
    case("avgpool1d-pad-count-include", nn.AvgPool1d(3, stride=2, padding=1), (1, 3, 8), expect_converters=("aten_avg_pool2d_default",)),
    case("avgpool2d-basic", nn.AvgPool2d(2), (2, 3, 8, 8), expect_converters=("aten_avg_pool2d_default",)),
    case("pitfall11-avgpool2d-count-include-pad", nn.AvgPool2d(3, stride=1, padding=1),
         (1, 3, 4, 4), expect_layers=("AvgPool2d",), expect_converters=("aten_avg_pool2d_default",)),
    case("avgpool2d-exclude-pad", nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False),
         (1, 3, 5, 6), expect_layers=("AvgPool2d",), expect_converters=("aten_avg_pool2d_default",)),
    case("pitfall11-avgpool2d-ceil-mode", nn.AvgPool2d(3, stride=2, ceil_mode=True),
         (1, 3, 8, 10), expect_layers=("AvgPool2d",), expect_converters=("aten_avg_pool2d_default",)),
    case("avgpool2d-ceil-pad-include", nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True),
         (1, 3, 8, 9), expect_converters=("aten_avg_pool2d_default",)),
    case("avgpool2d-ceil-pad-exclude", nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True,
                                                    count_include_pad=False), (1, 3, 8, 9), expect_converters=("aten_avg_pool2d_default",)),
    case("avgpool2d-divisor-override", nn.AvgPool2d(2, divisor_override=3), (1, 3, 6, 6),
         expect_layers=("AvgPool2d",), expect_converters=("aten_avg_pool2d_default",)),
    case("avgpool2d-divisor-override-pad", nn.AvgPool2d(3, stride=2, padding=1,
                                                        divisor_override=5), (1, 3, 7, 7), expect_converters=("aten_avg_pool2d_default",)),
    case("avgpool2d-rect", nn.AvgPool2d((3, 2), stride=(2, 1), padding=(1, 0)), (1, 3, 7, 6), expect_converters=("aten_avg_pool2d_default",)),
    case("avgpool3d-basic", nn.AvgPool3d(2), (1, 2, 4, 4, 6), expect_converters=("aten_avg_pool2d_default",)),
    case("avgpool3d-pad-ceil", nn.AvgPool3d(3, stride=2, padding=1, ceil_mode=True,
                                            count_include_pad=False), (1, 2, 5, 6, 7), expect_converters=("aten_avg_pool2d_default",)),
    case("avgpool3d-divisor", nn.AvgPool3d(2, stride=1, divisor_override=7), (1, 2, 3, 4, 4), expect_converters=("aten_avg_pool2d_default",)),
    # adaptive
    case("pitfall2-adaptiveavgpool2d-1-keeps-dims", nn.AdaptiveAvgPool2d(1), (2, 5, 7, 6), expect_converters=("aten_adaptive_avg_pool2d_default",)),
    case("pitfall2-adaptiveavgpool2d-uneven-7to3", nn.AdaptiveAvgPool2d(3), (1, 3, 7, 7), expect_converters=("aten_adaptive_avg_pool2d_default",)),
    case("adaptiveavgpool2d-divisible", nn.AdaptiveAvgPool2d((2, 3)), (1, 3, 8, 9), expect_converters=("aten_adaptive_avg_pool2d_default",)),
    case("adaptiveavgpool2d-none-and-upsample", nn.AdaptiveAvgPool2d((None, 8)), (1, 3, 5, 6), expect_converters=("aten_adaptive_avg_pool2d_default",)),
    case("adaptiveavgpool1d-5to3", nn.AdaptiveAvgPool1d(3), (1, 4, 5),
         expect_converters=("aten_adaptive_avg_pool2d_default",)),
    case("adaptiveavgpool3d-uneven", nn.AdaptiveAvgPool3d((2, 3, 1)), (1, 2, 5, 7, 4), expect_converters=("aten_adaptive_avg_pool2d_default",)),
    case("adaptivemaxpool2d-1", nn.AdaptiveMaxPool2d(1), (2, 3, 5, 6), expect_converters=("aten_adaptive_max_pool2d_default",)),
    case("adaptivemaxpool2d-uneven", nn.AdaptiveMaxPool2d((3, 4)), (1, 3, 7, 10), expect_converters=("aten_adaptive_max_pool2d_default",)),
    case("adaptivemaxpool1d", nn.AdaptiveMaxPool1d(4), (1, 3, 9),
         expect_converters=("aten_adaptive_max_pool2d_default",)),
    case("adaptivemaxpool3d", nn.AdaptiveMaxPool3d((1, 2, 3)), (1, 2, 4, 5, 7), expect_converters=("aten_adaptive_max_pool2d_default",)),
    case("pitfall2-gap-flatten-linear",
         nn.Sequential(nn.Conv2d(3, 6, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 4)),
         (2, 3, 8, 8), expect_converters=("aten_adaptive_avg_pool2d_default", "aten_conv_nd", "aten_linear_default", "aten_view_default")),
    case("mean-hw-keepdim-as-gap", Fn(lambda x: x.mean((2, 3), keepdim=True)), (2, 3, 5, 6),
         expect_converters=("aten_mean_dim",)),
    case("conv1d-avgpool1d-pad", nn.Sequential(nn.Conv1d(3, 4, 3), nn.AvgPool1d(3, 2, 1)),
         (2, 3, 12), expect_converters=("aten_avg_pool2d_default", "aten_conv_nd")),
    case("maxpool2d-dynamic-batch", nn.Sequential(nn.MaxPool2d(3, 2, 1, ceil_mode=True)),
         (2, 3, 8, 9), dynamic_batch=True, expect_converters=("aten_max_pool2d_default",)),
    case("adaptiveavgpool2d-uneven-dynamic-batch", nn.Sequential(nn.AdaptiveAvgPool2d(3)),
         (2, 3, 7, 8), dynamic_batch=True, expect_converters=("aten_adaptive_avg_pool2d_default",)),
    case("maxpool2d-return-indices", Fn(
        lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True)), (2, 3, 7, 8),
         expect_converters=("aten_max_pool2d_with_indices",)),
    case("adaptive-maxpool2d-return-indices", Fn(
        lambda x: F.adaptive_max_pool2d(x, (3, 2), return_indices=True)), (2, 3, 7, 8),
         expect_converters=("aten_adaptive_max_pool2d_default",)),
    case("maxpool2d-return-indices-values", Fn(
        lambda x: F.max_pool2d(x, 2, return_indices=True)[0]), (1, 3, 6, 6),
         expect_converters=("aten_max_pool2d_with_indices",)),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_pool(module, shapes, kwargs):
    torch.manual_seed(0)
    assert_converts(module, inputs(shapes), **kwargs)


# Keras' pooling/conv layers read dim 0 as the batch and TF's conv and average-pooling kernels
# are float only: these failed to build, failed at run time, or (adaptive pools of an
# unbatched input) pooled the wrong dims. Refused at pre-flight, naming the op (OpInfo sweep).
REFUSED = [
    pytest.param(Fn(lambda x: F.adaptive_avg_pool2d(x, 3)), torch.randn(4, 6, 6),
                 "aten.adaptive_avg_pool2d.default.*unbatched", id="adaptive-avg-unbatched"),
    pytest.param(Fn(lambda x: F.max_pool2d(x, 2)), torch.randn(4, 6, 6),
                 "aten.max_pool2d.default.*unbatched", id="max-pool-unbatched"),
    pytest.param(nn.Conv1d(4, 2, 3), torch.randn(4, 9),
                 "aten.conv1d.default.*unbatched", id="conv1d-unbatched"),
    pytest.param(Fn(lambda x: F.avg_pool2d(x, 2)), torch.randint(-5, 5, (1, 2, 4, 4)),
                 "aten.avg_pool2d.default.*int64 input", id="avg-pool-int64"),
]


@pytest.mark.parametrize("module, x, match", REFUSED)
def test_pool_and_conv_inputs_keras_cannot_take_are_refused(module, x, match):
    import crossport

    with torch.no_grad():
        module.eval()(x)  # torch computes it
    with pytest.raises(crossport.UnsupportedOpError, match=match):
        crossport.convert(module.eval(), (x,))


def _ties_and_nans(shape, seed=0):
    """Small integers (many tied maxima in a window) and a few NaNs: torch's kernel takes
    the first maximum and the last NaN of a window."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 3, shape, generator=g).float()
    x.view(-1)[torch.randperm(x.numel(), generator=g)[:3]] = float("nan")
    return x


INDICES = [
    pytest.param(dict(kernel_size=2), (2, 3, 8, 8), id="2x2"),
    pytest.param(dict(kernel_size=3, stride=2, padding=1), (1, 2, 9, 10), id="3x3-s2-pad"),
    pytest.param(dict(kernel_size=3, stride=2, ceil_mode=True), (1, 2, 8, 10), id="ceil"),
    pytest.param(dict(kernel_size=(2, 3), stride=1, dilation=2, padding=1), (1, 2, 7, 9),
                 id="dilated-rect"),
]


@pytest.mark.parametrize("config, shape", INDICES)
def test_max_pool_indices_and_unpool_match_torch(config, shape):
    """return_indices was refused ("max pooling indices"): the indices are the flat
    positions torch's kernel picks (first maximum, last NaN, padding never), and MaxUnpool
    (index_put) scatters by them; checked on tied and NaN inputs too."""
    import numpy as np

    import crossport

    def pool(x):
        values, indices = F.max_pool2d(x, return_indices=True, **config)
        if "dilation" in config:  # MaxUnpool has no dilation
            return values, indices, values
        return values, indices, F.max_unpool2d(
            values.nan_to_num(0.0), indices, config["kernel_size"], config.get("stride"),
            config.get("padding", 0), output_size=x.shape[-2:])

    module = Fn(pool).eval()
    model = crossport.convert(module, (torch.randn(shape),))
    for x in (torch.randn(shape), _ties_and_nans(shape)):
        want = module(x)
        got = model(x.numpy())
        np.testing.assert_array_equal(np.asarray(got[1]), want[1].numpy())
        np.testing.assert_array_equal(np.asarray(got[0]), want[0].numpy())
        np.testing.assert_array_equal(np.asarray(got[2]), want[2].numpy())


def test_max_pool_1d_and_3d_indices_match_torch():
    import numpy as np

    import crossport

    module = Fn(lambda a, b: (F.max_pool1d(a, 3, 2, 1, return_indices=True)[1],
                              F.max_pool3d(b, 2, return_indices=True)[1])).eval()
    a, b = _ties_and_nans((2, 3, 11)), _ties_and_nans((1, 2, 4, 6, 6), 1)
    model = crossport.convert(module, (torch.randn(2, 3, 11), torch.randn(1, 2, 4, 6, 6)))
    for g, w in zip(model([a.numpy(), b.numpy()]), module(a, b)):
        np.testing.assert_array_equal(np.asarray(g), w.numpy())


def test_max_pool_indices_and_unpool_export_to_tflite(tmp_path):
    """SegNet's encoder pool and decoder unpool as builtin TFLite ops, re-checked on LiteRT."""
    import crossport
    from crossport.export.formats import tflite_op_names

    class SegNetStage(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.pool, self.unpool = nn.MaxPool2d(2, return_indices=True), nn.MaxUnpool2d(2)

        def forward(self, x):
            values, indices = self.pool(torch.relu(self.conv(x)))
            return self.unpool(values, indices)

    torch.manual_seed(0)
    conversion = crossport.convert_with_report(SegNetStage().eval(), (torch.randn(1, 3, 8, 8),))
    result = crossport.export(conversion, tmp_path / "m.tflite")
    assert result.passed, result.summary()
    assert "CUSTOM" not in tflite_op_names(tmp_path / "m.tflite")


def test_adaptive_max_pool_indices_match_torch():
    """Adaptive windows of uneven widths (7 -> 3 overlaps, 10 -> 4), 1d/2d/3d, on random,
    tied and NaN inputs: the indices were refused ("adaptive max pooling indices")."""
    import numpy as np

    import crossport

    module = Fn(lambda a, b, c: (
        F.adaptive_max_pool1d(a, 3, return_indices=True),
        F.adaptive_max_pool2d(b, (3, 4), return_indices=True),
        F.adaptive_max_pool3d(c, 2, return_indices=True)[1])).eval()
    shapes = ((2, 3, 7), (1, 2, 7, 10), (1, 2, 3, 5, 5))
    model = crossport.convert(module, tuple(torch.randn(s) for s in shapes))
    for args in (tuple(torch.randn(s) for s in shapes),
                 tuple(_ties_and_nans(s, i) for i, s in enumerate(shapes))):
        want = torch.utils._pytree.tree_leaves(module(*args))
        got = torch.utils._pytree.tree_leaves(model([a.numpy() for a in args]))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), w.numpy())
