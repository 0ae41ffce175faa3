"""Torch modules for Keras' image augmentation layers (``keras.layers.Random*``, ``AugMix``,
``MixUp``, ``AutoContrast`` ...), emitted by ``to_torch/ops/augment.py``.

In inference (``model.predict``, ``model(x, training=False)``) Keras' random augmentations
return their input, cast to float32 by some of them. The modules do that in ``eval()``. In
``train()`` only :class:`KerasRandomFlip` reproduces Keras' distribution (TF's random stream
itself cannot be); the others raise :class:`~crossport.errors.TrainingModeError` rather than
silently train without the augmentation the Keras model applied.
"""

from __future__ import annotations

import torch
from torch import nn

from crossport.errors import TrainingModeError


def _refuse_training(layer: str, kind: str) -> TrainingModeError:
    return TrainingModeError(
        f"Keras layer {layer!r} ({kind}) augments at random in training; its converted module "
        "is only its inference identity. Call .eval() on the module, or augment in the data "
        "pipeline (e.g. torchvision.transforms.v2) and leave this layer out of training")


class KerasAugmentation(nn.Module):
    """A Keras random augmentation at inference: ``x`` (cast to float32 where Keras casts).

    Example:
        >>> import torch
        >>> KerasAugmentation("rotate", "RandomRotation", True).eval()(torch.tensor([2]))
        tensor([2.])
    """

    def __init__(self, layer: str, kind: str, cast: bool) -> None:
        super().__init__()
        self.layer, self.kind, self.cast = layer, kind, cast

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            raise _refuse_training(self.layer, self.kind)
        return x.to(torch.float32) if self.cast else x


class KerasRandomFlip(nn.Module):
    """``keras.layers.RandomFlip`` on a channels-first batch: identity (float32) in eval;
    in train each sample is flipped with probability 1/2 along ``dims`` (all of them
    together: Keras draws one flip per sample for ``horizontal_and_vertical``).

    Example:
        >>> import torch
        >>> KerasRandomFlip((3,)).eval()(torch.ones(1, 1, 1, 2)).dtype
        torch.float32
    """

    def __init__(self, dims: tuple[int, ...]) -> None:
        super().__init__()
        self.dims = tuple(dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(torch.float32)
        if not self.training:
            return x
        flips = torch.rand((x.shape[0],) + (1,) * (x.dim() - 1), device=x.device) <= 0.5
        return torch.where(flips, torch.flip(x, self.dims), x)


class KerasAutoContrast(nn.Module):
    """``keras.layers.AutoContrast`` (Keras order, batch first): each image's channels
    stretched from their min..max over Keras axes 1 and 2 to ``value_range``; a channel Keras
    leaves NaN (constant channels divide 0 by 0) keeps its input. Same in train and eval.

    Example:
        >>> import torch
        >>> KerasAutoContrast(0.0, 1.0)(torch.tensor([[[[0.25], [0.5]]]])).flatten()
        tensor([0., 1.])
    """

    def __init__(self, low: float, high: float) -> None:
        super().__init__()
        self.low, self.high = float(low), float(high)

    def _range(self, x: torch.Tensor, low: float, high: float, to_low: float,
               to_high: float) -> torch.Tensor:
        """Keras' _transform_value_range: the same float32 steps in the same order."""
        if (low, high) == (to_low, to_high):
            return x
        return (x - low) / (high - low) * (to_high - to_low) + to_low

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        original = x.to(torch.float32)
        images = self._range(original, self.low, self.high, 0.0, 255.0)
        low = torch.amin(images, dim=(1, 2), keepdim=True)
        high = torch.amax(images, dim=(1, 2), keepdim=True)
        scale = 255.0 / (high - low)
        offset = -low * scale
        results = torch.clamp(images * scale + offset, 0.0, 255.0)
        results = self._range(results, 0.0, 255.0, self.low, self.high)
        return torch.where(torch.isnan(results), original, results)
