"""keras.ops numpy functions that had no Keras -> PyTorch converter ("no converter for this
keras.ops op"): Keras' TF-backend formulas where torch's function of the same name differs
(hypot, fmod, fmax / fmin, heaviside, isclose, logaddexp2, sinc, angle, ldexp, gcd / lcm,
cross, rot90's half turn), on tensors held in Keras order and permuted (a conv output held
NCHW), at special values (NaN, ±inf, ±0, the dtype's extremes), in Keras' TF result dtypes,
and the forms refused by name."""

import keras
import numpy as np
import pytest
import torch
from keras import ops

import crossport
from tests.to_torch.harness import assert_to_torch

L = keras.layers


def _conv(x):
    return L.Conv2D(3, 1)(x)   # held NCHW: the op's Keras axes are remapped


def _t(x):
    return ops.transpose(x, (0, 2, 1))   # a relabelled layout: held permuted


def _ints(x):
    return ops.cast(x * 4.0, "int32")   # ints of both signs from the random input


W4 = np.array([1.0, 2.0, 0.5, 3.0], "float32")

AXES = {
    "diagonal-held-nchw": ((4, 5, 3), lambda x: [
        ops.diagonal(_conv(x), 1, 1, 2), ops.diagonal(_conv(x), -1, 3, 1),
        ops.diagonal(x, 0, 0, 1)]),
    "diag-diagflat": ((4, 5), lambda x: [ops.diag(x[:, 0], 1), ops.diag(x[:, :, 0], -1),
                                         ops.diag(_t(x)[:, 0], 2), ops.diagflat(x[:, :2, 0], 2)]),
    "trace-held-nchw": ((4, 5, 3), lambda x: [ops.trace(_conv(x), 0, 1, 2),
                                              ops.trace(_conv(x), 1, -1, 1)]),
    "rot90-held-nchw": ((4, 5, 3), lambda x: [
        ops.rot90(_conv(x), 1, (1, 2)), ops.rot90(_conv(x), -1, (3, 1)),
        ops.rot90(_conv(x), 2, (2, 3)), ops.rot90(x[:, :3, :3], 2, (1, 2)),
        ops.rot90(x, 4, (1, 2))]),
    "flips-held-nchw": ((4, 5, 3), lambda x: [ops.fliplr(_conv(x)), ops.flipud(_conv(x))]),
    "count-nonzero-held-nchw": ((4, 5, 3), lambda x: [
        ops.count_nonzero(ops.relu(_conv(x)), axis=(1, 3)), ops.count_nonzero(ops.relu(x)),
        ops.count_nonzero(ops.relu(_conv(x)), axis=()), ops.count_nonzero(x > 0, axis=-1)]),
    "average-held-nchw": ((4, 5, 3), lambda x: [
        ops.average(_conv(x), axis=3), ops.average(_conv(x), axis=1, weights=W4),
        ops.average(_conv(x)), ops.average(_conv(x), axis=2, weights=ops.relu(_conv(x))),
        ops.average(x, weights=ops.abs(x))]),
    "splits-held-nchw": ((4, 6, 3), lambda x: [
        *ops.hsplit(_conv(x), 2), *ops.vsplit(_conv(x), [1]), *ops.dsplit(_conv(x), [1, 4]),
        *ops.array_split(_conv(x), 2, axis=-1), *ops.hsplit(x[0, 0, 0], 3)]),
    "dstack-ravel": ((4, 5, 3), lambda x: [ops.dstack([_conv(x), _ints(x)]),
                                           ops.dstack([x[:, 0], x[:, 1, :, 0] * 2.0]),
                                           ops.ravel(_conv(x))]),
    "trapezoid": ((4, 5, 3), lambda x: [
        ops.trapezoid(_conv(x), axis=1), ops.trapezoid(_ints(x), dx=0.5),
        ops.trapezoid(x, x=np.array([0.0, 1.0, 3.5]), axis=-1),
        ops.trapezoid(x[:, 0, :, 0], x=np.linspace(0.0, 1.0, 5) ** 2)]),
    "cross": ((4, 3), lambda x: [ops.cross(x, x[:, ::-1]), ops.cross(_t(x), _t(x) + 1.0,
                                                                     axis=1),
                                 ops.cross(x[..., :2], x[:, ::-1], axisc=1),
                                 ops.cross(x[..., :2], x[..., 1:]), ops.cross(_ints(x), x)]),
    "kron-inner-vdot": ((4, 3), lambda x: [
        ops.kron(x[:, 0], x[:, 1] + 1.0), ops.kron(x[0], np.arange(6, dtype="float32")
                                                  .reshape(2, 3)),
        ops.inner(x, x[:, 0]), ops.inner(_ints(x), _ints(x)), ops.vdot(x, x * 2.0),
        ops.vdot(_ints(x), _ints(x))]),
    "correlate": ((6,), lambda x: [
        ops.correlate(x[0], np.array([1.0, 2.0], "float32")),
        ops.correlate(x[0], np.array([1.0, -2.0, 0.5, 3.0], "float32"), mode="same"),
        ops.correlate(x[1], x[0, :3], mode="same"), ops.correlate(x[0, :2], x[1], mode="full"),
        ops.correlate(_ints(x[0]), np.array([3, 1], "int32"), mode="full")]),
    "in-top-k": ((6,), lambda x: [ops.in_top_k(_ints(x[:, 0]) + 2, ops.tile(x, (1, 2)), 3),
                                  ops.in_top_k(ops.cast(x[:, 0] > 0, "int64"), x, 1)]),
}


