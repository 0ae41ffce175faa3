"""keras.ops in functional graphs -> torch: einsum, take, take_along_axis, sort, argsort,
top_k, stack, log_softmax, logsumexp and the concatenate family, on tensors held in Keras
order and permuted (a conv output held NCHW, a transposed tensor), and the special values
(±inf, ±0, ties, NaN) that decide an order."""

import keras
import numpy as np
import pytest
import torch

import crossport
from tests.to_torch.harness import assert_to_torch, load_written, reloaded

L = keras.layers
ops = keras.ops


def _conv(x):
    return L.Conv2D(3, 1)(x)   # held NCHW: the op's Keras axes are remapped


def _t(x):
    return ops.transpose(x, (0, 2, 1))   # a relabelled layout: held permuted


OPS = {
    "einsum-attention": ((5, 6), lambda x: ops.einsum("btc,bsc->bts", x, x)),
    "einsum-conv-held-nchw": ((4, 5, 2), lambda x: ops.einsum("bhwc,bhwd->bcd", _conv(x),
                                                              _conv(x))),
    "einsum-ellipsis": ((3, 5, 6), lambda x: ops.einsum("...c,...d->...cd", x, x[:, :1])),
    "einsum-ellipsis-ranks": ((3, 5, 6), lambda x: ops.einsum(
        "...c,...c->...", _conv(x), np.linspace(-1, 1, 15, dtype="float32").reshape(5, 3))),
    "einsum-implicit-renamed": ((5, 6), lambda x: ops.einsum("bcd,bce", x, x)),
    "einsum-numpy-operand": ((5, 6), lambda x: ops.einsum(
        "btc,cd->btd", _t(_t(x)), np.arange(24, dtype="float32").reshape(6, 4) / 10)),
    "take-axis-held-nchw": ((4, 5, 3), lambda x: ops.take(_conv(x), np.array([2, 0, -1, 2]),
                                                          axis=-1)),
    "take-scalar": ((4, 5, 3), lambda x: ops.take(_conv(x), -2, axis=1)),
    "take-2d-indices": ((5, 6), lambda x: ops.take(x, np.array([[0, -1], [3, 1]]), axis=2)),
    "take-flat": ((5, 6), lambda x: ops.take(x, np.array([3, -1, 7]))),
    "take-along-argsort": ((5, 6), lambda x: ops.take_along_axis(x, ops.argsort(x, axis=1),
                                                                 axis=1)),
    "take-along-transposed": ((5, 6), lambda x: ops.take_along_axis(
        _t(x), ops.argsort(-_t(x), axis=-1)[:, :, :2], axis=-1)),
    "take-along-negative-numpy": ((5, 6), lambda x: ops.take_along_axis(
        x, np.array([[[-1], [0], [-6], [2], [5]]]), axis=2)),
    "sort-axis-1": ((5, 6), lambda x: ops.sort(x, axis=1)),
    "sort-held-nchw": ((4, 5, 3), lambda x: ops.sort(_conv(x), axis=-1)),
    "sort-flat": ((5, 6), lambda x: ops.sort(x, axis=None)),
    "argsort-transposed": ((5, 6), lambda x: ops.argsort(_t(x), axis=1)),
    "top-k": ((5, 6), lambda x: list(ops.top_k(x, 3))),
    "top-k-held-nchw": ((4, 5, 3), lambda x: list(ops.top_k(_conv(x), 2))),
    "top-k-unsorted-all": ((5, 6), lambda x: list(ops.top_k(x, 6, sorted=False))),
    "stack-axis-1": ((5, 6), lambda x: ops.stack([x, x * 2.0, x - 1.0], axis=1)),
    "stack-held-nchw": ((4, 5, 3), lambda x: ops.stack([_conv(x), _conv(x)], axis=-1)),
    "stack-int-and-float": ((5, 6), lambda x: ops.stack([ops.cast(x > 0, "int32"), x])),
    "log-softmax": ((5, 6), lambda x: ops.log_softmax(x, axis=1)),
    "log-softmax-held-nchw": ((4, 5, 3), lambda x: ops.log_softmax(_conv(x))),
    "log-softmax-all": ((5, 6), lambda x: ops.log_softmax(x, axis=None)),
    "logsumexp": ((5, 6), lambda x: ops.logsumexp(x, axis=1)),
    "logsumexp-keepdims-nchw": ((4, 5, 3), lambda x: ops.logsumexp(_conv(x), axis=(1, 2),
                                                                   keepdims=True)),
    "append-flat": ((5, 6), lambda x: ops.append(x, x * 2.0)),
    "append-axis": ((4, 5, 3), lambda x: ops.append(_conv(x), _conv(x), axis=1)),
    "hstack": ((5, 6), lambda x: ops.hstack([x, _t(_t(x))])),
    "vstack": ((5, 6), lambda x: ops.vstack([x, x + 1.0])),
    "getitem-int": ((5, 6), lambda x: x[:, -1] + x[:, 0]),
    "getitem-slices-held-nchw": ((4, 5, 3), lambda x: _conv(x)[:, 1:100, -4:, 0]),
    "getitem-ellipsis-step": ((4, 5, 3), lambda x: _conv(x)[..., ::2, 1:]),
    "getitem-newaxis": ((5, 6), lambda x: x[:, None, 2:, ..., None]),
    # keras.ops.image.resize: TFResize, as the Resizing layer ("no converter" before)
    "image-resize-bilinear-nearest": ((5, 7, 2), lambda x: (
        ops.image.resize(x, (9, 4)), ops.image.resize(x, (10, 14), interpolation="nearest"))),
    "image-resize-aspect-ratio-area": ((6, 9, 2), lambda x: (
        ops.image.resize(x, (4, 4), interpolation="bicubic", crop_to_aspect_ratio=True),
        ops.image.resize(x, (5, 5), pad_to_aspect_ratio=True, fill_value=2.0),
        ops.image.resize(x, (3, 4), interpolation="area", antialias=True))),
    "image-resize-channels-first": ((2, 6, 9), lambda x: ops.image.resize(
        x, (4, 5), data_format="channels_first")),
    "image-resize-held-nchw": ((4, 5, 3), lambda x: ops.image.resize(_conv(x), (7, 3))),
}


