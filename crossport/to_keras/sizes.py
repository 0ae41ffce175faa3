"""Run-time sizes: torch's symbolic dims (sympy expressions) as Keras scalar tensors.

torch.export names every dynamic dim with a symbol (``s0``) and derived sizes with
expressions (``s0*s1``, ``(s0 - 1)//2 + 1``). The model inputs bind the symbols
(:class:`crossport.layers.dynamic.SizeOf` of an input axis); an expression becomes ``keras.ops``
arithmetic on those scalars, built once and cached.
"""

from __future__ import annotations

import keras
import sympy
import torch
from torch.utils._sympy import functions as symfn

ops = keras.ops


class RuntimeSizes:
    """Symbols bound to input axes, and the Keras scalar of any size expression."""

    def __init__(self):
        self._sources: dict[sympy.Symbol, tuple[object, int]] = {}
        self._cache: dict[sympy.Expr, object] = {}

    def bind(self, symbol: sympy.Symbol, keras_input, axis: int) -> None:
        self._sources.setdefault(symbol, (keras_input, axis))

    def value(self, size):
        """An int for a static size, else a Keras int32 scalar computed at run time."""
        if isinstance(size, (int, float)):
            return size
        symbolic = isinstance(size, (torch.SymInt, torch.SymFloat))
        expr = size.node.expr if symbolic else sympy.sympify(size)
        if expr.is_number:
            return float(expr) if isinstance(size, torch.SymFloat) else int(expr)
        return self._eval(expr)

    def is_dynamic(self, size) -> bool:
        return (isinstance(size, (torch.SymInt, torch.SymFloat))
                and not size.node.expr.is_number)

    def _eval(self, expr):
        if expr in self._cache:
            return self._cache[expr]
        result = self._build(expr)
        self._cache[expr] = result
        return result

    def _build(self, expr):
        from crossport.layers.dynamic import SizeOf
        from crossport.to_keras.ops.elementwise import keras_multiply

        if expr.is_Integer:
            return int(expr)
        if expr.is_Float:
            return float(expr)
        if isinstance(expr, sympy.Symbol):
            if expr not in self._sources:
                raise NotImplementedError(f"size {expr} is not the size of a model input")
            tensor, axis = self._sources[expr]
            return SizeOf(axis, name=f"size_{expr}")(tensor)
        args = [self._eval(a) for a in expr.args]
        if _is_float_expr(expr):  # Python float arithmetic on sizes: float64, like Python
            args = [_to_float64(a) for a in args]
        if isinstance(expr, symfn.ToFloat):
            return args[0]
        if isinstance(expr, (symfn.FloatTrueDiv, symfn.IntTrueDiv)):
            return ops.divide(*args)
        if isinstance(expr, symfn.FloatPow) or (
                isinstance(expr, sympy.Pow) and not expr.exp.is_Integer):
            return ops.power(*args)
        if isinstance(expr, sympy.Add):
            return _fold(ops.add, args)
        if isinstance(expr, sympy.Mul):  # 2*s0: dense (see keras_multiply)
            return _fold(keras_multiply, args)
        if isinstance(expr, symfn.FloorDiv):
            return ops.floor_divide(*args)
        if isinstance(expr, (symfn.Mod, symfn.PythonMod, sympy.Mod)):
            return ops.mod(*args)
        if isinstance(expr, symfn.CeilDiv):
            return ops.negative(ops.floor_divide(ops.negative(args[0]), args[1]))
        if isinstance(expr, (symfn.CeilToInt, sympy.ceiling)):  # math.ceil(h / 4)
            return ops.cast(ops.ceil(args[0]), "int32")
        if isinstance(expr, (symfn.FloorToInt, sympy.floor)):
            return ops.cast(ops.floor(args[0]), "int32")
        if isinstance(expr, symfn.TruncToInt):
            return ops.cast(ops.trunc(args[0]), "int32")
        if isinstance(expr, symfn.Max):
            return _fold(ops.maximum, args)
        if isinstance(expr, symfn.Min):
            return _fold(ops.minimum, args)
        if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) > 0:
            return _fold(keras_multiply, [args[0]] * int(expr.exp))
        raise NotImplementedError(f"run-time size expression {expr} ({type(expr).__name__})")


_FLOAT_FUNCTIONS = (symfn.ToFloat, symfn.FloatTrueDiv, symfn.IntTrueDiv, symfn.FloatPow)


def _is_float_expr(expr) -> bool:
    """Whether ``expr`` (or a part of it) is Python float arithmetic, not an int size."""
    return bool(expr.atoms(sympy.Float)) or any(expr.atoms(f) for f in _FLOAT_FUNCTIONS)


def _to_float64(value):
    if isinstance(value, (int, float)):
        return float(value)
    return ops.cast(value, "float64")


def _fold(fn, args):
    result = args[0]
    for a in args[1:]:
        result = fn(result, a)
    return result
