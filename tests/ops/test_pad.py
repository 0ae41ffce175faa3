"""F.pad and the padding modules: every mode, negative pads, layouts (pitfalls.md item 7)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.harness import assert_converts
from tests.ops.opcases import Fn, case, inputs


def conv_then(fn):
    """A conv first, so the pad receives a channels-last activation (layout remap)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), Fn(fn), nn.Conv2d(4, 2, 1))


CASES = [
    case("pitfall7-pad-constant-last-dim-first", Fn(lambda x: F.pad(x, (1, 2, 0, 3))),
         (1, 3, 5, 6), expect_converters=("aten_pad_default",)),
    case("pitfall7-pad-constant-value", Fn(lambda x: F.pad(x, (2, 1), value=-1.5)), (1, 3, 5, 6), expect_converters=("aten_pad_default",)),
    case("pitfall7-pad-negative-crops", Fn(lambda x: F.pad(x, (1, -2, -1, 2))), (1, 3, 5, 6), expect_converters=("aten_pad_default",)),
    case("pitfall7-pad-reflect", Fn(lambda x: F.pad(x, (1, 2, 3, 0), mode="reflect")),
         (1, 3, 5, 6), expect_converters=("aten_pad_default",)),
    case("pitfall7-pad-replicate", Fn(lambda x: F.pad(x, (2, 1, 0, 3), mode="replicate")),
         (1, 3, 5, 6), expect_converters=("aten_pad_default",)),
    case("pitfall7-pad-circular", Fn(lambda x: F.pad(x, (1, 2, 2, 1), mode="circular")),
         (1, 3, 5, 6), expect_converters=("aten_pad_default",)),
    case("pitfall7-pad-circular-negative", Fn(lambda x: F.pad(x, (2, -1, 1, 0), mode="circular")),
         (1, 3, 5, 6), expect_converters=("aten_pad_default",)),
    case("pad-reflect-1d", Fn(lambda x: F.pad(x, (3, 2), mode="reflect")), (2, 3, 7), expect_converters=("aten_pad_default",)),
    case("pad-replicate-3d", Fn(lambda x: F.pad(x, (1, 0, 0, 2, 1, 1), mode="replicate")),
         (1, 2, 3, 4, 5), expect_converters=("aten_pad_default",)),
    case("pad-circular-3d", Fn(lambda x: F.pad(x, (1, 1, 2, 0, 0, 1), mode="circular")),
         (1, 2, 3, 4, 5), expect_converters=("aten_pad_default",)),
    case("pad-constant-channel-and-batch-dims", Fn(lambda x: F.pad(x, (0, 0, 0, 0, 1, 2, 1, 0))),
         (1, 3, 4, 5), expect_converters=("aten_pad_default",)),
    # Keras 3.15 flags x * 2 sparse (a Python operand counts as sparse); Pad traced on it failed
    case("pad-after-scalar-multiply", Fn(lambda x: F.pad(x * 2, (0, 0, 0, 4))), (2, 12, 4),
         expect_converters=("aten_mul_tensor", "aten_pad_default")),
    case("pad-constant-2d-tensor", Fn(lambda x: F.pad(x, (2, -1, 1, 1), value=0.5)), (3, 6), expect_converters=("aten_pad_default",)),
    case("zeropad2d-module", nn.ZeroPad2d((1, 2, 3, 0)), (1, 3, 5, 6), expect_converters=("aten_pad_default",)),
    case("reflectionpad2d-module", nn.ReflectionPad2d(2), (1, 3, 5, 6), expect_converters=("aten_pad_default",)),
    case("replicationpad1d-module", nn.ReplicationPad1d((3, 1)), (1, 3, 6), expect_converters=("aten_pad_default",)),
    case("circularpad2d-module", nn.CircularPad2d((1, 0, 2, 1)), (1, 3, 5, 6),
         expect_converters=("aten_pad_default",)),
    case("constantpad3d-module", nn.ConstantPad3d((1, 0, 2, 1, 0, 1), 0.25), (1, 2, 3, 4, 5), expect_converters=("aten_pad_default",)),
    case("pad-after-conv-channels-last-constant",
         conv_then(lambda x: F.pad(x, (1, 2, 2, 1))), (1, 3, 8, 9), expect_converters=("aten_conv_nd", "aten_pad_default")),
    case("pad-after-conv-channels-last-reflect",
         conv_then(lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect")), (1, 3, 8, 9), expect_converters=("aten_conv_nd", "aten_pad_default")),
    case("pad-after-conv-channels-last-circular-negative",
         conv_then(lambda x: F.pad(x, (-1, 2, 2, -1), mode="circular")), (1, 3, 8, 9), expect_converters=("aten_conv_nd", "aten_pad_default")),
    case("pad-after-conv-channel-dim",
         nn.Sequential(nn.Conv2d(3, 4, 3), Fn(lambda x: F.pad(x, (0, 0, 1, 1, 1, 2))),
                       nn.Conv2d(7, 2, 1)), (1, 3, 8, 9), expect_converters=("aten_conv_nd", "aten_pad_default")),
    case("pad-reflect-dynamic-batch",
         nn.Sequential(Fn(lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"))),
         (2, 3, 5, 6), dynamic_batch=True, expect_converters=("aten_pad_default",)),
    case("pad-channels-last-io", conv_then(lambda x: F.pad(x, (1, 0, -1, 2), mode="replicate")),
         (1, 3, 8, 9), channels_last_io=True, expect_converters=("aten_conv_nd", "aten_pad_default")),
    case("aten-constant-pad-nd", Fn(lambda x: torch.ops.aten.constant_pad_nd(x, [1, 2, 0, 1], 0.5)),
         (1, 3, 5, 6),
         expect_converters=("aten_constant_pad_nd_default",)),
    case("aten-reflection-pad2d", Fn(lambda x: torch.ops.aten.reflection_pad2d(x, [1, 2, 2, 0])),
         (1, 3, 5, 6), expect_converters=("aten_reflection_pad2d_default",)),
    case("aten-reflection-pad1d", Fn(lambda x: torch.ops.aten.reflection_pad1d(x, [2, 1])),
         (1, 3, 6),
         expect_converters=("aten_reflection_pad2d_default",)),
    case("aten-replication-pad3d", Fn(lambda x: torch.ops.aten.replication_pad3d(
        x, [1, 0, 0, 1, 2, 1])), (1, 2, 3, 4, 5),
         expect_converters=("aten_replication_pad2d_default",)),
    case("aten-pad-circular", Fn(lambda x: torch.ops.aten._pad_circular(x, [1, 2, 1, 0])),
         (1, 3, 5, 6),
         expect_converters=("aten_pad_circular_default",)),
    # amounts from dynamic sizes: circular is captured as crossport::pad_circular (torch's
    # own kernel branches on each amount), the other modes stay aten ops; DynamicPad gathers
    case("pad-circular-run-time-amounts", conv_then(lambda x: F.pad(
        x, (0, (4 - x.shape[3] % 4) % 4, 1, (4 - x.shape[2] % 4) % 4), mode="circular")),
         (1, 3, 6, 7), dynamic_dims={0: {2: "h", 3: "w"}}, expect_layers=("DynamicPad",),
         expect_converters=("crossport_pad_circular_default",)),
    case("pad-reflect-run-time-amounts", conv_then(lambda x: F.pad(
        x, (0, (4 - x.shape[3] % 4) % 4, 1, (4 - x.shape[2] % 4) % 4), mode="reflect")),
         (1, 3, 6, 7), dynamic_dims={0: {2: "h", 3: "w"}}, expect_layers=("DynamicPad",),
         expect_converters=("aten_pad_default",)),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_pad(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), **kwargs)
