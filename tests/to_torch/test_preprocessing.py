"""Rescaling and Normalization with per-channel constants on any axis, held NHWC or NCHW."""

import keras
import numpy as np
import pytest
import torch

import crossport
from tests.to_torch.harness import assert_to_torch, chain, load_written

L = keras.layers
IMG = (5, 6, 3)
RNG = np.random.default_rng(0)


def _stats(*shape):
    return RNG.normal(0.0, 1.0, shape).astype("float32"), \
        RNG.uniform(0.5, 2.0, shape).astype("float32")


RESCALING = {
    "scalar": (IMG, [L.Rescaling(1 / 127.5, -1.0)]),
    "per-channel-input": (IMG, [L.Rescaling([0.5, 2.0, -1.0], [0.1, 0.2, 0.3])]),
    # after a conv the tensor is held NCHW: the (C,) vectors are laid out [C, 1, 1]
    "per-channel-after-conv": (IMG, [L.Conv2D(3, 1), L.Rescaling(np.array([0.5, 2.0, -1.0]),
                                                                np.array([1.0, 0.0, -2.0]))]),
    "vector-scale-scalar-offset": (IMG, [L.Conv2D(3, 1), L.Rescaling([0.5, 2.0, 3.0], 1.0)]),
    "per-width-column": (IMG, [L.Conv2D(3, 1), L.Rescaling(RNG.uniform(0.5, 2, (6, 1)))]),
    "sequence": ((4, 3), [L.Rescaling([1.0, 2.0, 3.0], [0.0, 1.0, -1.0])]),
}


@pytest.mark.parametrize("case", RESCALING.values(), ids=RESCALING.keys())
def test_rescaling(case):
    shape, layers = case
    assert_to_torch(chain(shape, *layers), max_permutes=0)


def _norm(axis, sizes, **kw):
    mean, var = _stats(*sizes)
    return L.Normalization(axis=axis, mean=mean, variance=var, **kw)


NORMALIZATION = {
    "last-axis": (IMG, [_norm(-1, (3,))]),
    "last-axis-after-conv": (IMG, [L.Conv2D(3, 1), _norm(-1, (3,))]),
    "height-axis-after-conv": (IMG, [L.Conv2D(3, 1), _norm(1, (5,))]),
    "width-axis": (IMG, [_norm(2, (6,))]),
    "two-axes-after-conv": (IMG, [L.Conv2D(3, 1), _norm((1, 3), (5, 3))]),
    "scalar-axis-none": (IMG, [L.Conv2D(3, 1), L.Normalization(axis=None, mean=0.5,
                                                                variance=2.0)]),
    "invert": (IMG, [L.Conv2D(3, 1), _norm(-1, (3,), invert=True)]),
    "sequence-time-axis": ((4, 3), [_norm(1, (4,))]),
}


@pytest.mark.parametrize("case", NORMALIZATION.values(), ids=NORMALIZATION.keys())
def test_normalization(case):
    shape, layers = case
    assert_to_torch(chain(shape, *layers), live=False, max_permutes=0)


def test_normalization_adapted_per_channel():
    layer = L.Normalization(axis=-1)
    layer.adapt(RNG.normal(2.0, 3.0, (16, *IMG)).astype("float32"))
    assert_to_torch(chain(IMG, layer), live=False)


def test_rescaling_broadcasting_onto_the_batch_axis_is_refused():
    model = chain((3,), L.Rescaling(np.ones((2, 3), "float32")))
    with pytest.raises(crossport.UnsupportedLayerError, match="Rescaling"):
        crossport.to_torch(model, (torch.zeros(2, 3),))


CENTER_CROP = {
    "nhwc": ((8, 10, 3), [L.CenterCrop(5, 6)], "float32"),
    "after-conv-nchw": ((8, 10, 3), [L.Conv2D(2, 1), L.CenterCrop(5, 7), L.Conv2D(2, 1)],
                        "float32"),
    "int-image-cast-to-float": ((8, 10, 3), [L.CenterCrop(5, 6)], "int32"),
    "channels-first": ((3, 8, 10), [L.CenterCrop(5, 7, data_format="channels_first")],
                       "float32"),
}


@pytest.mark.parametrize("shape, layers, dtype", CENTER_CROP.values(), ids=CENTER_CROP.keys())
def test_center_crop(shape, layers, dtype):
    assert_to_torch(chain(shape, *layers, dtype=dtype), max_permutes=0)


def test_center_crop_of_a_smaller_image_is_refused():
    """Keras resizes (smart_resize) when the image is smaller than the crop."""
    with pytest.raises(crossport.UnsupportedLayerError, match="smart_resize"):
        crossport.to_torch(chain((4, 5, 3), L.CenterCrop(6, 6)), (torch.zeros(2, 4, 5, 3),))


def test_discretization_buckets_like_tf():
    """TF's Bucketize counts the boundaries <= x (NaN and inf included), int64 out."""
    model = chain((8,), L.Discretization(bin_boundaries=[-1.0, 0.0, 0.5]), L.Embedding(4, 2))
    assert_to_torch(model)
    model = chain((8,), L.Discretization(bin_boundaries=[-1.0, 0.0, 0.5]))
    values = np.array([[-2.0, -1.0, 0.0, 0.5, np.nan, np.inf, -np.inf, 0.49999]], "float32")
    net = crossport.to_torch(model, (torch.from_numpy(values),))
    want = np.asarray(model(values))
    got = net(torch.from_numpy(values)).numpy()
    assert got.dtype == want.dtype and (got == want).all()


