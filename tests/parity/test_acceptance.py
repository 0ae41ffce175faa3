"""The acceptance rule and the float64 replay that explains a failure (docs/parity.md).

Under ``tolerance="rounding"`` (the default) an error above ``atol`` passes only when torch
in float64 says the Keras model is as close to the truth as float32 arithmetic allows; a
real semantic bug (a deliberately wrong converter, registered for the test and restored
after it) still fails, and the float64 replay that locates it survives integer casts.
"""

from __future__ import annotations

import contextlib
import json

import keras
import pytest
import torch
from torch import nn

import crossport
from crossport.parity import check_live, make_live
from crossport.to_keras.registry import replaced
from tests.harness import random_inputs

aten = torch.ops.aten


@contextlib.contextmanager
def wrong_converter(op, fn):
    """Register ``fn`` as ``op``'s converter for the block, then restore the original."""
    with replaced(op, fn, supports=None):
        yield


def leaky_relu_by_mistake(ctx, self):
    return keras.layers.LeakyReLU(negative_slope=0.1, name=ctx.name())(self)


def gelu_tanh_by_mistake(ctx, self, approximate="none"):
    return keras.activations.gelu(self, approximate=True)


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x


def conv_mixer(dim=64, depth=32, kernel=9, patch=4, classes=10) -> nn.Module:
    """Isotropic ConvMixer: patch conv, then depthwise kxk + pointwise blocks (GELU, BN)."""
    def block():
        mix = nn.Sequential(nn.Conv2d(dim, dim, kernel, groups=dim, padding="same"), nn.GELU(),
                            nn.BatchNorm2d(dim))
        return nn.Sequential(Residual(mix), nn.Conv2d(dim, dim, 1), nn.GELU(),
                             nn.BatchNorm2d(dim))
    return nn.Sequential(nn.Conv2d(3, dim, patch, stride=patch), nn.GELU(), nn.BatchNorm2d(dim),
                         *[block() for _ in range(depth)], nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(dim, classes))


@pytest.fixture(scope="module")
def live_conv_mixer():
    torch.manual_seed(0)
    net = conv_mixer().eval()
    x = random_inputs((2, 3, 64, 64))
    make_live(net, x, calibration_batches=16)
    check_live(net, x)
    return net, x


@pytest.mark.slow
def test_deep_net_rounding_passes_under_the_rule_and_fails_a_hard_bound(live_conv_mixer):
    """32 depthwise-9x9 blocks: past a tight atol by float32 rounding alone."""
    net, x = live_conv_mixer
    atol = 1e-6  # below this net's float32 rounding (~1e-5 normalized)
    with pytest.raises(crossport.ParityError) as info:
        crossport.convert(net, x, atol=atol, tolerance="atol")
    hard = info.value.report
    assert hard.rule == "atol" and hard.verdict == "rounding", hard.summary()

    report = crossport.convert_with_report(net, x, atol=atol).report
    assert report.passed and report.rule == "rounding" and report.verdict == "rounding"
    assert report.max_error > atol
    # both distances from the float64 truth are reported, and the rule's bound holds
    assert 0 < report.torch_vs_fp64 < report.keras_vs_fp64 <= 100 * report.torch_vs_fp64
    assert "verdict: rounding" in report.summary()
    json.dumps(report.to_dict(), allow_nan=False)


def test_rounding_past_a_tight_atol_passes_by_evidence_fast():
    """The rule on a small conv stack (the slow ConvMixer rows show it at depth)."""
    torch.manual_seed(0)
    layers = [nn.Conv2d(3, 16, 3, padding=1), nn.GELU()]
    for _ in range(2):
        layers += [nn.Conv2d(16, 16, 3, padding=1), nn.GELU()]
    net = nn.Sequential(*layers).eval()
    x = random_inputs((1, 3, 8, 8))
    atol = 1e-9  # below float32 rounding of any conv
    with pytest.raises(crossport.ParityError, match="rule atol"):
        crossport.convert(net, x, atol=atol, tolerance="atol")
    report = crossport.convert_with_report(net, x, atol=atol).report
    assert report.passed and report.verdict == "rounding" and report.max_error > atol
    assert report.keras_vs_fp64 is not None and report.torch_vs_fp64 is not None
    assert report.first_divergent is None  # no node replay when the rule accepts


@pytest.mark.slow
def test_semantic_bug_in_a_deep_net_still_fails_under_the_rule(live_conv_mixer):
    net, x = live_conv_mixer
    with (wrong_converter(aten.gelu.default, gelu_tanh_by_mistake),
          pytest.raises(crossport.ParityError) as info):
        crossport.convert(net, x)
    report = info.value.report
    assert report.rule == "rounding" and report.verdict == "semantic", report.summary()
    assert report.keras_vs_fp64 > 100 * report.torch_vs_fp64
    assert "gelu" in report.first_divergent.op


class IntegerCasts(nn.Module):
    """Integer casts in the graph (quantise to uint8, truncate to int32) around a ReLU."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.act = nn.ReLU()

    def forward(self, x):
        y = self.act(self.conv(x))
        q = (y * 10).clamp(0, 255).to(torch.uint8)
        return y + q.float() * 0.01 + y.int().float()


def test_float64_replay_survives_integer_casts_and_names_the_divergent_node():
    with (wrong_converter(aten.relu.default, leaky_relu_by_mistake),
          pytest.raises(crossport.ParityError) as info):
        crossport.convert(IntegerCasts().eval(), random_inputs((1, 3, 10, 10)))
    first = info.value.report.first_divergent
    assert first is not None and "aten.relu" in first.op and first.module_path == "act"
    assert first.verdict == "semantic" and first.keras_vs_fp64 is not None
    assert "first divergence" in str(info.value)


def test_tolerance_rule_is_validated():
    with pytest.raises(crossport.InputError, match="tolerance"):
        crossport.convert(nn.ReLU(), random_inputs((1, 3)), tolerance="loose")
