"""Torch modules for Keras' dropout and noise layers (``Dropout``, ``SpatialDropout1D/2D/3D``,
``GaussianDropout``, ``GaussianNoise``, ``AlphaDropout``),
emitted by ``to_torch/ops/noise.py``.

In ``eval()`` each is the identity, as Keras is at inference (an int tensor stays int). In
``train()`` each draws Keras' distribution (TF backend, Keras 3.15) from torch's global
generator; TF's random stream itself (and a layer's ``seed``) cannot be replayed:

- dropout keeps an element (a ``noise_shape`` cell) where ``U[0, 1) >= rate`` and scales it
  by ``float32(1 / (1 - rate))``, zeroing the others (NaN and inf too: TF selects, it does
  not multiply); ``rate=1`` gives zeros, ``rate=0`` the input;
- Gaussian dropout multiplies by ``N(1, sqrt(rate / (1 - rate)))``, Gaussian noise adds
  ``N(0, stddev)``; AlphaDropout is Keras' affine formula below.

What Keras cannot train with either (an integer input, ``rate=1`` for the Gaussian and alpha
dropouts, a ``noise_shape`` that does not broadcast) raises
:class:`~crossport.errors.TrainingModeError` in ``train()``: never a silent difference.
(``ActivityRegularization`` is the identity: its loss term is kept by
``crossport.to_torch.regularization``.)
"""

from __future__ import annotations

import math

import torch
from torch import nn

from crossport.errors import TrainingModeError

# Keras' AlphaDropout constants (SELU's alpha and scale)
_ALPHA = 1.6732632423543772848170429916717
_SCALE = 1.0507009873554804934193349852946


def _cannot_train(layer: str, why: str) -> TrainingModeError:
    return TrainingModeError(
        f"Keras layer {layer!r}: {why}. Call .eval() on the module, or replace this "
        f"submodule for training")


def _float_input(layer: str, x: torch.Tensor) -> None:
    if not x.is_floating_point():
        raise _cannot_train(layer, f"Keras cannot train it on a {x.dtype} input (it drops "
                                   "or adds noise to floats only)")


def _noise_shape(layer: str, x: torch.Tensor, noise_shape) -> tuple[int, ...]:
    """Keras' noise_shape on the tensor as held (None: the input's size there)."""
    if noise_shape is None:
        return tuple(x.shape)
    if len(noise_shape) != x.dim() or any(
            n is not None and n not in (1, size) for n, size in zip(noise_shape, x.shape)):
        raise _cannot_train(layer, f"noise_shape (held order) {tuple(noise_shape)} does not "
                                   f"broadcast to the input's {tuple(x.shape)}; Keras fails too")
    return tuple(size if n is None else n for n, size in zip(noise_shape, x.shape))


