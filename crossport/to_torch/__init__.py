"""Keras -> PyTorch: capture a Keras functional graph, convert layer by layer, verify.

See docs/architecture.md ("Keras -> PyTorch") and :func:`crossport.to_torch`.
"""

from crossport.to_torch.registry import register_layer, register_op, registered_layers

__all__ = ["register_layer", "register_op", "registered_layers"]
