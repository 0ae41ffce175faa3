"""Python source for values: identifiers from layer names, literals, constant arrays."""

from __future__ import annotations

import builtins
import keyword
import math
import re

import keras
import numpy as np

# Names the generated module defines or imports: never reused for a tensor.
RESERVED = {"keras", "np", "crossport", "Path", "WEIGHTS", "CONSTANTS", "constants", "model",
            "build_model", "weights"}
# Arrays up to this many elements are written into the source; larger ones go to the
# ``.constants.npz`` file next to it.
INLINE_ELEMENTS = 16
_BUILTINS = set(dir(builtins))


class Identifiers:
    """Unique Python identifiers derived from layer names (``layer1.0.conv1`` -> ``layer1_0_conv1``)."""

    def __init__(self):
        self._used: set[str] = set(RESERVED) | _BUILTINS

    def new(self, name: str) -> str:
        base = re.sub(r"\W+", "_", name).strip("_") or "x"
        if base[0].isdigit():
            base = f"layer_{base}"
        if keyword.iskeyword(base) or base in _BUILTINS:
            base = f"{base}_"
        ident, k = base, 1
        while ident in self._used:
            ident = f"{base}_{k}"
            k += 1
        self._used.add(ident)
        return ident


class Constants:
    """Arrays too large to inline, stored in the ``.npz`` file beside the source."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}

    def add(self, array: np.ndarray) -> str:
        key = f"c{len(self.arrays)}"
        self.arrays[key] = array
        return f'constants["{key}"]'


def literal(value, tensor_name, constants: Constants) -> str:
    """Source for ``value``: tensors by variable name, arrays inline or from the npz file.

    Args:
        value: a config or call argument (nested lists, tuples, dicts of plain values).
        tensor_name: maps a KerasTensor to its variable name, or returns None.
        constants: where arrays too large to inline go.
    """
    name = tensor_name(value)
    if name is not None:
        return name
    if value is None or isinstance(value, (bool, str)):
        return _string(value) if isinstance(value, str) else repr(value)
    if _is_backend_tensor(value):  # a concrete tensor passed to an op: write its values
        value = np.asarray(keras.ops.convert_to_numpy(value))
    if isinstance(value, np.generic):  # numpy scalar: keep its dtype
        return _numpy_scalar(value)
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, np.ndarray):
        return _array(value, constants)
    if isinstance(value, tuple):
        items = [literal(v, tensor_name, constants) for v in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(value, list):
        return f"[{', '.join(literal(v, tensor_name, constants) for v in value)}]"
    if isinstance(value, dict):
        items = (f"{literal(k, tensor_name, constants)}: {literal(v, tensor_name, constants)}"
                 for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, slice):
        return (f"slice({literal(value.start, tensor_name, constants)}, "
                f"{literal(value.stop, tensor_name, constants)}, "
                f"{literal(value.step, tensor_name, constants)})")
    if value is Ellipsis:
        return "..."
    raise TypeError(f"cannot write a {type(value).__name__} value ({value!r}) as Python source")


def _is_backend_tensor(value) -> bool:
    return (not isinstance(value, (np.ndarray, np.generic, keras.KerasTensor))
            and keras.ops.is_tensor(value))


def _string(text: str) -> str:
    """A double-quoted string literal (ruff's default quote style)."""
    body = repr(text)[1:-1]
    if repr(text).startswith('"'):
        return repr(text)
    return '"' + body.replace("\\'", "'").replace('"', '\\"') + '"'


def _float(value) -> str:
    value = float(value)
    if math.isnan(value):
        return 'float("nan")'
    if math.isinf(value):
        return 'float("inf")' if value > 0 else 'float("-inf")'
    return repr(value)  # shortest repr: float32 values come back bit-exact


def _numpy_scalar(value: np.generic) -> str:
    if isinstance(value, np.bool_):
        return f"np.bool_({bool(value)})"
    return f"np.{value.dtype.name}({_element(value)})"


def _array(array: np.ndarray, constants: Constants) -> str:
    if array.size > INLINE_ELEMENTS or array.dtype.kind not in "biuf":
        return constants.add(array)
    dtype = _string(array.dtype.name)
    return f"np.array({_nested(array)}, dtype={dtype})"


def _nested(array: np.ndarray) -> str:
    if array.ndim == 0:
        return _element(array[()])
    return "[" + ", ".join(_nested(a) for a in array) + "]"


def _element(value: np.generic) -> str:
    """One array element; floats in the shortest form that reads back to the same bits."""
    if value.dtype.kind == "f":
        if not np.isfinite(value):
            return _float(float(value))
        return str(value)  # numpy's shortest round-trip repr for the element's own dtype
    if value.dtype.kind == "b":
        return repr(bool(value))
    return repr(int(value))
