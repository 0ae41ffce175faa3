"""tf.image.resize (TF2) and Keras UpSampling2D / Resizing ported to torch (pitfall 12)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_layers_support import PROPERTY, TOL, nerr, randn, to_cf, to_cl, torch_run

from crossport.torch_layers import METHODS, KerasUpSampling2D, TFResize

SIZES = st.integers(1, 13)


@PROPERTY
@given(
    method=st.sampled_from(METHODS),
    antialias=st.booleans(),
    h=SIZES,
    w=SIZES,
    oh=SIZES,
    ow=SIZES,
    seed=st.integers(0, 99),
)
def test_resize_matches_tf_image_resize(method, antialias, h, w, oh, ow, seed):
    x = randn((2, h, w, 3), seed)
    ref = tf.image.resize(x, (oh, ow), method=method, antialias=antialias).numpy()
    got = to_cl(torch_run(TFResize((oh, ow), method, antialias), to_cf(x)))
    assert nerr(got, ref) < TOL


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("size", [(4, 3), (3, 7), (17, 5), (8, 16), (1, 6)])
def test_resize_fixed_grid(method, antialias, size):
    # Downsampling by non-integer ratios, upsampling, and to a single pixel.
    x = randn((1, 8, 6, 2), 5)
    ref = tf.image.resize(x, size, method=method, antialias=antialias).numpy()
    got = to_cl(torch_run(TFResize(size, method, antialias), to_cf(x)))
    assert nerr(got, ref) < TOL


def test_nearest_keeps_dtype_like_tf():
    x = np.arange(2 * 5 * 4 * 1, dtype=np.int32).reshape(2, 5, 4, 1)
    ref = tf.image.resize(x, (3, 7), method="nearest").numpy()
    got = to_cl(torch_run(TFResize((3, 7), "nearest"), to_cf(x)))
    assert got.dtype == ref.dtype
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear", "bicubic", "lanczos3", "area"])
@pytest.mark.parametrize("size", [(2, 2), (3, 1), (1, 4)])
def test_upsampling2d_matches_keras(interpolation, size):
    x = randn((2, 5, 4, 3), 9)
    layer = keras.layers.UpSampling2D(size, interpolation=interpolation)
    got = to_cl(torch_run(KerasUpSampling2D.from_keras(layer), to_cf(x)))
    assert nerr(got, layer(x).numpy()) < TOL


@pytest.mark.parametrize(
    "interpolation,antialias", [("bilinear", False), ("bicubic", True), ("area", False)]
)
def test_resizing_layer_matches_keras(interpolation, antialias):
    x = randn((2, 9, 7, 3), 4)
    layer = keras.layers.Resizing(5, 4, interpolation=interpolation, antialias=antialias)
    got = to_cl(torch_run(TFResize.from_keras(layer), to_cf(x)))
    assert nerr(got, layer(x).numpy()) < TOL


def test_torch_interpolate_nearest_is_not_tf_nearest():
    # The reason the module exists: F.interpolate floors, TF rounds half-pixel centres.
    x = randn((1, 4, 4, 1), 2)
    ref = tf.image.resize(x, (3, 3), method="nearest").numpy()
    naive = to_cl(
        torch.nn.functional.interpolate(torch.from_numpy(to_cf(x)), (3, 3), mode="nearest")
    )
    assert nerr(naive, ref) > 1e-3
    assert nerr(to_cl(torch_run(TFResize((3, 3), "nearest"), to_cf(x))), ref) < TOL
