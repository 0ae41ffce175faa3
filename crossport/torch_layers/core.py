"""``keras.layers.Dense`` as a torch module (pitfall 10: kernel ``[in, out]`` vs ``[out, in]``)."""

from __future__ import annotations

import torch
from torch import nn

from crossport.torch_layers.activation import activation_name, keras_activation
from crossport.torch_layers.keras_weights import load_kernel_and_bias
from crossport.weights.rules import dense_weight_from_keras

__all__ = ["KerasDense"]


class KerasDense(nn.Linear):
    """``keras.layers.Dense``: ``nn.Linear`` over the last dim plus the Keras activation.

    Args:
        in_features: input features (last dim).
        units: output features.
        use_bias: learn a bias.
        activation: Keras activation name (``softmax`` over the last dim, as in Keras).

    Example:
        >>> import torch
        >>> KerasDense(4, 3, activation="relu")(torch.randn(2, 4)).shape
        torch.Size([2, 3])
    """

    def __init__(
        self, in_features: int, units: int, use_bias: bool = True, activation: str | None = None
    ) -> None:
        super().__init__(in_features, units, bias=use_bias)
        self.activation = activation_name(activation)
        self._act = keras_activation(self.activation, axis=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._act(super().forward(x))

    @classmethod
    def from_keras(cls, layer) -> KerasDense:
        """Copy a built ``keras.layers.Dense`` (kernel transposed by the weights rule)."""
        cfg = layer.get_config()
        units_in, units_out = layer.kernel.shape
        module = cls(int(units_in), int(units_out), bool(cfg["use_bias"]), cfg.get("activation"))
        return load_kernel_and_bias(module, layer, dense_weight_from_keras)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", activation={self.activation!r}"
