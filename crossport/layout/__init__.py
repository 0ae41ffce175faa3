"""Layout: which order each tensor's axes take in the Keras model (see layout.py)."""

from crossport.layout.layout import (
    FlatOrder,
    Layout,
    canonical,
    channels_last,
    permuted_shape,
    transpose_between,
)

__all__ = [
    "FlatOrder",
    "Layout",
    "canonical",
    "channels_last",
    "permuted_shape",
    "transpose_between",
]
