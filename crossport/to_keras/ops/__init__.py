"""Converter families; importing this package registers every built-in converter."""

from crossport.to_keras.ops import (  # noqa: F401
    activation,
    conv,
    conv_transpose,
    elementwise,
    linear,
    misc,
    norm,
    pad,
    pool,
    reduce,
    resize,
    shape,
    shuffle,
)
