"""crossport.layers normalisation against torch: LayerNorm layouts, groups, running stats."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import crossport.layers as L
from crossport.errors import InputError

HYP = settings(max_examples=20, deadline=None, derandomize=True)
FORMAT = st.sampled_from(("channels_last", "channels_first"))


def _randomize(module, seed: int):
    """Non-trivial affine parameters and running statistics."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in list(module.named_parameters()) + list(module.named_buffers()):
            if name == "num_batches_tracked":
                p.fill_(3)
            elif name == "running_var":
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g))
    return module


def _input(lt, seed, *shape):
    """Offset and scaled: a naive E[x^2]-E[x]^2 variance would lose digits here."""
    return lt.randn(seed, *shape) * 3.0 + 5.0


@HYP
@given(rank=st.integers(2, 5), data=st.data(), seed=st.integers(0, 2**16),
       affine=st.booleans(), bias=st.booleans())
def test_layer_norm_matches_torch_any_perm(lt, rank, data, seed, affine, bias):
    shape = data.draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))
    m = data.draw(st.integers(1, rank))
    if int(np.prod(shape[rank - m:])) < 3:  # ill-conditioned tiny sets, see the GroupNorm test
        shape[-1] = 3
    perm = data.draw(st.permutations(range(rank)))
    module = _randomize(torch.nn.LayerNorm(shape[rank - m:], eps=1e-5, elementwise_affine=affine,
                                           bias=bias), seed)
    x = _input(lt, seed, *shape)
    ref = lt.torch_run64(module, x)
    layer = L.LayerNorm.from_torch(module, perm=perm)
    out = np.asarray(layer(np.transpose(x, perm)))
    lt.assert_close(out, np.transpose(ref, perm))


@pytest.mark.parametrize("normalized", [[4], [3, 4], [2, 3, 4]])
def test_layer_norm_data_formats(lt, normalized, data_format):
    module = _randomize(torch.nn.LayerNorm(normalized), 1)
    x = _input(lt, 1, 2, 2, 3, 4)
    layer = L.LayerNorm.from_torch(module, data_format=data_format)
    lt.assert_close(lt.keras_run(layer, x, data_format), lt.torch_run(module, x))


def test_layer_norm_default_is_torch_layout(lt):
    module = _randomize(torch.nn.LayerNorm(8), 2)
    x = _input(lt, 2, 3, 5, 8)  # a [N, T, D] sequence stays [N, T, D]
    lt.assert_close(np.asarray(L.LayerNorm.from_torch(module)(x)), lt.torch_run(module, x))


@HYP
@given(rank=st.integers(2, 5), groups=st.sampled_from([1, 2, 3]), per=st.integers(1, 3),
       data=st.data(), seed=st.integers(0, 2**16), affine=st.booleans(), data_format=FORMAT)
def test_group_norm_matches_torch(lt, rank, groups, per, data, seed, affine, data_format):
    spatial = data.draw(st.lists(st.integers(1, 4), min_size=rank - 2, max_size=rank - 2))
    if int(np.prod(spatial)) * per < 3:
        # tiny groups are ill-conditioned (x - mean of two close values): float32 rounding
        # of either implementation dominates, so keep groups of >= 3 elements
        per = 3
    module = _randomize(torch.nn.GroupNorm(groups, groups * per, affine=affine), seed)
    x = _input(lt, seed, 2, groups * per, *spatial)
    layer = L.GroupNorm.from_torch(module, data_format=data_format)
    lt.assert_close(lt.keras_run(layer, x, data_format), lt.torch_run64(module, x))


NORM_CASES = list(itertools.product((1, 2, 3), ("Batch", "Instance")))


@HYP
@given(case=st.sampled_from(NORM_CASES), affine=st.booleans(), track=st.booleans(),
       momentum=st.sampled_from([0.1, 0.3, None]), train=st.booleans(),
       seed=st.integers(0, 2**16), data_format=FORMAT, data=st.data())
def test_batch_and_instance_norm_match_torch(lt, case, affine, track, momentum, train, seed,
                                             data_format, data):
    n, kind = case
    spatial = data.draw(st.lists(st.integers(2, 4), min_size=n, max_size=n))
    module = getattr(torch.nn, f"{kind}Norm{n}d")(3, momentum=momentum, affine=affine,
                                                   track_running_stats=track)
    module = _randomize(module, seed).train(train)
    layer = getattr(L, f"{kind}Norm{n}d").from_torch(module, data_format=data_format)
    for step in range(2):  # the second step sees the updated running statistics
        x = _input(lt, seed + step, 3, 3, *spatial)
        ref = lt.torch_run(module, x)
        lt.assert_close(lt.keras_run(layer, x, data_format, training=train), ref)
        if track:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                lt.assert_close(np.asarray(getattr(layer, name)), getattr(module, name).numpy())


def test_batch_norm_1d_on_features(lt):
    module = _randomize(torch.nn.BatchNorm1d(6), 4).eval()
    x = _input(lt, 4, 5, 6)  # (N, C): identical in both layouts
    for data_format in ("channels_last", "channels_first"):
        layer = L.BatchNorm1d.from_torch(module, data_format=data_format)
        lt.assert_close(np.asarray(layer(x)), lt.torch_run(module, x))


LAYERS = [
    lambda: L.LayerNorm.from_torch(_randomize(torch.nn.LayerNorm([3, 5]), 0)),
    lambda: L.GroupNorm.from_torch(_randomize(torch.nn.GroupNorm(2, 4), 0)),
    lambda: L.InstanceNorm2d.from_torch(_randomize(torch.nn.InstanceNorm2d(4, affine=True), 0)),
    lambda: L.InstanceNorm1d(4, track_running_stats=True),
    lambda: L.BatchNorm2d.from_torch(_randomize(torch.nn.BatchNorm2d(4), 0).eval()),
    lambda: L.BatchNorm3d(4, affine=False, momentum=None),
]


@pytest.mark.parametrize("make", LAYERS, ids=["layer", "group", "instance2d", "instance1d",
                                              "batch2d", "batch3d"])
def test_keras_roundtrip(lt, make, tmp_path):
    layer = make()
    shapes = {"LayerNorm": (2, 4, 3, 5), "InstanceNorm1d": (2, 6, 4), "BatchNorm3d": (2, 3, 3, 3, 4)}
    x = _input(lt, 7, *shapes.get(type(layer).__name__, (2, 5, 6, 4)))
    lt.roundtrip(layer, x, tmp_path)


def test_invalid_arguments():
    with pytest.raises(InputError):
        L.GroupNorm(3, 4)
    with pytest.raises(InputError):
        L.LayerNorm(4)(np.zeros((2, 3), np.float32))
    with pytest.raises(InputError):
        L.BatchNorm2d(3)(np.zeros((2, 4, 4, 4), np.float32))
    with pytest.raises(InputError):
        L.BatchNorm2d(3)(np.zeros((2, 3), np.float32))