@pytest.mark.parametrize("shape, fn", OPS.values(), ids=OPS.keys())
def test_keras_ops(shape, fn):
    x = keras.Input(shape)
    assert_to_torch(keras.Model(x, fn(x)))


def test_take_with_indices_from_the_graph():
    """Indices as an int32 model input: negative ones count from the end."""
    x, ids = keras.Input((5, 6)), keras.Input((3,), dtype="int32")
    model = keras.Model([x, ids], [ops.take(x, ids - 3, axis=1), ops.take(x, ids)])
    assert_to_torch(model, int_high=5)


def test_integer_einsum_keeps_keras_dtype():
    x = keras.Input((4, 5), dtype="int32")
    assert_to_torch(keras.Model(x, ops.einsum("bij,bkj->bik", x, x)), live=False)


def test_integer_sort_extremes():
    x = keras.Input((6,), dtype="int32")
    model = keras.Model(x, [ops.sort(x), ops.argsort(x), *ops.top_k(x, 4)])
    net = crossport.to_torch(model, (torch.randint(-9, 9, (2, 6), dtype=torch.int32),))
    info = np.iinfo(np.int32)
    values = np.array([[info.min, info.max, 0, info.min, 5, info.max],
                       [3, 3, -1, 3, info.min, 0]], np.int32)
    _assert_same(model, net, values)


SPECIAL = np.array([-np.inf, np.inf, -0.0, 0.0, 1.0, -1.0, 2.0], np.float32)


