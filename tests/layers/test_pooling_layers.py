"""crossport.layers pooling against torch: max/avg with every option, adaptive windows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import crossport.layers as L
from crossport.errors import InputError

HYP = settings(max_examples=25, deadline=None, derandomize=True)
FORMAT = st.sampled_from(("channels_last", "channels_first"))


def _torch_or_none(fn, x, **kwargs):
    try:
        with torch.no_grad():
            return fn(torch.from_numpy(x), **kwargs).numpy()
    except RuntimeError:
        return None


@st.composite
def windows(draw, with_dilation: bool):
    n = draw(st.integers(1, 3))
    max_size = {1: 13, 2: 9, 3: 6}[n]
    sizes = draw(st.lists(st.integers(1, max_size), min_size=n, max_size=n))
    kernel = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    stride = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    dilation = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n)) if with_dilation else None
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilation or [1] * n)]
    padding = [draw(st.integers(0, e // 2)) for e in extent]  # torch's limit
    # enough input for one window most of the time (torch rejects an empty output)
    sizes = [max(s, e - 2 * p - 1) for s, e, p in zip(sizes, extent, padding)]
    channels = draw(st.sampled_from([1, 3]))
    return n, sizes, kernel, stride, padding, dilation, channels


@HYP
@given(w=windows(True), ceil_mode=st.booleans(), seed=st.integers(0, 2**16), data_format=FORMAT)
def test_max_pool_matches_torch(lt, w, ceil_mode, seed, data_format):
    n, sizes, kernel, stride, padding, dilation, channels = w
    x = lt.randn(seed, 2, channels, *sizes)
    fn = getattr(F, f"max_pool{n}d")
    ref = _torch_or_none(fn, x, kernel_size=kernel, stride=stride, padding=padding,
                         dilation=dilation, ceil_mode=ceil_mode)
    assume(ref is not None and ref.size > 0)
    layer = getattr(L, f"MaxPool{n}d")(kernel, stride, padding, dilation, ceil_mode,
                                       data_format=data_format)
    lt.assert_close(lt.keras_run(layer, x, data_format), ref)


@HYP
@given(w=windows(False), ceil_mode=st.booleans(), count_include_pad=st.booleans(),
       override=st.sampled_from([None, None, 1, 5]), seed=st.integers(0, 2**16),
       data_format=FORMAT)
def test_avg_pool_matches_torch(lt, w, ceil_mode, count_include_pad, override, seed,
                                data_format):
    n, sizes, kernel, stride, padding, _, channels = w
    x = lt.randn(seed, 2, channels, *sizes)
    kwargs = {"kernel_size": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil_mode,
                  "count_include_pad": count_include_pad}
    if n == 1:
        override = None  # F.avg_pool1d has no divisor_override
    else:
        kwargs["divisor_override"] = override
    ref = _torch_or_none(getattr(F, f"avg_pool{n}d"), x, **kwargs)
    assume(ref is not None and ref.size > 0)
    layer = getattr(L, f"AvgPool{n}d")(kernel, stride, padding, ceil_mode, count_include_pad,
                                       override, data_format=data_format)
    lt.assert_close(lt.keras_run(layer, x, data_format), ref)


@HYP
@given(n=st.integers(1, 3), data=st.data(), kind=st.sampled_from(("Avg", "Max")),
       seed=st.integers(0, 2**16), data_format=FORMAT)
def test_adaptive_pool_matches_torch(lt, n, data, kind, seed, data_format):
    sizes = data.draw(st.lists(st.integers(1, {1: 17, 2: 10, 3: 6}[n]), min_size=n, max_size=n))
    out = data.draw(st.lists(st.one_of(st.integers(1, 9), st.none()) if n > 1
                             else st.integers(1, 9), min_size=n, max_size=n))
    x = lt.randn(seed, 2, 3, *sizes)
    module = getattr(torch.nn, f"Adaptive{kind}Pool{n}d")(out)
    ref = lt.torch_run(module, x)
    layer = getattr(L, f"Adaptive{kind}Pool{n}d").from_torch(module, data_format=data_format)
    lt.assert_close(lt.keras_run(layer, x, data_format), ref)


@pytest.mark.parametrize("kind", ["Avg", "Max"])
@pytest.mark.parametrize("output_size", [1, (1, 1), 4, (2, 5), (3, None), (7, 3)])
def test_adaptive_pool_2d_paths(lt, kind, output_size, data_format):
    # global (1), evenly dividing (fixed windows), uneven (separable) and mixed
    x = lt.randn(7, 2, 4, 8, 10)
    module = getattr(torch.nn, f"Adaptive{kind}Pool2d")(output_size)
    layer = getattr(L, f"Adaptive{kind}Pool2d")(output_size, data_format=data_format)
    lt.assert_close(lt.keras_run(layer, x, data_format), lt.torch_run(module, x))


def test_count_include_pad_divisor_at_ceil_overhang(lt, data_format):
    # the window past the right padding: torch divides by the part inside input+padding
    x = lt.randn(11, 1, 2, 6, 6)
    for cip in (True, False):
        module = torch.nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=cip)
        layer = L.AvgPool2d.from_torch(module, data_format=data_format)
        lt.assert_close(lt.keras_run(layer, x, data_format), lt.torch_run(module, x))


MODULES = [
    torch.nn.MaxPool1d(3, 2, 1, ceil_mode=True),
    torch.nn.MaxPool2d((3, 2), (2, 1), (1, 0), dilation=(1, 2)),
    torch.nn.MaxPool3d(2),
    torch.nn.AvgPool1d(3, 2, 1, ceil_mode=True, count_include_pad=False),
    torch.nn.AvgPool2d(3, 2, 1, divisor_override=4),
    torch.nn.AvgPool3d(2, ceil_mode=True),
    torch.nn.AdaptiveAvgPool1d(5),
    torch.nn.AdaptiveAvgPool2d((3, 4)),
    torch.nn.AdaptiveAvgPool3d((2, None, 3)),
    torch.nn.AdaptiveMaxPool1d(1),
    torch.nn.AdaptiveMaxPool2d((5, 3)),
    torch.nn.AdaptiveMaxPool3d(3),
]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: type(m).__name__)
def test_from_torch_and_keras_roundtrip(lt, module, data_format, tmp_path):
    n = int(type(module).__name__[-2])
    x = lt.randn(13, 2, 3, *[9, 8, 7][:n])
    layer = getattr(L, type(module).__name__).from_torch(module, data_format=data_format)
    lt.assert_close(lt.keras_run(layer, x, data_format), lt.torch_run(module, x))
    lt.roundtrip(layer, lt.to_keras(x, data_format), tmp_path)


@pytest.mark.parametrize("layer", [L.MaxPool2d(3, 2, 1), L.AvgPool2d(3, 2, 1)],
                         ids=["max", "avg"])
def test_dynamic_spatial_dims_without_ceil_mode(lt, layer, tmp_path):
    x = lt.to_keras(lt.randn(17, 2, 3, 9, 8), "channels_last")
    lt.roundtrip(layer, x, tmp_path, dynamic=(0, 1, 2))


def test_unsupported_and_invalid():
    with pytest.raises(InputError):
        L.MaxPool2d(2, return_indices=True)
    with pytest.raises(InputError):
        L.AdaptiveMaxPool2d(2, return_indices=True)
    with pytest.raises(InputError):
        L.AvgPool2d(3, padding=2)
    with pytest.raises(InputError):
        L.AdaptiveAvgPool2d((2, 3, 4))
    with pytest.raises(InputError):
        L.MaxPool2d(3)(np.zeros((1, 2, 2, 1), np.float32))
