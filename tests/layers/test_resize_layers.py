"""crossport.layers.Interpolate against F.interpolate: every mode, sizes, scales, layouts."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import crossport.layers as L
from crossport.errors import InputError
from crossport.layers.resize import nearest_indices

HYP = settings(max_examples=25, deadline=None, derandomize=True)
FORMAT = st.sampled_from(("channels_last", "channels_first"))
MODES = {1: ["nearest", "nearest-exact", "linear", "area"],
         2: ["nearest", "nearest-exact", "bilinear", "bicubic", "area"],
         3: ["nearest", "nearest-exact", "trilinear", "area"]}
LINEAR = {"linear", "bilinear", "bicubic", "trilinear"}


@st.composite
def resize_case(draw):
    n = draw(st.integers(1, 3))
    mode = draw(st.sampled_from(MODES[n]))
    sizes = draw(st.lists(st.integers(1, {1: 12, 2: 8, 3: 5}[n]), min_size=n, max_size=n))
    kwargs = {"mode": mode}
    if draw(st.booleans()):
        kwargs["size"] = draw(st.lists(st.integers(1, {1: 20, 2: 12, 3: 7}[n]), min_size=n,
                                       max_size=n))
    else:
        factor = st.floats(0.3, 3.5).map(lambda f: round(f, 2))
        kwargs["scale_factor"] = (draw(factor) if draw(st.booleans())
                                  else draw(st.lists(factor, min_size=n, max_size=n)))
        if draw(st.booleans()):
            kwargs["recompute_scale_factor"] = True
    if mode in LINEAR:
        kwargs["align_corners"] = draw(st.sampled_from([None, False, True]))
    return n, sizes, kwargs


def _torch_or_none(x, kwargs):
    """torch's result, or None for a configuration torch rejects."""
    try:
        return F.interpolate(torch.from_numpy(x), **kwargs).numpy()
    except (RuntimeError, ValueError):
        return None


@HYP
@given(case=resize_case(), seed=st.integers(0, 2**16), data_format=FORMAT,
       fast=st.booleans())
def test_interpolate_matches_torch(lt, case, seed, data_format, fast):
    _n, sizes, kwargs = case
    x = lt.randn(seed, 2, 3, *sizes)
    ref = _torch_or_none(x, kwargs)
    assume(ref is not None and ref.size > 0)
    layer = L.Interpolate(**kwargs, data_format=data_format)
    layer.fast_paths = fast
    lt.assert_close(lt.keras_run(layer, x, data_format), ref)


@HYP
@given(case=resize_case(), seed=st.integers(0, 2**16), data_format=FORMAT)
def test_interpolate_on_dynamic_sizes_matches_torch(lt, case, seed, data_format):
    """Spatial dims ``None`` in the model: taps computed at run time, torch's rules."""
    _n, sizes, kwargs = case
    assume(kwargs["mode"] != "area")
    x = lt.randn(seed, 2, 3, *sizes)
    ref = _torch_or_none(x, kwargs)
    assume(ref is not None and ref.size > 0)
    spatial = [None] * len(sizes)
    shape = (*spatial, 3) if data_format == "channels_last" else (3, *spatial)
    inp = keras.Input(shape)
    model = keras.Model(inp, L.Interpolate(**kwargs, data_format=data_format)(inp))
    lt.assert_close(lt.from_keras(model(lt.to_keras(x, data_format)), data_format), ref)


def test_interpolate_to_run_time_sizes(lt):
    x = lt.randn(0, 1, 2, 5, 6)
    inp, height = keras.Input((None, None, 2)), keras.Input((), dtype="int32", batch_size=1)
    layer = L.InterpolateTo(size=[None, 9], mode="bicubic", align_corners=True)
    model = keras.Model([inp, height], layer(inp, keras.ops.squeeze(height, 0)))
    for h in (4, 11):
        ref = F.interpolate(torch.from_numpy(x), size=(h, 9), mode="bicubic",
                            align_corners=True).numpy()
        got = model([lt.to_keras(x, "channels_last"), np.array([h], "int32")])
        lt.assert_close(lt.from_keras(got, "channels_last"), ref)


@pytest.mark.parametrize("mode, args", [("nearest", ()), ("bilinear", (False,)),
                                        ("bicubic", (True,))])
