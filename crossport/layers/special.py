"""Special functions built from TFLite builtin ops.

TF's ``Erf`` has no TFLite builtin: a model using it would need the Flex delegate, which
standalone LiteRT lacks. :class:`Erf` computes erf from multiplies, adds, a divide and
clamps, which every TFLite runtime (and XNNPACK) runs.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

# erf(x) = x * P(x^2) / Q(x^2) on |x| <= ERF_CLAMP, a rational fit (least squares with
# Lawson reweighting towards minimax, in float64) of degree 5/5 in x^2. Relative error of
# the fit 1.9e-8; evaluated in float32: at most 4.4e-7 absolute, ~7 float32 ulps relative
# (tests/layers/test_special.py measures it against float64). Past the clamp erf(x)
# rounds to +-1 in float32.
ERF_CLAMP = 3.92
ERF_P = (1.1283791461727268, 0.19040680184514738, 0.052748760922216816,
         0.0037656294328174294, 0.0002848826533571527, 2.050079997609288e-06)
ERF_Q = (1.0, 0.5020763756457227, 0.11410924412525691, 0.014969242070902595,
         0.0011625378720973526, 3.8091636117396854e-05)


def _horner(t: Any, coefficients: tuple[float, ...]) -> Any:
    """``sum(c[k] * t**k)``, highest power first."""
    acc = ops.multiply(t, coefficients[-1])
    for c in reversed(coefficients[1:-1]):
        acc = ops.multiply(ops.add(acc, c), t)
    return ops.add(acc, coefficients[0])


def erf(x: Any) -> Any:
    """The error function from builtin-only ops (see the module docstring).

    Example:
        >>> import numpy as np
        >>> [round(float(v), 6) for v in erf(np.array([-1.0, 0.0, 0.5], "float32"))]
        [-0.842701, 0.0, 0.5205]
    """
    x = ops.clip(x, -ERF_CLAMP, ERF_CLAMP)
    t = ops.square(x)
    y = ops.divide(ops.multiply(x, _horner(t, ERF_P)), _horner(t, ERF_Q))
    return ops.clip(y, -1.0, 1.0)  # float32 rounding may overshoot 1 by an ulp or two


@keras.saving.register_keras_serializable(package="crossport")
class Erf(keras.layers.Layer):
    """``torch.erf`` with TFLite builtin ops only (no Flex delegate needed).

    Example:
        >>> import numpy as np
        >>> round(float(Erf()(np.array([0.5], "float32"))[0]), 6)
        0.5205
    """

    def call(self, x):
        return erf(x)

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, dtype=x.dtype)


@keras.saving.register_keras_serializable(package="crossport")
class LogGamma(keras.layers.Layer):
    """``torch.lgamma``: TF's Lgamma (the C library's lgamma, as torch's CPU kernel).

    Example:
        >>> import numpy as np
        >>> [round(float(v), 5) for v in LogGamma()(np.array([0.5, 3.0], "float32"))]
        [0.57236, 0.69315]
    """

    def call(self, x):
        import tensorflow as tf

        return tf.math.lgamma(x)


@keras.saving.register_keras_serializable(package="crossport")
class Digamma(keras.layers.Layer):
    """TF's Digamma (Eigen's series; NaN at 0 and at the negative integers).

    Example:
        >>> import numpy as np
        >>> round(float(Digamma()(np.array([1.0], "float32"))[0]), 5)
        -0.57722
    """

    def call(self, x):
        import tensorflow as tf

        return tf.math.digamma(x)


# Special functions keras.ops lacks, by the name of TF's kernel (tf.math / tf.math.special)
_TF_SPECIAL = {
    "bessel_i0e": ("math", "bessel_i0e"), "bessel_i1": ("math", "bessel_i1"),
    "bessel_i1e": ("math", "bessel_i1e"), "bessel_k0": ("math.special", "bessel_k0"),
    "bessel_k1": ("math.special", "bessel_k1"), "bessel_k0e": ("math.special", "bessel_k0e"),
    "bessel_k1e": ("math.special", "bessel_k1e"), "bessel_j0": ("math.special", "bessel_j0"),
    "bessel_j1": ("math.special", "bessel_j1"), "bessel_y0": ("math.special", "bessel_y0"),
    "bessel_y1": ("math.special", "bessel_y1"), "ndtri": ("math", "ndtri"),
    "igamma": ("math", "igamma"), "igammac": ("math", "igammac"), "zeta": ("math", "zeta"),
    "nextafter": ("math", "nextafter"),
}


def _tf_special(function: str):
    import tensorflow as tf

    module, name = _TF_SPECIAL[function]
    for part in module.split("."):
        tf = getattr(tf, part)
    return getattr(tf, name)


@keras.saving.register_keras_serializable(package="crossport")
class TFSpecialFunction(keras.layers.Layer):
    """A special function Keras has no op for, as TF's kernel of that name computes it
    (``function``: ``bessel_i1``, ``bessel_k0``, ``ndtri``, ``igamma``, ``zeta`` ...). One
    tensor argument, or a list of two for the binary ones (``igamma(a, x)``, ``zeta(x, q)``,
    ``nextafter(x, toward)``), which broadcast.

    Example:
        >>> import numpy as np
        >>> layer = TFSpecialFunction("bessel_i1")
        >>> round(float(layer(np.array([1.0], "float32"))[0]), 5)
        0.56516
    """

    def __init__(self, function: str, **kwargs):
        super().__init__(**kwargs)
        if function not in _TF_SPECIAL:
            raise ValueError(f"unknown special function {function!r}; one of "
                             f"{sorted(_TF_SPECIAL)}")
        self.function = function

    def call(self, inputs):
        arguments = inputs if isinstance(inputs, (list, tuple)) else [inputs]
        return _tf_special(self.function)(*arguments)

    def get_config(self):
        return {**super().get_config(), "function": self.function}
