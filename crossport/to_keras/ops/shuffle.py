"""pixel_shuffle / pixel_unshuffle on channels-last activations.

Torch orders the packed channels ``c*r*r + i*r + j`` (channel-major, "CRD"); TF's
``depth_to_space`` orders them ``(i*r + j)*C + c`` ("DCR"), so it cannot be used as is.
The converter emits ``crossport.layers.PixelShuffle``/``PixelUnshuffle``, which do the
exact rearrangement (reshape, transpose of the split axes, reshape) on channels-last data.
"""

from __future__ import annotations

import torch

from crossport import layers as torch_semantics
from crossport.to_keras.registry import Policy, register

aten = torch.ops.aten


def _rank4(node: torch.fx.Node) -> str | None:
    val = node.args[0].meta.get("val")
    if val is None or val.dim() != 4:
        return "pixel (un)shuffle of a tensor that is not [N, C, H, W]"
    return None


@register(aten.pixel_shuffle.default, policy=Policy.CHANNELS_LAST, supports=_rank4, dynamic=True)
def aten_pixel_shuffle_default(ctx, self, upscale_factor):
    """pixel_shuffle(Tensor self, int upscale_factor) -> Tensor

    out[c, h*r+i, w*r+j] = in[c*r*r + i*r + j, h, w] (TF depth_to_space packs i,j first):
    crossport.layers.PixelShuffle.
    """
    layer = torch_semantics.PixelShuffle(int(upscale_factor), data_format="channels_last",
                                         name=ctx.name())
    return layer(self)


@register(aten.pixel_unshuffle.default, policy=Policy.CHANNELS_LAST, supports=_rank4, dynamic=True)
def aten_pixel_unshuffle_default(ctx, self, downscale_factor):
    """pixel_unshuffle(Tensor self, int downscale_factor) -> Tensor: crossport.layers.PixelUnshuffle"""
    layer = torch_semantics.PixelUnshuffle(int(downscale_factor), data_format="channels_last",
                                           name=ctx.name())
    return layer(self)
