"""keras.ops that had no Keras -> PyTorch converter: layer_normalization and
rms_normalization as ops, slice_update (XLA's clamped starts), the bitwise ops and shifts
(Keras' result dtypes, TF's shift clamp) and the NaN-ignoring reductions (Keras' TF
formulas; inputs with NaN, all-NaN slices, ints and bools)."""

import keras
import numpy as np
import pytest
import torch
from keras import ops

import crossport
from tests.to_torch.harness import assert_to_torch

GAMMA = np.linspace(0.5, 1.5, 6).astype("float32")


def _t(x):
    return ops.transpose(x, (0, 2, 1))


NORMS = {
    "layer-norm-gamma-beta": lambda x: ops.layer_normalization(x, GAMMA, GAMMA * 0.1),
    "layer-norm-plain": lambda x: ops.layer_normalization(x, epsilon=1e-3),
    "layer-norm-two-axes": lambda x: ops.layer_normalization(x, axis=(1, 2)),
    "layer-norm-axis-1-gamma": lambda x: ops.layer_normalization(x, GAMMA[:5], axis=1),
    "layer-norm-transposed": lambda x: ops.layer_normalization(_t(x), GAMMA[:5]),
    "rms-norm-scale": lambda x: ops.rms_normalization(x, GAMMA),
    "rms-norm-axis-1": lambda x: ops.rms_normalization(x, axis=1, epsilon=1e-2),
}


@pytest.mark.parametrize("fn", NORMS.values(), ids=NORMS.keys())
def test_norm_ops(fn):
    x = keras.Input((5, 6))
    assert_to_torch(keras.Model(x, fn(x)))


def test_norm_ops_with_graph_weights():
    """gamma / beta / scale computed in the graph (tensors, not constants)."""
    x, g = keras.Input((5, 6)), keras.Input((6,))
    model = keras.Model([x, g], [ops.layer_normalization(x, g[0], g[1] * 0.5),
                                 ops.rms_normalization(x, g[0])])
    assert_to_torch(model)


@pytest.mark.parametrize("start", [(0, 1, 2), (1, 4, -3), (0, 9, 9)],
                         ids=["inside", "clamped-high-and-negative", "clamped-both"])
def test_slice_update(start):
    x, u = keras.Input((5, 6)), keras.Input((2, 3))
    assert_to_torch(keras.Model([x, u], ops.slice_update(x, start, u)), batch=1)


class Writes(keras.layers.Layer):
    """slice_update at a run-time position (the last row) of a traced tensor."""

    def call(self, x):
        n = ops.shape(x)[1]
        return ops.slice_update(x, (0, n - 1, 0), ops.ones_like(x[:, :1]) * 7.0)


def test_slice_update_at_a_runtime_start():
    from tests.to_torch.test_runtime_sizes import assert_at_sizes

    x = keras.Input((None, 3))
    assert_at_sizes(keras.Model(x, Writes(name="writes")(x)), (torch.randn(1, 5, 3),),
                    [[(1, 2, 3)], [(1, 9, 3)]])


def _ints(dtype, shape, values):
    rng = np.random.default_rng(0)
    return torch.from_numpy(rng.choice(np.asarray(values), size=shape).astype(dtype))


@pytest.mark.parametrize("dtype", ["int32", "uint8", "int64"])
def test_bitwise_ops_and_shifts_at_the_extremes(dtype):
    """Shifts past the width and negative ones are clamped to [0, bits - 1] by TF's
    kernel (torch gives 0 / -1 there)."""
    info = np.iinfo(dtype)
    i, j = keras.Input((8,), dtype=dtype), keras.Input((8,), dtype=dtype)
    outs = [ops.bitwise_and(i, j), ops.bitwise_or(i, np.asarray(3, dtype)),
            ops.bitwise_xor(i, j), ops.bitwise_invert(i), ops.bitwise_not(j),
            ops.left_shift(i, j), ops.right_shift(i, j), ops.bitwise_left_shift(i, 70),
            ops.bitwise_right_shift(i, 3)]
    model = keras.Model([i, j], outs)
    x = _ints(dtype, (3, 8), [info.min, info.max, 0, 1, 5, info.max // 3])
    shifts = [0, 1, 7, info.bits - 1, info.bits, info.bits + 3]
    if info.min < 0:
        shifts.append(-1)
    y = _ints(dtype, (3, 8), shifts)
    conv = crossport.to_torch_with_report(model, (x, y))
    _same(model, conv.module, (x, y))


def _same(model, module, args):
    ref = keras.tree.flatten(model([a.numpy() for a in args] if len(args) > 1 else
                                   args[0].numpy()))
    got = keras.tree.flatten(module(*args))
    for r, g in zip(ref, got):
        r, g = np.asarray(r), g.detach().numpy()
        assert r.dtype == g.dtype and r.shape == g.shape
        np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_nan_reductions_with_nan_and_all_nan_slices():
    x = keras.Input((5, 6))
    model = keras.Model(x, [ops.nansum(x, axis=1), ops.nanmean(x, axis=(1, 2), keepdims=True),
                            ops.nanmax(x, axis=1), ops.nanmin(x), ops.nanmean(x, axis=-1),
                            ops.nanmax(_t(x), axis=-1), ops.nansum(x)])
    values = np.random.default_rng(0).standard_normal((3, 5, 6)).astype("float32")
    values[0, :, 0] = np.nan          # an all-NaN column (axis 1)
    values[1, 1, :] = np.nan          # an all-NaN row (axis -1)
    values[2] = np.nan                # everything
    values[0, 2, 3] = np.inf
    conv = crossport.to_torch_with_report(model, (torch.from_numpy(values),))
    _same(model, conv.module, (torch.from_numpy(values),))


def test_nan_reductions_of_ints_and_bools():
    i = keras.Input((6,), dtype="int32")
    b = keras.Input((6,), dtype="bool")
    model = keras.Model([i, b], [ops.nansum(i, axis=-1), ops.nanmean(i), ops.nanmax(i, axis=-1),
                                 ops.nanmin(b, axis=-1), ops.nanmax(b, axis=-1),
                                 ops.nansum(b, axis=-1)])
    args = (_ints("int32", (3, 6), [-50, 7, 0, 2**20]), _ints("bool", (3, 6), [True, False]))
    conv = crossport.to_torch_with_report(model, args)
    _same(model, conv.module, args)
