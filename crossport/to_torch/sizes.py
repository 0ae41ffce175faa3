"""Run-time sizes of a traced ``call()``: ints that remember where they came from.

A custom layer's ``call`` is traced at the example's sizes (``graph.trace_call``): every dim
that is ``None`` in the Keras graph is a :class:`RunSize` on the stand-in tensors, an int
holding the example's value (so Keras' shape inference and the layer's own Python see a
number) and the expression computing it at run time: ``shape(x)[d]`` of a stand-in and the
integer arithmetic applied since (``+ - * // %``, negation). Keras' shape inference keeps
them in the shapes of the tensors it derives (:func:`tracing_sizes` lets ``standardize_shape``
pass them through), so ``ops.shape(y)[1]`` of an intermediate tensor is one as well.

The converters that take sizes (``reshape``, ``slice``, ``broadcast_to``, ``tile``, ``x[:n]``,
``arange``, elementwise arithmetic) emit the expression (:func:`emit_size`): the torch module
reads ``x.shape[d]`` at run time. Any other op or layer holding a ``RunSize`` is refused by
the pre-flight check; a size the Python of the layer turned into a plain number (``int(n)``,
``range(n)``, numpy) is not tracked, which the self-check at a second size
(``to_torch/verify.py``) turns into a loud failure.
"""

from __future__ import annotations

import operator
import sys
from contextlib import contextmanager

import keras
import numpy as np
import torch


class RunSize(int):
    """A size known at run time: the example's value, and how to compute it (``expr``:
    ``("dim", tensor, axis)`` or ``(name, operand, ...)`` over RunSizes and ints)."""

    def __new__(cls, value: int, expr: tuple):
        size = super().__new__(cls, int(value))
        size.expr = expr
        return size

    def __repr__(self) -> str:
        return f"RunSize({int(self)}, {describe(self)})"

    def __str__(self) -> str:  # as a number (Keras formats sizes into strings)
        return str(int(self))

    def __reduce__(self):  # a copy or pickle keeps the number only
        return (int, (int(self),))

    def __deepcopy__(self, memo):
        return int(self)


def _arith(name: str, fn, reflected: bool = False):
    def method(self, other):
        if not isinstance(other, (int, np.integer)) or isinstance(other, bool):
            return fn(int(self), other) if not reflected else fn(other, int(self))
        a, b = (other, self) if reflected else (self, other)
        value = fn(int(a), int(b))
        simple = _simplify(name, a, b)
        return simple if simple is not None else RunSize(value, (name, a, b))

    return method


def _simplify(name: str, a, b):
    """``n + 0``, ``n * 1``, ``n // 1``: the size itself (keeps the emitted code short)."""
    if name in ("add", "sub") and not isinstance(b, RunSize) and b == 0:
        return a
    if name == "add" and not isinstance(a, RunSize) and a == 0:
        return b
    if name in ("mul", "floordiv") and not isinstance(b, RunSize) and b == 1:
        return a
    if name == "mul" and not isinstance(a, RunSize) and a == 1:
        return b
    return None


_OPERATORS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
              "floordiv": operator.floordiv, "mod": operator.mod}
for _name, _fn in _OPERATORS.items():
    setattr(RunSize, f"__{_name}__", _arith(_name, _fn))
    setattr(RunSize, f"__r{_name}__", _arith(_name, _fn, reflected=True))
RunSize.__neg__ = lambda self: RunSize(-int(self), ("neg", self))
RunSize.__pos__ = lambda self: self
# min / max of sizes (``conditions.extremum``), emitted as torch.sym_min / sym_max
_FUNCTIONS = {**_OPERATORS, "min": min, "max": max}
_EMITTED = {**_OPERATORS, "min": torch.sym_min, "max": torch.sym_max}


def _compare(name: str, fn):
    """A comparison: the example's outcome, the condition observed first (a Python branch
    of the layer's own code on a run-time size: ``conditions.observe``)."""
    def method(self, other):
        if isinstance(other, (np.integer, np.floating)):
            other = other.item()
        if not isinstance(other, (int, float)):
            return NotImplemented
        _observe(name, self, other, sys._getframe(1))
        return fn(int(self), int(other) if isinstance(other, RunSize) else other)

    return method


def _truth(self) -> bool:
    _observe("bool", self, 0, sys._getframe(1))
    return int(self) != 0


def _observe(name: str, size, other, frame) -> None:
    from crossport.to_torch import conditions

    conditions.observe(name, size, other, frame)


for _name, _fn in {"lt": operator.lt, "le": operator.le, "gt": operator.gt,
                   "ge": operator.ge, "eq": operator.eq, "ne": operator.ne}.items():
    setattr(RunSize, f"__{_name}__", _compare(_name, _fn))
RunSize.__bool__ = _truth
RunSize.__hash__ = int.__hash__


