"""Graph bookkeeping ops that compute nothing in an inference model."""

from __future__ import annotations

import torch

from crossport.to_keras.registry import Policy, register

aten = torch.ops.aten


@register(aten._assert_tensor_metadata.default, aten._assert_scalar.default,
          aten.sym_constrain_range_for_size.default, aten._assert_async.msg,
          policy=Policy.CUSTOM)
def aten_assert_tensor_metadata_default(ctx, *args, **kwargs):
    """Assertions torch.export records about shapes and dtypes: checked at export, dropped."""
    return None
