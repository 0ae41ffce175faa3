"""PyTorch (fx graph) -> Keras: the converter registry, the context and the emitter."""

from crossport.to_keras.registry import Policy, register, registered_ops

__all__ = ["Policy", "register", "registered_ops"]
