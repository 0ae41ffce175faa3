"""``Constant``: a layer that returns a stored array (a torch buffer or parameter used as a value)."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops


@keras.saving.register_keras_serializable(package="crossport")
class Constant(keras.layers.Layer):
    """Returns a fixed array, whatever it is called on (no batch dim is added).

    The array is stored as a weight, so it lives in the ``.keras`` weights file and not in the
    config (which holds only its shape and dtype): large buffers do not bloat the JSON.

    Args:
        value: the array to return (anything ``np.asarray`` accepts).
        trainable: whether the array is a trainable weight (default False: a buffer).
        **kwargs: standard Keras layer arguments (``name``...).

    Example:
        >>> import numpy as np, keras
        >>> layer = Constant(np.arange(6, dtype="float32").reshape(2, 3))
        >>> keras.ops.convert_to_numpy(layer(keras.ops.zeros((4, 1)))).shape
        (2, 3)
    """

    def __init__(
        self,
        value: Any = None,
        trainable: bool = False,
        shape: tuple[int, ...] | None = None,
        value_dtype: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(trainable=trainable, **kwargs)
        if value is None:
            # From a config: the value comes back with the weights.
            if shape is None or value_dtype is None:
                raise ValueError("Constant needs `value`, or `shape` and `value_dtype`.")
            array = np.zeros(shape, dtype=value_dtype)
        else:
            array = np.asarray(value)
            if array.dtype == np.float64 and self.compute_dtype != "float64":
                # Keras' float default; torch params are float32. A float64 model (built
                # under a float64 dtype policy) keeps its doubles: bucketize's float64
                # boundaries [0.1, 0.3] were searched as 0.10000000149, 0.30000001192
                array = array.astype(np.float32)
        self.value_shape = tuple(int(s) for s in array.shape)
        self.value_dtype = str(array.dtype)
        self.value = self.add_weight(
            name="value",
            shape=self.value_shape,
            dtype=self.value_dtype,
            initializer="zeros",
            trainable=trainable,
            autocast=False,
        )
        if array.size:
            self.value.assign(array)
        self.built = True

    def build(self, input_shape: Any = None) -> None:
        self.built = True

    def call(self, inputs: Any = None) -> Any:
        # A copy: returning the variable itself would leak it out of a Functional model.
        return ops.copy(self.value)

    def compute_output_spec(self, inputs: Any = None) -> keras.KerasTensor:
        return keras.KerasTensor(self.value_shape, dtype=self.value_dtype)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            shape=self.value_shape, value_dtype=self.value_dtype, trainable=self.trainable
        )
        return config