def test_interpolate_to_a_size_sampling_with_given_scales(mode, args, tmp_path):
    """``sampling_scales``: aten.upsample_* given an output size and scales samples output
    i at i / scale (here 1.6 on H, in / out on W), also after a save and reload."""
    op = {"nearest": torch.ops.aten.upsample_nearest2d,
          "bilinear": torch.ops.aten.upsample_bilinear2d,
          "bicubic": torch.ops.aten.upsample_bicubic2d}[mode]
    layer = L.InterpolateTo(size=[7, 9], mode=mode, align_corners=args[0] if args else None,
                            sampling_scales=[1.6, None], data_format="channels_last")
    inp = keras.Input((None, None, 2))
    keras.Model(inp, layer(inp)).save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert loaded.layers[-1].sampling_scales == [1.6, None]
    for h, w in ((5, 6), (3, 11), (8, 4)):
        x = torch.randn(1, 2, h, w, generator=torch.Generator().manual_seed(h))
        ref = op(x, [7, 9], *args, 1.6, None).numpy()
        got = loaded(x.permute(0, 2, 3, 1).numpy())
        np.testing.assert_allclose(np.transpose(got, (0, 3, 1, 2)), ref, atol=1e-5)


def test_sampling_scales_need_a_size():
    with pytest.raises(InputError, match="sampling_scales needs size"):
        L.InterpolateTo(scale_factor=2, sampling_scales=[2.0, 2.0])


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("exact", [False, True])
def test_nearest_source_indices_match_torch_exhaustively(n, exact):
    # every (in, out) up to 32 x 64 and a spread of scale factors, index by index
    mode = "nearest-exact" if exact else "nearest"
    for size in range(1, 33):
        x = torch.arange(size, dtype=torch.float32).view(1, 1, *[1] * (n - 1), size)
        for out in range(1, 65):
            ref = F.interpolate(x, size=[1] * (n - 1) + [out], mode=mode).view(-1).long()
            np.testing.assert_array_equal(nearest_indices(size, out, None, exact, n), ref)
        for factor in (0.3, 0.7, 1.05, 1.1, 1.2, 1.7, 2.0, 2.3, 3.3, 1 / 3, 6.1):
            out = int(np.floor(size * factor))
            if out < 1:
                continue
            ref = F.interpolate(x, scale_factor=[1.0] * (n - 1) + [factor], mode=mode)
            np.testing.assert_array_equal(nearest_indices(size, out, factor, exact, n),
                                          ref.view(-1).long())


@pytest.mark.parametrize("kwargs", [
    {"scale_factor": 2, "mode": "nearest"},                       # repeat fast path
    {"size": (7, 5), "mode": "nearest"},                          # torch floor, not TF rounding
    {"scale_factor": 1.5, "mode": "bilinear"},                    # 1/scale != in/out
    {"size": (9, 4), "mode": "bilinear"},                         # image.resize fast path
    {"size": (9, 4), "mode": "bilinear", "align_corners": True},
    {"scale_factor": 2, "mode": "bicubic", "align_corners": False},
    {"size": (3, 5), "mode": "area"},
], ids=lambda k: "-".join(f"{v}" for v in k.values()))
def test_interpolate_2d_cases_and_roundtrip(lt, kwargs, data_format, tmp_path):
    x = lt.randn(1, 2, 3, 6, 5)
    layer = L.Interpolate(**kwargs, data_format=data_format)
    lt.assert_close(lt.keras_run(layer, x, data_format), F.interpolate(torch.from_numpy(x),
                                                                       **kwargs).numpy())
    lt.roundtrip(layer, lt.to_keras(x, data_format), tmp_path)


@pytest.mark.parametrize("module", [
    torch.nn.Upsample(scale_factor=2, mode="nearest"),
    torch.nn.Upsample(size=(5, 9), mode="bicubic", align_corners=True),
    torch.nn.UpsamplingBilinear2d(scale_factor=3),
    torch.nn.UpsamplingNearest2d(size=(4, 7)),
], ids=lambda m: type(m).__name__)
def test_from_torch(lt, module, data_format):
    x = lt.randn(2, 2, 3, 4, 6)
    layer = L.Interpolate.from_torch(module, data_format=data_format)
    lt.assert_close(lt.keras_run(layer, x, data_format), lt.torch_run(module, x))


def test_invalid_arguments():
    with pytest.raises(InputError):
        L.Interpolate(size=4, scale_factor=2)
    with pytest.raises(InputError):
        L.Interpolate(scale_factor=2, mode="nearest", align_corners=True)
    with pytest.raises(InputError):
        L.Interpolate(scale_factor=2, mode="bilinear", antialias=True)
    with pytest.raises(InputError):
        L.Interpolate(scale_factor=2, mode="bicubic")(np.zeros((1, 4, 2), np.float32))
