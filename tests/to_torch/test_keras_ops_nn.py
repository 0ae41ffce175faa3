"""keras.ops.nn in functional graphs (and traced calls) -> torch: conv, depthwise_conv,
separable_conv, conv_transpose, the pools, batch_normalization, depth_to_space,
space_to_depth, multi_hot and sparsemax, on tensors held in Keras order and held NCHW, with
TF's asymmetric SAME padding, channels_first data, kernels computed in the graph, sizes known
only at run time and the special values (NaN, ±inf, ints) that decide a result."""

import keras
import numpy as np
import pytest
import torch

import crossport
from tests.to_torch.harness import assert_to_torch

L = keras.layers
ops = keras.ops


def _k(*shape):
    """A constant kernel seeded by its shape (float32: TF's conv takes no float64 kernel
    for float32 images)."""
    rng = np.random.default_rng(int(np.prod(shape)) * 7 + len(shape))
    return rng.standard_normal(shape).astype("float32")


def _conv(x):
    return L.Conv2D(3, 1)(x)   # held NCHW: the op sees the tensor channels-first already


class KernelCall(L.Layer):
    """A custom layer calling ``fn(x, self.kernel)``: traced into the keras.ops op, the
    kernel a variable read at run time (ops.conv_transpose runs only here: the functional
    ConvTranspose.call passes output_padding and padding swapped and fails)."""

    def __init__(self, fn, kernel_shape, **kwargs):
        super().__init__(**kwargs)
        self.fn, self.kernel_shape = fn, kernel_shape

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=self.kernel_shape, initializer="random_normal")

    def call(self, x):
        return self.fn(x, self.kernel)


def _traced(fn, kernel_shape):
    return lambda x: KernelCall(fn, kernel_shape)(x)