def dim(value: int, tensor, axis: int) -> RunSize:
    """The run-time size of ``tensor``'s Keras dim ``axis`` (its example value ``value``)."""
    return RunSize(value, ("dim", tensor, axis))


# how far :func:`moved` moves every run-time size read off a stand-in
_MOVE = 7


def moved(size):
    """``size`` with every stand-in size it reads moved by a few: the value a derived size
    takes at another input size (``track_sizes`` tells which sizes follow the input's)."""
    if not isinstance(size, RunSize):
        return size
    name, *operands = size.expr
    if name == "dim":
        return int(size) + _MOVE
    if name == "neg":
        return -moved(operands[0])
    return _FUNCTIONS[name](moved(operands[0]), moved(operands[1]))


def describe(size) -> str:
    """``size`` as source: ``shape(x)[1] // 4``."""
    if not isinstance(size, RunSize):
        return repr(size)
    name, *operands = size.expr
    if name == "dim":
        tensor, axis = operands
        name = getattr(tensor, "_crossport_argument", None) or getattr(tensor, "name", "x")
        return f"shape({name})[{axis}]"
    if name == "neg":
        return f"-({describe(operands[0])})"
    if name in ("min", "max"):
        return f"{name}({describe(operands[0])}, {describe(operands[1])})"
    symbol = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%"}[name]
    return f"({describe(operands[0])} {symbol} {describe(operands[1])})"


def leaves(size) -> list:
    """The tensors whose shapes ``size`` reads."""
    if not isinstance(size, RunSize):
        return []
    name, *operands = size.expr
    if name == "dim":
        return [operands[0]]
    return [t for o in operands for t in leaves(o)]


def sizes_in(value) -> list[RunSize]:
    """Every RunSize inside ``value`` (nested tuples, lists, dicts and slices)."""
    if isinstance(value, RunSize):
        return [value]
    if isinstance(value, slice):
        return sizes_in((value.start, value.stop, value.step))
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in sizes_in(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in sizes_in(v)]
    return []


def static_shape(shape) -> tuple:
    """A Keras shape as converters see it: a run-time size is ``None``."""
    return tuple(None if isinstance(s, RunSize) else s for s in shape)


def emit_size(ctx, value):
    """``value`` in the torch graph: an int as it is, a RunSize as the fx nodes computing it
    from the held tensors' run-time shapes (``x.size(d) // 4``)."""
    if not isinstance(value, RunSize):
        return value
    key = id(value)
    if key in ctx.size_nodes:
        return ctx.size_nodes[key][1]
    name, *operands = value.expr
    if name == "dim":
        tensor, axis = operands
        node = ctx.size_of(tensor, axis)
    elif name == "neg":
        node = ctx.call_function(operator.neg, emit_size(ctx, operands[0]))
    else:
        a, b = (emit_size(ctx, o) for o in operands)
        node = ctx.call_function(_EMITTED[name], a, b)
    ctx.size_nodes[key] = (value, node)  # the value kept alive: its id stays unique
    return node


def emit_sizes(ctx, value):
    """:func:`emit_size` over a nested structure (tuples, lists, slices)."""
    if isinstance(value, slice):
        return slice(*(emit_sizes(ctx, v) for v in (value.start, value.stop, value.step)))
    if isinstance(value, (list, tuple)):
        return type(value)(emit_sizes(ctx, v) for v in value)
    return emit_size(ctx, value)


# -- tracing ------------------------------------------------------------------------------

@contextmanager
def tracing_sizes():
    """While a ``call()`` is traced: Keras keeps RunSizes in the shapes it infers, and a
    keras.ops function handed a RunSize without a symbolic tensor (``ops.arange(n)``,
    ``ops.slice(table, (0, 0), (n, d))`` of a variable) records a graph node instead of
    computing a constant of the example's size. One trace at a time per process, every
    patch undone on exit (``to_torch/patching.py``)."""
    from crossport.to_torch import lift, patching, rawtf

    with patching.session() as stack:
        if stack is not None:
            _keep_run_sizes(stack)
            lift.install(stack)
            rawtf.install(stack)
        yield


def _keep_run_sizes(stack) -> None:
    """Keras' ``standardize_shape`` passing RunSizes through (on the tracing thread)."""
    from crossport.to_torch.patching import active, replace

    backend = keras.src.backend
    original = backend.standardize_shape

    def standardize_shape(shape):
        if active() and isinstance(shape, (list, tuple)) and any(
                isinstance(s, RunSize) for s in shape):
            plain = original(tuple(1 if isinstance(s, RunSize) else s for s in shape))
            return tuple(s if isinstance(s, RunSize) else p for s, p in zip(shape, plain))
        return original(shape)

    for module in (backend, keras.src.backend.common.variables, keras.src.backend.common):
        if hasattr(module, "standardize_shape"):
            replace(stack, module, "standardize_shape", standardize_shape)


def as_torch_dtype(dtype: str) -> torch.dtype:
    return getattr(torch, keras.backend.standardize_dtype(dtype))
