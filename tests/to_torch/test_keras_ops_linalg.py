"""keras.ops norm, normalize, dot, tensordot, median, moments, ptp, amax/amin -> torch, on
tensors held in Keras order and permuted (a conv output held NCHW), and the special values
where Keras' TF formulas differ from torch's own kernels (median's ``-inf * 0``, a zero
vector under normalize, NaN counted by ord=0)."""


import keras
import numpy as np
import pytest
import torch

import crossport
from tests.to_torch.harness import assert_to_torch, reloaded

L = keras.layers
ops = keras.ops
INF = float("inf")


def _conv(x):
    return L.Conv2D(3, 1)(x)   # held NCHW: the op's Keras axes are remapped


MATRIX_ORDS = (None, "fro", 1, -1, INF, -INF, "nuc", 2, -2)
VECTOR_ORDS = (None, 2, INF, -INF, 0, 1, -1, 3, 0.5)

OPS = {
    "norm-vector-ords": ((5, 6), lambda x: [ops.norm(x, ord=o, axis=-1) for o in VECTOR_ORDS]),
    "norm-vector-keepdims-held-nchw": ((4, 5, 3), lambda x: [
        ops.norm(_conv(x), axis=-1, keepdims=True), ops.norm(_conv(x), ord=3, axis=1)]),
    "norm-matrix-ords": ((5, 6), lambda x: [ops.norm(x, ord=o, axis=(1, 2))
                                            for o in MATRIX_ORDS]),
    "norm-matrix-keepdims": ((5, 6), lambda x: [ops.norm(x, ord=o, axis=(1, 2), keepdims=True)
                                                for o in MATRIX_ORDS]),
    "norm-matrix-held-nchw": ((4, 5, 3), lambda x: [
        ops.norm(_conv(x), ord=o, axis=(-1, 1)) for o in (1, INF, "fro", "nuc")]),
    "norm-axis-none": ((6,), lambda x: [ops.norm(x), ops.norm(x, ord=1)]),
    "norm-of-ints": ((6,), lambda x: ops.norm(ops.cast(x * 4.0, "int32"), ord=1, axis=-1)),
    "normalize": ((4, 5, 3), lambda x: [
        ops.normalize(_conv(x)), ops.normalize(x, axis=1, order=1),
        ops.normalize(x, axis=(1, 2), epsilon=0.5), ops.normalize(_conv(x), order=3,
                                                                   epsilon=1e-3)]),
    "dot": ((5, 6), lambda x: [
        ops.dot(x, np.linspace(-1, 1, 18, dtype="float32").reshape(6, 3)),
        ops.dot(x, np.linspace(0, 1, 6, dtype="float32")),
        ops.dot(x, np.arange(24, dtype="float32").reshape(2, 6, 2) / 10),
        ops.dot(x, np.float32(1.5))]),
    "dot-of-ints": ((6,), lambda x: ops.dot(ops.cast(x * 4.0, "int32"),
                                            np.arange(18, dtype="int32").reshape(6, 3))),
    "tensordot": ((5, 6), lambda x: [
        ops.tensordot(x, np.linspace(-1, 1, 60, dtype="float32").reshape(5, 6, 2), axes=2),
        ops.tensordot(x, np.ones((6, 3), "float32"), axes=1),
        ops.tensordot(_t(x), np.linspace(0, 1, 15, dtype="float32").reshape(3, 5),
                      axes=([2], [1])),
        ops.tensordot(x, np.linspace(0, 1, 30, dtype="float32").reshape(6, 5),
                      axes=[[1, 2], [1, 0]]),
        ops.tensordot(x, x, axes=([0], [0]))]),
    "median": ((5, 6), lambda x: [ops.median(x, axis=-1), ops.median(x, axis=1, keepdims=True),
                                  ops.median(x, axis=(1, 2)), ops.median(x),
                                  ops.median(x, keepdims=True)]),
    "median-held-nchw": ((4, 5, 3), lambda x: [ops.median(_conv(x), axis=-1),
                                               ops.median(_conv(x), axis=(1, 3), keepdims=True)]),
    "median-of-ints": ((6,), lambda x: ops.median(ops.cast(x * 4.0, "int32"), axis=-1)),
    "moments-ptp-amax": ((4, 5, 3), lambda x: [
        *ops.moments(_conv(x), axes=[1, 2]), *ops.moments(x, axes=[-1], keepdims=True),
        ops.ptp(_conv(x), axis=-1), ops.amax(_conv(x), axis=(1, 2)),
        ops.amin(x, axis=-1, keepdims=True)]),
}


