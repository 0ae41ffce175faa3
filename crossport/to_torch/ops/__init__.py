"""Reverse converters by Keras layer family; importing this package registers them."""

from crossport.to_torch.ops import (  # noqa: F401
    activation,
    attention,
    conv,
    crossport_layers,
    core,
    kops,
    merge,
    norm,
    pool,
    recurrent,
    shape,
)
