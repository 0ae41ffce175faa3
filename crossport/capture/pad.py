"""Circular ``F.pad`` with run-time amounts as one opaque op during capture.

torch runs ``_pad_circular`` on fake tensors through C++ code that branches on each amount
(``if pad > 0``: copy the wrapped block) and compares slice sizes, and torch.export keeps
those branches as guards on the sizes: with an example where the amount is 0 it records
``w + pad == w``, as if the model only ran at sizes that need no padding (the size check
would then refuse the dim, although the graph's ``pad`` takes any amount). While capturing,
``F.pad(x, pad, "circular")`` with an amount computed from a dynamic size calls
``crossport::pad_circular`` instead: its fake (shape) function adds the amounts without
branching, and its real kernel is torch's own circular pad, so the exported program
computes exactly what torch does. Reflect and replicate pads have symbolic meta functions
(their only guard is reflect's ``pad < size``, torch's own limit) and stay aten ops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


@torch.library.custom_op("crossport::pad_circular", mutates_args=())
def pad_circular(self: Tensor, pad: list[int]) -> Tensor:
    """``F.pad(self, pad, mode="circular")``: torch's kernel, its errors included."""
    return torch._C._nn.pad(self, pad, "circular", None)


@pad_circular.register_fake
def _pad_circular_fake(self, pad):
    shape = list(self.shape)
    for i in range(len(pad) // 2):
        shape[-1 - i] = shape[-1 - i] + pad[2 * i] + pad[2 * i + 1]
    return self.new_empty(shape)


def _takes_opaque(input, pad, mode, value) -> bool:
    """A circular pad torch accepts the form of, with an amount that is a traced size."""
    if mode != "circular" or value is not None or not isinstance(input, Tensor):
        return False
    if len(pad) % 2 or not 1 <= len(pad) // 2 <= 3 or input.dim() - len(pad) // 2 not in (1, 2):
        return False  # torch's own error, from its own kernel
    return any(isinstance(p, torch.SymInt) for p in pad)


@contextlib.contextmanager
def opaque_dynamic_pads() -> Iterator[None]:
    """Within the block, ``F.pad`` routes circular pads with traced amounts to
    ``crossport::pad_circular`` (``nn.CircularPad*d`` call ``F.pad`` too)."""
    original = F.pad

    def pad(input, pad, mode="constant", value=None):
        if _takes_opaque(input, pad, mode, value):
            return torch.ops.crossport.pad_circular(input, list(pad))
        return original(input, pad, mode, value)

    pad.__doc__, pad.__wrapped__ = original.__doc__, original
    F.pad = pad
    try:
        yield
    finally:
        F.pad = original
