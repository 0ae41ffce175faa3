"""Create a layer's weights directly from arrays.

``layer(x)`` followed by ``set_weights`` allocates each weight three times (a random
initial value, the variable, the assigned copy: measured 0.81 GB for a 0.26 GB embedding
table, kept by the process). Building the layer with initializers that return the arrays
allocates each weight once, which is what lets a billion-parameter model convert at all.
"""

from __future__ import annotations

import numpy as np


def call_with_weights(layer, x, **arrays):
    """``layer(x)``, its weights (initializer attribute name -> array) created from ``arrays``.

    The layer's own initializers are restored afterwards, so its config (and a saved
    ``.keras`` file) is what plain construction gives.

    Example:
        >>> import keras, numpy as np
        >>> dense = keras.layers.Dense(2, use_bias=False)
        >>> y = call_with_weights(dense, np.ones((1, 3), "float32"),
        ...                       kernel_initializer=np.full((3, 2), 0.5, "float32"))
        >>> y.numpy().tolist()
        [[1.5, 1.5]]
    """
    saved = {name: getattr(layer, name) for name in arrays}
    for name, array in arrays.items():
        setattr(layer, name, _returning(array))
    try:
        return layer(x)
    finally:
        for name, initializer in saved.items():
            setattr(layer, name, initializer)


def _returning(array):
    def initializer(shape, dtype=None):
        if tuple(shape) != tuple(np.shape(array)):
            raise ValueError(f"weight shape {tuple(shape)} != array shape {np.shape(array)}")
        return np.asarray(array, dtype=dtype)  # no copy when the dtype already matches

    return initializer