def _uniform(x: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.rand(shape, dtype=x.dtype, device=x.device)


def keras_dropout(x: torch.Tensor, rate: float) -> torch.Tensor:
    """TF's dropout of a float tensor, elementwise: kept where ``U[0, 1) >= rate`` and scaled
    by ``1 / (1 - rate)``, else zero (``rate=1``: zeros). Attention layers drop their
    probabilities with it in training."""
    if rate >= 1.0:
        return torch.zeros_like(x)
    keep = _uniform(x, tuple(x.shape)) >= rate
    scale = torch.tensor(1.0 / (1.0 - rate), dtype=x.dtype, device=x.device)
    return torch.where(keep, x * scale, torch.zeros((), dtype=x.dtype, device=x.device))


class KerasDropout(nn.Module):
    """``keras.layers.Dropout`` / ``SpatialDropout*D``: the identity in eval; in train each
    cell of ``noise_shape`` (held order; ``None`` = the input's size, 1 = broadcast) kept with
    probability ``1 - rate`` and scaled by ``1 / (1 - rate)``, as TF's ``stateless_dropout``.

    Example:
        >>> import torch
        >>> KerasDropout("drop", 0.5).eval()(torch.tensor([3]))
        tensor([3])
        >>> KerasDropout("drop", 1.0).train()(torch.tensor([float("nan")]))
        tensor([0.])
    """

    def __init__(self, layer: str, rate: float, noise_shape: tuple | None = None) -> None:
        super().__init__()
        self.layer, self.rate = layer, float(rate)
        self.noise_shape = None if noise_shape is None else tuple(noise_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.rate == 0.0:
            return x
        _float_input(self.layer, x)
        return self._drop(x)

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        """The training output of a float ``x`` for ``0 < rate <= 1``."""
        if self.rate == 1.0:
            return torch.zeros_like(x)
        keep = _uniform(x, _noise_shape(self.layer, x, self.noise_shape)) >= self.rate
        scale = torch.tensor(1.0 / (1.0 - self.rate), dtype=x.dtype, device=x.device)
        return torch.where(keep, x * scale, torch.zeros((), dtype=x.dtype, device=x.device))


class KerasGaussianNoise(nn.Module):
    """``keras.layers.GaussianNoise``: the identity in eval; ``x + N(0, stddev)`` in train.

    Example:
        >>> import torch
        >>> KerasGaussianNoise("noise", 1.0).eval()(torch.tensor([2.0]))
        tensor([2.])
    """

    def __init__(self, layer: str, stddev: float) -> None:
        super().__init__()
        self.layer, self.stddev = layer, float(stddev)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.stddev <= 0.0:
            return x
        _float_input(self.layer, x)
        noise = torch.randn(x.shape, dtype=x.dtype, device=x.device) * self.stddev + 0.0
        return x + noise


class KerasGaussianDropout(nn.Module):
    """``keras.layers.GaussianDropout``: the identity in eval; in train ``x`` times
    ``N(1, sqrt(rate / (1 - rate)))``.

    Example:
        >>> import torch
        >>> KerasGaussianDropout("gdrop", 0.2).eval()(torch.tensor([2.0]))
        tensor([2.])
    """

    def __init__(self, layer: str, rate: float) -> None:
        super().__init__()
        self.layer, self.rate = layer, float(rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.rate == 0.0:
            return x
        _float_input(self.layer, x)
        if self.rate == 1.0:
            raise _cannot_train(self.layer, "GaussianDropout(rate=1) divides by zero in Keras' "
                                            "training call (its stddev is infinite)")
        stddev = math.sqrt(self.rate / (1.0 - self.rate))
        return x * (torch.randn(x.shape, dtype=x.dtype, device=x.device) * stddev + 1.0)


class KerasAlphaDropout(KerasDropout):
    """``keras.layers.AlphaDropout``: the identity in eval; in train Keras' formula
    ``a * (x * kept + alpha' * (1 - kept)) + b`` with ``kept = U[0, 1) >= rate`` per
    ``noise_shape`` cell, ``alpha' = -alpha * scale`` (SELU's), ``a = ((1 - rate) * (1 + rate
    * alpha'^2))^-1/2``, ``b = -a * alpha' * rate`` (torch's ``nn.AlphaDropout`` has the same
    constants but no noise_shape and another float order).

    Example:
        >>> import torch
        >>> KerasAlphaDropout("adrop", 0.1).eval()(torch.tensor([2.0]))
        tensor([2.])
    """

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        if self.rate == 1.0:
            raise _cannot_train(self.layer, "AlphaDropout(rate=1) divides by zero in Keras' "
                                            "training call")
        alpha_p = -_ALPHA * _SCALE
        a = ((1 - self.rate) * (1 + self.rate * alpha_p ** 2)) ** -0.5
        b = -a * alpha_p * self.rate
        shape = _noise_shape(self.layer, x, self.noise_shape)
        kept = (_uniform(x, shape) >= self.rate).to(x.dtype)
        return a * (x * kept + alpha_p * (1 - kept)) + b


class KerasTrainingRefusal(nn.Module):
    """The identity in eval; raises in train with ``why``: put in front of a converted layer
    whose Keras training call draws randomness the module cannot reproduce (e.g. an LSTM
    layer's device-dependent ``dropout=1``), so training with it is never silently different.

    Example:
        >>> import torch
        >>> KerasTrainingRefusal("lstm", "LSTM(dropout=0.2)").eval()(torch.tensor([2]))
        tensor([2])
    """

    def __init__(self, layer: str, why: str) -> None:
        super().__init__()
        self.layer, self.why = layer, why

    def forward(self, x):
        if self.training:
            raise _cannot_train(self.layer, self.why)
        return x
