"""Read a Keras functional model back as a list of calls, in an order that can be replayed.

Keras 3 has no public API for the call graph of a functional model: which operation ran on
which tensors, with which extra arguments. ``Function`` keeps it in ``_nodes_by_depth`` and
each ``Node`` in ``arguments`` (the call's args and kwargs, tensors and constants as they
were passed). This module is the only place in ``crossport.codegen`` that touches those
private attributes, so a Keras upgrade that renames them breaks one file.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import keras


@dataclass
class Call:
    """One node of the functional graph: ``outputs = operation(*args, **kwargs)``."""

    operation: keras.Operation
    args: tuple
    kwargs: dict
    outputs: list  # flat KerasTensors, in the order Keras flattens the call's result


def is_functional(model: keras.Model) -> bool:
    """Whether ``model`` has a call graph to read (a functional model, not a subclassed one)."""
    return hasattr(model, "_nodes_by_depth")


def calls(model: keras.Model) -> list[Call]:
    """The model's calls in the order a person would write them.

    A depth-first walk from the outputs, arguments in order, each call placed right after
    the calls it needs: a residual block reads main branch, shortcut, add (torch's
    ``forward`` order), not all ops of one graph depth together. Input nodes are left out.
    """
    producer = {}
    for nodes in model._nodes_by_depth.values():  # private: Function's graph, by depth
        for node in nodes:
            if node.operation is None or node.is_input:
                continue
            for t in node.outputs:
                producer[tensor_key(t)] = node
    order, done = [], set()
    for root in keras.tree.flatten(model.output):
        stack = [(producer.get(tensor_key(root)), False)]
        while stack:
            node, expanded = stack.pop()
            if node is None or id(node) in done:
                continue
            if expanded:
                done.add(id(node))
                order.append(Call(node.operation, tuple(node.arguments.args),
                                  dict(node.arguments.kwargs), list(node.outputs)))
                continue
            stack.append((node, True))
            for t in reversed(node.arguments.keras_tensors):
                stack.append((producer.get(tensor_key(t)), False))
    return order


def operation_arguments(operation: keras.Operation) -> dict:
    """The constructor arguments of a ``keras.ops`` operation (``Transpose(axes=...)``).

    Keras records them at construction when they are plain Python values (the operation's
    auto-config); otherwise they are read back from the same-named attributes.
    """
    auto = getattr(operation, "_auto_config", None)  # private: the recorded __init__ args
    if auto is not None:
        config = dict(auto.config)
    else:
        config = {}
        for name, param in inspect.signature(type(operation).__init__).parameters.items():
            if name in ("self", "name") or param.kind in (param.VAR_POSITIONAL,
                                                          param.VAR_KEYWORD):
                continue
            if not hasattr(operation, name):
                raise ValueError(f"cannot recover argument {name!r} of "
                                 f"{type(operation).__name__} (no attribute of that name)")
            config[name] = getattr(operation, name)
    config.pop("name", None)
    return config


def input_layer(tensor) -> keras.layers.InputLayer:
    """The ``InputLayer`` that created a model input (from the tensor's Keras history)."""
    return tensor._keras_history[0]  # private: (operation, node_index, tensor_index)


def tensor_key(tensor) -> int:
    """Identity of a symbolic tensor (KerasTensors are not hashable by value)."""
    return id(tensor)
