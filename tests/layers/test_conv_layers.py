"""crossport.layers convolutions against torch: padding modes, groups/depthwise, transposed."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import crossport.layers as L
from crossport.errors import InputError

HYP = settings(max_examples=25, deadline=None, derandomize=True)
FORMAT = st.sampled_from(("channels_last", "channels_first"))
MAX_SIZE = {1: 12, 2: 8, 3: 5}


def _make(factory, *args, **kwargs):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return factory(*args, **kwargs)
    except (ValueError, RuntimeError):
        return None


def _torch_or_none(lt, module, x):
    """The float64 torch result (see conftest.torch_run64), None where torch raises."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return lt.torch_run64(module, x)
    except RuntimeError:
        return None


@st.composite
def conv_args(draw):
    n = draw(st.integers(1, 3))
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    in_channels = groups * draw(st.integers(1, 2))
    depthwise = draw(st.booleans()) and groups > 1
    if depthwise:
        in_channels = groups  # groups == in_channels: the depthwise path
    out_channels = groups * draw(st.integers(1, 3))
    kernel = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    padding = draw(st.one_of(
        st.sampled_from(["same", "valid"]),
        st.lists(st.integers(0, 2), min_size=n, max_size=n),
    ))
    stride = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    if padding == "same":
        stride = [1] * n
    return {
        "n": n,
        "in_channels": in_channels,
        "out_channels": out_channels,
        "kernel_size": kernel,
        "stride": stride,
        "padding": padding,
        "dilation": draw(st.lists(st.integers(1, 3), min_size=n, max_size=n)),
        "groups": groups,
        "bias": draw(st.booleans()),
        "padding_mode": draw(st.sampled_from(["zeros", "zeros", "reflect", "replicate",
                                           "circular"])),
        "sizes": draw(st.lists(st.integers(1, MAX_SIZE[n]), min_size=n, max_size=n)),
    }


@HYP
@given(args=conv_args(), seed=st.integers(0, 2**16), data_format=FORMAT)
def test_conv_matches_torch(lt, args, seed, data_format):
    n, sizes = args.pop("n"), args.pop("sizes")
    torch.manual_seed(seed)
    module = _make(getattr(torch.nn, f"Conv{n}d"), **args)
    assume(module is not None)
    x = lt.randn(seed, 2, args["in_channels"], *sizes)
    ref = _torch_or_none(lt, module, x)
    assume(ref is not None and ref.size > 0)
    layer = getattr(L, f"Conv{n}d").from_torch(module, data_format=data_format)
    lt.assert_close(lt.keras_run(layer, x, data_format), ref)


@st.composite
def conv_transpose_args(draw):
    n = draw(st.integers(1, 3))
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    stride = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    dilation = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    return {
        "n": n,
        "in_channels": groups * draw(st.integers(1, 2)),
        "out_channels": groups * draw(st.integers(1, 3)),
        "kernel_size": draw(st.lists(st.integers(1, 4), min_size=n, max_size=n)),
        "stride": stride,
        "padding": draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)),
        "output_padding": [draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation)],
        "groups": groups,
        "bias": draw(st.booleans()),
        "dilation": dilation,
        "sizes": draw(st.lists(st.integers(1, MAX_SIZE[n] - 2), min_size=n, max_size=n)),
    }


@HYP
@given(args=conv_transpose_args(), seed=st.integers(0, 2**16), data_format=FORMAT)
def test_conv_transpose_matches_torch(lt, args, seed, data_format):
    n, sizes = args.pop("n"), args.pop("sizes")
    torch.manual_seed(seed)
    module = _make(getattr(torch.nn, f"ConvTranspose{n}d"), **args)
    assume(module is not None)
    x = lt.randn(seed, 2, args["in_channels"], *sizes)
    ref = _torch_or_none(lt, module, x)
    assume(ref is not None and ref.size > 0)
    layer = getattr(L, f"ConvTranspose{n}d").from_torch(module, data_format=data_format)
    lt.assert_close(lt.keras_run(layer, x, data_format), ref)


