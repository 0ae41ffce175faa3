"""keras.ops.image in functional graphs -> torch: crop_images, pad_images, rgb_to_grayscale,
rgb_to_hsv, hsv_to_rgb, extract_patches and gaussian_blur, on images held in Keras order
and held NCHW, channels_first data, unbatched images, sizes known only at run time, integer
images and the special values (NaN, ±inf) TF's colour kernels meet."""

import keras
import numpy as np
import pytest
import torch

import crossport
from tests.to_torch.harness import assert_to_torch

L = keras.layers
ops = keras.ops
image = keras.ops.image


def _conv(x):
    return L.Conv2D(3, 1)(x)   # held NCHW: the op finds its axes in the layout


OPS = {
    "crop-top-left-target": ((7, 8, 2), lambda x: image.crop_images(
        x, top_cropping=1, left_cropping=2, target_height=4, target_width=3)),
    "crop-four-sides": ((7, 8, 2), lambda x: image.crop_images(
        x, top_cropping=2, bottom_cropping=1, left_cropping=0, right_cropping=3)),
    "crop-bottom-right-target": ((7, 8, 2), lambda x: image.crop_images(
        x, bottom_cropping=2, right_cropping=1, target_height=3, target_width=5)),
    "crop-channels-first": ((2, 7, 8), lambda x: image.crop_images(
        x, top_cropping=1, bottom_cropping=2, left_cropping=3, target_width=4,
        data_format="channels_first")),
    "crop-held-nchw": ((7, 8, 2), lambda x: image.crop_images(
        _conv(x), top_cropping=3, left_cropping=1, target_height=2, target_width=6)),
    "crop-unbatched": ((7, 8, 2), lambda x: image.crop_images(
        x[0], top_cropping=1, left_cropping=1, bottom_cropping=2, right_cropping=2)),
    "pad-four-sides": ((4, 5, 2), lambda x: image.pad_images(
        x, top_padding=1, bottom_padding=2, left_padding=0, right_padding=3)),
    "pad-target-after-top": ((4, 5, 2), lambda x: image.pad_images(
        x, top_padding=2, left_padding=1, target_height=7, target_width=6)),
    "pad-target-before-bottom": ((4, 5, 2), lambda x: image.pad_images(
        x, bottom_padding=1, right_padding=2, target_height=6, target_width=9)),
    "pad-channels-first": ((2, 4, 5), lambda x: image.pad_images(
        x, top_padding=1, bottom_padding=1, right_padding=2, target_width=8,
        data_format="channels_first")),
    "pad-held-nchw": ((4, 5, 2), lambda x: image.pad_images(
        _conv(x), top_padding=1, left_padding=2, bottom_padding=0, right_padding=1)),
    "pad-unbatched": ((4, 5, 2), lambda x: image.pad_images(
        x[1], top_padding=1, left_padding=2, target_height=6, target_width=7)),
    "grayscale": ((5, 6, 3), lambda x: image.rgb_to_grayscale(x)),
    "grayscale-channels-first": ((3, 5, 6), lambda x: image.rgb_to_grayscale(
        x, data_format="channels_first")),
    "grayscale-held-nchw": ((5, 6, 2), lambda x: image.rgb_to_grayscale(_conv(x))),
    "grayscale-one-channel": ((5, 6, 1), lambda x: image.rgb_to_grayscale(x) * 2.0),
    "rgb-to-hsv": ((5, 6, 3), lambda x: image.rgb_to_hsv(x)),
    "rgb-to-hsv-positive": ((5, 6, 3), lambda x: image.rgb_to_hsv(ops.sigmoid(x))),
    "rgb-to-hsv-channels-first": ((3, 5, 6), lambda x: image.rgb_to_hsv(
        x, data_format="channels_first")),
    "rgb-to-hsv-held-nchw": ((5, 6, 2), lambda x: image.rgb_to_hsv(_conv(x))),
    "hsv-to-rgb": ((5, 6, 3), lambda x: image.hsv_to_rgb(x)),
    "hsv-to-rgb-channels-first": ((3, 5, 6), lambda x: image.hsv_to_rgb(
        ops.sigmoid(x), data_format="channels_first")),
    "hsv-round-trip-held-nchw": ((5, 6, 2), lambda x: image.hsv_to_rgb(
        image.rgb_to_hsv(ops.sigmoid(_conv(x))))),
    "patches-2d": ((6, 8, 2), lambda x: image.extract_patches(x, 2)),
    "patches-same-strided": ((7, 8, 3), lambda x: image.extract_patches(
        x, (3, 2), strides=2, padding="same")),
    "patches-dilated": ((7, 8, 2), lambda x: image.extract_patches(
        x, 2, strides=1, dilation_rate=2)),
    "patches-channels-first": ((2, 7, 8), lambda x: image.extract_patches(
        x, 3, strides=(2, 3), padding="same", data_format="channels_first")),
    "patches-held-nchw": ((6, 8, 2), lambda x: image.extract_patches(_conv(x), (2, 4))),
    "patches-3d": ((4, 6, 5, 2), lambda x: image.extract_patches(x, (2, 3, 2),
                                                                 padding="same")),
    "gaussian-blur": ((7, 8, 3), lambda x: image.gaussian_blur(x)),
    "gaussian-blur-non-square": ((7, 8, 2), lambda x: image.gaussian_blur(
        x, kernel_size=(5, 3), sigma=(1.5, 0.7))),
    "gaussian-blur-even-kernel": ((7, 8, 2), lambda x: image.gaussian_blur(
        x, kernel_size=(4, 2), sigma=(2.0, 1.0))),
    "gaussian-blur-channels-first": ((3, 7, 8), lambda x: image.gaussian_blur(
        x, kernel_size=(3, 5), data_format="channels_first")),
    "gaussian-blur-held-nchw": ((7, 8, 2), lambda x: image.gaussian_blur(_conv(x))),
}