def _special(shape, seed, nan=False):
    rng = np.random.default_rng(seed)
    values = rng.choice(SPECIAL, size=shape)
    if nan:
        values[rng.random(shape) < 0.2] = np.nan
    return values.astype(np.float32)


def _order_model():
    """sort / argsort / top_k on the Keras-ordered tensor and on a permuted one."""
    x = keras.Input((7, 9))
    outs = [ops.sort(x), ops.argsort(x), *ops.top_k(x, 4), ops.sort(x, axis=1),
            ops.argsort(x, axis=1), ops.sort(_t(x), axis=1), ops.argsort(_t(x), axis=1),
            *ops.top_k(_t(x), 7), ops.argsort(x, axis=None)]
    return keras.Model(x, outs)


def _run(model, net, values):
    want = [np.asarray(w) for w in keras.tree.flatten(model(values))]
    with torch.no_grad():
        got = [g.numpy() for g in keras.tree.flatten(net(torch.from_numpy(values)))]
    return want, got


def _assert_same(model, net, values):
    want, got = _run(model, net, values)
    for w, g in zip(want, got):
        assert w.dtype == g.dtype
        np.testing.assert_array_equal(g, w)   # NaN positions too
        if w.dtype.kind == "f":   # -0.0 and 0.0 are ties: which one lands where is order
            np.testing.assert_array_equal(np.signbit(g), np.signbit(w))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_order_with_inf_signed_zeros_and_ties(seed):
    """TF breaks ties (-0.0 == 0.0 included) by the lower index and orders ±inf as values:
    the stable sort gives the same values, signs of zeros and indices."""
    model = _order_model()
    net = crossport.to_torch(model, (torch.randn(2, 7, 9),))
    _assert_same(model, net, _special((3, 7, 9), seed))


def test_order_of_rows_with_nan():
    """NaN fails TF's comparisons both ways, so a row holding NaN comes out in an order its
    kernel's steps leave (the module puts NaN where torch does): rows without NaN match
    exactly, rows with NaN hold the same values and their indices are a permutation."""
    x = keras.Input((9,))
    model = keras.Model(x, [ops.sort(x), ops.argsort(x), *ops.top_k(x, 9)])
    net = crossport.to_torch(model, (torch.randn(2, 9),))
    values = _special((40, 9), 3, nan=True)
    clean = ~np.isnan(values).any(axis=1)
    assert clean.any() and not clean.all()
    want, got = _run(model, net, values)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g[clean], w[clean])
        if w.dtype.kind == "f":
            np.testing.assert_array_equal(np.sort(g, axis=1), np.sort(w, axis=1))
        else:
            np.testing.assert_array_equal(np.sort(g, axis=1), np.sort(w, axis=1))
            np.testing.assert_array_equal(np.sort(g, axis=1), np.broadcast_to(np.arange(9),
                                                                              g.shape))


def test_softmax_family_with_infinities():
    """-inf logits get log-probability -inf, an all -inf row or a +inf logit makes the row
    NaN; logsumexp shifts by the finite max only, as TF's reduce_logsumexp (softmax is not
    here: TF's own result for a +inf logit depends on TF_ENABLE_ONEDNN_OPTS)."""
    x = keras.Input((6,))
    model = keras.Model(x, [ops.log_softmax(x), ops.logsumexp(x, axis=-1),
                            ops.logsumexp(x, axis=-1, keepdims=True)])
    net = crossport.to_torch(model, (torch.randn(2, 6),))
    values = _special((30, 6), 4) * np.float32(3.0)
    values[0] = -np.inf
    values[1] = np.inf
    values[2, :3] = np.array([np.inf, -np.inf, 1.0], np.float32)
    want, got = _run(model, net, values)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(np.isinf(g) & (g > 0), np.isinf(w) & (w > 0))
        np.testing.assert_array_equal(np.isinf(g) & (g < 0), np.isinf(w) & (w < 0))
        finite = np.isfinite(w)
        np.testing.assert_allclose(g[finite], w[finite], rtol=1e-5, atol=1e-5)