@pytest.mark.parametrize("shape, fn", AXES.values(), ids=AXES.keys())
def test_axis_ops(shape, fn):
    x = keras.Input(shape)
    assert_to_torch(keras.Model(x, fn(x)))


ELEMENTWISE = {
    "binary-held-nchw": ((4, 5, 3), lambda x: [
        ops.hypot(_conv(x), x), ops.fmod(_conv(x), x), ops.fmax(_conv(x), 0.5),
        ops.fmin(x, _conv(x)), ops.heaviside(_conv(x), x), ops.logaddexp2(_conv(x), x),
        ops.isclose(_conv(x), _conv(x) * 1.001, 1e-3), ops.nextafter(_conv(x), x),
        ops.isin(_conv(x), _conv(x)[:, :2, :2])]),
    "unary": ((6,), lambda x: [ops.sinc(x), ops.fabs(x), ops.i0(x * 3.0), ops.angle(x),
                               ops.real(x), ops.imag(x), ops.conj(x), ops.isreal(x),
                               ops.sinc(_ints(x)), ops.fabs(_ints(x)), ops.angle(_ints(x))]),
    "ints": ((6,), lambda x: [
        ops.hypot(_ints(x), _ints(x) + 1), ops.fmod(_ints(x), ops.abs(_ints(x)) + 1),
        ops.fmod(_ints(x), -3), ops.fmax(_ints(x), 1), ops.heaviside(_ints(x), x),
        ops.logaddexp2(_ints(x), x), ops.isclose(_ints(x), 1.5), ops.ldexp(x, _ints(x)),
        ops.gcd(_ints(x), 6), ops.lcm(_ints(x), _ints(x) + 1), ops.isin(_ints(x), [0, 2, -3]),
        ops.allclose(x, x + 1e-9), ops.allclose(x, x * 1.1, rtol=0.01)]),
    "select-unravel": ((6,), lambda x: [
        ops.select([x > 0.5, x < -0.5], [x, x * 2.0], -1.0),
        ops.select([_ints(x) > 0], [_ints(x)], 1000),
        ops.select([x], [ops.ones_like(x)]),
        *ops.unravel_index(_ints(x) * 5, (3, 4)),
        *ops.unravel_index(_ints(x[:, 0]) * 5, (2, 3, 4))]),
}


