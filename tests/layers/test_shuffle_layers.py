"""crossport.layers.PixelShuffle / PixelUnshuffle against torch's channel order."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import crossport.layers as L
from crossport.errors import InputError

HYP = settings(max_examples=20, deadline=None, derandomize=True)
FORMAT = st.sampled_from(("channels_last", "channels_first"))


@HYP
@given(r=st.integers(1, 3), c=st.integers(1, 3), h=st.integers(1, 4), w=st.integers(1, 4),
       seed=st.integers(0, 2**16), data_format=FORMAT)
def test_shuffle_and_unshuffle_match_torch(lt, r, c, h, w, seed, data_format):
    x = lt.randn(seed, 2, c * r * r, h, w)
    shuffle = torch.nn.PixelShuffle(r)
    ref = lt.torch_run(shuffle, x)
    out = lt.keras_run(L.PixelShuffle.from_torch(shuffle, data_format=data_format), x,
                       data_format)
    np.testing.assert_array_equal(out, ref)
    unshuffle = torch.nn.PixelUnshuffle(r)
    back = lt.keras_run(L.PixelUnshuffle.from_torch(unshuffle, data_format=data_format), ref,
                        data_format)
    np.testing.assert_array_equal(back, lt.torch_run(unshuffle, ref))
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("layer,shape", [(lambda df: L.PixelShuffle(2, data_format=df),
                                          (2, 8, 3, 5)),
                                         (lambda df: L.PixelUnshuffle(2, data_format=df),
                                          (2, 3, 6, 4))], ids=["shuffle", "unshuffle"])
def test_roundtrip_dynamic_spatial(lt, layer, shape, data_format, tmp_path):
    x = lt.to_keras(lt.randn(0, *shape), data_format)
    dims = (0, 1, 2) if data_format == "channels_last" else (0, 2, 3)
    lt.roundtrip(layer(data_format), x, tmp_path, dynamic=dims)


def test_invalid_inputs():
    with pytest.raises(InputError):
        L.PixelShuffle(2)(np.zeros((1, 3, 3, 6), np.float32))
    with pytest.raises(InputError):
        L.PixelUnshuffle(2)(np.zeros((1, 3, 4, 2), np.float32))
    with pytest.raises(InputError):
        L.PixelShuffle(0)
