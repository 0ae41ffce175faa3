"""keras.ops FFTs -> torch.fft: (real, imag) pairs in and out, on Keras-ordered and
permuted tensors; TF's kernels and pocketfft differ in rounding only (docs/parity.md)."""

import keras
import pytest
from keras import ops

from tests.to_torch.harness import assert_to_torch


def _t(x):
    return ops.transpose(x, (0, 2, 1))


OPS = {
    "fft2-real-input": ((6, 8), lambda x: list(ops.fft2((x, ops.zeros_like(x))))),
    "fft2-fnet-real-part": ((5, 4), lambda x: ops.fft2((x, ops.zeros_like(x)))[0] + x),
    "fft-complex": ((6, 8), lambda x: list(ops.fft((x, x * 0.5)))),
    "fft-transposed": ((6, 8), lambda x: list(ops.fft((_t(x), _t(x) - 1.0)))),
    "ifft2-of-fft2": ((6, 8), lambda x: list(ops.ifft2(ops.fft2((x, x * 2.0))))),
    "rfft": ((6, 8), lambda x: list(ops.rfft(x))),
    "rfft-padded": ((6, 8), lambda x: list(ops.rfft(x, 11))),
    "rfft-cut": ((6, 8), lambda x: list(ops.rfft(x, 5))),
    "irfft-default-length": ((6, 8), lambda x: ops.irfft((x, x * 0.1))),
    "irfft-odd-length": ((6, 8), lambda x: ops.irfft(ops.rfft(x, 9), 9)),
}


@pytest.mark.parametrize("shape, fn", OPS.values(), ids=OPS.keys())
def test_fft_ops(shape, fn):
    x = keras.Input(shape)
    assert_to_torch(keras.Model(x, fn(x)))
