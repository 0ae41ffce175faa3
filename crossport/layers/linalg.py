"""``SingularValues``: ``keras.ops.svd`` singular values for matrices of run-time size."""

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