def test_image_resize_of_an_unbatched_image_is_refused():
    x = keras.Input((5, 7, 2), batch_size=None)
    model = keras.Model(x, keras.layers.Lambda(lambda t: ops.image.resize(t[0], (3, 3)))(x))
    with pytest.raises(crossport.UnsupportedLayerError, match="unbatched image"):
        crossport.to_torch(model, (np.zeros((1, 5, 7, 2), "float32"),))


def test_top_k_unsorted_is_refused():
    """TF's sorted=False order is what its selection kernel leaves: not reproduced."""
    x = keras.Input((6,))
    model = keras.Model(x, ops.top_k(x, 3, sorted=False)[0])
    with pytest.raises(crossport.UnsupportedLayerError, match="sorted=False"):
        crossport.to_torch(model, (torch.randn(2, 6),))


def test_log_softmax_over_several_axes_is_refused():
    x = keras.Input((4, 5, 3))
    model = keras.Model(x, ops.log_softmax(x, axis=(1, 2)))
    with pytest.raises(crossport.UnsupportedLayerError, match="log_softmax over axes"):
        crossport.to_torch(model, (torch.randn(2, 4, 5, 3),))


def test_new_ops_export_and_write_source(tmp_path):
    """The module exports with torch.export and its generated source rebuilds it exactly."""

    x, ids = keras.Input((5, 6)), keras.Input((3,), dtype="int32")
    y = ops.einsum("btc,bsc->bts", x, x)
    values, indices = ops.top_k(ops.sort(y, axis=1), 2)
    out = ops.stack([ops.take(x, ids), ops.take_along_axis(
        x[:, :, 1], ops.argsort(x[:, :, 2]), axis=1)[:, :3]], axis=-1)
    model = keras.Model([x, ids], [values, indices, out, ops.log_softmax(y, axis=1),
                                   ops.cumprod(y, axis=1), ops.cumsum(x)])
    conv = assert_to_torch(model, int_high=5, export=True)
    path = crossport.to_torch_source(conv, tmp_path / "model_torch.py")
    written = load_written(path)
    args = (torch.randn(3, 5, 6), torch.randint(-5, 5, (3, 3), dtype=torch.int32))
    with torch.no_grad():
        torch.testing.assert_close(written.build_model()(*args), conv.module(*args), rtol=0,
                                   atol=0)


UNARY = ["sin", "cos", "tan", "arctan", "arcsin", "arccos", "sinh", "cosh", "log1p", "expm1",
         "log2", "log10", "exp2", "floor", "ceil", "sign", "reciprocal", "softsign",
         "log_sigmoid", "selu", "hard_tanh", "round", "isnan", "isinf", "isfinite", "elu",
         "celu", "leaky_relu", "logical_not"]


# what Keras' TF backend runs on int32 (its activations refuse ints)
UNARY_INT = ["sin", "cos", "arctan", "sinh", "log1p", "expm1", "log2", "log10", "exp2",
             "floor", "ceil", "sign", "round", "isnan", "isinf", "isfinite", "logical_not"]


def _unary_model(dtype="float32"):
    x = keras.Input((18,), dtype=dtype)
    if dtype != "float32":
        return keras.Model(x, [getattr(ops, name)(x - 2) for name in UNARY_INT]
                           + [ops.round(x * 7, -1), ops.round(x, 1)])
    outs = [getattr(ops, name)(x) for name in UNARY]
    outs += [ops.elu(x, 0.5), ops.celu(x, 0.7), ops.leaky_relu(x, 0.1), ops.round(x, 1),
             ops.round(x, -1)]
    return keras.Model(x, outs)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_elementwise_math(dtype):
    """Random inputs (log1p, arcsin ... of out-of-domain values give NaN in both); an int
    input is computed in float32 where Keras does (floor, sin ... of ints are float)."""
    assert_to_torch(_unary_model(dtype), int_high=5, live=False)