@pytest.mark.parametrize("shape, fn", OPS.values(), ids=OPS.keys())
def test_keras_ops_image(shape, fn):
    x = keras.Input(shape)
    assert_to_torch(keras.Model(x, fn(x)))


def test_integer_images():
    """uint8 images: the grayscale is computed in float32 and truncated back to uint8 as
    TF does (every value exact, checked over the whole uint8 cube elsewhere); crops and
    pads keep the dtype."""
    x = keras.Input((6, 7, 3), dtype="uint8")
    model = keras.Model(x, [
        image.rgb_to_grayscale(x),
        image.rgb_to_grayscale(ops.transpose(x, (0, 3, 1, 2)), data_format="channels_first"),
        image.crop_images(x, top_cropping=1, left_cropping=2, target_height=3,
                          target_width=4),
        image.pad_images(x, top_padding=1, left_padding=2, target_height=9, target_width=9)])
    assert_to_torch(model, int_high=256, live=False)


def test_crop_and_pad_at_sizes_known_at_run_time():
    """Height and width None in the graph: a crop to a target from the bottom counts from
    the end, a pad to a target reads ``x.size`` when the module runs."""
    x = keras.Input((None, None, 2))
    model = keras.Model(x, [
        image.crop_images(x, bottom_cropping=1, right_cropping=2, target_height=3,
                          target_width=2),
        image.crop_images(x, top_cropping=1, left_cropping=2, target_height=4,
                          target_width=1),
        image.pad_images(x, top_padding=1, left_padding=0, target_height=12,
                         target_width=10)])
    conv = crossport.to_torch_with_report(model, (torch.randn(2, 6, 7, 2),))
    assert len(conv.report.shapes) == 2, conv.report.summary()  # a second size was checked
    rng = np.random.default_rng(3)
    for shape in [(1, 5, 8, 2), (2, 9, 4, 2)]:
        values = rng.standard_normal(shape).astype("float32")
        with torch.no_grad():
            got = conv.module(torch.from_numpy(values))
        for w, g in zip(model(values), got):
            np.testing.assert_array_equal(g.numpy(), np.asarray(w))


@pytest.mark.parametrize("op, shape", [
    (lambda x: image.crop_images(x, bottom_cropping=1, right_cropping=2, target_height=3,
                                 target_width=2), (1, 3, 8, 2)),
    (lambda x: image.crop_images(x, top_cropping=1, left_cropping=2, target_height=4,
                                 target_width=1), (1, 9, 2, 2)),
    (lambda x: image.pad_images(x, top_padding=1, left_padding=0, target_height=12,
                                target_width=10), (1, 13, 4, 2)),
], ids=["crop-from-the-end", "crop-target", "pad-to-target"])
def test_crop_and_pad_that_do_not_fit_a_run_time_size_raise_as_keras_does(op, shape):
    """Keras raises when a crop or pad does not fit an image of a size it learns at run
    time; the module raised nothing and cropped or padded short (a silently wrong size)."""
    x = keras.Input((None, None, 2))
    model = keras.Model(x, op(x))
    conv = crossport.to_torch_with_report(model, (torch.randn(2, 6, 7, 2),))
    values = np.random.default_rng(0).standard_normal(shape).astype("float32")
    with pytest.raises(Exception):
        model(values)
    with pytest.raises(AssertionError, match="image is (smaller|larger)"), torch.no_grad():
        conv.module(torch.from_numpy(values))


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 1.0, -1.0, 0.25], np.float32)


def _every_triple() -> np.ndarray:
    """Every (r, g, b) from the special values, as a [1, 27, 27, 3] image."""
    grid = np.stack(np.meshgrid(SPECIAL, SPECIAL, SPECIAL, indexing="ij"), -1)
    return grid.reshape(1, 27, 27, 3)


