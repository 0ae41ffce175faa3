"""keras.ops numpy functions that had no Keras -> PyTorch converter ("no converter for this
keras.ops op"): Keras' TF-backend formulas where torch's function of the same name differs
(hypot, fmod, fmax / fmin, heaviside, isclose, logaddexp2, sinc, angle, ldexp, gcd / lcm),
on tensors held in Keras order and permuted (a conv output held NCHW), at special values
(NaN, ±inf, ±0, the dtype's extremes), in Keras' TF result dtypes, and the forms refused by
name."""

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


def _ints(x):
    return ops.cast(x * 4.0, "int32")   # ints of both signs from the random input


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


REFUSED = {
    "fmod-float64": (lambda x: ops.fmod(ops.cast(x, "float64"), 2.0), "fmod of float64"),
    "gcd-float": (lambda x: ops.gcd(x, x), "integers only"),
    "ldexp-float-exponent": (lambda x: ops.ldexp(x, x), "float32 exponent"),
    "select-dtypes": (lambda x: ops.select([x > 0], [_ints(x)], 0.5), "default 0.5"),
    "select-mixed-choices": (lambda x: ops.select([x > 0, x < 0], [_ints(x), x]),
                             "choices of dtypes"),
    "unravel-none": (lambda x: ops.unravel_index(_ints(x[:, 0, 0]), (None, 3)),
                     "None in shape"),
}


@pytest.mark.parametrize("fn, reason", REFUSED.values(), ids=REFUSED.keys())
def test_refused_by_name(fn, reason):
    x = keras.Input((4, 3))
    with pytest.raises(crossport.UnsupportedLayerError, match=reason):
        crossport.to_torch(keras.Model(x, fn(x)), (torch.randn(2, 4, 3),))