def test_elementwise_math_special_values():
    """NaN, ±inf, ±0, halves (round to even) and huge values, NaN positions included: sign
    keeps NaN as TF does (torch.sign gives 0). Subnormal inputs are left out: TF's CPU
    kernels flush them to zero, torch does not (true of every op, not of these)."""
    model = _unary_model()
    net = crossport.to_torch(model, (torch.randn(2, 18),))
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 0.5, -0.5, 1.5, 2.5, -2.5,
               0.25, -0.75, 3.0, -1.0, 1.0, 0.999]
    values = np.array([special, special[::-1]], np.float32)
    want, got = _run(model, net, values)
    for w, g in zip(want, got):
        assert w.dtype == g.dtype
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)   # inf positions exact


ORDER_FREE = {
    "flip": ((5, 6), lambda x: ops.flip(x, 1)),
    "flip-all-held-nchw": ((4, 5, 3), lambda x: ops.flip(_conv(x))),
    "roll-axes": ((4, 5, 3), lambda x: ops.roll(_conv(x), (1, -2), axis=(1, 3))),
    "roll-flat": ((5, 6), lambda x: ops.roll(x, 7)),
    "repeat-held-nchw": ((4, 5, 3), lambda x: ops.repeat(_conv(x), 2, axis=-1)),
    "repeat-flat": ((5, 6), lambda x: ops.repeat(x, 3)),
    "swapaxes": ((4, 5, 3), lambda x: ops.swapaxes(_conv(x), 1, -1) + 1.0),
    "moveaxis": ((4, 5, 3), lambda x: ops.moveaxis(_conv(x), [3, 1], [1, 2])),
    "argmin-held-nchw": ((4, 5, 3), lambda x: ops.argmin(_conv(x), -1)),
    "var-std": ((4, 5, 3), lambda x: [ops.var(_conv(x), axis=(1, 2)),
                                      ops.std(x, axis=-1, keepdims=True)]),
}


@pytest.mark.parametrize("shape, fn", ORDER_FREE.values(), ids=ORDER_FREE.keys())
def test_moving_and_statistics_ops(shape, fn):
    x = keras.Input(shape)
    assert_to_torch(keras.Model(x, fn(x)))


def test_var_of_ints_and_argmin_of_negative_zero():
    """var of int32 is float32 in Keras; argmin reads -0.0 as just below 0.0 (TF's fix)."""
    x = keras.Input((6,), dtype="int32")
    assert_to_torch(keras.Model(x, ops.var(x, axis=-1)), live=False)
    f = keras.Input((4,))
    model = keras.Model(f, ops.argmin(f, axis=-1))
    net = crossport.to_torch(model, (torch.randn(2, 4),))
    _assert_same(model, net, np.array([[0.0, -0.0, 1.0, 0.0], [1.0, 0.0, -0.0, -0.0]],
                                      np.float32))


def _ints(x):
    return ops.cast(x * 4.0, "int32")   # ints of both signs from the random input


