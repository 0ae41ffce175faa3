"""Layout: the order each tensor's axes take in the target framework (see layout.py).

Shared by both directions: ``Layout`` (a permutation from the reference tensor to the held
one), ``Policy`` (policy.py: what a converter wants), the dim-remapping contract (dims.py:
which held axes a reference dim, permutation or pad names, and the layout of the result)
and the analysis in assign.py.
"""

from crossport.layout.dims import (
    after_insert,
    after_permute,
    after_reduce,
    after_unfold,
    dims_at,
    dims_last,
    normalize_dims,
    order_free,
    physical_array,
    physical_axes,
    physical_axis,
    physical_broadcast,
    physical_index,
    physical_order,
    physical_pad,
    reduction_dims,
    shared_layout,
    transpose_perm,
)
from crossport.layout.layout import (
    FlatOrder,
    Layout,
    canonical,
    channels_first,
    channels_last,
    io_layout,
    keras_kernel,
    normalize_dim,
    permuted_shape,
    torch_kernel,
    transpose_between,
)
from crossport.layout.policy import Policy

__all__ = [
    "FlatOrder",
    "Layout",
    "Policy",
    "after_insert",
    "after_permute",
    "after_reduce",
    "after_unfold",
    "canonical",
    "channels_first",
    "channels_last",
    "dims_at",
    "dims_last",
    "io_layout",
    "keras_kernel",
    "normalize_dim",
    "normalize_dims",
    "order_free",
    "permuted_shape",
    "physical_array",
    "physical_axes",
    "physical_axis",
    "physical_broadcast",
    "physical_index",
    "physical_order",
    "physical_pad",
    "reduction_dims",
    "shared_layout",
    "torch_kernel",
    "transpose_between",
    "transpose_perm",
]
