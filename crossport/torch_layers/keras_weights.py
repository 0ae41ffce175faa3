"""Keras variables into torch parameters: the one copy step of every ``from_keras``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from crossport.errors import InputError


def keras_array(variable) -> np.ndarray:
    """A Keras variable's value as a numpy array."""
    return np.asarray(variable.numpy())


def copy_into(param: torch.Tensor, array: np.ndarray) -> None:
    """``param[...] = array``; a shape mismatch is an InputError, not a broadcast."""
    if tuple(param.shape) != array.shape:
        raise InputError(f"weight shape {array.shape} does not fit {tuple(param.shape)}")
    with torch.no_grad():
        param.copy_(torch.from_numpy(np.ascontiguousarray(array)))


def load_kernel_and_bias(module: nn.Module, layer,
                         kernel_rule: Callable[[np.ndarray], np.ndarray]) -> nn.Module:
    """Copy ``layer.kernel`` (through its layout rule) and ``layer.bias`` into ``module``."""
    copy_into(module.weight, kernel_rule(keras_array(layer.kernel)))
    if module.bias is not None:
        copy_into(module.bias, keras_array(layer.bias))
    return module