def test_colour_conversions_with_nan_infinities_and_signed_zeros():
    """TF's kernels take the max / min of the channels left to right (a NaN is dropped
    unless it is the last channel), divide by a zero range and carry NaN and ±inf through
    their clamps: every combination of special values lands where TF puts it."""
    x = keras.Input((27, 27, 3))
    model = keras.Model(x, [image.rgb_to_hsv(x), image.hsv_to_rgb(x),
                            image.rgb_to_hsv(_conv(x)), image.rgb_to_grayscale(x)])
    net = crossport.to_torch(model, (torch.rand(2, 27, 27, 3),))
    values = _every_triple()
    want = [np.asarray(w) for w in model(values)]
    with torch.no_grad():
        got = [g.numpy() for g in net(torch.from_numpy(values))]
    for w, g in zip(want, got):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(np.isposinf(g), np.isposinf(w))
        np.testing.assert_array_equal(np.isneginf(g), np.isneginf(w))
        finite = np.isfinite(w)
        np.testing.assert_allclose(g[finite], w[finite], rtol=1e-6, atol=1e-6)


def _refusal(model, example, match):
    with pytest.raises(crossport.UnsupportedLayerError, match=match):
        crossport.to_torch(model, example)


def test_unbatched_patches_and_blur_are_refused_by_name():
    x = keras.Input((6, 6, 2))
    model = keras.Model(x, [image.extract_patches(x[0], 2), image.gaussian_blur(x[0])])
    with pytest.raises(crossport.UnsupportedLayerError, match="unbatched") as refused:
        crossport.to_torch(model, (torch.randn(2, 6, 6, 2),))
    assert "ExtractPatches" in str(refused.value) and "GaussianBlur" in str(refused.value)


def test_integer_patches_and_blur_are_refused_by_name():
    """Keras' TF backend convolves no integer images (it fails at run time)."""
    x = keras.Input((6, 6, 2), dtype="int32")
    model = keras.Model(x, [image.extract_patches(x, 2), image.gaussian_blur(x)])
    with pytest.raises(crossport.UnsupportedLayerError, match="int32 images") as refused:
        crossport.to_torch(model, (torch.zeros(2, 6, 6, 2, dtype=torch.int32),))
    assert "ExtractPatches" in str(refused.value) and "GaussianBlur" in str(refused.value)


# one transform row per image: a zoom about a corner, a rotation, a shear beyond the edges
# and a projective row (c0, c1 != 0, TF's own)
ROWS = np.array([[1.5, 0.0, -2.0, 0.0, 1.5, -1.0, 0.0, 0.0],
                 [0.8, -0.6, 3.0, 0.6, 0.8, -2.0, 0.0, 0.0],
                 [1.0, 0.7, -4.0, 0.3, 1.0, 2.5, 0.0, 0.0],
                 [0.9, 0.1, 0.5, -0.2, 1.1, 0.25, 0.02, -0.03]], np.float32)


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("fill_mode", ["constant", "nearest", "wrap", "reflect"])
def test_affine_transform(interpolation, fill_mode):
    """Every fill mode and interpolation of TF's projective kernel, a row per image, the
    images as Keras holds them, held NCHW, and channels_first."""
    x = keras.Input((7, 9, 2))

    def transform(images, rows, **kwargs):
        return image.affine_transform(images, rows, interpolation=interpolation,
                                      fill_mode=fill_mode, fill_value=-0.5, **kwargs)

    model = keras.Model(x, [transform(x, ROWS), transform(_conv(x), ROWS[1]),
                            transform(ops.transpose(x, (0, 3, 1, 2)), ROWS[3],
                                      data_format="channels_first")])
    assert_to_torch(model, batch=4)


def test_affine_transform_rows_from_the_graph_and_integer_images():
    """Transform rows computed from a model input (per image), and uint8 images: nearest
    reads them as they are, bilinear in float32 truncated back, the fill value cast to
    uint8 first."""
    x, t = keras.Input((6, 8, 3), dtype="uint8"), keras.Input((8,))
    rows = t * 0.05 + ROWS[1]
    model = keras.Model([x, t], [
        image.affine_transform(x, rows, interpolation="nearest", fill_value=7.9),
        image.affine_transform(x, rows, fill_mode="reflect"),
        image.affine_transform(ops.cast(x, "float32"), rows, fill_mode="wrap")])
    assert_to_torch(model, int_high=256, live=False)


def test_affine_transform_of_an_unknown_size_is_refused_by_name():
    x = keras.Input((None, None, 2))
    _refusal(keras.Model(x, image.affine_transform(x, ROWS[0])),
             (torch.randn(2, 5, 6, 2),), "run time")


def test_affine_transform_where_the_projection_is_zero():
    """``c0 x + c1 y + 1 == 0`` on a whole column: TF gives the fill value there (the
    module's division gives ±inf / NaN points, read as outside)."""
    x = keras.Input((5, 6, 2))
    row = np.array([1, 0, 0, 0, 1, 0, -0.25, 0], np.float32)   # k == 0 at x == 4
    model = keras.Model(x, [image.affine_transform(x, row, interpolation=mode, fill_value=3.0)
                            for mode in ("nearest", "bilinear")])
    net = crossport.to_torch(model, (torch.randn(2, 5, 6, 2),))
    values = np.random.default_rng(4).standard_normal((2, 5, 6, 2)).astype("float32")
    with torch.no_grad():
        got = [g.numpy() for g in net(torch.from_numpy(values))]
    for w, g in zip(model(values), got):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-6, atol=1e-6)
        assert (g[:, :, 4] == 3.0).all()