@pytest.mark.parametrize("shape, fn", ELEMENTWISE.values(), ids=ELEMENTWISE.keys())
def test_elementwise_ops(shape, fn):
    x = keras.Input(shape)
    assert_to_torch(keras.Model(x, fn(x)))


def test_held_nchw_ops_need_no_permute():
    """The axis ops run at the held axes of a conv block's NCHW tensors."""
    x = keras.Input((4, 5, 3))
    a = _conv(x)
    outs = [ops.rot90(a, 1, (1, 2)), ops.fliplr(a), ops.hypot(a, a), *ops.dsplit(a, [2]),
            ops.trace(a, 0, 1, 2), ops.diagonal(a, 0, 1, 2), ops.count_nonzero(a, axis=(1, 2))]
    outs = [L.Conv2D(2, 1)(o) if len(o.shape) == 4 else o for o in outs]
    assert_to_torch(keras.Model(x, outs), max_permutes=0)


# -- special values, compared exactly ----------------------------------------------------------

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5, -3.0, 1e-30, 3e38,
                    7.0, 0.1], np.float32)


def _every_pair(values):
    n = len(values)
    return np.repeat(values, n).reshape(n, n), np.tile(values, n).reshape(n, n)


def _same(model, args, rtol=1e-6, signs=True):
    """The torch module's outputs equal Keras' in dtype, shape, NaN and infinity positions
    and signs of zeros; values within ``rtol`` (an ulp: TF's sqrt / log1p round alike but
    not always identically)."""
    args = tuple(np.asarray(a) for a in args)
    net = crossport.to_torch(model, tuple(torch.from_numpy(a) for a in args))
    want = keras.tree.flatten(model(list(args) if len(args) > 1 else args[0]))
    with torch.no_grad():
        got = keras.tree.flatten(net(*(torch.from_numpy(a) for a in args)))
    for i, (w, g) in enumerate(zip(want, got)):
        w, g = np.asarray(w), g.numpy()
        assert (w.dtype, w.shape) == (g.dtype, g.shape), (i, w.dtype, g.dtype, w.shape, g.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=0, err_msg=f"output {i}")
        if signs and w.dtype.kind == "f":
            zero = w == 0
            np.testing.assert_array_equal(np.signbit(g[zero]), np.signbit(w[zero]),
                                          err_msg=f"output {i}: signs of zeros")


def test_binary_math_at_special_values():
    """Every pair of NaN, ±inf, ±0, huge and ordinary values: hypot(inf, inf) is NaN,
    fmod(-0.0, y) +0.0 and fmod(3e38, 0.1) finite (torch's float32 fmod gives NaN),
    heaviside(NaN, y) y, isclose(inf, inf) False, logaddexp2(inf, inf) inf."""
    x, y = keras.Input((13,)), keras.Input((13,))
    model = keras.Model([x, y], [
        ops.hypot(x, y), ops.fmod(x, y), ops.heaviside(x, y), ops.logaddexp2(x, y),
        ops.isclose(x, y), ops.isclose(x, y, 0.1, 0.5, equal_nan=True), ops.nextafter(x, y),
        ops.isin(x, y), ops.isin(x, np.array([1.0, np.nan, 2.5]), invert=True),
        ops.allclose(x, y), ops.allclose(x, x, equal_nan=True), ops.allclose(x, x)])
    _same(model, _every_pair(SPECIAL))


def test_fmax_fmin_take_the_number_over_nan():
    """(The sign of the max of 0.0 and -0.0 is the kernel's choice in TF as in torch: not
    compared.)"""
    x, y = keras.Input((13,)), keras.Input((13,))
    model = keras.Model([x, y], [ops.fmax(x, y), ops.fmin(x, y), ops.fmax(x, 0.5),
                                 ops.fmin(np.float32(-1.0), y)])
    _same(model, _every_pair(SPECIAL), signs=False)


