"""Accuracy of large reductions against the float64 truth, as the element count grows.

TF's CPU sum over an outer axis (InstanceNorm over channels-last space, ``sum(0)``) is one
running float32 sum per output: before crossport summed pairwise, an InstanceNorm3d over
96³ voxels was 1.9e-4 from float64 where torch fp32 is 1e-7. For every size, the converted
model must be no further from float64 than 10x torch fp32's own distance, or within a floor
of 16 float32 ulps of a unit result (1.9e-6): below that, both are plain rounding.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

import crossport
from crossport.parity.verify import run_keras
from tests.ops.opcases import Fn

FLOOR = 16 * float(np.finfo(np.float32).eps)
FACTOR = 10


def distance(truth, got) -> float:
    truth, got = np.asarray(truth, np.float64), np.asarray(got, np.float64)
    return float(np.max(np.abs(truth - got)) / max(1.0, np.max(np.abs(truth))))


def instance_norm_3d():
    return nn.InstanceNorm3d(2)


def group_norm():
    torch.manual_seed(0)
    norm = nn.GroupNorm(2, 4)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    return norm


def after_conv(fn):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 1), Fn(fn))


def sizes(*counts):
    """Element counts; the million-element ones are marked slow (seconds each)."""
    return [(n, [pytest.mark.slow] if n >= 1_000_000 else []) for n in counts]


SIZES = [
    *[pytest.param(instance_norm_3d, (1, 2, s, s, s), id=f"instancenorm3d-{s}^3",
                   marks=[pytest.mark.slow] if s > 48 else []) for s in (16, 48, 96)],
    *[pytest.param(group_norm, (1, 4, n // 100, 100), id=f"groupnorm-{n}", marks=m)
      for n, m in sizes(1_000, 100_000, 1_000_000)],
    *[pytest.param(lambda n=n: nn.LayerNorm(n), (2, n), id=f"layernorm-{n}", marks=m)
      for n, m in sizes(1_000, 1_000_000)],
    *[pytest.param(lambda: Fn(lambda x: x.var()), (n,), id=f"var-all-{n}", marks=m)
      for n, m in sizes(1_000, 1_000_000)],
    *[pytest.param(lambda: Fn(lambda x: x.std(0)), (n, 2), id=f"std-dim0-{n}", marks=m)
      for n, m in sizes(1_000, 100_000, 1_000_000)],
    *[pytest.param(lambda: Fn(lambda x: x.sum(0)), (n, 3), id=f"sum-dim0-{n}", marks=m)
      for n, m in sizes(1_000, 100_000, 1_000_000)],
    *[pytest.param(lambda: Fn(lambda x: x.mean(0)), (n, 3), id=f"mean-dim0-{n}", marks=m)
      for n, m in sizes(1_000, 1_000_000)],
    *[pytest.param(lambda: after_conv(lambda x: x.mean((2, 3))), (1, 3, n // 100, 100),
                   id=f"mean-hw-after-conv-{n}", marks=m)
      for n, m in sizes(1_000, 100_000, 1_000_000)],
    # an SE block's spatial mean: one running sum up to reduction.JOINT elements, folded above
    *[pytest.param(lambda: after_conv(lambda x: x.mean((2, 3), keepdim=True)), (1, 3, s, s),
                   id=f"se-mean-{s}x{s}") for s in (28, 32, 33, 56)],
    *[pytest.param(lambda: after_conv(lambda x: torch.relu(x).sum((2, 3))), (1, 3, s, s),
                   id=f"relu-sum-hw-{s}x{s}") for s in (32, 56)],
]


@pytest.mark.parametrize("make, shape", SIZES)
def test_error_vs_element_count(make, shape):
    module = make().eval()
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 2 + 1  # off-centre
    with torch.no_grad():
        fp32 = module(x).numpy()
        fp64 = copy.deepcopy(module).double()(x.double()).numpy()
    model = crossport.convert_with_report(module, (x,), check=False).model
    got = run_keras(model, (x,), False, like=torch.from_numpy(fp32))[0]
    torch_error, keras_error = distance(fp64, fp32), distance(fp64, got)
    assert keras_error <= max(FACTOR * torch_error, FLOOR), (
        f"Keras {keras_error:.2e} from float64, torch fp32 {torch_error:.2e}")