@pytest.mark.parametrize("mult", [1, 3])
@pytest.mark.parametrize("stride,dilation", [(1, 1), (2, 1), (1, 2), (2, 2)])
@pytest.mark.parametrize("n", [1, 2])
def test_depthwise_uses_depthwise_kernel(lt, n, mult, stride, dilation, data_format):
    torch.manual_seed(0)
    module = getattr(torch.nn, f"Conv{n}d")(4, 4 * mult, 3, stride, 1, dilation, groups=4)
    layer = getattr(L, f"Conv{n}d").from_torch(module, data_format=data_format)
    assert layer.depthwise and tuple(layer.kernel.shape) == (*[3] * n, 4, mult)
    x = lt.randn(1, 2, 4, *[11, 10][:n])
    lt.assert_close(lt.keras_run(layer, x, data_format), lt.torch_run64(module, x))


def test_same_padding_puts_extra_on_the_right(lt, data_format):
    torch.manual_seed(1)
    module = torch.nn.Conv2d(3, 5, (2, 4), padding="same", dilation=(1, 3))
    x = lt.randn(2, 1, 3, 7, 6)
    layer = L.Conv2d.from_torch(module, data_format=data_format)
    lt.assert_close(lt.keras_run(layer, x, data_format), lt.torch_run64(module, x))


MODULES = [
    torch.nn.Conv1d(4, 6, 3, stride=2, padding=1, padding_mode="reflect"),
    torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2),
    torch.nn.Conv2d(4, 8, 3, padding="same", groups=4, bias=False),
    torch.nn.Conv3d(4, 6, (1, 3, 2), padding=(0, 1, 1), padding_mode="circular"),
    torch.nn.ConvTranspose1d(4, 6, 4, stride=2, padding=1, groups=2),
    torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, dilation=2),
    torch.nn.ConvTranspose3d(4, 2, 2, stride=2, bias=False),
]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: f"{type(m).__name__}")
def test_from_torch_and_keras_roundtrip(lt, module, data_format, tmp_path):
    n = int(type(module).__name__[-2])
    x = lt.randn(3, 2, 4, *[7, 6, 5][:n])
    layer = getattr(L, type(module).__name__).from_torch(module, data_format=data_format)
    lt.assert_close(lt.keras_run(layer, x, data_format), lt.torch_run64(module, x))
    lt.roundtrip(layer, lt.to_keras(x, data_format), tmp_path)
    torch_params = sum(p.numel() for p in module.parameters())
    assert sum(int(np.prod(w.shape)) for w in layer.weights) == torch_params


@pytest.mark.parametrize("cls", [L.Conv2d, L.ConvTranspose2d])
def test_default_init_matches_torch_bounds(cls):
    layer = cls(6, 4, 3, groups=2)
    layer.build((None, 8, 8, 6))
    fan_in = (6 if cls is L.Conv2d else 4) // 2 * 9
    for w in layer.weights:
        assert np.abs(np.asarray(w)).max() <= 1 / np.sqrt(fan_in)


@pytest.mark.parametrize("n", [2, 3])
def test_single_output_on_strided_last_axis(lt, n, data_format):
    # oneDNN float32 returns garbage here (TF and torch); the layer sidesteps it
    torch.manual_seed(2)
    module = getattr(torch.nn, f"Conv{n}d")(1, 2, (*[1] * (n - 1), 5), stride=(*[1] * (n - 1), 2))
    x = lt.randn(4, 2, 1, *[3] * (n - 1), 5)
    layer = getattr(L, f"Conv{n}d").from_torch(module, data_format=data_format)
    lt.assert_close(lt.keras_run(layer, x, data_format), lt.torch_run64(module, x))


def test_invalid_arguments():
    with pytest.raises(InputError):
        L.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(InputError):
        L.Conv2d(4, 4, 3, stride=2, padding="same")
    with pytest.raises(InputError):
        L.Conv2d(4, 4, 3, padding_mode="symmetric")
    with pytest.raises(InputError):
        L.ConvTranspose2d(4, 4, 3, stride=2, output_padding=2)
    with pytest.raises(InputError):
        L.Conv2d(4, 4, 3)(np.zeros((1, 5, 5, 3), np.float32))