OPS = {
    # TF's SAME: 6 rows at stride 2 pad (0, 1); an even kernel pads (0, 1) at stride 1
    "conv-2d-valid": ((6, 7, 3), lambda x: ops.conv(x, _k(3, 2, 3, 4))),
    "conv-2d-same-strided": ((6, 7, 3), lambda x: ops.conv(x, _k(3, 3, 3, 4), strides=2,
                                                            padding="same")),
    "conv-2d-same-even-kernel": ((5, 6, 2), lambda x: ops.conv(x, _k(2, 4, 2, 3),
                                                               padding="same")),
    "conv-1d-same-dilated": ((9, 3), lambda x: ops.conv(x, _k(3, 3, 2), padding="same",
                                                        dilation_rate=2)),
    "conv-3d-same-strided": ((4, 5, 6, 2), lambda x: ops.conv(x, _k(2, 3, 3, 2, 3), strides=(
        1, 2, 2), padding="same")),
    "conv-channels-first": ((3, 6, 7), lambda x: ops.conv(x, _k(3, 3, 3, 4), strides=2,
                                                          padding="same",
                                                          data_format="channels_first")),
    "conv-held-nchw": ((6, 7, 2), lambda x: ops.conv(_conv(x), _k(3, 3, 3, 4), padding="same")),
    "conv-kernel-variable": ((6, 7, 3), _traced(lambda x, k: ops.conv(
        x, k, strides=2, padding="same"), (3, 3, 3, 4))),
    "depthwise-2d-same-strided": ((6, 7, 3), lambda x: ops.depthwise_conv(
        x, _k(3, 3, 3, 2), strides=2, padding="same")),
    "depthwise-1d": ((9, 3), lambda x: ops.depthwise_conv(x, _k(3, 3, 2), padding="same")),
    "depthwise-strided-dilated": ((9, 8, 3), lambda x: ops.depthwise_conv(
        x, _k(3, 2, 3, 1), strides=2, padding="same", dilation_rate=2)),
    "depthwise-1d-strided-dilated": ((10, 2), lambda x: ops.depthwise_conv(
        x, _k(3, 2, 2), strides=3, padding="same", dilation_rate=2)),
    "depthwise-channels-first": ((3, 6, 7), lambda x: ops.depthwise_conv(
        x, _k(3, 3, 3, 2), padding="same", data_format="channels_first")),
    "depthwise-kernel-variable": ((6, 7, 3), _traced(lambda x, k: ops.depthwise_conv(
        x, k, strides=2, padding="same"), (3, 3, 3, 2))),
    "separable-2d-same": ((6, 7, 3), lambda x: ops.separable_conv(
        x, _k(3, 3, 3, 2), _k(1, 1, 6, 4), strides=2, padding="same")),
    "separable-1d-dilated": ((9, 3), lambda x: ops.separable_conv(
        x, _k(3, 3, 1), _k(1, 3, 5), dilation_rate=2)),
    "separable-held-nchw": ((6, 7, 2), lambda x: ops.separable_conv(
        _conv(x), _k(2, 2, 3, 1), _k(1, 1, 3, 4), padding="same")),
    "conv-transpose-2d-same": ((5, 6, 3), _traced(lambda x, k: ops.conv_transpose(
        x, k, strides=2, padding="same"), (3, 3, 4, 3))),
    "conv-transpose-2d-valid": ((5, 6, 3), _traced(lambda x, k: ops.conv_transpose(
        x, k, strides=(2, 3)), (3, 2, 4, 3))),
    "conv-transpose-output-padding": ((5, 6, 3), _traced(lambda x, k: ops.conv_transpose(
        x, k, strides=3, padding="same", output_padding=(1, 2)), (4, 3, 2, 3))),
    "conv-transpose-1d-dilated": ((7, 3), _traced(lambda x, k: ops.conv_transpose(
        x, k, padding="same", dilation_rate=2), (3, 2, 3))),
    "conv-transpose-3d": ((3, 4, 3, 2), _traced(lambda x, k: ops.conv_transpose(
        x, k, strides=2, padding="same"), (2, 3, 3, 3, 2))),
    "conv-transpose-channels-first": ((3, 5, 6), _traced(lambda x, k: ops.conv_transpose(
        x, k, strides=2, padding="same", data_format="channels_first"), (3, 3, 2, 3))),
    "max-pool-2d-valid": ((6, 7, 3), lambda x: ops.max_pool(x, 2)),
    "max-pool-2d-same-strided": ((6, 7, 3), lambda x: ops.max_pool(x, 3, 2, padding="same")),
    "max-pool-1d-same": ((7, 3), lambda x: ops.max_pool(x, 2, padding="same")),
    "max-pool-3d": ((4, 5, 6, 2), lambda x: ops.max_pool(x, (2, 2, 3), padding="same")),
    "max-pool-channels-first": ((3, 6, 7), lambda x: ops.max_pool(
        x, 2, padding="same", data_format="channels_first")),
    "max-pool-held-nchw": ((6, 7, 2), lambda x: ops.max_pool(_conv(x), (2, 3), 1)),
    "avg-pool-2d-same-strided": ((6, 7, 3), lambda x: ops.average_pool(x, 3, 2,
                                                                       padding="same")),
    "avg-pool-1d-valid": ((7, 3), lambda x: ops.average_pool(x, 3, 2)),
    "avg-pool-3d-same": ((4, 5, 6, 2), lambda x: ops.average_pool(x, 2, padding="same")),
    "avg-pool-channels-first": ((3, 6, 7), lambda x: ops.average_pool(
        x, (2, 3), padding="same", data_format="channels_first")),
    "adaptive-avg-2d": ((7, 9, 3), lambda x: ops.adaptive_average_pool(x, (3, 4))),
    "adaptive-avg-1d-channels-first": ((3, 10), lambda x: ops.adaptive_average_pool(
        x, (4,), data_format="channels_first")),
    "adaptive-max-2d-held-nchw": ((7, 9, 2), lambda x: ops.adaptive_max_pool(_conv(x), (3, 3))),
    "adaptive-max-3d": ((5, 6, 7, 2), lambda x: ops.adaptive_max_pool(x, (2, 3, 4))),
    "batch-norm-last-axis": ((4, 5, 3), lambda x: ops.batch_normalization(
        x, _k(3), np.abs(_k(3)), -1, offset=_k(3), scale=_k(3))),
    "batch-norm-held-nchw": ((4, 5, 2), lambda x: ops.batch_normalization(
        _conv(x), _k(3), np.abs(_k(3)), 3, epsilon=0.1)),
    "batch-norm-axis-1-scale-only": ((4, 5), lambda x: ops.batch_normalization(
        x, _k(4), np.abs(_k(4)), 1, scale=_k(4))),
    "batch-norm-statistics-from-graph": ((4, 5, 3), lambda x: ops.batch_normalization(
        x, ops.mean(x, axis=(0, 1, 2)), ops.var(x, axis=(0, 1, 2)), -1,
        offset=ops.max(x, axis=(0, 1, 2)), scale=ops.min(x, axis=(0, 1, 2)))),
    "depth-to-space": ((3, 4, 8), lambda x: ops.depth_to_space(x, 2)),
    "depth-to-space-channels-first": ((18, 2, 3), lambda x: ops.depth_to_space(
        x, 3, data_format="channels_first")),
    "depth-to-space-held-nchw": ((3, 4, 2), lambda x: ops.depth_to_space(
        ops.concatenate([_conv(x), _conv(x) * 2.0], axis=-1)[..., :4], 2)),
    "space-to-depth": ((4, 6, 3), lambda x: ops.space_to_depth(x, 2)),
    "space-to-depth-channels-first": ((2, 6, 9), lambda x: ops.space_to_depth(
        x, 3, data_format="channels_first")),
    "space-to-depth-held-nchw": ((4, 6, 2), lambda x: ops.space_to_depth(_conv(x), 2)),
    "depth-space-round-trip": ((4, 6, 3), lambda x: ops.depth_to_space(
        ops.space_to_depth(x, 2), 2) - x),
    "sparsemax-last": ((4, 6), lambda x: ops.sparsemax(x * 3.0)),
    "sparsemax-axis-1": ((4, 6), lambda x: ops.sparsemax(x * 2.0, axis=1)),
    "sparsemax-held-nchw": ((4, 5, 2), lambda x: ops.sparsemax(_conv(x) * 2.0, axis=1)),
}