def test_unary_math_at_special_values():
    x = keras.Input((13,))
    model = keras.Model(x, [ops.sinc(x), ops.fabs(x), ops.i0(x), ops.angle(x), ops.imag(x),
                            ops.real(x), ops.isreal(x)])
    _same(model, [np.stack([SPECIAL, SPECIAL[::-1] * 0.5])])


def test_ldexp_exponents():
    """``x1 * 2.0^x2``: 0 and ±inf kept, overflow to ±inf, exponents past int8 and the
    int32 extremes (no subnormal results: TF flushes them, as every CPU kernel)."""
    x, e = keras.Input((13,)), keras.Input((13,), dtype="int32")
    model = keras.Model([x, e], [ops.ldexp(x, e), ops.ldexp(x, ops.cast(e, "int16"))])
    exponents = np.array([0, 1, -1, 5, 127, 128, -100, -125, 30, 300, -300, 2**31 - 1, -2**31],
                         np.int32)
    values = np.abs(SPECIAL).clip(1.0, None)
    values[:5] = SPECIAL[:5]
    _same(model, [np.stack([values, -values]), np.stack([exponents, exponents[::-1]])])


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_gcd_lcm_of_every_pair(dtype):
    """Every pair of the dtype's values: negatives by magnitude, gcd(0, 0) 0, and the lowest
    value, whose magnitude wraps, as TF's loop leaves it (gcd(6, -128) is -2)."""
    info = np.iinfo(dtype)
    x, y = keras.Input((256,), dtype=dtype), keras.Input((256,), dtype=dtype)
    model = keras.Model([x, y], [ops.gcd(x, y), ops.lcm(x, y)])
    _same(model, _every_pair(np.arange(info.min, info.max + 1).astype(dtype)))


def test_gcd_lcm_take_the_most_euclid_steps():
    """Consecutive Fibonacci numbers (the longest Euclid runs) and the extremes of int32 and
    int64: the unrolled loop is long enough."""
    i32 = np.iinfo(np.int32)
    i64 = np.iinfo(np.int64)
    a32 = np.array([1836311903, 1134903170, -1134903170, i32.min, i32.max, i32.min + 1, 0, 6,
                    -18, 2**30], np.int32)
    a64 = np.array([7540113804746346429, 4660046610375530309, i64.min, i64.max, 0, -6, 2**62,
                    12, 1, -1], np.int64)
    x, y = keras.Input((10,), dtype="int32"), keras.Input((10,), dtype="int32")
    u, v = keras.Input((10,), dtype="int64"), keras.Input((10,), dtype="int64")
    model = keras.Model([x, y, u, v], [ops.gcd(x, y), ops.lcm(x, y), ops.gcd(u, v),
                                       ops.lcm(u, v), ops.gcd(x, 12)])
    _same(model, [*_every_pair(a32), *_every_pair(a64)])


def test_operand_dtypes_are_keras_tf_backend_ones():
    """Python numbers become int32 / float32 tensors before promotion, as the TF backend
    converts them: fmod(int8, 3) is int32 and gcd(int32, 12) int32 (Keras declares int8 and
    int64), bools fmod as int32, unsigned ints in int32, and 0.1 beside a float64 tensor is
    float32's 0.1; fmax keeps a number weak (in the tensor's dtype)."""
    x = keras.Input((6,), dtype="int8")
    u = keras.Input((6,), dtype="uint8")
    b = keras.Input((6,), dtype="bool")
    d = keras.Input((6,), dtype="float64")
    model = keras.Model([x, u, b, d], [
        ops.fmod(x, 3), ops.fmod(x, u), ops.fmod(u, 7), ops.fmod(b, True), ops.hypot(x, u),
        ops.logaddexp2(x, u), ops.isclose(x, 2.5), ops.isclose(u, x), ops.fmax(x, 100),
        ops.fmin(u, 3.5), ops.heaviside(x, u), ops.nextafter(x, u), ops.gcd(x, 6),
        ops.lcm(u, x), ops.isin(x, u), ops.isin(u, [1, 300]), ops.isclose(d, 0.1, 0.0, 0.0),
        ops.fmax(d, 0.1), ops.nextafter(d, 0.1), ops.isin(d, 0.1)])
    args = [np.array([[-128, -7, 0, 5, 127, 3]] * 2, np.int8),
            np.array([[1, 200, 7, 5, 255, 9]] * 2, np.uint8),
            np.array([[True, True, False, True, False, True]] * 2),
            np.array([[0.1, np.float32(0.1), 0.0, -1.0, 0.2, 0.1]] * 2, np.float64)]
    _same(model, args)


