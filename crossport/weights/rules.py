"""The layout rules (pitfalls.md items 1, 6, 9, 10). Shapes use torch's names."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

_SMALL = 1 << 16  # elements: below this numpy's strided copy is as fast as anything


def permuted(array: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    """``np.transpose(array, axes)`` as a C-contiguous copy.

    Large arrays go through torch's permute copy, which is blocked for the cache: 2.4 ms
    against numpy's 15.6 ms for one ViT-B MLP weight (3072x768), 0.5 s of ViT-B's build.

    Example:
        >>> permuted(np.arange(6, dtype="float32").reshape(2, 3), (1, 0)).tolist()
        [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    """
    array = np.asarray(array)
    if array.size >= _SMALL and array.flags.writeable:
        try:
            return torch.from_numpy(array).permute(*axes).contiguous().numpy()
        except TypeError:  # a dtype torch has no tensor for
            pass
    return np.ascontiguousarray(np.transpose(array, axes))


def conv_weight_to_keras(weight: np.ndarray) -> np.ndarray:
    """Conv kernel ``[out, in/groups, *k]`` -> Keras ``[*k, in/groups, out]`` (any rank)."""
    spatial = tuple(range(2, weight.ndim))
    return permuted(weight, (*spatial, 1, 0))


def conv_weight_from_keras(kernel: np.ndarray) -> np.ndarray:
    """Inverse of :func:`conv_weight_to_keras`."""
    n_spatial = kernel.ndim - 2
    return permuted(kernel, (n_spatial + 1, n_spatial, *range(n_spatial)))


def depthwise_weight_to_keras(weight: np.ndarray, in_channels: int) -> np.ndarray:
    """Depthwise kernel ``[in*mult, 1, *k]`` -> Keras ``[*k, in, mult]``.

    Output channel ``c*mult + m`` reads input channel ``c`` in both frameworks.
    """
    out_channels = weight.shape[0]
    mult = out_channels // in_channels
    spatial = weight.shape[2:]
    grouped = weight.reshape(in_channels, mult, *spatial)
    n = len(spatial)
    return permuted(grouped, (*range(2, 2 + n), 0, 1))


def depthwise_weight_from_keras(kernel: np.ndarray) -> np.ndarray:
    """Inverse of :func:`depthwise_weight_to_keras`."""
    n = kernel.ndim - 2
    in_channels, mult = kernel.shape[n], kernel.shape[n + 1]
    grouped = np.transpose(kernel, (n, n + 1, *range(n)))
    return np.ascontiguousarray(grouped.reshape(in_channels * mult, 1, *kernel.shape[:n]))


def conv_transpose_weight_to_keras(weight: np.ndarray) -> np.ndarray:
    """Transposed-conv kernel ``[in, out/groups, *k]`` -> Keras ``[*k, out/groups, in]``.

    Keras' ``ConvNDTranspose`` kernel is ``[*k, filters, in]`` (like ``tf.nn.conv*_transpose``).
    The kernel is not flipped: both frameworks compute the adjoint of the same convolution.
    """
    spatial = tuple(range(2, weight.ndim))
    return permuted(weight, (*spatial, 1, 0))


def conv_transpose_weight_from_keras(kernel: np.ndarray) -> np.ndarray:
    """Inverse of :func:`conv_transpose_weight_to_keras`."""
    return conv_weight_from_keras(kernel)


def dense_weight_to_keras(weight: np.ndarray) -> np.ndarray:
    """Linear weight ``[out, in]`` -> Dense kernel ``[in, out]``."""
    return permuted(weight, (1, 0))


def dense_weight_from_keras(kernel: np.ndarray) -> np.ndarray:
    """Inverse of :func:`dense_weight_to_keras`."""
    return permuted(kernel, (1, 0))


def flat_feature_order(block_shape: Sequence[int], block_perm: Sequence[int]) -> np.ndarray:
    """Torch feature index of each Keras feature after a flatten of a permuted block.

    ``torch.flatten(x, 1)`` of an NCHW block orders features C-major; the same flatten of the
    NHWC block orders them H, W, C (pitfalls.md item 9). With ``block_shape`` the torch
    shape of one sample (``(C, H, W)``) and ``block_perm`` the order Keras holds it in
    (``(1, 2, 0)``), ``order[j]`` is the torch feature that sits at Keras position ``j``;
    a following Dense kernel is ``kernel_torch_rows[order]``.
    """
    return np.arange(int(np.prod(block_shape))).reshape(block_shape).transpose(block_perm).ravel()


def lstm_weights_to_keras(weight_ih: np.ndarray, weight_hh: np.ndarray,
                          bias_ih: np.ndarray | None = None, bias_hh: np.ndarray | None = None):
    """Torch LSTM ``weight_ih [4H, F]``, ``weight_hh [4H, H]``, two biases -> Keras LSTM.

    Both frameworks order the gates ``(i, f, g|c, o)``: the kernels are transposes
    (``kernel [F, 4H]``, ``recurrent_kernel [H, 4H]``) and Keras' one bias is
    ``bias_ih + bias_hh`` (pitfalls.md item 13). Returns ``(kernel, recurrent_kernel, bias)``
    (``bias`` None without biases).
    """
    bias = None
    if bias_ih is not None:
        bias = np.asarray(bias_ih) + (0 if bias_hh is None else np.asarray(bias_hh))
    return (np.ascontiguousarray(np.asarray(weight_ih).T),
            np.ascontiguousarray(np.asarray(weight_hh).T), bias)


def lstm_weights_from_keras(kernel: np.ndarray, recurrent_kernel: np.ndarray,
                            bias: np.ndarray | None = None):
    """Inverse of :func:`lstm_weights_to_keras`: ``(weight_ih, weight_hh, bias_ih, bias_hh)``.

    The split of the summed bias is not recoverable: it all goes to ``bias_ih`` and
    ``bias_hh`` is zero (the same LSTM).
    """
    bias_ih = None if bias is None else np.array(bias)
    bias_hh = None if bias is None else np.zeros_like(bias_ih)
    return (np.ascontiguousarray(kernel.T), np.ascontiguousarray(recurrent_kernel.T),
            bias_ih, bias_hh)


_GRU_TO_KERAS = (1, 0, 2)  # torch (r, z, n) -> Keras (z, r, h); the swap is its own inverse


def gru_weights_to_keras(weight_ih: np.ndarray, weight_hh: np.ndarray,
                         bias_ih: np.ndarray | None = None, bias_hh: np.ndarray | None = None):
    """Torch GRU ``weight_ih [3H, F]``, ``weight_hh [3H, H]``, biases -> Keras GRU.

    Torch orders the gates ``(r, z, n)`` and applies the reset gate after the recurrent
    matmul: Keras ``GRU(reset_after=True)`` with gates ``(z, r, h)`` and a bias
    ``[2, 3H]`` (input row, recurrent row). Returns ``(kernel, recurrent_kernel, bias)``.
    """
    def reorder(a):
        return np.concatenate([np.split(np.asarray(a), 3, axis=0)[i] for i in _GRU_TO_KERAS])

    kernel = np.ascontiguousarray(reorder(weight_ih).T)
    recurrent = np.ascontiguousarray(reorder(weight_hh).T)
    bias = None
    if bias_ih is not None:
        bias_hh = np.zeros_like(bias_ih) if bias_hh is None else bias_hh
        bias = np.stack([reorder(bias_ih), reorder(bias_hh)])
    return kernel, recurrent, bias


def gru_weights_from_keras(kernel: np.ndarray, recurrent_kernel: np.ndarray,
                           bias: np.ndarray | None = None):
    """Inverse of :func:`gru_weights_to_keras`: ``(weight_ih, weight_hh, bias_ih, bias_hh)``."""
    def reorder(a):
        return np.concatenate([np.split(a, 3, axis=0)[i] for i in _GRU_TO_KERAS])

    weight_ih = np.ascontiguousarray(reorder(np.asarray(kernel).T))
    weight_hh = np.ascontiguousarray(reorder(np.asarray(recurrent_kernel).T))
    if bias is None:
        return weight_ih, weight_hh, None, None
    return weight_ih, weight_hh, reorder(bias[0]), reorder(bias[1])


def rnn_weights_to_keras(weight_ih: np.ndarray, weight_hh: np.ndarray,
                         bias_ih: np.ndarray | None = None, bias_hh: np.ndarray | None = None):
    """Torch RNN (tanh/relu) weights -> Keras ``SimpleRNN`` ``(kernel, recurrent_kernel, bias)``."""
    return lstm_weights_to_keras(weight_ih, weight_hh, bias_ih, bias_hh)


def rnn_weights_from_keras(kernel: np.ndarray, recurrent_kernel: np.ndarray,
                           bias: np.ndarray | None = None):
    """Inverse of :func:`rnn_weights_to_keras` (the bias goes to ``bias_ih``)."""
    return lstm_weights_from_keras(kernel, recurrent_kernel, bias)
