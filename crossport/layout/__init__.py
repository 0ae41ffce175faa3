"""Layout: the order each tensor's axes take in the target framework (see layout.py).

Shared by both directions: ``Layout`` (a permutation from the reference tensor to the held
one), ``Policy`` (policy.py: what a converter wants) and the analysis in assign.py.
"""

from crossport.layout.layout import (
    FlatOrder,
    Layout,
    canonical,
    channels_first,
    channels_last,
    permuted_shape,
    transpose_between,
)
from crossport.layout.policy import Policy

__all__ = [
    "FlatOrder",
    "Layout",
    "Policy",
    "canonical",
    "channels_first",
    "channels_last",
    "permuted_shape",
    "transpose_between",
]
