"""``GELU`` with torch's formula (Keras' own ``gelu`` defaults to the tanh approximation)."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops

from crossport.errors import InputError

SQRT1_2 = 0.7071067811865476  # torch's M_SQRT1_2


@keras.saving.register_keras_serializable(package="crossport")
class GELU(keras.layers.Layer):
    """``torch.nn.GELU(approximate)``: ``"none"`` (exact, torch's default) or ``"tanh"``.

    The exact form is torch's CPU formula, ``x * 0.5 * (1 + erf(x * sqrt(1/2)))``, not TF's
    ``0.5 * x * erfc(-x * sqrt(1/2))`` (``keras.ops.gelu``): TF's ``Erfc`` kernel is ~1.5x
    slower than ``Erf`` on CPU, and the TFLite converter turns both forms into one ``GELU``
    op. Half-precision inputs are computed in float32, as torch's CPU kernels do.

    Example:
        >>> import numpy as np
        >>> x = np.array([-1.0, 0.0, 2.0], "float32")
        >>> [round(float(v), 5) for v in GELU()(x)]
        [-0.15866, 0.0, 1.9545]
    """

    def __init__(self, approximate: str = "none", **kwargs: Any):
        kwargs.setdefault("autocast", False)  # a float16 input stays float16, as in torch
        super().__init__(**kwargs)
        if approximate not in ("none", "tanh"):
            raise InputError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}.")
        self.approximate = approximate

    def call(self, inputs: Any) -> Any:
        x = ops.cast(inputs, keras.backend.result_type(inputs.dtype, "float32"))
        if self.approximate == "tanh" and keras.backend.standardize_dtype(x.dtype) == "float64":
            y = _tanh_gelu_float64(x)
        elif self.approximate == "tanh":
            y = ops.gelu(x, approximate=True)
        else:
            y = (x * 0.5) * (1.0 + ops.erf(x * SQRT1_2))
        return ops.cast(y, _output_dtype(inputs.dtype))

    def compute_output_spec(self, inputs: Any) -> keras.KerasTensor:
        return keras.KerasTensor(inputs.shape, dtype=_output_dtype(inputs.dtype))

    def get_config(self) -> dict:
        return {**super().get_config(), "approximate": self.approximate}


def _tanh_gelu_float64(x: Any) -> Any:
    """torch's tanh approximation in float64 with double constants: TF's ``gelu`` casts
    0.044715 to the input's dtype through a float32 tensor (1.2e-10 off at 2.05)."""
    beta = np.float64(1.41421356237309504880 * 1.12837916709551257390 * 0.5)  # M_SQRT2 * M_2_SQRTPI / 2
    inner = ops.multiply(beta, x + ops.multiply(np.float64(0.044715), x * x * x))
    return (x * 0.5) * (1.0 + ops.tanh(inner))


def _output_dtype(dtype: Any) -> str:
    """The input's float dtype; float32 for integer inputs."""
    dtype = keras.backend.standardize_dtype(dtype)
    return dtype if "float" in dtype else "float32"