def test_complex_parts():
    """real / imag / conj / angle / isreal of a complex tensor (made in the graph)."""
    x = keras.Input((4,))
    c = ops.cast(x, "complex64") * np.array([1j, 1 + 1j, -1, 2 - 1j], np.complex64)
    c = c + np.complex64(0.5j)
    model = keras.Model(x, [ops.real(c), ops.imag(c), ops.angle(c), ops.isreal(c),
                            ops.real(ops.conj(c)), ops.imag(ops.conjugate(c)),
                            ops.isreal(ops.cast(x, "complex64"))])
    _same(model, [np.random.default_rng(0).standard_normal((3, 4)).astype("float32")])


def test_axis_ops_at_special_values():
    """count_nonzero counts NaN, not -0.0; trace and diagonal skip NaN off the diagonal;
    cross rounds each product alone (inf - inf is NaN; torch.linalg.cross fuses them);
    average by zero weights is NaN; in_top_k is False for a row holding NaN or inf and counts
    ties at the boundary in; select reads a NaN condition as true."""
    x = keras.Input((4, 3))
    ids = ops.cast(ops.abs(ops.nan_to_num(x[:, 0, 0])) * 2.0, "int32") - 1
    model = keras.Model(x, [
        ops.count_nonzero(x, axis=1), ops.trace(x, 0, 1, 2), ops.trace(x, -1, 1, 2),
        ops.diagonal(x, 1, 2, 1), ops.average(x, axis=1),
        ops.average(x, axis=2, weights=np.array([1.0, 0.0, -1.0], "float32")),
        ops.average(x, axis=1, weights=np.zeros(4, "float32")), ops.cross(x, x[:, ::-1]),
        ops.cross(x[..., :2], x[:, ::-1]), ops.cross(x[..., :2], x[..., 1:]),
        ops.in_top_k(ids, x[:, 0], 2), ops.in_top_k(ids, x[:, :, 0], 1),
        ops.select([x > 0, ops.isnan(x)], [x, x * 2.0], -1.0), ops.select([x], [x * 0.0 + 1.0]),
        ops.trapezoid(x, axis=1), ops.rot90(x, 2, (1, 2))])
    rng = np.random.default_rng(1)
    values = rng.choice(SPECIAL, size=(40, 4, 3)).astype("float32")
    values[:20] = rng.choice(np.array([0.0, -0.0, 1.0, 2.0, -1.0], np.float32), (20, 4, 3))
    _same(model, [values])


def test_rot90_half_turn_is_tfs_not_numpys():
    """TF's backend reshapes the once-turned [w, h] planes as [h, w] before the second turn
    (and returns them [h, w], where Keras declares [w, h]): the module does the same."""
    x = keras.Input((2, 3))
    model = keras.Model(x, [ops.rot90(x, 2, (1, 2)), ops.rot90(x, -2, (1, 2))])
    values = np.arange(12, dtype="float32").reshape(2, 2, 3)
    assert not np.array_equal(np.asarray(model(values)[0]), np.rot90(values, 2, (1, 2)))
    _same(model, [values])


