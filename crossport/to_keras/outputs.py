"""The converted model's outputs: forward's structure in plain containers, and what may not
be an output (a Python number; state written back to a buffer)."""

from __future__ import annotations

from collections.abc import Mapping

import keras
import numpy as np
import torch
from torch.utils import _pytree as pytree

from crossport.capture import dataclass_fields
from crossport.to_keras.values import TensorValue


def plain_structure(outputs, leaf=lambda value: value):
    """forward's output structure in containers Keras takes: a HF ``ModelOutput`` (a dict
    subclass torch's pytree rebuilds) or a registered dataclass as a dict of its fields, a
    namedtuple as a tuple; ``leaf`` maps each leaf."""
    outputs = dataclass_fields(outputs)
    if isinstance(outputs, Mapping):
        return {key: plain_structure(value, leaf) for key, value in outputs.items()}
    if isinstance(outputs, list):
        return [plain_structure(value, leaf) for value in outputs]
    if isinstance(outputs, tuple):  # namedtuples too
        return tuple(plain_structure(value, leaf) for value in outputs)
    return leaf(outputs)


def unflatten_plain(flat: list, spec: pytree.TreeSpec):
    """``flat`` in the structure ``spec`` describes, in plain containers.

    The user's output classes are built with torch placeholders, never with Keras tensors:
    a class's own checks may not take them (a HF ``ModelOutput`` with one field iterates a
    first field it does not know as a tensor, which a symbolic KerasTensor refuses).
    """
    placeholders = [torch.empty(0) for _ in flat]
    position = {id(p): i for i, p in enumerate(placeholders)}
    return plain_structure(pytree.tree_unflatten(placeholders, spec),
                            leaf=lambda value: flat[position[id(value)]]
                            if id(value) in position else value)


def held_constant(value) -> np.ndarray | None:
    """A value a converter computed from constants alone, as a numpy array in torch's order
    (None for a graph value, or a flattened block's features)."""
    if (not isinstance(value, TensorValue) or isinstance(value.tensor, keras.KerasTensor)
            or value.layout.flat is not None):
        return None
    held = np.asarray(value.tensor)
    return np.transpose(held, np.argsort(value.layout.perm)).reshape(value.shape)


def writes_back_unchanged(exported: torch.export.ExportedProgram, target: str,
                          value) -> bool:
    """Whether the value forward writes to buffer/parameter ``target`` is a constant equal
    to its current value: no state changes across calls (a QAT observer switched off
    copies its statistics back)."""
    value = held_constant(value) if isinstance(value, TensorValue) else value
    current = exported.state_dict.get(target, exported.constants.get(target))
    if not isinstance(value, np.ndarray) or not isinstance(current, torch.Tensor):
        return False
    current = current.detach().cpu().numpy()
    return value.shape == current.shape and bool(np.array_equal(value, current,
                                                               equal_nan=True))


def not_a_tensor_output(index: int, arg, value) -> str:
    if isinstance(arg, torch.fx.Node) or isinstance(value, (torch.SymInt, torch.SymFloat)):
        what = f"a Python number computed from shapes ({arg.name})"
    else:
        what = f"the Python value {value!r}"
    return (f"model output {index} is {what}; a Keras model returns tensors only. Return "
            "tensors from forward (torch.tensor(...) or a tensor op on the input), or wrap "
            "the module to drop the non-tensor outputs.")
