"""pixel_shuffle / pixel_unshuffle on channels-last activations.

Torch orders the packed channels ``c*r*r + i*r + j`` (channel-major, "CRD"); TF's
``depth_to_space`` orders them ``(i*r + j)*C + c`` ("DCR"), so it cannot be used as is.
On a channels-last tensor the exact rearrangement is one reshape, one transpose of the
split axes and one reshape.
"""

from __future__ import annotations

import keras
import torch

from crossport.to_keras.registry import Policy, register

aten = torch.ops.aten
ops = keras.ops


def _rank4(node: torch.fx.Node) -> str | None:
    val = node.args[0].meta.get("val")
    if val is None or val.dim() != 4:
        return "pixel (un)shuffle of a tensor that is not [N, C, H, W]"
    return None


@register(aten.pixel_shuffle.default, policy=Policy.CHANNELS_LAST, supports=_rank4)
def aten_pixel_shuffle_default(ctx, self, upscale_factor):
    """pixel_shuffle(Tensor self, int upscale_factor) -> Tensor

    out[c, h*r+i, w*r+j] = in[c*r*r + i*r + j, h, w] (TF depth_to_space packs i,j first).
    """
    r = int(upscale_factor)
    _, channels, height, width = ctx.arg_shape(0)
    c = channels // (r * r)
    x = ops.reshape(self, (-1, height, width, c, r, r))
    x = ops.transpose(x, (0, 1, 4, 2, 5, 3))
    return ops.reshape(x, (-1, height * r, width * r, c))


@register(aten.pixel_unshuffle.default, policy=Policy.CHANNELS_LAST, supports=_rank4)
def aten_pixel_unshuffle_default(ctx, self, downscale_factor):
    """pixel_unshuffle(Tensor self, int downscale_factor) -> Tensor (inverse of pixel_shuffle)"""
    r = int(downscale_factor)
    _, channels, height, width = ctx.arg_shape(0)
    h, w = height // r, width // r
    x = ops.reshape(self, (-1, h, r, w, r, channels))
    x = ops.transpose(x, (0, 1, 3, 5, 2, 4))
    return ops.reshape(x, (-1, h, w, channels * r * r))