@pytest.mark.parametrize("shape, fn", OPS.values(), ids=OPS.keys())
def test_keras_ops_nn(shape, fn):
    x = keras.Input(shape)
    assert_to_torch(keras.Model(x, fn(x)))


def test_conv_kernel_computed_in_the_graph():
    """A kernel that is a tensor of the graph (here the batch mean of a second input),
    permuted to torch's weight at run time; the images held NCHW by a conv before."""
    x, w = keras.Input((6, 7, 2)), keras.Input((3, 3, 3, 4))
    kernel = ops.mean(w, axis=0)
    model = keras.Model([x, w], [ops.conv(_conv(x), kernel, strides=2, padding="same"),
                                 ops.depthwise_conv(x, kernel[:, :, :2, :2], padding="same")])
    assert_to_torch(model)


def test_integer_ops():
    """Integer tensors: max_pool (TF pads SAME with the dtype's lowest value) and the
    rearrangements keep int32; multi_hot makes the op's dtype (Keras declares the input's),
    an index outside [0, num_classes) hitting no class."""
    x = keras.Input((5, 6, 4), dtype="int32")
    ids = keras.Input((7,), dtype="int32")
    model = keras.Model([x, ids], [
        ops.max_pool(x - 5, 2, padding="same"), ops.max_pool(x, (3, 2), (2, 1)),
        ops.depth_to_space(x, 2), ops.space_to_depth(x[:, :4], 2),
        ops.multi_hot(ids - 2, 5), ops.multi_hot(ids, 6, dtype="bool"),
        ops.multi_hot(ids - 3, 4, dtype="int32"), ops.multi_hot(ops.expand_dims(ids, 1), 8,
                                                                axis=1)])
    assert_to_torch(model, int_high=9, live=False)


def _compare(model, net, values):
    want = [np.asarray(w) for w in keras.tree.flatten(model(values))]
    with torch.no_grad():
        got = [g.numpy() for g in keras.tree.flatten(net(torch.from_numpy(values)))]
    for w, g in zip(want, got):
        assert w.dtype == g.dtype
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(np.isposinf(g), np.isposinf(w))
        np.testing.assert_array_equal(np.isneginf(g), np.isneginf(w))
        finite = np.isfinite(w)
        np.testing.assert_allclose(g[finite], w[finite], rtol=1e-5, atol=1e-5)


