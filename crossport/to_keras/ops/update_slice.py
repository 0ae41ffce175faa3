"""``crossport::dynamic_update_slice`` (crossport.capture.update_slice) -> one
``keras.ops.slice_update``, which TFLite runs as its ``DYNAMIC_UPDATE_SLICE`` builtin: the
block is written in O(block) instead of a ``where`` over every slot."""

from __future__ import annotations

import keras
import torch

import crossport.capture.update_slice  # noqa: F401  (defines the op)
from crossport.layout import canonical
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register

ops = keras.ops


@register(torch.ops.crossport.dynamic_update_slice.default, policy=Policy.CUSTOM, dynamic=True)
def crossport_dynamic_update_slice_default(ctx, self, src, start, dim):
    """dynamic_update_slice(Tensor self, Tensor src, Tensor start, int dim) -> Tensor

    The start is clamped to ``[0, size - count]`` by the builtin itself, as the torch op
    does; the other dims start at 0.
    """
    x, y = (ctx.canonical(as_value(ctx, t)) for t in (self, src))
    if y.dtype != x.dtype:
        y = ops.cast(y, x.dtype)
    first = ops.cast(ops.reshape(ctx.canonical(as_value(ctx, start)), [-1])[0], "int32")
    starts = [0] * len(x.shape)
    starts[dim % len(x.shape)] = first
    ctx.out_layout = canonical(len(x.shape))
    return ops.slice_update(x, starts, y)