BINARY_AND_SHAPE = {
    "mod": ((4, 5), lambda x: [ops.mod(x, 0.3), ops.mod(x, -0.7), ops.mod(x * 2.0, x)]),
    "mod-int-and-bool": ((4, 5), lambda x: [ops.mod(_ints(x), 3), ops.mod(_ints(x), -3),
                                            ops.mod(x > 0, x > -100.0)]),
    "floor-divide": ((4, 5), lambda x: [ops.floor_divide(x, 0.1), ops.floor_divide(3.0, x),
                                        ops.floor_divide(_ints(x), -3)]),
    "divide-no-nan": ((4, 5), lambda x: [ops.divide_no_nan(x, ops.relu(x)),
                                         ops.divide_no_nan(x, 0.0),
                                         ops.divide_no_nan(_ints(x), 2)]),
    "logaddexp": ((4, 5), lambda x: [ops.logaddexp(x, x * 3.0), ops.logaddexp(_ints(x), x)]),
    "nan-to-num": ((4, 5), lambda x: ops.nan_to_num(ops.log(x) * ops.exp(x * 100.0),
                                                    nan=-2.0, posinf=5.0)),
    "tril-triu": ((4, 5, 3), lambda x: [ops.tril(_conv(x), -1), ops.triu(_conv(x), 1)]),
    "split-sections-held-nchw": ((4, 6, 3), lambda x: ops.split(_conv(x), 3, axis=2)),
    "split-indices": ((5, 6), lambda x: ops.split(x, [1, 4], axis=-1)),
    "tile": ((4, 5, 3), lambda x: [ops.tile(_conv(x), (2, 1, 3)), ops.tile(x, (1, 2, 1, 1, 2))]),
    "one-hot": ((6,), lambda x: [ops.one_hot(_ints(x), 5), ops.one_hot(_ints(x), 4, axis=1,
                                                                       dtype="int32")]),
}


@pytest.mark.parametrize("shape, fn", BINARY_AND_SHAPE.values(), ids=BINARY_AND_SHAPE.keys())
def test_binary_and_shape_ops(shape, fn):
    """Negative ints and out-of-range ids (one_hot: a zero row, as TF) come from the random
    input; divide_no_nan divides by exact zeros (relu of negatives)."""
    x = keras.Input(shape)
    assert_to_torch(keras.Model(x, fn(x)))


def test_floor_divide_is_tf_floor_of_the_quotient():
    """tf.math.floordiv of floats is floor(x1 / x2); torch.floor_divide is Python's // (which
    gives 1 // 0.1 == 9.0)."""
    x = keras.Input((6,))
    model = keras.Model(x, [ops.floor_divide(x, 0.1), ops.mod(x, 0.1)])
    net = crossport.to_torch(model, (torch.randn(2, 6),))
    values = np.array([[1.0, -1.0, 0.7, 0.3, 2.5, -0.0]] * 2, np.float32)
    want, got = _run(model, net, values)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], atol=1e-6)