def test_pools_and_convs_with_nan_and_infinities():
    """TF's max pool skips NaN (a window of NaN / -inf alone is the lowest finite value);
    the average pool, the convs and batch_normalization spread NaN and ±inf as TF does."""
    x = keras.Input((6, 7, 2))
    model = keras.Model(x, [
        ops.max_pool(x, 2, padding="same"), ops.max_pool(x, 3, 2, padding="same"),
        ops.average_pool(x, 3, 2, padding="same"), ops.adaptive_max_pool(x, (3, 4)),
        ops.conv(x, _k(2, 2, 2, 3), padding="same"),
        ops.depthwise_conv(x, _k(3, 3, 2, 1), strides=2, padding="same"),
        ops.batch_normalization(x, _k(2), np.abs(_k(2)), -1, offset=_k(2), scale=_k(2))])
    net = crossport.to_torch(model, (torch.randn(2, 6, 7, 2),))
    rng = np.random.default_rng(1)
    values = rng.standard_normal((4, 6, 7, 2)).astype("float32")
    values[rng.random(values.shape) < 0.1] = np.nan
    values[rng.random(values.shape) < 0.1] = np.inf
    values[rng.random(values.shape) < 0.1] = -np.inf
    values[3, :3, :3] = np.nan   # whole windows of NaN
    values[2, :2, :2] = -np.inf
    _compare(model, net, values)


def test_sparsemax_with_infinities_ties_and_nan_rows():
    """Rows with ±inf and ties match TF (an +inf makes the row +inf, a -inf is 0); a row
    holding NaN is NaN in the module (TF's result there is what its sort kernel leaves)."""
    x = keras.Input((6,))
    model = keras.Model(x, ops.sparsemax(x))
    net = crossport.to_torch(model, (torch.randn(2, 6),))
    values = np.array([[np.inf, 1, 0, 0, 2, 2], [-np.inf, 1, 0, 2, 2, -1],
                       [1, 1, 1, 1, 1, 1], [-np.inf] * 5 + [0.0], [3, -np.inf, 3, 0, 0, 1],
                       [0.5, 0.25, 0.25, 0.0, -0.0, 0.1]], np.float32)
    _compare(model, net, values)
    with_nan = values.copy()
    with_nan[:, 2] = np.nan
    with torch.no_grad():
        assert torch.isnan(net(torch.from_numpy(with_nan))).all()


def test_conv_and_pools_at_sizes_known_at_run_time():
    """Spatial sizes None in the graph: TF's SAME pads at stride 2 are read off ``x.size``
    when the module runs (0 before and 1 after at an even size, 1 and 1 at an odd one)."""
    x = keras.Input((None, None, 3))
    model = keras.Model(x, [ops.conv(x, _k(3, 3, 3, 4), strides=2, padding="same"),
                            ops.conv(x, _k(1, 2, 3, 2), strides=3, padding="same"),
                            ops.depthwise_conv(x, _k(4, 4, 3, 1), strides=2, padding="same"),
                            ops.max_pool(x, 3, 2, padding="same")])
    conv = crossport.to_torch_with_report(model, (torch.randn(2, 6, 7, 3),))
    assert len(conv.report.shapes) == 2, conv.report.summary()  # a second size was checked
    rng = np.random.default_rng(2)
    for shape in [(1, 5, 8, 3), (2, 9, 4, 3), (1, 1, 2, 3)]:
        values = rng.standard_normal(shape).astype("float32")
        with torch.no_grad():
            got = conv.module(torch.from_numpy(values))
        for w, g in zip(model(values), got):
            np.testing.assert_allclose(g.numpy(), np.asarray(w), rtol=1e-5, atol=1e-5)


def _refusal(model, example, match):
    with pytest.raises(crossport.UnsupportedLayerError, match=match):
        crossport.to_torch(model, example)


def test_polar_is_refused_by_name():
    """polar makes complex64 numbers (Keras declares float32)."""
    x = keras.Input((4,))
    _refusal(keras.Model(x, ops.polar(x, x)), (torch.randn(2, 4),), "complex")


def test_strided_dilated_conv_is_refused_by_name():
    """Keras' TF backend fails on strides > 1 with dilation > 1: nothing to match."""
    x = keras.Input((9, 9, 2))
    model = keras.Model(x, ops.conv(x, _k(3, 3, 2, 2), strides=2, dilation_rate=2))
    _refusal(model, (torch.randn(2, 9, 9, 2),), "dilation")


def test_adaptive_max_pool_to_size_one_is_refused_by_name():
    """TF's adaptive max pool kernel crashes the process on an output size of 1."""
    x = keras.Input((6, 6, 2))
    _refusal(keras.Model(x, ops.adaptive_max_pool(x, (1, 3))), (torch.randn(2, 6, 6, 2),),
             "crashes")


def test_sparse_multi_hot_is_refused_by_name():
    ids = keras.Input((4,), dtype="int32")
    _refusal(keras.Model(ids, ops.multi_hot(ids, 5, sparse=True)),
             (torch.zeros(2, 4, dtype=torch.int32),), "sparse")
