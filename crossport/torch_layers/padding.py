"""TensorFlow padding rules in torch: TF's asymmetric ``SAME`` and ``tf.pad`` (pitfalls 4, 7)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from crossport.errors import InputError

__all__ = ["TFPad", "same_padding", "same_paddings"]


def same_padding(in_size: int, kernel: int, stride: int = 1, dilation: int = 1) -> tuple[int, int]:
    """Padding ``(before, after)`` that TensorFlow's ``padding="SAME"`` applies to one dim.

    TF pads ``total = max((ceil(in/s) - 1)*s + (k-1)*d + 1 - in, 0)`` and puts the odd
    element **after** (bottom/right), so with a stride > 1 or an even kernel the padding is
    asymmetric and torch's symmetric integer ``padding=`` cannot express it.

    Args:
        in_size: length of the (unpadded) input dim.
        kernel: kernel (or pooling window) size.
        stride: stride.
        dilation: dilation rate.

    Returns:
        ``(before, after)`` with ``before = total // 2``.

    Example:
        >>> same_padding(4, 2, stride=2)
        (0, 0)
        >>> same_padding(5, 3, stride=2)
        (1, 1)
        >>> same_padding(6, 3, stride=2)
        (0, 1)
    """
    effective = (kernel - 1) * dilation + 1
    # = (ceil(in/s) - 1)*s + effective - in for in >= 1, in integer arithmetic whose padded
    # size s*((in-1)//s) + effective torch.export can bound at a run-time size (a float
    # ceil and a max it cannot: it refused small minimum sizes); the clamp is needed only
    # when the window is shorter than the stride
    total = stride * ((in_size - 1) // stride) + effective - in_size
    if effective < stride:
        total = torch.sym_max(total, 0)
    return total // 2, total - total // 2


def same_paddings(
    spatial: Sequence[int], kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]
) -> list[int]:
    """``F.pad`` argument (last dim first) for TF ``SAME`` over several spatial dims."""
    pads: list[int] = []
    for size, k, s, d in reversed(list(zip(spatial, kernel, stride, dilation))):
        pads.extend(same_padding(size, k, s, d))
    return pads


def _mirror_index(size: int, before: int, after: int, symmetric: bool) -> torch.Tensor:
    """Source index of every output position of a REFLECT/SYMMETRIC pad of one dim."""
    idx = torch.arange(-before, size + after)
    if symmetric:  # edge repeated: -1 -> 0, size -> size-1
        idx = torch.where(idx < 0, -idx - 1, idx)
        idx = torch.where(idx >= size, 2 * size - 1 - idx, idx)
    else:  # edge not repeated: -1 -> 1, size -> size-2
        idx = idx.abs()
        idx = torch.where(idx >= size, 2 * (size - 1) - idx, idx)
    return idx


class TFPad(nn.Module):
    """``tf.pad`` with TensorFlow's argument order and modes.

    ``paddings`` is ``[[before, after], ...]`` for every dim **starting from the first**
    (``tf.pad`` order), where ``F.pad`` lists pairs from the last dim. Modes ``CONSTANT``,
    ``REFLECT`` (edge not repeated, ``pad <= size-1``) and ``SYMMETRIC`` (edge repeated,
    ``pad <= size``); the last has no ``F.pad`` mode.

    Args:
        paddings: one ``(before, after)`` pair per input dim, first dim first.
        mode: ``"CONSTANT"``, ``"REFLECT"`` or ``"SYMMETRIC"`` (case-insensitive).
        constant_values: fill value of ``CONSTANT``.
        from_channels_last: the pairs are those of the original channels-last TF tensor
            (``[N, H, W, C]``) and the module pads its channels-first port (``[N, C, H, W]``):
            the last pair moves to position 1.

    Example:
        >>> import torch
        >>> pad = TFPad([[0, 0], [0, 0], [1, 2], [2, 1]], mode="SYMMETRIC")
        >>> pad(torch.zeros(1, 3, 4, 4)).shape
        torch.Size([1, 3, 7, 7])
        >>> TFPad([[0, 0], [1, 0], [0, 1], [0, 0]], from_channels_last=True).paddings
        ((0, 0), (0, 0), (1, 0), (0, 1))
    """

    def __init__(
        self,
        paddings: Sequence[Sequence[int]],
        mode: str = "CONSTANT",
        constant_values: float = 0.0,
        from_channels_last: bool = False,
    ) -> None:
        super().__init__()
        pairs = tuple((int(p[0]), int(p[1])) for p in paddings)
        if any(b < 0 or a < 0 for b, a in pairs):
            raise InputError(f"tf.pad paddings must be >= 0, got {pairs}")
        if from_channels_last and len(pairs) >= 3:
            pairs = (pairs[0], pairs[-1], *pairs[1:-1])
        self.paddings = pairs
        self.mode = mode.upper()
        if self.mode not in ("CONSTANT", "REFLECT", "SYMMETRIC"):
            raise InputError(f"mode must be CONSTANT, REFLECT or SYMMETRIC, got {mode!r}")
        self.constant_values = constant_values

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if len(self.paddings) != x.ndim:
            raise InputError(f"{len(self.paddings)} padding pairs for a rank-{x.ndim} input")
        if self.mode == "CONSTANT":
            flat = [v for pair in reversed(self.paddings) for v in pair]  # F.pad: last dim first
            return F.pad(x, flat, mode="constant", value=self.constant_values)
        symmetric = self.mode == "SYMMETRIC"
        for dim, (before, after) in enumerate(self.paddings):
            if before == after == 0:
                continue
            size = x.shape[dim]
            limit = size if symmetric else size - 1
            if before > limit or after > limit:
                raise InputError(
                    f"{self.mode} padding ({before}, {after}) of dim {dim} exceeds {limit} "
                    f"(size {size}), which tf.pad rejects"
                )
            x = x.index_select(dim, _mirror_index(size, before, after, symmetric).to(x.device))
        return x

    def extra_repr(self) -> str:
        return (
            f"paddings={self.paddings}, mode={self.mode!r}, constant_values={self.constant_values}"
        )
