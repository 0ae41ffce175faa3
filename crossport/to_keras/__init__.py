"""PyTorch (fx graph) -> Keras: the converter registry, the context and the emitter.

Importing this package registers every built-in converter (``crossport.to_keras.ops``), so
a user's ``crossport.register(..., override=True)`` always replaces a built-in, whatever
the order.
"""

from crossport.to_keras import ops  # noqa: F401  (registers the built-ins)
from crossport.to_keras.registry import Policy, register, registered_ops

__all__ = ["Policy", "register", "registered_ops"]
