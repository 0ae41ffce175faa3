"""``torch.special.airy_ai`` (was "no converter"): :class:`crossport.layers.airy.AiryAi`,
ATen's kernel in keras.ops (its module docstring says how)."""

from __future__ import annotations

import torch

from crossport.layers.airy import AiryAi
from crossport.to_keras.ops.special import _floating, _floats_only
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.values import keras_dtype

aten = torch.ops.aten


@register(aten.special_airy_ai.default, policy=Policy.AGNOSTIC, supports=_floats_only,
          dynamic=True)
def aten_special_airy_ai_default(ctx, x):
    """special_airy_ai(Tensor x) -> Tensor: the Airy function Ai(x), ATen's three regions
    (0 past x = 103.892, NaN at +-inf)."""
    return AiryAi(dtype=keras_dtype(ctx.out_dtype), name=ctx.name())(_floating(ctx, x))