def test_sizes_read_at_run_time():
    """Ops on the batch axis, whose size the module reads at each call: array_split's
    sections, bincount of a vector, vander's N, argpartition's kth clip, size."""
    x = keras.Input((6,))
    first = x[:, 0]
    ids = ops.cast(ops.abs(x[:, 1]) * 3.0, "int32")
    model = keras.Model(x, [
        *ops.array_split(x, 3, axis=0), ops.bincount(ids, minlength=30),
        ops.vander(first), ops.vander(first, 3, increasing=True),
        ops.argpartition(first, 1), ops.argpartition(_ints(first), 9),
        ops.argpartition(x, 4, axis=None), ops.size(x)])
    assert_to_torch(model, batch=5)


def test_bincount_rows_and_weights():
    i = keras.Input((6,), dtype="int32")
    model = keras.Model(i, [ops.bincount(i, minlength=10),
                            ops.bincount(i[0], weights=np.arange(6) * 0.5, minlength=12),
                            ops.bincount(ops.cast(i, "uint8"), minlength=11),
                            ops.bincount(i[0] > 3, weights=np.arange(6, dtype="int32"),
                                         minlength=3)])
    assert_to_torch(model, batch=4, live=False)


def test_vsplit_of_a_batch_it_does_not_divide_fails_at_run_time():
    """tf.split raises when the sections do not divide the axis; the module fails too."""
    x = keras.Input((3,))
    model = keras.Model(x, ops.vsplit(x, 2))
    net = crossport.to_torch(model, (torch.randn(4, 3),))
    with pytest.raises(Exception, match="do not divide"):
        net(torch.randn(5, 3))


def test_bincount_past_minlength_fails_at_run_time():
    """TF's result would be longer than minlength: the module fails by name instead."""
    i = keras.Input((4,), dtype="int32")
    net = crossport.to_torch(keras.Model(i, ops.bincount(i, minlength=5)),
                             (torch.randint(0, 5, (2, 4), dtype=torch.int32),))
    with pytest.raises(Exception, match="bincount"):
        net(torch.tensor([[0, 1, 5, 2]], dtype=torch.int32))


REFUSED = {
    "fmod-float64": (lambda x: ops.fmod(ops.cast(x, "float64"), 2.0), "fmod of float64"),
    "gcd-float": (lambda x: ops.gcd(x, x), "integers only"),
    "ldexp-float-exponent": (lambda x: ops.ldexp(x, x), "float32 exponent"),
    "ndim": (lambda x: ops.ndim(x), "Python int"),
    "bincount-no-minlength": (lambda x: ops.bincount(_ints(x[:, 0, 0])), "without minlength"),
    "bincount-sparse": (lambda x: ops.bincount(_ints(x[:, 0, 0]), minlength=9, sparse=True),
                        "sparse=True"),
    "argpartition-rows": (lambda x: ops.argpartition(x[:, 0], 1), "mixing rows"),
    "kron-ranks": (lambda x: ops.kron(x, np.ones((2, 2), "float32")), "different ranks"),
    "select-dtypes": (lambda x: ops.select([x > 0], [_ints(x)], 0.5), "default 0.5"),
    "select-mixed-choices": (lambda x: ops.select([x > 0, x < 0], [_ints(x), x]),
                             "choices of dtypes"),
    "vander-int": (lambda x: ops.vander(_ints(x[:, 0, 0])), "not correctly rounded"),
    "correlate-long-filter": (lambda x: ops.correlate(x[0, 0], np.ones(5, "float32")),
                              "x2 longer than x1"),
    "trapezoid-tensor-x": (lambda x: ops.trapezoid(x, x=x), "tensor x or dx"),
    "unravel-none": (lambda x: ops.unravel_index(_ints(x[:, 0, 0]), (None, 3)),
                     "None in shape"),
}


@pytest.mark.parametrize("fn, reason", REFUSED.values(), ids=REFUSED.keys())
def test_refused_by_name(fn, reason):
    x = keras.Input((4, 3))
    with pytest.raises(crossport.UnsupportedLayerError, match=reason):
        crossport.to_torch(keras.Model(x, fn(x)), (torch.randn(2, 4, 3),))
