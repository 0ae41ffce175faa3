"""Reverse converters by Keras layer family; importing this package registers them."""

from crossport.to_torch.ops import (  # noqa: F401  (registers on import)
    activation,
    attention,
    conv,
    core,
    crossport_layers,
    elementwise,
    fft,
    indexing,
    kops,
    linalg,
    merge,
    norm,
    numeric,
    pool,
    recurrent,
    shape,
    statistics,
    traced,
    wrappers,
)
