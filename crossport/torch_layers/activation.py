"""Keras activations in torch, where a Keras default or formula differs from torch's (pitfall 14).

``keras_activation(name)`` maps the Keras activation names that conv/dense/recurrent layers
take (``activation="relu"``) to torch functions with the Keras semantics; the modules cover the
layers whose defaults differ: ``LeakyReLU`` (Keras layer 0.3, ``keras.activations`` 0.2, torch
0.01), ``PReLU`` (Keras: one slope per element, zeros; torch: one shared slope, 0.25),
``hard_sigmoid`` (Keras 2 / ``tf_keras``: ``clip(0.2x + 0.5)``; Keras 3 = torch) and GELU
(``keras.ops.gelu`` defaults to the tanh approximation, torch and ``keras.activations.gelu``
to the exact erf form).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from crossport.errors import InputError

__all__ = [
    "KerasActivation",
    "KerasGELU",
    "KerasHardSigmoid",
    "KerasLeakyReLU",
    "KerasPReLU",
    "activation_name",
    "keras_activation",
]

Activation = Callable[[torch.Tensor], torch.Tensor]


def _hard_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return F.relu6(x + 3.0) / 6.0  # Keras 3 (and torch.nn.Hardsigmoid)


def _legacy_hard_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp(0.2 * x + 0.5, 0.0, 1.0)  # Keras 2 / tf_keras


def _softplus(x: torch.Tensor) -> torch.Tensor:
    return torch.logaddexp(x, torch.zeros_like(x))  # no torch threshold switch at 20


# Module-level functions (no lambdas) so converted modules pickle with torch.save(module).
def _linear(x: torch.Tensor) -> torch.Tensor:
    return x


def _hard_silu(x: torch.Tensor) -> torch.Tensor:
    return x * _hard_sigmoid(x)


def _leaky_relu(x: torch.Tensor) -> torch.Tensor:
    return F.leaky_relu(x, 0.2)  # keras.activations default, not torch's 0.01


def _mish(x: torch.Tensor) -> torch.Tensor:
    return x * torch.tanh(_softplus(x))


_ELEMENTWISE: dict[str, Activation] = {
    "linear": _linear,
    "relu": F.relu,
    "relu6": F.relu6,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "elu": F.elu,
    "selu": F.selu,
    "celu": F.celu,
    "softplus": _softplus,
    "softsign": F.softsign,
    "silu": F.silu,
    "swish": F.silu,
    "gelu": F.gelu,  # keras.activations.gelu: approximate=False
    "hard_sigmoid": _hard_sigmoid,
    "hard_silu": _hard_silu,
    "hard_swish": _hard_silu,
    "hard_tanh": F.hardtanh,
    "leaky_relu": _leaky_relu,
    "exponential": torch.exp,
    "mish": _mish,
    "log_sigmoid": F.logsigmoid,
    "tanh_shrink": F.tanhshrink,
}
_AXIS_WISE = ("softmax", "log_softmax", "glu")


def activation_name(identifier: object) -> str:
    """Name of a Keras activation given as a string, a config dict or a Keras function."""
    if identifier is None:
        return "linear"
    if isinstance(identifier, str):
        return identifier
    if isinstance(identifier, dict):  # serialized form {"class_name": ..., "config": name}
        return activation_name(identifier.get("config"))
    name = getattr(identifier, "__name__", None)
    if name is None or not _is_keras_function(identifier, name):
        raise InputError(
            f"the activation {identifier!r} is not one of Keras' own functions (a user "
            "function, a lambda, or one that only shares a Keras name): its torch form is "
            "unknown. Use a Keras activation, or a separate layer crossport converts.")
    return name


def _is_keras_function(fn: object, name: str) -> bool:
    """``fn`` is the Keras activation called ``name`` (not just a function of that name)."""
    keras = sys.modules.get("keras")  # a Keras function given: Keras is loaded
    if keras is None:
        return False
    try:
        return keras.activations.get(name) is fn
    except (ValueError, TypeError):
        return False


def keras_activation(name: object, axis: int = -1) -> Activation:
    """Torch function computing the Keras activation ``name``.

    Args:
        name: a Keras activation identifier (``"relu"``, ``None``, a Keras function ...).
        axis: torch dim of ``softmax``/``log_softmax``/``glu``; Keras applies them to its last
            axis, which is dim 1 of a channels-first port of a channels-last tensor.

    Example:
        >>> import torch
        >>> keras_activation("hard_sigmoid")(torch.tensor([0.0, 3.0]))
        tensor([0.5000, 1.0000])
    """
    key = activation_name(name)
    if key in _ELEMENTWISE:
        return _ELEMENTWISE[key]
    if key == "softmax":
        return functools.partial(torch.softmax, dim=axis)
    if key == "log_softmax":
        return functools.partial(torch.log_softmax, dim=axis)
    if key == "glu":
        return functools.partial(F.glu, dim=axis)
    raise InputError(
        f"Keras activation {key!r} is not supported; supported: "
        f"{sorted([*_ELEMENTWISE, *_AXIS_WISE])}"
    )


class KerasActivation(nn.Module):
    """A Keras activation by name, as a module (``keras.layers.Activation``).

    Args:
        name: Keras activation name.
        axis: torch dim for ``softmax``/``log_softmax``/``glu`` (see :func:`keras_activation`).

    Example:
        >>> import torch
        >>> KerasActivation("softmax", axis=1)(torch.zeros(1, 4, 2, 2)).sum(1).mean().item()
        1.0
    """

    def __init__(self, name: str = "linear", axis: int = -1) -> None:
        super().__init__()
        self.name = activation_name(name)
        self.axis = axis
        self._fn = keras_activation(self.name, axis)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._fn(x)

    @classmethod
    def from_keras(cls, layer, channels_first: bool = True) -> KerasActivation:
        """From ``keras.layers.Activation``/``Softmax``; axis -1 -> dim 1 if channels_first."""
        cfg = layer.get_config()
        name = activation_name(cfg.get("activation", "softmax"))
        axis = cfg.get("axis", -1)
        if isinstance(axis, (list, tuple)):
            raise InputError(f"multi-axis softmax {axis} is not supported")
        return cls(name, axis=1 if channels_first and axis == -1 else axis)

    def extra_repr(self) -> str:
        return f"{self.name!r}, axis={self.axis}"


class KerasHardSigmoid(nn.Module):
    """Keras ``hard_sigmoid``: ``relu6(x + 3) / 6`` (Keras 3, same as ``nn.Hardsigmoid``).

    Args:
        legacy: use the Keras 2 / ``tf_keras`` / TF1 formula ``clip(0.2*x + 0.5, 0, 1)``,
            which checkpoints trained with Keras 2 expect.

    Example:
        >>> import torch
        >>> KerasHardSigmoid(legacy=True)(torch.tensor([1.0])).item()
        0.699999988079071
    """

    def __init__(self, legacy: bool = False) -> None:
        super().__init__()
        self.legacy = legacy

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _legacy_hard_sigmoid(x) if self.legacy else _hard_sigmoid(x)

    def extra_repr(self) -> str:
        return f"legacy={self.legacy}"


class KerasGELU(nn.Module):
    """GELU with Keras' ``approximate`` flag (``True`` = tanh form = torch ``'tanh'``).

    ``keras.activations.gelu`` and ``Activation("gelu")`` default to ``approximate=False``
    like torch, but ``keras.ops.gelu`` defaults to ``approximate=True``.

    Example:
        >>> import torch
        >>> x = torch.tensor([1.0])
        >>> KerasGELU(approximate=True)(x).item() != KerasGELU()(x).item()
        True
    """

    def __init__(self, approximate: bool = False) -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh" if self.approximate else "none")

    def extra_repr(self) -> str:
        return f"approximate={self.approximate}"


class KerasLeakyReLU(nn.Module):
    """``keras.layers.LeakyReLU``: default slope **0.3** (torch 0.01, ``keras.activations`` 0.2).

    Example:
        >>> import torch
        >>> KerasLeakyReLU()(torch.tensor([-1.0])).item()
        -0.30000001192092896
    """

    def __init__(self, negative_slope: float = 0.3) -> None:
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, self.negative_slope)

    @classmethod
    def from_keras(cls, layer) -> KerasLeakyReLU:
        return cls(float(layer.get_config()["negative_slope"]))

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class KerasPReLU(nn.Module):
    """``keras.layers.PReLU``: one learned slope per element (zeros), not torch's shared 0.25.

    ``alpha_shape`` is the slope's shape without the batch dim, in **torch** layout, with 1 on
    shared axes: ``(C, H, W)`` for Keras' default on an NHWC tensor ported to NCHW, ``(C, 1, 1)``
    for ``shared_axes=[1, 2]`` (which is torch's ``nn.PReLU(C)``).

    Example:
        >>> import torch
        >>> KerasPReLU((3, 1, 1))(torch.randn(2, 3, 4, 4)).shape
        torch.Size([2, 3, 4, 4])
    """

    def __init__(self, alpha_shape: Sequence[int]) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(*alpha_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x) - self.alpha * F.relu(-x)  # Keras' formula

    @classmethod
    def from_keras(cls, layer, channels_first: bool = True) -> KerasPReLU:
        """Copy ``alpha``; with ``channels_first`` its channel axis moves first (HWC -> CHW)."""
        alpha = np.asarray(layer.alpha.numpy())
        if channels_first and alpha.ndim >= 2:
            alpha = np.moveaxis(alpha, -1, 0)
        module = cls(alpha.shape)
        with torch.no_grad():
            module.alpha.copy_(torch.from_numpy(np.ascontiguousarray(alpha)))
        return module