def _t(x):
    return ops.transpose(x, (0, 2, 1))


@pytest.mark.parametrize("shape, fn", OPS.values(), ids=OPS.keys())
def test_keras_ops(shape, fn):
    x = keras.Input(shape)
    assert_to_torch(keras.Model(x, fn(x)))


def test_held_layout_needs_no_permute():
    """Vector norms, normalize, median and moments run at the held axes of an NCHW block."""
    x = keras.Input((4, 5, 3))
    a = _conv(x)
    outs = [ops.norm(a, axis=-1), ops.normalize(a), ops.median(a, axis=(1, 2)),
            ops.moments(a, axes=[1, 2])[1]]
    assert_to_torch(keras.Model(x, outs), max_permutes=0)


def _run(model, net, values):
    want = [np.asarray(w) for w in keras.tree.flatten(model(values))]
    with torch.no_grad():
        got = [g.numpy() for g in keras.tree.flatten(net(torch.from_numpy(values)))]
    return want, got


def _assert_special(model, net, values, rtol=1e-5):
    want, got = _run(model, net, values)
    assert len(want) == len(got)
    for i, (w, g) in enumerate(zip(want, got)):
        assert w.shape == g.shape and w.dtype == g.dtype, (i, w.shape, g.shape)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"output {i}")
        np.testing.assert_array_equal(np.isposinf(g), np.isposinf(w), err_msg=f"output {i}")
        np.testing.assert_array_equal(np.isneginf(g), np.isneginf(w), err_msg=f"output {i}")
        finite = np.isfinite(w)
        np.testing.assert_allclose(g[finite], w[finite], rtol=rtol, atol=1e-5,
                                   err_msg=f"output {i}")


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.0, 0.5], np.float32)


def _special(shape, seed, nan_rate=0.1):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape).astype(np.float32)
    mask = rng.random(shape) < 0.4
    values[mask] = rng.choice(SPECIAL[1:], size=int(mask.sum()))
    values[rng.random(shape) < nan_rate] = np.nan
    return values


@pytest.mark.parametrize("seed", [0, 1])
def test_norms_with_special_values(seed):
    """ord=0 counts NaN as non-zero, ±inf norms take |x|, p-norms of 0 with p < 0 are 0 (the
    sum is inf), a NaN anywhere in a slice makes its norm NaN; rows of zeros included."""
    x = keras.Input((7,))
    outs = [ops.norm(x, ord=o, axis=-1) for o in VECTOR_ORDS]
    outs += [ops.norm(ops.reshape(x[:, :6], (-1, 2, 3)), ord=o, axis=(1, 2))
             for o in (None, 1, -1, INF, -INF)]
    outs += [ops.norm(ops.reshape(x[:, :6], (-1, 2, 3)), ord=o, axis=(1, 2))
             for o in ("nuc", 2, -2)]   # TF's SVD gives NaN for non-finite matrices
    model = keras.Model(x, outs)
    net = crossport.to_torch(model, (torch.randn(2, 7),))
    values = _special((40, 7), seed)
    values[0] = 0.0
    values[1] = -0.0
    _assert_special(model, net, values)


def test_normalize_epsilon_semantics():
    """order 2 is ``x * min(rsqrt(sum x^2), 1/eps)``: a zero row stays zeros (not NaN), a tiny
    row is scaled by 1/eps, NaN propagates through the minimum; other orders divide by
    ``max(norm, eps)``; ``epsilon=None`` is ``keras.config.epsilon()``."""
    x = keras.Input((5,))
    model = keras.Model(x, [ops.normalize(x), ops.normalize(x, epsilon=1e-2),
                            ops.normalize(x, order=1, epsilon=0.5), ops.normalize(x, order=3)])
    net = crossport.to_torch(model, (torch.randn(2, 5),))
    values = _special((30, 5), 2)
    values[0] = 0.0
    values[1] = 1e-9
    values[2] = np.array([1e-3, -1e-3, 0.0, 0.0, 2e-3], np.float32)
    values[3, :] = 3.0
    _assert_special(model, net, values)


