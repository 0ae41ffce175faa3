"""``crossport::dynamic_update_slice``: write a block at a run-time offset, in O(block).

torch has no dynamic-offset slice assignment that ``torch.export`` keeps without a
data-dependent ``.item()``; ``index_copy``/``index_put`` take arbitrary indices, so their
converters must touch every slot. This op states the contiguous case, with XLA's and
TFLite's ``DYNAMIC_UPDATE_SLICE`` semantics (the start is clamped so the block fits), so the
converter emits that one builtin and both sides compute the same thing for every input.

Example:
    >>> import torch
    >>> from crossport.capture.update_slice import dynamic_update_slice
    >>> dynamic_update_slice(torch.zeros(5), torch.ones(2), torch.tensor([2]), 0).tolist()
    [0.0, 0.0, 1.0, 1.0, 0.0]
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


@torch.library.custom_op("crossport::dynamic_update_slice", mutates_args=())
def dynamic_update_slice(self: Tensor, src: Tensor, start: Tensor, dim: int) -> Tensor:
    """``self`` with ``self.narrow(dim, s, src.size(dim))`` replaced by ``src``, where
    ``s = clamp(start[0], 0, self.size(dim) - src.size(dim))``; ``src`` has ``self``'s sizes
    on every other dim."""
    count = src.shape[dim]
    first = int(start.reshape(-1)[0].clamp(0, self.shape[dim] - count))
    out = self.clone()
    out.narrow(dim, first, count).copy_(src.to(self.dtype))
    return out


@dynamic_update_slice.register_fake
def _dynamic_update_slice_fake(self, src, start, dim):
    return self.new_empty(self.shape)
