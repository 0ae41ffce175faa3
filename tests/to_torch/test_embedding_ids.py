"""Embedding ids as Keras 3 on TF reads them: ``ops.take`` counts ``[-n, -1]`` from the end;
ids ``>= n`` or ``< -n`` are an error in Keras (TF's gather) and in the torch module."""

import keras
import numpy as np
import pytest
import torch

import crossport

L = keras.layers
VOCAB = 7


def _model(dtype, mask_zero):
    ids = keras.Input((6,), dtype=dtype)
    x = L.Embedding(VOCAB, 4, mask_zero=mask_zero)(ids)
    pooled = L.GlobalAveragePooling1D()(x)   # the masked mean when mask_zero
    return keras.Model(ids, [x, pooled])


def _ids(dtype, seed, low=-VOCAB, high=VOCAB):
    rng = np.random.default_rng(seed)
    ids = rng.integers(low, high, (3, 6))
    ids[0, :4] = [-1, -VOCAB, 0, VOCAB - 1]
    return ids.astype(dtype)


@pytest.mark.parametrize("mask_zero", [False, True], ids=["plain", "mask-zero"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_negative_ids_count_from_the_end(dtype, mask_zero):
    model = _model(dtype, mask_zero)
    net = crossport.to_torch(model, (torch.from_numpy(_ids(dtype, 0)),))
    for seed in (1, 2, 3):
        ids = _ids(dtype, seed)
        want = [np.asarray(t) for t in model(ids)]
        with torch.no_grad():
            got = [t.numpy() for t in net(torch.from_numpy(ids))]
        for w, g in zip(want, got):
            assert w.shape == g.shape and w.dtype == g.dtype
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bad", [VOCAB, VOCAB + 3, -VOCAB - 1, -3 * VOCAB])
def test_out_of_range_ids_fail_in_both(bad):
    model = _model("int32", False)
    net = crossport.to_torch(model, (torch.from_numpy(_ids("int32", 0)),))
    ids = _ids("int32", 1)
    ids[1, 2] = bad
    with pytest.raises(Exception, match="not in|indices"):
        model(ids)
    with pytest.raises(IndexError):
        net(torch.from_numpy(ids))
