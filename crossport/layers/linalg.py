"""Linear-algebra layers for what `keras.ops` lacks: singular values of run-time-size
matrices and the matrix exponential."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="crossport")
class SingularValues(keras.layers.Layer):
    """The singular values of the last two axes, largest first (``torch.linalg.svdvals``).

    ``keras.ops.svd`` cannot infer its output shape when a matrix dim is ``None``; this
    layer can (the count is ``None`` then).

    Example:
        >>> import keras, numpy as np
        >>> s = SingularValues()(np.diag([3.0, 1.0, 2.0]).astype("float32")[None])
        >>> np.round(keras.ops.convert_to_numpy(s), 5).tolist()
        [[3.0, 2.0, 1.0]]
    """

    def call(self, x: Any) -> Any:
        return ops.svd(x, full_matrices=False, compute_uv=False)

    def compute_output_spec(self, x: Any) -> keras.KerasTensor:
        rows, columns = x.shape[-2:]
        count = None if rows is None or columns is None else min(rows, columns)
        return keras.KerasTensor((*x.shape[:-2], count), dtype=x.dtype)


@keras.saving.register_keras_serializable(package="crossport")
class MatrixExponential(keras.layers.Layer):
    """``exp`` of the square matrices on the last two axes (``torch.linalg.matrix_exp``):
    TF's Padé approximant with scaling and squaring (``tf.linalg.expm``).

    Example:
        >>> import numpy as np
        >>> e = MatrixExponential()(np.array([[[0.0, 1.0], [0.0, 0.0]]], "float32"))
        >>> keras.ops.convert_to_numpy(e).tolist()
        [[[1.0, 1.0], [0.0, 1.0]]]
    """

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("autocast", False)  # a float64 input stays float64, as in torch
        super().__init__(**kwargs)

    def call(self, x: Any) -> Any:
        import tensorflow as tf

        return tf.linalg.expm(x)

    def compute_output_spec(self, x: Any) -> keras.KerasTensor:
        return keras.KerasTensor(x.shape, dtype=x.dtype)
