"""More elementwise keras.ops -> torch: inverse hyperbolics, arctan2, trunc, cbrt, signbit, the
shrink and sparse activations, glu, logical_xor, full_like / empty_like, broadcast_to,
stop_gradient / copy; NaN, ±inf and ±0 where TF's ``where`` formulas differ from torch's own
kernels (``soft_shrink(NaN)`` is 0 in Keras, NaN in ``F.softshrink``)."""


import keras
import numpy as np
import pytest
import torch

import crossport
from tests.to_torch.harness import assert_to_torch, reloaded

L = keras.layers
ops = keras.ops


def _conv(x):
    return L.Conv2D(4, 1)(x)


def _elementwise(x):
    return [ops.arcsinh(x), ops.arccosh(x * 3.0), ops.arctanh(x * 0.5), ops.erfc(x),
            ops.deg2rad(x), ops.rad2deg(x), ops.trunc(x * 3.0), ops.cbrt(x * 10.0),
            ops.signbit(x), ops.isposinf(x * 1e38 * 10.0), ops.isneginf(x * 1e38 * 10.0),
            ops.arctan2(x, x * 2.0 - 1.0), ops.arctan2(x, 0.0), ops.logical_xor(x > 0, x),
            ops.soft_shrink(x), ops.hard_shrink(x, 0.3), ops.threshold(x, 0.1, -2.0),
            ops.tanh_shrink(x), ops.squareplus(x), ops.squareplus(x, 0.5),
            ops.sparse_plus(x * 2.0), ops.sparse_sigmoid(x * 2.0), ops.stop_gradient(x),
            ops.copy(x)]


def _integers(x):
    i = ops.cast(x * 4.0, "int32")
    return [ops.arcsinh(i), ops.deg2rad(i), ops.trunc(i), ops.cbrt(i), ops.signbit(i),
            ops.isposinf(i), ops.arctan2(i, i - 1), ops.logical_xor(i, x), ops.signbit(x > 0),
            ops.full_like(i, 2.7), ops.full_like(x, 3, dtype="int32"), ops.empty_like(i)]


OPS = {
    "elementwise": ((9,), _elementwise),
    "integers": ((9,), _integers),
    "elementwise-held-nchw": ((3, 4, 2), lambda x: _elementwise(_conv(x))[:8]),
    "glu": ((4, 6, 4), lambda x: [ops.glu(_conv(x)), ops.glu(_conv(x), axis=1),
                                  ops.glu(x, axis=2)]),
    "full-like": ((3, 4, 2), lambda x: [ops.full_like(_conv(x), -1.5), ops.zeros_like(x),
                                        ops.full_like(_conv(x), x[:, :1, :1, :1]),
                                        ops.empty_like(_conv(x))]),
    "broadcast-to": ((1, 6), lambda x: [ops.broadcast_to(x, (2, 5, 6)),
                                        ops.broadcast_to(x, (3, 2, 4, 6))]),
    "broadcast-to-held-nchw": ((3, 1, 2), lambda x: ops.broadcast_to(_conv(x), (2, 3, 5, 4))),
}


@pytest.mark.parametrize("shape, fn", OPS.values(), ids=OPS.keys())
def test_keras_ops(shape, fn):
    x = keras.Input(shape)
    assert_to_torch(keras.Model(x, fn(x)))


def test_glu_and_broadcast_need_no_permute():
    x = keras.Input((3, 4, 2))
    a = _conv(x)
    assert_to_torch(keras.Model(x, [ops.glu(a), ops.broadcast_to(a[:, :1], (2, 3, 4, 4)),
                                    ops.full_like(a, 2.0)]), max_permutes=0)


SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.3, -0.3, 2.5, -2.5,
           1e-3, 0.999, -0.999, 1e30, -1e30]


def test_special_values():
    """NaN, ±inf, ±0, thresholds' edges: TF's ``where`` gives 0 (soft/hard_shrink,
    sparse_plus) or its formula's value where a comparison with NaN fails; trunc keeps the
    sign of zero, signbit reads -0.0; positions of NaN and infinities match exactly."""
    x = keras.Input((len(SPECIAL),))
    model = keras.Model(x, _elementwise(x))
    net = crossport.to_torch(model, (torch.randn(2, len(SPECIAL)),))
    values = np.array([SPECIAL, SPECIAL[::-1]], np.float32)
    want = [np.asarray(w) for w in model(values)]
    with torch.no_grad():
        got = [g.numpy() for g in net(torch.from_numpy(values))]
    for i, (w, g) in enumerate(zip(want, got)):
        assert w.dtype == g.dtype, i
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"output {i}")
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6, err_msg=f"output {i}")
        if w.dtype.kind == "f":
            zeros = w == 0
            np.testing.assert_array_equal(np.signbit(g[zeros]), np.signbit(w[zeros]),
                                          err_msg=f"output {i}")


def test_new_elementwise_ops_pickle_and_write_source(tmp_path):
    x = keras.Input((3, 4, 2))
    a = _conv(x)
    outs = [*_elementwise(x), ops.glu(a), ops.broadcast_to(a[:, :1], (3, 3, 4, 4)),
            ops.full_like(a, 2.0), ops.full_like(a, a[:, :1])]
    conv = assert_to_torch(keras.Model(x, outs), batch=3)
    loaded, written = reloaded(conv, tmp_path / "elementwise_torch.py")
    args = (torch.randn(3, 3, 4, 2),)
    with torch.no_grad():
        want = conv.module(*args)
        torch.testing.assert_close(loaded(*args), want, rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(written.build_model()(*args), want, rtol=0, atol=0,
                                   equal_nan=True)