def test_keras_ops_modules_pickle_and_write_source(tmp_path):
    """Every converted op is a torch function or method in the graph (softplus was a lambda:
    the module neither pickled nor wrote as source)."""

    x = keras.Input((6, 4))
    outs = [ops.softplus(x), ops.floor_divide(x, 0.1), ops.divide_no_nan(x, ops.relu(x)),
            ops.one_hot(ops.cast(x[:, 0] * 3, "int32"), 3), *ops.split(x, 2, axis=-1),
            ops.sign(x), ops.round(x, 1), ops.take(x, np.array([0, -1]), axis=1)]
    conv = assert_to_torch(keras.Model(x, outs))
    loaded, written = reloaded(conv, tmp_path / "ops_torch.py")
    args = (torch.randn(3, 6, 4),)
    with torch.no_grad():
        want = conv.module(*args)
        torch.testing.assert_close(loaded(*args), want, rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(written.build_model()(*args), want, rtol=0, atol=0,
                                   equal_nan=True)


def test_ops_on_nchw_held_tensors_need_no_permute():
    """einsum reads each operand in its held order, stack / take / sort / top_k / flip run at
    the held axes: a conv block's NCHW tensors reach them with no permute."""
    x = keras.Input((4, 5, 3))
    a, b = _conv(x), _conv(x)
    gram = ops.einsum("bhwc,bhwd->bcd", a, b)
    pooled = ops.mean(ops.stack([a, ops.flip(b, 1)], axis=-1), axis=(1, 2))
    picked = ops.take(a, np.array([2, 0]), axis=-1)
    values, _ = ops.top_k(ops.sort(picked, axis=1), 2)
    model = keras.Model(x, [gram, pooled, L.Conv2D(2, 1)(values)])
    assert_to_torch(model, max_permutes=0)


PAD_PROD = {
    "pad-constant-held-nchw": ((4, 5, 3), lambda x: ops.pad(
        _conv(x), ((0, 0), (1, 2), (0, 3), (1, 0)), constant_values=1.5)),
    "pad-batch-too": ((4, 5), lambda x: ops.pad(x, [[1, 0], [0, 0], [2, 2]])),
    "pad-reflect-held-nchw": ((4, 5, 3), lambda x: ops.pad(_conv(x), ((0, 0), (2, 1), (3, 4),
                                                                      (0, 0)), mode="reflect")),
    "pad-symmetric": ((4, 5, 3), lambda x: ops.pad(x, ((0, 0), (0, 4), (2, 5), (1, 1)),
                                                   mode="symmetric")),
    "prod-held-nchw": ((4, 5, 3), lambda x: ops.prod(_conv(x) * 0.5 + 1.0, axis=(1, 2))),
    "prod-int-keepdims": ((4, 5), lambda x: ops.prod(_ints(x), axis=-1, keepdims=True)),
}


@pytest.mark.parametrize("shape, fn", PAD_PROD.values(), ids=PAD_PROD.keys())
def test_pad_and_prod(shape, fn):
    x = keras.Input(shape)
    assert_to_torch(keras.Model(x, fn(x)))


_MAX, _INF, _NAN = float(np.finfo(np.float32).max), np.inf, np.nan

# Rows along the cumulated axis where torch's float64 accumulation (its CPU kernels for
# float32) and TF's float32 accumulator differ in kind, not in rounding.
CUMULATIVE_SPECIALS = {
    "cumsum-overflow-stays-inf": (ops.cumsum, [
        [_MAX, _MAX, -_MAX, 1.0], [_MAX, _MAX, -_INF, 1.0], [-_MAX, -_MAX, _MAX, _MAX],
        [_INF, 1.0, -_INF, 1.0], [1.0, _NAN, _INF, 1.0], [-0.0, -0.0, 0.0, 1.0]]),
    "cumprod-overflow-stays-inf": (ops.cumprod, [
        [_MAX, 10.0, 0.01, 1.0], [_MAX, 2.0, 0.0, 1.0], [_MAX, 10.0, -1.0, 1e-30],
        [_INF, -1.0, 0.0, 1.0]]),
    "cumprod-underflow-flushes-to-zero": (ops.cumprod, [
        [1e-30, 1e-30, 1e30, 1e30], [1e-30, 1e-30, _INF, 1.0], [2e-38, 0.5, 4.0, 1.0],
        [-1e-30, 1e-30, -1.0, 1e30]]),
    "nancumsum-overflow-stays-inf": (ops.nancumsum, [
        [_INF, _INF, -_MAX, 1.0], [_MAX, _NAN, _MAX, -_INF]]),
    "nancumprod-underflow-flushes-to-zero": (ops.nancumprod, [
        [1e-30, 1e-30, 1e30, 1e30], [1e-30, _NAN, 1e-30, 1e30]]),
}


@pytest.mark.parametrize("fn, rows", CUMULATIVE_SPECIALS.values(),
                         ids=CUMULATIVE_SPECIALS.keys())
def test_cumulative_ops_overflow_and_underflow_as_tf_float32(fn, rows):
    """A float32 sum or product past float32's range stays ±inf (NaN after an opposite
    infinity or a zero), one below its smallest normal value 0, as in TF: torch's CPU
    kernels accumulate in float64, whose partial results came back ([max, max, -max] ended
    max, [max, 10, 0.01] 3e37, [1e-30, 1e-30, 1e30, 1e30] 1; TF: inf, inf, 0)."""
    values = np.asarray(rows, np.float32).T[None]           # (1, 4 steps, rows)
    x = keras.Input(values.shape[1:])
    model = keras.Model(x, [fn(x, axis=1), fn(_t(x), axis=-1), fn(_t(x))])  # None: rows in turn
    net = crossport.to_torch(model, (torch.from_numpy(values),))
    want, got = _run(model, net, values)
    for w, g in zip(want, got):
        assert w.dtype == g.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6)       # NaN and ±inf positions exactly
        signed = ~np.isnan(w)                             # the sign of a NaN is no value
        np.testing.assert_array_equal(np.signbit(g[signed]), np.signbit(w[signed]))


