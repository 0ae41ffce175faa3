"""Converter families; importing this package registers every built-in converter."""

from crossport.to_keras.ops import (  # noqa: F401
    activation,
    conv,
    elementwise,
    linear,
    misc,
    norm,
    pad,
    pool,
    reduce,
    shape,
)
