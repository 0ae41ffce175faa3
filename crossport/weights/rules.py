"""The layout rules (pitfalls.md items 1, 6, 9, 10). Shapes use torch's names."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def conv_weight_to_keras(weight: np.ndarray) -> np.ndarray:
    """Conv kernel ``[out, in/groups, *k]`` -> Keras ``[*k, in/groups, out]`` (any rank)."""
    spatial = tuple(range(2, weight.ndim))
    return np.ascontiguousarray(np.transpose(weight, (*spatial, 1, 0)))


def conv_weight_from_keras(kernel: np.ndarray) -> np.ndarray:
    """Inverse of :func:`conv_weight_to_keras`."""
    n_spatial = kernel.ndim - 2
    return np.ascontiguousarray(np.transpose(kernel, (n_spatial + 1, n_spatial, *range(n_spatial))))


def depthwise_weight_to_keras(weight: np.ndarray, in_channels: int) -> np.ndarray:
    """Depthwise kernel ``[in*mult, 1, *k]`` -> Keras ``[*k, in, mult]``.

    Output channel ``c*mult + m`` reads input channel ``c`` in both frameworks.
    """
    out_channels = weight.shape[0]
    mult = out_channels // in_channels
    spatial = weight.shape[2:]
    grouped = weight.reshape(in_channels, mult, *spatial)
    n = len(spatial)
    return np.ascontiguousarray(np.transpose(grouped, (*range(2, 2 + n), 0, 1)))


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
    return np.ascontiguousarray(np.transpose(weight, (*spatial, 1, 0)))


def conv_transpose_weight_from_keras(kernel: np.ndarray) -> np.ndarray:
    """Inverse of :func:`conv_transpose_weight_to_keras`."""
    return conv_weight_from_keras(kernel)


def dense_weight_to_keras(weight: np.ndarray) -> np.ndarray:
    """Linear weight ``[out, in]`` -> Dense kernel ``[in, out]``."""
    return np.ascontiguousarray(weight.T)


def dense_weight_from_keras(kernel: np.ndarray) -> np.ndarray:
    """Inverse of :func:`dense_weight_to_keras`."""
    return np.ascontiguousarray(kernel.T)


def flat_feature_order(block_shape: Sequence[int], block_perm: Sequence[int]) -> np.ndarray:
    """Torch feature index of each Keras feature after a flatten of a permuted block.

    ``torch.flatten(x, 1)`` of an NCHW block orders features C-major; the same flatten of the
    NHWC block orders them H, W, C (pitfalls.md item 9). With ``block_shape`` the torch
    shape of one sample (``(C, H, W)``) and ``block_perm`` the order Keras holds it in
    (``(1, 2, 0)``), ``order[j]`` is the torch feature that sits at Keras position ``j``;
    a following Dense kernel is ``kernel_torch_rows[order]``.
    """
    return np.arange(int(np.prod(block_shape))).reshape(block_shape).transpose(block_perm).ravel()
