"""torch's ``nn.Transformer*`` modules, captured as eager torch computes them.

**A mask compared with the causal mask.** Given a mask and no ``is_causal``, the encoder
and decoder ask ``_detect_is_causal_mask`` whether it equals the causal mask, a comparison of
values that ``torch.export`` cannot branch on (nn.Transformer's own documented use,
``tgt_mask=generate_square_subsequent_mask(n)``, failed to capture). The answer only picks
how the same masked attention runs (the mask, or SDPA's ``is_causal`` when it is that
mask), so while capturing it is "not known causal": the mask is applied as given.

**The nested-tensor path.**

In eval mode with a ``src_key_padding_mask`` (and no grad, no ``mask``), eager
``TransformerEncoder.forward`` packs the batch into a nested tensor when every row's padding
is at its end ("left aligned"), runs the layers on the real tokens only and pads the result
back with **zeros** before its final ``norm``. Under ``torch.export`` that path is off
(``mask_check enabled with torch.compile or torch.export``), so the program computes the
padded positions from the masked attention instead: same values at real tokens, different
ones at pads (zeros, or ``norm(0)``), and the check rightly failed.

While capturing, :func:`eager_nested_transformers` makes ``TransformerEncoder.forward``
add what the eager path does, in graph ops: the pads of a left-aligned mask are zeroed
before ``norm`` (the alignment is tested in the graph, as eager tests it at run time).
Inference semantics: with grad enabled and trainable weights eager torch skips the path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
import torch.nn.modules.transformer as torch_transformer
from torch import nn


@contextlib.contextmanager
def eager_transformers() -> Iterator[None]:
    """Within the block, ``nn.TransformerEncoder`` zeroes padded positions as eager torch's
    nested-tensor path does, and masks are not compared with the causal mask (a class
    attribute and a module function swapped and restored, as the RNN ops are)."""
    original = nn.TransformerEncoder.forward
    detect = torch_transformer._detect_is_causal_mask

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        if not _eager_nests(self, src, mask, src_key_padding_mask):
            return original(self, src, mask, src_key_padding_mask, is_causal)
        canonical = F._canonical_mask(mask=src_key_padding_mask, mask_name="src_key_padding_mask",
                                      other_type=None, other_name="mask", target_type=src.dtype,
                                      check_other=False)
        pad = canonical != 0  # the pads (eager's ``logical_not()`` of it: the real tokens)
        zeroed = _zero_left_aligned_pads(pad)
        if self.norm is None:
            return zeroed(None, (original(self, src, mask, src_key_padding_mask, is_causal),))[0]
        handle = self.norm.register_forward_pre_hook(zeroed, prepend=True)  # before norm's own
        try:
            return original(self, src, mask, src_key_padding_mask, is_causal)
        finally:
            handle.remove()

    nn.TransformerEncoder.forward = forward
    torch_transformer._detect_is_causal_mask = _given_is_causal
    try:
        yield
    finally:
        nn.TransformerEncoder.forward = original
        torch_transformer._detect_is_causal_mask = detect


def _given_is_causal(mask, is_causal=None, size=None) -> bool:
    """``_detect_is_causal_mask`` without comparing the mask's values: the hint as given."""
    return is_causal is True


def _eager_nests(encoder, src, mask, src_key_padding_mask) -> bool:
    """Whether eager ``forward`` would take the nested path, but for the run-time alignment
    test (the conditions known at capture, in torch's order)."""
    first = encoder.layers[0]
    return (torch.backends.mha.get_fastpath_enabled()
            and getattr(encoder, "use_nested_tensor", False)
            and getattr(encoder, "mask_check", True)
            and not first.training and src.dim() == 3 and src_key_padding_mask is not None
            and mask is None and not torch.is_autocast_enabled()
            and src.device.type in ("cpu", "cuda"))


def _zero_left_aligned_pads(pad: torch.Tensor):
    """A pre-hook (and plain function) zeroing ``pad`` positions of its first argument when
    every row's pads come after its tokens."""

    def zeroed(_module, args):
        hidden, *rest = args
        later_token = pad[:, :-1] & ~pad[:, 1:]  # a pad followed by a real token
        aligned = ~later_token.any()
        return (torch.where((pad & aligned)[..., None], torch.zeros_like(hidden), hidden),
                *rest)

    return zeroed
