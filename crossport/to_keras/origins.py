"""Which torch graph node each operation of the Keras model comes from.

Layers are named after torch module paths, so they map back by name. ``keras.ops`` calls
(a residual ``add`` in ``forward``, a ``flatten``, a layout transpose) are not layers and
carry no torch name: :func:`operation_origins` walks the Keras graph back from each fx
node's value, in graph order, and gives every operation not yet claimed to that node, so
an op belongs to the node whose conversion created it. The export names the operations'
TF ops after their origin (:func:`named_scopes`), so the per-layer quantization report can
say ``layer1.0 (add)`` or ``<root> (flatten)`` instead of a raw TFLite tensor name.
"""

from __future__ import annotations

import operator
import re
import weakref
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from crossport.capture.source import module_path

# the name scope an operation's TF ops are traced in: ``fx.<origin index>``; TF appends
# ``_N`` when a scope repeats (several operations of one node)
SCOPE = re.compile(r"^fx\.(\d+)(?:_\d+)?$")


@dataclass(frozen=True)
class Origin:
    """The torch node an operation was made for: its position in the graph, a label
    (``layer1.0 (add)``: the module that ran it and the op) and the fx node's name."""

    index: int
    label: str
    node: str
    module: str = ""  # the torch module path that ran it ('' for the root)


def label(node: torch.fx.Node) -> str:
    """``<module path> (<op>)``, ``<root>`` for the top module's own forward."""
    if node.op == "placeholder":
        return f"<input {node.name}>"
    if node.op == "output":
        return "<outputs>"
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]  # one output of a multi-output op: name the op
    target = node.target
    op = getattr(target, "_opname", None) or getattr(target, "__name__", str(target))
    return f"{module_path(node) or '<root>'} ({op})"


def operation_origins(graph: torch.fx.Graph, values: dict, outputs: list) -> dict:
    """``{Keras operation: Origin}`` for every operation reachable from the nodes' values.

    ``values``: fx node -> its value (``TensorValue``s are walked); ``outputs``: the model's
    output tensors (the final layout transposes belong to the output node).
    """
    # weak keys: a Conversion keeps these, and must not keep a Keras model alive that its
    # owner dropped (the generative export drops it to free a 4 GB copy of the weights)
    origins: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    for index, node in enumerate(graph.nodes):
        value = values.get(node)
        tensors = outputs if node.op == "output" else [getattr(value, "tensor", None)]
        origin = Origin(index, label(node), node.name, module_path(node))
        stack = [t for t in tensors if t is not None]
        while stack:
            history = getattr(stack.pop(), "_keras_history", None)
            if history is None or history.operation in origins:
                continue
            operation = history.operation
            if type(operation).__name__ == "InputLayer":
                continue
            origins[operation] = origin
            stack.extend(operation._inbound_nodes[history.node_index].input_tensors)
    return origins


@contextmanager
def named_scopes(origins: dict):
    """While a model is traced (saved for the TFLite converter), each ``keras.ops``
    operation's TF ops are created in the name scope ``fx.<origin index>``: TFLite tensor
    names then say which torch node an op computes. Layers keep their own scopes."""
    import keras
    import tensorflow as tf

    patched = []
    for operation, origin in origins.items():
        if isinstance(operation, keras.layers.Layer) or "call" in vars(operation):
            continue

        def scoped(*args, _call=operation.call, _scope=f"fx.{origin.index}", **kwargs):
            with tf.name_scope(_scope):
                return _call(*args, **kwargs)

        operation.call = scoped  # an instance attribute: Operation.__call__ reads self.call
        patched.append(operation)
    try:
        yield
    finally:
        for operation in patched:
            del operation.call
