"""Indexing keras.ops that used to be refused: negative-step slices (``x[::-1]``), per-element
``repeat``, ``diff``, reflect / symmetric ``pad`` along a run-time dim, and einsum with an
implicit output whose ``...`` stands for no dim; each checked at several sizes where a dim
is dynamic, against Keras' own errors where Keras fails."""

import itertools

import keras
import numpy as np
import pytest
import torch

import crossport
from tests.to_torch.harness import assert_to_torch, reloaded

L = keras.layers
ops = keras.ops


def _conv(x):
    return L.Conv2D(3, 1)(x)   # held NCHW


OPS = {
    "reverse": ((5, 6), lambda x: x[:, ::-1]),
    "negative-steps": ((5, 6), lambda x: [x[:, 4:1:-2, ::-3], x[..., -1:-5:-1],
                                          x[:, None, ::-1, 2], x[::-1, 1]]),
    "negative-steps-held-nchw": ((4, 5, 3), lambda x: [_conv(x)[:, ::-2, 1:, ::-1],
                                                       _conv(x)[..., 2::-1]]),
    "repeat-per-element": ((4, 3), lambda x: [ops.repeat(x, [1, 0, 2, 3], axis=1),
                                              ops.repeat(x, [2], axis=-1),
                                              ops.repeat(x, np.array([3, 1, 2]), axis=2)]),
    "repeat-per-element-held-nchw": ((4, 5, 3), lambda x: ops.repeat(_conv(x), [2, 0, 1],
                                                                     axis=-1)),
    "diff": ((5, 6), lambda x: [ops.diff(x), ops.diff(x, n=2, axis=1), ops.diff(x, n=0),
                                ops.diff(x > 0, axis=-1),
                                ops.diff(ops.cast(x * 1e9, "int32"), axis=1)]),
    "diff-held-nchw": ((4, 5, 3), lambda x: ops.diff(_conv(x), n=3, axis=2)),
    "einsum-implicit-empty-ellipsis": ((4, 5), lambda x: [
        ops.einsum("...bij,...bjk", x, ops.transpose(x, (0, 2, 1))),
        ops.einsum("...ij,jk", x[0], np.ones((5, 2), "float32"))]),
}


@pytest.mark.parametrize("shape, fn", OPS.values(), ids=OPS.keys())
def test_keras_ops(shape, fn):
    x = keras.Input(shape)
    assert_to_torch(keras.Model(x, fn(x)))


def test_negative_steps_match_python_at_every_bound():
    """Every start/stop (None, in range, out of range, negative) with steps -1..-3 on a dim
    of size 5 and on a dynamic dim at sizes 1..7: the mirrored forward slice is Python's."""
    bounds = [None, -9, -6, -5, -3, -1, 0, 1, 3, 4, 5, 9]
    keys = [slice(a, b, s) for a, b, s in itertools.product(bounds, bounds, (-1, -2, -3))]
    for static in (True, False):
        x = keras.Input((5 if static else None, 2))
        model = keras.Model(x, [x[:, key] for key in keys])
        net = crossport.to_torch(model, (torch.randn(2, 5, 2),))
        for size in ((5,) if static else (1, 2, 5, 7)):
            values = np.arange(2 * size * 2, dtype=np.float32).reshape(2, size, 2)
            want = model(values)
            with torch.no_grad():
                got = net(torch.from_numpy(values))
            for key, w, g in zip(keys, want, got):
                np.testing.assert_array_equal(g.numpy(), np.asarray(w), err_msg=str(key))
                np.testing.assert_array_equal(g.numpy(), values[:, key], err_msg=str(key))


def test_reverse_keeps_signed_zeros_and_nan():
    x = keras.Input((4,))
    model = keras.Model(x, x[:, ::-1])
    net = crossport.to_torch(model, (torch.randn(2, 4),))
    values = np.array([[np.nan, -0.0, np.inf, 0.0], [-np.inf, 1.0, -0.0, np.nan]], np.float32)
    with torch.no_grad():
        got = net(torch.from_numpy(values)).numpy()
    want = np.asarray(model(values))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("mode", ["reflect", "symmetric"])
def test_mirror_pad_along_a_run_time_dim(mode):
    """Flipped edge slices read the same at every size; a size TF's MirrorPad refuses
    (reflect: a pad >= n, symmetric: > n) is an error in the module too, not a short pad."""
    x = keras.Input((None, 3))
    model = keras.Model(x, ops.pad(x, ((0, 0), (2, 1), (1, 2)), mode=mode))
    conv = crossport.to_torch_with_report(model, (torch.randn(2, 4, 3),))
    smallest = 3 if mode == "reflect" else 2
    for size in (smallest, smallest + 1, 8):
        values = np.random.default_rng(size).standard_normal((2, size, 3)).astype(np.float32)
        with torch.no_grad():
            got = conv.module(torch.from_numpy(values)).numpy()
        np.testing.assert_array_equal(got, np.asarray(model(values)))
    values = np.zeros((2, smallest - 1, 3), np.float32)
    with pytest.raises(Exception, match="MirrorPad|padding"):
        model(values)
    with pytest.raises(AssertionError, match="need a size of at least"):
        conv.module(torch.from_numpy(values))


def test_per_element_repeat_along_a_run_time_dim_is_refused():
    """The output's size is the sum of the repeats only when the dim has len(repeats)
    elements; a dim of run-time size cannot promise it."""
    x = keras.Input((None, 3))
    model = keras.Model(x, ops.repeat(x, [1, 2, 0], axis=1))
    with pytest.raises(crossport.UnsupportedLayerError,
                       match="static size equal to the number of repeats"):
        crossport.to_torch(model, (torch.randn(2, 3, 3),))


def test_einsum_implicit_ellipsis_over_dims_is_refused():
    """An implicit output with '...' standing for dims: Keras' TF backend itself fails when
    the model runs (TF wants the ellipsis in the output), so there is nothing to match."""
    x = keras.Input((4, 5))
    model = keras.Model(x, ops.einsum("...ij,...jk", x, ops.transpose(x, (0, 2, 1))))
    with pytest.raises(Exception, match="ellipsis"):
        model(np.ones((2, 4, 5), np.float32))
    with pytest.raises(crossport.UnsupportedLayerError, match="fails on it at run time"):
        crossport.to_torch(model, (torch.randn(2, 4, 5),))


def test_new_indexing_ops_pickle_and_write_source(tmp_path):
    x = keras.Input((None, 4))
    outs = [x[:, ::-1], x[:, -2::-2, 1:3], ops.repeat(x, [0, 1, 2, 3], axis=-1),
            ops.diff(x, 2, axis=1), ops.pad(x, ((0, 0), (2, 1), (1, 1)), mode="reflect")]
    conv = crossport.to_torch_with_report(keras.Model(x, outs), (torch.randn(2, 5, 4),))
    loaded, written = reloaded(conv, tmp_path / "indexing_torch.py")
    for size in (5, 6):
        args = (torch.randn(3, size, 4),)
        with torch.no_grad():
            want = conv.module(*args)
            torch.testing.assert_close(loaded(*args), want, rtol=0, atol=0)
            torch.testing.assert_close(written.build_model()(*args), want, rtol=0, atol=0)
