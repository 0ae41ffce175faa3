"""Small torch modules the reverse converters emit where no plain torch layer fits.

Each holds the Keras layer's state as buffers (so ``state_dict`` has every Keras weight) and
does one line of arithmetic; none needs keras or TF at run time.
"""

from __future__ import annotations

import torch
from torch import nn


class Standardize(nn.Module):
    """``keras.layers.Normalization``: ``(x - mean) / max(sqrt(var), eps)`` (buffers held).

    Example:
        >>> import torch
        >>> Standardize(torch.zeros(1, 3), torch.ones(1, 3))(torch.ones(2, 3))
        tensor([[1., 1., 1.],
                [1., 1., 1.]])
    """

    def __init__(self, mean: torch.Tensor, variance: torch.Tensor, invert: bool = False) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("variance", variance)
        self.invert = invert

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        std = torch.clamp(torch.sqrt(self.variance), min=1e-7)  # keras.config.epsilon()
        if self.invert:
            return self.mean + x * std
        return (x - self.mean) / std


class Scale(nn.Module):
    """``x * scale + offset`` with Keras ``Rescaling``'s constants.

    Example:
        >>> import torch
        >>> Scale(1 / 255, -1.0)(torch.tensor([255.0]))
        tensor([0.])
    """

    def __init__(self, scale: float, offset: float) -> None:
        super().__init__()
        self.scale, self.offset = scale, offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.offset

    def extra_repr(self) -> str:
        return f"scale={self.scale}, offset={self.offset}"
