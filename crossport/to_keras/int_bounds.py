"""Bounds on integer graph values that static sizes prove: indices, aranges, and what
shape ops and arithmetic by constants make of them.

TFLite has no int64 ``FLOOR_DIV`` and no int64 ``UNSORTED_SEGMENT_*`` builtins, while torch
computes every index in int64 (transformers' mixture-of-experts path divides sort indices by
``top_k``). An int64 op whose operands provably fit int32 computes the same integers in
int32, so a converter may run it there and cast back (exact, and a TFLite builtin).
A value nothing bounds (a model input, data-dependent arithmetic) gives None: never guessed.
"""

from __future__ import annotations

import math
import operator

import torch

from crossport.capture.op_facts import VALUE_AND_INDEX_OPS, op_name

INT32 = (-(2**31), 2**31 - 1)
_NARROW = {torch.bool: (0, 1), torch.uint8: (0, 255), torch.int8: (-128, 127),
           torch.int16: (-(2**15), 2**15 - 1), torch.int32: INT32}
# Ops whose integer output (element 1 of VALUE_AND_INDEX_OPS) indexes their first input:
# every value is below its numel.
_INDEX_OPS = {"argmax", "argmin", "argsort"}
# Ops whose output values are some of their first input's values.
_SAME_VALUES = {"view", "_unsafe_view", "reshape", "clone", "expand", "permute", "transpose",
                "t", "squeeze", "unsqueeze", "slice", "select", "flatten", "contiguous",
                "alias", "index_select", "gather", "index", "repeat", "flip", "roll",
                "narrow", "unflatten", "detach", "lift_fresh_copy", "_to_copy", "to"}
_DEPTH = 64  # a chain deeper than this is not followed (None)


def fits_int32(value) -> bool:
    """Whether ``value`` (a graph node or a Python number) provably lies in int32's range.

    Example:
        >>> import torch
        >>> class M(torch.nn.Module):
        ...     def forward(self, x):
        ...         return torch.sort(x).indices // 2, x.long() // 2
        >>> ep = torch.export.export(M(), (torch.randn(5),))
        >>> [fits_int32(n.args[0]) for n in ep.graph.nodes
        ...  if n.target is torch.ops.aten.floor_divide.default]
        [True, False]
    """
    bounds = int_bounds(value)
    return bounds is not None and INT32[0] <= bounds[0] and bounds[1] <= INT32[1]


def int_bounds(value, depth: int = 0) -> tuple[int, int] | None:
    """``(low, high)`` containing every value of ``value``, or None (not provable)."""
    if isinstance(value, bool) or isinstance(value, int):
        return int(value), int(value)
    if not isinstance(value, torch.fx.Node) or depth > _DEPTH:
        return None
    meta = value.meta.get("val")
    if isinstance(meta, torch.Tensor) and meta.dtype in _NARROW:
        return _NARROW[meta.dtype]
    if isinstance(meta, torch.Tensor) and meta.dtype != torch.int64:
        return None
    if value.target is operator.getitem:
        source = value.args[0]
        if (isinstance(source, torch.fx.Node) and op_name(source) in VALUE_AND_INDEX_OPS
                and value.args[1] == 1):
            return _index_bounds(source)
        return None
    name = op_name(value)
    if name in _INDEX_OPS:
        return _index_bounds(value)
    if name == "arange":
        return _arange_bounds(value)
    if name in _SAME_VALUES:
        return int_bounds(value.args[0], depth + 1)
    if name in ("add", "sub", "mul", "floor_divide", "remainder") \
            and value.kwargs.get("alpha", 1) == 1:
        return _arithmetic(name, [int_bounds(a, depth + 1) for a in value.args[:2]])
    return None


def _index_bounds(op: torch.fx.Node) -> tuple[int, int] | None:
    source = op.args[0].meta.get("val") if isinstance(op.args[0], torch.fx.Node) else None
    if not isinstance(source, torch.Tensor):
        return None
    high = largest_size(source.numel())
    return None if high is None else (0, max(high - 1, 0))


def largest_size(size) -> int | None:
    """The largest value a size can take: itself, or a run-time size's upper bound from the
    export's ranges (``int()`` of it would specialize the symbol to the example's value);
    None when it has none."""
    if not isinstance(size, torch.SymInt):
        return int(size)
    node = size.node
    try:
        upper = node.shape_env.bound_sympy(node.expr).upper
        return int(upper) if upper.is_finite and upper < 2**62 else None
    except (AttributeError, TypeError, ValueError):
        return None


def _arange_bounds(node: torch.fx.Node) -> tuple[int, int] | None:
    args = [a for a in node.args if not isinstance(a, torch.fx.Node)]
    if len(args) != len(node.args) or not all(isinstance(a, int) for a in args):
        return None  # a run-time end, or float steps
    start, end, step = (0, args[0], 1) if len(args) == 1 else (*args[:2], *(args[2:] or [1]))
    values = range(start, end, step)
    return (min(values[0], values[-1]), max(values[0], values[-1])) if values else (0, 0)


def _arithmetic(name: str, operands: list) -> tuple[int, int] | None:
    if len(operands) != 2 or None in operands:
        return None
    (a_lo, a_hi), (b_lo, b_hi) = operands
    if name == "add":
        return a_lo + b_lo, a_hi + b_hi
    if name == "sub":
        return a_lo - b_hi, a_hi - b_lo
    corners_of = {"mul": lambda x, y: x * y, "floor_divide": lambda x, y: x // y}
    if name == "remainder":
        return (0, b_hi - 1) if b_lo > 0 else None  # Python's sign: the divisor's
    if name == "floor_divide" and b_lo <= 0 <= b_hi:
        return None  # a zero divisor
    corners = [corners_of[name](x, y) for x in (a_lo, a_hi) for y in (b_lo, b_hi)]
    return min(corners), max(corners)


def largest_count(shapes) -> int | None:
    """An upper bound on the element count of ``shapes`` broadcast together (torch sizes,
    run-time ones by their ranges), or None."""
    rank = max((len(shape) for shape in shapes), default=0)
    dims = [1] * rank
    for shape in shapes:
        for i, size in enumerate(shape, start=rank - len(shape)):
            high = largest_size(size)
            if high is None:
                return None
            dims[i] = max(dims[i], high)
    return math.prod(dims)
