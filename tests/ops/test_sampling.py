"""F.grid_sample (2-D and 3-D inputs) and F.affine_grid: every mode (bilinear, nearest,
bicubic; 3-D: bilinear, nearest), padding (zeros, border, reflection) and align_corners,
against torch's CPU kernels.

grid_sampler_2d and grid_sampler_3d were "no converter". Grids are random normal times 1.6, so positions fall
inside, on and outside the image; the special-value test puts NaN, +-inf, huge values, the
exact edges and a nearest tie torch decides with a fused multiply-add (width 97,
``g = -0.97938144``: pixel 1 in torch, pixel 0 from ``(g + 1) * 48.5 - 0.5`` in two roundings)
into the grid, and NaN/+-inf into the image.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from crossport.parity.compare import compare_outputs
from crossport.parity.verify import run_keras
from tests.harness import assert_converts
from tests.ops.opcases import Fn, case, inputs

GRID = ("aten_grid_sampler_2d_default",)
GRID_3D = ("aten_grid_sampler_3d_default",)
PADDINGS = ("zeros", "border", "reflection")


def every_padding(mode):
    """One module: ``mode`` with each padding and align_corners (six outputs)."""
    def fn(x, g):
        return tuple(F.grid_sample(x, g * 1.6, mode=mode, padding_mode=p, align_corners=a)
                     for p in PADDINGS for a in (False, True))
    return Fn(fn)


class SpatialTransformer(nn.Module):
    """A conv feature map resampled by an affine grid predicted from it (STN)."""

    def __init__(self, mode="bilinear", align_corners=False):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.theta = nn.Linear(6, 6)
        self.mode, self.align_corners = mode, align_corners

    def forward(self, x):
        y = self.conv(x)
        theta = self.theta(y.mean((2, 3))).view(-1, 2, 3)
        grid = F.affine_grid(theta, [y.shape[0], 6, 5, 7], align_corners=self.align_corners)
        return F.grid_sample(y, grid, mode=self.mode, align_corners=self.align_corners)


class FlowWarp(nn.Module):
    """Optical-flow style warping: a base grid buffer plus a flow from a conv
    (``[N, 2, H, W]`` permuted to the grid's ``[N, H, W, 2]``)."""

    def __init__(self, padding_mode="border"):
        super().__init__()
        torch.manual_seed(0)
        self.flow = nn.Conv2d(3, 2, 3, padding=1)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, 6), torch.linspace(-1, 1, 8),
                                indexing="ij")
        self.register_buffer("base", torch.stack([xs, ys], -1)[None])
        self.padding_mode = padding_mode

    def forward(self, x):
        grid = self.base + self.flow(x).permute(0, 2, 3, 1) * 0.5
        return F.grid_sample(x, grid, padding_mode=self.padding_mode, align_corners=True)


class Float64(nn.Module):
    def forward(self, x, g):
        x, g = x.double(), g.double() * 1.6
        return (F.grid_sample(x, g, mode="bicubic", padding_mode="reflection",
                              align_corners=False),
                F.grid_sample(x, g, mode="nearest", align_corners=True))


class VolumeTransformer(nn.Module):
    """A 3-D conv feature volume resampled by an affine grid predicted from it."""

    def __init__(self, mode="bilinear", align_corners=False):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv3d(2, 3, 3, padding=1)
        self.theta = nn.Linear(3, 12)
        self.mode, self.align_corners = mode, align_corners

    def forward(self, x):
        y = self.conv(x)
        theta = self.theta(y.mean((2, 3, 4))).view(-1, 3, 4)
        grid = F.affine_grid(theta, [y.shape[0], 3, 4, 5, 3],
                             align_corners=self.align_corners)
        return F.grid_sample(y, grid, mode=self.mode, align_corners=self.align_corners)


CASES = [
    case("grid-sample-bilinear-every-padding", every_padding("bilinear"),
         [(2, 3, 5, 7), (2, 4, 6, 2)], expect_converters=GRID),
    case("grid-sample-nearest-every-padding", every_padding("nearest"),
         [(2, 3, 5, 7), (2, 4, 6, 2)], expect_converters=GRID),
    case("grid-sample-bicubic-every-padding", every_padding("bicubic"),
         [(2, 3, 5, 7), (2, 4, 6, 2)], expect_converters=GRID),
    case("grid-sample-one-pixel-wide", every_padding("bilinear"),
         [(1, 2, 1, 4), (1, 3, 5, 2)], expect_converters=GRID),
    case("spatial-transformer-affine-grid", SpatialTransformer(), (2, 3, 5, 7),
         expect_converters=("aten_conv_nd", *GRID)),
    case("spatial-transformer-bicubic-align-corners",
         SpatialTransformer("bicubic", align_corners=True), (2, 3, 5, 7),
         expect_converters=GRID),
    case("flow-warp-border", FlowWarp(), (2, 3, 6, 8), expect_converters=GRID),
    case("flow-warp-reflection", FlowWarp("reflection"), (2, 3, 6, 8), expect_converters=GRID),
    case("grid-sample-float64", Float64(), [(2, 3, 5, 7), (2, 4, 6, 2)],
         expect_converters=GRID),
    case("grid-sample-3d-bilinear-every-padding", every_padding("bilinear"),
         [(2, 3, 4, 5, 6), (2, 3, 4, 2, 3)], expect_converters=GRID_3D),
    case("grid-sample-3d-nearest-every-padding", every_padding("nearest"),
         [(2, 3, 4, 5, 6), (2, 3, 4, 2, 3)], expect_converters=GRID_3D),
    case("grid-sample-3d-one-voxel-deep", every_padding("bilinear"),
         [(1, 2, 1, 3, 4), (1, 2, 3, 2, 3)], expect_converters=GRID_3D),
    case("volume-transformer-affine-grid", VolumeTransformer(), (2, 2, 4, 5, 6),
         expect_converters=("aten_conv_nd", *GRID_3D)),
    case("volume-transformer-nearest-align-corners",
         VolumeTransformer("nearest", align_corners=True), (2, 2, 4, 5, 6),
         expect_converters=GRID_3D),
    case("grid-sample-3d-float64", Fn(lambda x, g: tuple(
        F.grid_sample(x.double(), g.double() * 1.6, mode=m, padding_mode="reflection")
        for m in ("bilinear", "nearest"))), [(2, 3, 4, 5, 6), (2, 3, 4, 2, 3)],
         expect_converters=GRID_3D),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_grid_sample(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), max_transposes=None, **kwargs)


SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1.0000001, -1.0000001, 0.99999994,
           1e-30, 0.5, -0.5, 2.5, -2.5, 7.5, 100.0, 1e10, -1e10, 3e38, -3e38,
           -0.9793814420700073]  # the FMA tie at width 97


def special_grid() -> torch.Tensor:
    values = torch.tensor(SPECIAL)
    gx, gy = torch.meshgrid(values, values, indexing="ij")
    return torch.stack([gx, gy], -1)[None].repeat(2, 1, 1, 1)


def special_image() -> torch.Tensor:
    x = torch.randn(2, 3, 5, 97, generator=torch.Generator().manual_seed(0))
    x[0, 0, 1, 2], x[1, 1, 0, 0], x[0, 2, 4, 96] = np.inf, np.nan, -np.inf
    return x


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_special_values_match_torch(mode):
    """NaN/inf grid positions and image values, and the nearest tie, exactly where torch
    puts them (every padding and align_corners)."""
    module = Fn(lambda x, g: tuple(
        F.grid_sample(x, g, mode=mode, padding_mode=p, align_corners=a)
        for p in PADDINGS for a in (False, True)))
    args = (special_image(), special_grid())
    conversion = assert_converts(module, args, expect_converters=GRID, max_transposes=None)
    with torch.no_grad():
        want = module(*args)
    got = run_keras(conversion.model, args, False, like=want)
    comparison = compare_outputs(list(want), got)
    assert not comparison.mismatches, comparison.mismatches
    if mode == "nearest":  # exactly torch's pixels, the tie included
        for w, g in zip(want, got):
            np.testing.assert_array_equal(np.asarray(g), w.numpy())


def special_grid_3d() -> torch.Tensor:
    values = torch.tensor(SPECIAL[:-1])  # the 2-D kernel's FMA tie does not apply here
    z = torch.tensor([np.nan, 0.0, 1.0, -0.5, 1e10])
    gx, gy, gz = torch.meshgrid(values, values[::4], z, indexing="ij")
    return torch.stack([gx, gy, gz], -1)[None].repeat(2, 1, 1, 1, 1)


def special_volume() -> torch.Tensor:
    x = torch.randn(2, 3, 4, 5, 7, generator=torch.Generator().manual_seed(0))
    x[0, 0, 1, 2, 3], x[1, 1, 0, 0, 0], x[0, 2, 3, 4, 6] = np.inf, np.nan, -np.inf
    return x


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_special_values_match_torch_3d(mode):
    """torch's 3-D scalar kernel on NaN/+-inf/huge grid positions and NaN/inf voxels: NaN
    clips to the last voxel, zeros padding gives 0 for NaN/inf/huge positions, reflection
    folds by fmod (the 2-D rules got 2280 NaN positions wrong here)."""
    module = Fn(lambda x, g: tuple(
        F.grid_sample(x, g, mode=mode, padding_mode=p, align_corners=a)
        for p in PADDINGS for a in (False, True)))
    args = (special_volume(), special_grid_3d())
    conversion = assert_converts(module, args, expect_converters=GRID_3D, max_transposes=None)
    with torch.no_grad():
        want = module(*args)
    got = run_keras(conversion.model, args, False, like=want)
    comparison = compare_outputs(list(want), got)
    assert not comparison.mismatches, comparison.mismatches
    for w, g in zip(want, got):  # bit for bit (the kernel has no FMA to round differently)
        np.testing.assert_array_equal(np.asarray(g), w.numpy())


def test_grid_sample_3d_unnormalizes_with_two_roundings():
    """Half-voxel positions at width 97 and their float32 neighbours: torch's 3-D kernel
    rounds ``(g + 1) * size`` before subtracting 1 (a fused multiply-add picks another
    voxel for 2063 of these 600000 samples)."""
    pixels = np.random.default_rng(0).integers(0, 97, 20000)
    g = (((pixels + 0.5) * 2 + 1) / 97 - 1).astype(np.float32)
    g = np.concatenate([g, np.nextafter(g, np.float32(2)), np.nextafter(g, np.float32(-2))])
    grid = torch.zeros(1, 1, 1, g.size, 3)
    grid[..., 0] = torch.from_numpy(g)
    volume = torch.arange(97.0).reshape(1, 1, 1, 1, 97)
    module = Fn(lambda x, g: F.grid_sample(x, g, mode="nearest", align_corners=False))
    conversion = assert_converts(module, (volume, grid), expect_converters=GRID_3D,
                                 max_transposes=None)
    got = np.asarray(run_keras(conversion.model, (volume, grid), False)[0])
    np.testing.assert_array_equal(got, module(volume, grid).numpy())
