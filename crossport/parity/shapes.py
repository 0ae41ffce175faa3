"""Which input shapes the parity check runs at: the example's, and one that moves every
dynamic dim.

A ``None`` dim promises the model is right at every size. A check at the example's shape
alone cannot see a converter that baked the example's size in, so the check (and every
export re-check) also runs at a second shape: each size symbol torch.export named moves by
a few elements (odd and even steps, within the ranges torch inferred), and torch itself is
run first to confirm it accepts that shape. Dims the user asked to be dynamic that the
model's code fixes are reported, not silently kept static.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy
import torch

# Steps tried in order: +3 flips parity (floor/ceil rules), then smaller and larger moves,
# then the multiples a strided network needs (a YOLO or UNet takes sizes divisible by 32).
_STEPS = (3, 2, 1, 5, 8, 16, 32, 64)
_STRIDE_STEPS = 16  # from here on only sizes at least the step move by it; smaller ones
# (a batch of 2) move by the first step, not to a batch of 34


@dataclass
class CheckShapes:
    """The input shapes a check runs at, and what the user asked for that the model fixed.

    ``sets[0]`` is the example's shapes; a second entry exists when the model has dynamic
    dims and torch accepted another size. ``fixed`` names dims asked dynamic that the
    model's code fixes (the Keras model keeps them static); ``untried`` says why no second
    shape could be checked.
    """

    sets: list[tuple[tuple[int, ...], ...]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)
    untried: str | None = None
    branches: dict[int, str] = field(default_factory=dict)  # set index -> the size condition

    def describe(self) -> list[str]:
        """``["x 1x3x32x32", ...]``: one phrase per shape set, inputs named."""
        return [", ".join(f"{n} {'x'.join(map(str, s)) or 'scalar'}"
                          for n, s in zip(self.names, shapes)) for shapes in self.sets]


def user_input_dims(exported: torch.export.ExportedProgram) -> list[list]:
    """Per user input, its dims as torch.export traced them (ints or sympy expressions)."""
    user = set(exported.graph_signature.user_inputs)
    dims = []
    for node in exported.graph_module.graph.nodes:
        if node.op == "placeholder" and node.name in user:
            val = node.meta.get("val")
            shape = val.shape if isinstance(val, torch.Tensor) else ()
            dims.append([d.node.expr if isinstance(d, torch.SymInt) else int(d) for d in shape])
    return dims


def _bounds(exported, symbol) -> tuple[int, float]:
    ranges = exported.range_constraints.get(symbol)
    if ranges is None:
        return 2, float("inf")
    lower, upper = finite_bound(ranges.lower, 2), finite_bound(ranges.upper, float("inf"))
    return max(lower, 2), upper  # torch.export specialises sizes 0 and 1


def finite_bound(bound, default):
    """A range bound as an int; torch's ``int_oo`` (unbounded) as ``default``."""
    try:
        return int(bound) if bool(bound.is_Integer) else default
    except (TypeError, ValueError, AttributeError, OverflowError):
        return default


def _example_values(dims: list[list], example: tuple) -> dict:
    """Each size symbol's value in the example inputs."""
    values = {}
    for traced, arg in zip(dims, example):
        for expr, size in zip(traced, arg.shape):
            if isinstance(expr, sympy.Symbol):
                values.setdefault(expr, int(size))
    return values


def _shapes_for(dims: list[list], example: tuple, values: dict) -> tuple[tuple[int, ...], ...]:
    shapes = []
    for traced, arg in zip(dims, example):
        shape = [int(expr.subs(values)) if isinstance(expr, sympy.Expr) and not expr.is_number
                 else int(size) for expr, size in zip(traced, arg.shape)]
        shapes.append(tuple(shape))
    return tuple(shapes)


def candidate_shapes(exported, example: tuple):
    """Second shapes to try, best first: every symbol moved by the same step (by the first
    step instead when a stride-sized step is larger than the symbol itself)."""
    dims = user_input_dims(exported)
    values = _example_values(dims, example)
    if not values:
        return
    for step in _STEPS:
        moved = {}
        for symbol, value in values.items():
            lower, upper = _bounds(exported, symbol)
            move = _STEPS[0] if step >= _STRIDE_STEPS and value < step else step
            new = value + move if value + move <= upper else value - move
            if not lower <= new <= upper or new == value:
                break
            moved[symbol] = new
        else:
            yield _shapes_for(dims, example, moved)


def requested_but_fixed(exported, requested: dict[int, set[int]], names: list[str]) -> list[str]:
    """Dims asked dynamic (``{input index: dims}``) that torch.export kept static."""
    dims = user_input_dims(exported)
    fixed = []
    for index, wanted in sorted(requested.items()):
        for d in sorted(wanted):
            if index < len(dims) and d < len(dims[index]) and isinstance(dims[index][d], int):
                fixed.append(f"{names[index]} dim {d} (the model fixes it at "
                             f"{dims[index][d]})")
    return fixed


def check_shapes(exported, example: tuple, names: list[str],
                 requested: dict[int, set[int]], accepts) -> CheckShapes:
    """The shapes to check: the example's plus the first candidate torch ``accepts``.

    ``accepts(shapes) -> bool`` runs torch on random inputs of those shapes.
    """
    result = CheckShapes(sets=[tuple(tuple(a.shape) for a in example)], names=list(names),
                         fixed=requested_but_fixed(exported, requested, names))
    tried = 0
    for shapes in candidate_shapes(exported, example):
        tried += 1
        if accepts(shapes):
            result.sets.append(shapes)
            return result
    if tried:
        result.untried = ("torch rejected every other size tried for the dynamic dims, so "
                          "they were checked at the example's size only")
    return result