def test_discretization_of_ints():
    assert_to_torch(chain((5,), L.Discretization(bin_boundaries=[2.0, 5.5]), dtype="int32"))


RESIZING_BOX = {
    # (input H, W, C), Resizing(...), then a conv (the input held NCHW) or not
    "crop-wide-to-square": ((6, 9, 2), L.Resizing(4, 4, crop_to_aspect_ratio=True), False),
    "crop-tall-odd": ((9, 5, 2), L.Resizing(3, 4, crop_to_aspect_ratio=True,
                                            interpolation="bicubic"), True),
    "crop-one-row": ((1, 9, 2), L.Resizing(4, 2, crop_to_aspect_ratio=True,
                                           interpolation="nearest"), False),
    "pad-wide": ((4, 9, 2), L.Resizing(5, 5, pad_to_aspect_ratio=True, fill_value=0.5), True),
    # the width wants 7 (3 more): Keras pads int(3 / 2) = 1 column each side, 6 in all
    "pad-tall-odd-difference": ((7, 4, 2), L.Resizing(7, 7, pad_to_aspect_ratio=True,
                                                      interpolation="area"), False),
    "pad-not-needed": ((4, 6, 2), L.Resizing(2, 3, pad_to_aspect_ratio=True), False),
    "crop-antialias-downscale": ((8, 12, 2), L.Resizing(3, 3, crop_to_aspect_ratio=True,
                                                        antialias=True), True),
}


@pytest.mark.parametrize("case", RESIZING_BOX.values(), ids=RESIZING_BOX.keys())
def test_resizing_to_aspect_ratio(case):
    """Keras' centred crop / pad box (float32 box arithmetic, symmetric pad rows) before
    tf.image.resize."""
    shape, layer, after_conv = case
    layers = [L.Conv2D(shape[-1], 1), layer] if after_conv else [layer]
    assert_to_torch(chain(shape, *layers), export=True)


def test_resizing_to_aspect_ratio_channels_first_writes_source(tmp_path):

    layer = L.Resizing(4, 6, pad_to_aspect_ratio=True, fill_value=-1.0,
                       data_format="channels_first")
    conv = assert_to_torch(chain((2, 7, 5), layer), max_permutes=0)
    path = crossport.to_torch_source(conv, tmp_path / "resize.py")
    written = load_written(path)
    x = torch.randn(3, 2, 7, 5)
    with torch.no_grad():
        torch.testing.assert_close(written.build_model()(x), conv.module(x), rtol=0, atol=0)


CATEGORY_ENCODING = {
    # ids drawn from [0, 7): those >= num_tokens=5 are dropped by Keras (zero rows, not counted)
    "one-hot-ids": ((3,), "one_hot"),
    "one-hot-trailing-unit-axis": ((1,), "one_hot"),
    "one-hot-rank-3": ((3, 2), "one_hot"),
    "multi-hot": ((4,), "multi_hot"),
    "multi-hot-rank-3-reduces-axis-1": ((3, 2), "multi_hot"),
    "count": ((4,), "count"),
    "count-rank-3": ((3, 2), "count"),
}


@pytest.mark.parametrize("case", CATEGORY_ENCODING.values(), ids=CATEGORY_ENCODING.keys())
def test_category_encoding(case):
    shape, mode = case
    model = chain(shape, L.CategoryEncoding(5, output_mode=mode), dtype="int32")
    assert_to_torch(model, int_high=7)


def test_category_encoding_batch_of_scalars():
    """A rank-1 input: Keras' multi_hot / count reduce over the batch itself."""
    for mode in ("one_hot", "multi_hot", "count"):
        assert_to_torch(chain((), L.CategoryEncoding(4, output_mode=mode), dtype="int32"),
                        batch=5, int_high=6)


def test_category_encoding_count_weights():
    ids, weights = keras.Input((4,), dtype="int32"), keras.Input((4,))
    counts = L.CategoryEncoding(6, output_mode="count")(ids, count_weights=weights)
    assert_to_torch(keras.Model([ids, weights], counts), int_high=6)


@pytest.mark.parametrize("mode,shape", [("count", (None,)), ("multi_hot", (None, 2)),
                                        ("one_hot", (None,))])
def test_category_encoding_at_run_time_lengths(mode, shape):
    model = chain(shape, L.CategoryEncoding(5, output_mode=mode), dtype="int32")
    example = torch.randint(0, 7, (2, 6, *shape[1:]), dtype=torch.int32)
    conv = crossport.to_torch_with_report(model, (example,))
    assert len(conv.report.shapes) == 2, conv.report.summary()  # a second length checked


def test_an_int_policy_layer_without_converter_is_refused_as_such():
    """Hashing computes in int64 by design; its refusal said 'computes in int64 (dtype policy
    'int64') ... rebuild the model under keras.config.set_dtype_policy('float32')', advice
    that cannot help (found by the adversarial audit). It is a layer with no converter."""
    ids = keras.Input((2,), dtype="int64")
    model = keras.Model(ids, keras.layers.Hashing(8, name="hash")(ids))
    with pytest.raises(crossport.UnsupportedLayerError) as err:
        crossport.to_torch(model, (torch.randint(0, 5, (2, 2)),))
    assert "hash (Hashing): no converter for this layer" in str(err.value)
    assert "set_dtype_policy" not in str(err.value)
