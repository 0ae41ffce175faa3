"""Converter families; importing this package registers every built-in converter."""

from crossport.to_keras.ops import (  # noqa: F401
    activation,
    assign,
    attention,
    conv,
    conv_transpose,
    elementwise,
    index,
    linalg,
    linear,
    misc,
    norm,
    pad,
    pool,
    recurrent,
    reduce,
    resize,
    shape,
    shuffle,
    update_slice,
)
