"""same_padding and TFPad against TensorFlow itself (pitfalls 4 and 7)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_layers_support import PROPERTY, nerr, randn, to_cf, to_cl, torch_run

from crossport.errors import InputError
from crossport.torch_layers import TFPad, same_padding


@PROPERTY
@given(
    size=st.integers(1, 12),
    k=st.integers(1, 5),
    s=st.integers(1, 4),
    d=st.integers(1, 3),
    seed=st.integers(0, 99),
)
def test_same_padding_is_what_tf_same_pads(size, k, s, d, seed):
    # TF's explicit-padding conv equals its SAME conv exactly when the padding is TF's.
    if d > 1 and s > 1:  # tf.nn.conv2d allows this only with stride 1
        s = 1
    x = tf.constant(randn((1, size, 3, 1), seed))
    w = tf.constant(randn((k, 1, 1, 2), seed + 1))
    before, after = same_padding(size, k, s, d)
    same = tf.nn.conv2d(x, w, (s, 1), "SAME", dilations=(d, 1))
    explicit = tf.nn.conv2d(
        x, w, (s, 1), [[0, 0], [before, after], [0, 0], [0, 0]], dilations=(d, 1)
    )
    assert same.shape == explicit.shape
    np.testing.assert_array_equal(same.numpy(), explicit.numpy())


def test_same_padding_puts_the_odd_element_after():
    assert same_padding(6, 3, 2) == (0, 1)  # torch's symmetric padding=1 would pad (1, 1)
    assert same_padding(4, 2, 1) == (0, 1)


@PROPERTY
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    mode=st.sampled_from(["CONSTANT", "REFLECT", "SYMMETRIC"]),
    data=st.data(),
)
def test_tf_pad_matches_tf_pad(shape, mode, data):
    limit = {"CONSTANT": lambda n: 3, "REFLECT": lambda n: n - 1, "SYMMETRIC": lambda n: n}[mode]
    paddings = [
        [data.draw(st.integers(0, limit(n))), data.draw(st.integers(0, limit(n)))] for n in shape
    ]
    value = data.draw(st.sampled_from([0.0, -1.5, 2.0]))
    x = randn(shape, len(shape))
    ref = tf.pad(x, paddings, mode=mode, constant_values=value).numpy()
    got = torch_run(TFPad(paddings, mode, value), x).numpy()
    assert nerr(got, ref) == 0.0


@pytest.mark.parametrize("mode", ["CONSTANT", "REFLECT", "SYMMETRIC"])
def test_tf_pad_channels_last_paddings_on_channels_first_port(mode):
    x = randn((2, 4, 5, 3), 7)
    paddings = [[0, 0], [1, 2], [2, 0], [0, 1]]
    ref = tf.pad(x, paddings, mode=mode).numpy()
    got = torch_run(TFPad(paddings, mode, from_channels_last=True), to_cf(x))
    assert nerr(to_cl(got), ref) == 0.0


def test_tf_pad_rejects_what_tf_rejects():
    with pytest.raises(InputError):
        TFPad([[3, 0]], "REFLECT")(torch.zeros(3))
    with pytest.raises(InputError):
        TFPad([[-1, 0]])
    with pytest.raises(InputError):
        TFPad([[0, 0]], "CIRCULAR")