def test_median_special_values_and_sizes():
    """Keras' linear quantile multiplies the lower neighbour by 0 for an odd count:
    ``median([-inf, 0, 1])`` is NaN in Keras (torch.median would say 0), ``[-inf, -inf,
    inf, inf]`` is NaN, a NaN anywhere gives NaN; odd and even counts, one element."""
    x = keras.Input((5, 4))
    model = keras.Model(x, [ops.median(x, axis=1), ops.median(x, axis=-1),
                            ops.median(x[:, :1], axis=1), ops.median(x, axis=(1, 2))])
    net = crossport.to_torch(model, (torch.randn(2, 5, 4),))
    for seed in (3, 4):
        _assert_special(model, net, _special((12, 5, 4), seed, nan_rate=0.02))
    rows = np.zeros((2, 5, 4), np.float32)
    rows[0, :, 0] = [-np.inf, 0.0, 1.0, 2.0, 3.0]
    rows[0, :, 1] = [-np.inf, -np.inf, 0.0, 1.0, 2.0]   # s[lo] * 0 with s[lo] = -inf
    rows[0, 0, :] = [-np.inf, -np.inf, np.inf, np.inf]
    rows[1] = np.inf
    _assert_special(model, net, rows)


@pytest.mark.parametrize("batch", [1, 2, 3, 4])
def test_median_over_the_batch_at_every_size(batch):
    """axis=None counts the batch: the count (odd or even) is read at run time."""
    x = keras.Input((3,))
    model = keras.Model(x, [ops.median(x), ops.median(x, axis=0, keepdims=True)])
    net = crossport.to_torch(model, (torch.randn(2, 3),))
    values = np.random.default_rng(batch).standard_normal((batch, 3)).astype(np.float32)
    _assert_special(model, net, values)


def test_integer_tensordot_stays_integer():
    """tf.tensordot computes int32 in int32 (exact), dot in float32 then casts back."""
    x = keras.Input((4, 3), dtype="int32")
    kernel = np.arange(-6, 6, dtype="int32").reshape(3, 4)
    model = keras.Model(x, [ops.tensordot(x, kernel, axes=1), ops.dot(x, kernel)])
    assert_to_torch(model, live=False, int_high=1000)


def test_norm_keepdims_with_negative_axes_is_refused():
    """Keras' TF backend re-inserts the SVD norms' kept dims at the raw (negative) axes of
    the reduced tensor: its output differs from its own declared shape."""
    x = keras.Input((3, 4))
    model = keras.Model(x, ops.norm(x, ord="nuc", axis=(-2, -1), keepdims=True))
    assert np.asarray(model(np.ones((2, 3, 4), np.float32))).shape != (2, 1, 1)
    with pytest.raises(crossport.UnsupportedLayerError, match="non-negative and ascending"):
        crossport.to_torch(model, (torch.randn(2, 3, 4),))


def test_new_linalg_ops_pickle_and_write_source(tmp_path):
    """The converted graph holds torch functions only (no lambda): it pickles, and its
    generated source rebuilds the same module, the run-time median count included."""
    x = keras.Input((6, 4))
    outs = [ops.norm(x, ord=o, axis=-1) for o in VECTOR_ORDS]
    outs += [ops.norm(x, ord="nuc", axis=(1, 2)), ops.normalize(x, axis=1),
             ops.dot(x, np.ones((4, 2), "float32")), ops.tensordot(x, x, axes=([0], [0])),
             ops.median(x, axis=1), ops.median(x), *ops.moments(x, axes=[1]), ops.ptp(x, 1)]
    conv = assert_to_torch(keras.Model(x, outs))
    loaded, written = reloaded(conv, tmp_path / "linalg_torch.py")
    for batch in (3, 4):
        args = (torch.randn(batch, 6, 4),)
        with torch.no_grad():
            want = conv.module(*args)
            torch.testing.assert_close(loaded(*args), want, rtol=0, atol=0, equal_nan=True)
            torch.testing.assert_close(written.build_model()(*args), want, rtol=0, atol=0,
                                       equal_nan=True)