def test_cumulative_ints_wrap_as_tf():
    """int32 sums and products wrap in int32 in TF and in the module; bools count as int32."""
    x = keras.Input((4,), dtype="int32")
    model = keras.Model(x, [ops.cumsum(x, axis=-1), ops.cumprod(x, axis=-1),
                            ops.cumsum(x > 0, axis=-1)])
    values = np.asarray([[2**31 - 1, 1, 5, -2**31], [65536, 65536, 3, -1]], np.int32)
    net = crossport.to_torch(model, (torch.from_numpy(values),))
    _assert_same(model, net, values)


def test_split_into_sections_of_a_run_time_size_that_they_do_not_divide_raises():
    """tf.split raises when the sections do not divide a size it learns at run time; the
    module split 5 rows into 3 + 2 and went on."""
    x = keras.Input((None, 3))
    model = keras.Model(x, ops.split(x, 2, axis=1))
    conv = crossport.to_torch_with_report(model, (np.zeros((2, 4, 3), "float32"),))
    values = np.zeros((2, 5, 3), "float32")
    with pytest.raises(Exception):
        model(values)
    with pytest.raises(AssertionError, match="do not divide"), torch.no_grad():
        conv.module(torch.from_numpy(values))


def test_float_mod_where_the_quotient_overflows_and_at_signed_zeros():
    """keras.ops.mod is TF's FloorMod: fmod (exact), then plus the divisor where the signs
    differ. torch.remainder computed x - y * floor(x / y): NaN for mod(3e38, 0.1), where TF
    gives 0.0796, and +0.0 where TF keeps fmod's -0.0."""
    x, y = keras.Input((48,)), keras.Input((48,))
    model = keras.Model([x, y], [ops.mod(x, y), ops.mod(x, 0.1), ops.mod(x, -2.5)])
    # 48 columns: torch's vectorised float kernel (short tensors take an exact scalar loop)
    a = np.tile(np.array([[3e38, -4.0, 4.0, -0.0, 5.5, np.nan],
                          [-3e38, 1e-30, -1e-30, 7.0, -7.0, np.inf]], np.float32), 8)
    b = np.tile(np.array([[0.1, 2.0, -2.0, 3.0, -0.0, 1.0],
                          [0.3, 5.0, 5.0, np.inf, np.inf, 2.0]], np.float32), 8)
    conv = crossport.to_torch_with_report(model, (a, b))
    with torch.no_grad():
        got = conv.module(torch.from_numpy(a), torch.from_numpy(b))
    for g, w in zip(got, model([a, b])):
        g, w = g.numpy(), np.asarray(w)
        np.testing.assert_array_equal(g, w)
        finite = ~np.isnan(w)
        np.testing.assert_array_equal(np.signbit(g[finite]), np.signbit(w[finite]))


def test_a_complex_model_input():
    """A complex64 Input crashed the check's fresh inputs (torch.iinfo of a complex
    dtype); complex inputs are drawn as complex normals."""
    x = keras.Input((4,), dtype="complex64")
    model = keras.Model(x, [ops.real(x) * 2, ops.imag(x), ops.abs(x)])
    example = (np.ones((2, 4), np.complex64),)
    conv = crossport.to_torch_with_report(model, example)
    rng = np.random.default_rng(0)
    values = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))).astype("complex64")
    with torch.no_grad():
        got = conv.module(torch.from_numpy(values))
    for g, w in zip(got, model(values)):
        np.testing.assert_allclose(g.numpy(), np.asarray(w), rtol=1e-6, atol=1e-6)
