"""Python conditions on run-time sizes in a traced ``call()``: proven constant or refused.

A traced layer's Python sees a run-time size as the example's number (a
:class:`~crossport.to_torch.sizes.RunSize`), so ``if seq_len > self.max_len:``,
``if n % 2 == 1:`` or ``bool(n)`` is decided at the example's value and the trace records
the branch taken there: the module would compute that branch at every size, silently wrong
at sizes Keras sends down the other one (the check's second size moves sizes by a few only).

So every comparison (``< <= > >= == !=``) and truth test of a RunSize made by the layer's
own code (:func:`observe`, called by RunSize's operators; a frame of Keras, TF, numpy or
crossport is shape inference, not a branch of the layer) must be *constant*: the same at
every size Keras accepts, proven from the size's expression (:func:`constant`). Sizes
counted as accepted: every size read off a tensor is at least 1 (an empty tensor is not a
size the conversion promises, as torch.export assumes every dynamic dim ``>= 2`` in the
other direction); so ``n > 0``, ``n >= 1``, ``bool(n)``, ``n + 1 > n`` or ``n % 4 < 4`` are
fine. Any other condition refuses the layer, naming the line and the condition
(``shape(x)[1] > 64 was False at the example``), unless it only guards a ``raise``
(:func:`raise_guard`: ``if n > self.max_len: raise ValueError(...)``, ``assert n <= 64``),
where sizes on the other side are sizes Keras rejects.

``min(n, c)`` / ``max(n, c)`` of sizes in the layer's modules are recorded instead
(:func:`extremum`: a RunSize ``torch.sym_min`` / ``sym_max`` computes at run time), so the
comparison inside them is no branch; ``ops.minimum`` of a size is a tensor op already.
"""

from __future__ import annotations

import ast
import functools
import linecache
import math
import operator
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from crossport.to_torch.patching import active
from crossport.to_torch.sizes import RunSize, describe

INF = math.inf
_STATE = threading.local()
COMPARISONS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
               "eq": operator.eq, "ne": operator.ne}
_SYMBOLS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
# functions whose comparisons only infer shapes (a sublayer converted by its own converter
# runs its compute_output_shape on run-time sizes): no branch of the module
_SHAPE_INFERENCE = frozenset({"compute_output_shape", "compute_output_spec"})
ADVICE = ("build that Keras Input dim with a fixed size (no None there), or compute without "
          "a Python branch on the size (ops.where, ops.minimum / ops.maximum of the size), "
          "or register a converter for the layer with crossport.to_torch.register_layer(...)")


# -- what sizes can be --------------------------------------------------------------------

def _key(value):
    """A structural key: two RunSizes computing the same expression have the same key."""
    if not isinstance(value, RunSize):
        return value
    name, *operands = value.expr
    if name == "dim":
        return ("dim", id(operands[0]), operands[1])
    return (name, *(_key(o) for o in operands))


def _linear(value) -> tuple[dict, float]:
    """``value`` as ``sum(coefficient * atom) + constant``: the atoms are the dims and the
    non-linear sub-expressions (``n // 4``, ``n % 2``, ``min(n, 8)``), keyed by :func:`_key`
    with the atom beside its coefficient."""
    if not isinstance(value, RunSize):
        return {}, value
    name, *operands = value.expr
    if name == "neg":
        terms, constant = _linear(operands[0])
        return {k: (-c, a) for k, (c, a) in terms.items()}, -constant
    if name in ("add", "sub"):
        sign = 1 if name == "add" else -1
        (left, c1), (right, c2) = _linear(operands[0]), _linear(operands[1])
        terms = dict(left)
        for k, (c, atom) in right.items():
            terms[k] = (terms.get(k, (0, atom))[0] + sign * c, atom)
        return {k: v for k, v in terms.items() if v[0] != 0}, c1 + sign * c2
    if name == "mul" and not all(isinstance(o, RunSize) for o in operands):
        factor, size = (operands[0], operands[1]) if not isinstance(operands[0], RunSize) \
            else (operands[1], operands[0])
        terms, constant = _linear(size)
        return {k: (c * factor, a) for k, (c, a) in terms.items() if c * factor}, \
            constant * factor
    return {_key(value): (1, value)}, 0


def _times(c: float, bound: tuple) -> tuple:
    low, high = (_product(c, bound[0]), _product(c, bound[1]))
    return (low, high) if low <= high else (high, low)


def _product(a: float, b: float) -> float:
    return 0 if a == 0 or b == 0 else a * b


def _floordiv(a: float, b: float) -> float | None:
    """``a // b`` for ``b >= 1`` with infinite ends (None: not bounded that way)."""
    if math.isinf(a) and math.isinf(b):
        return None
    if math.isinf(b):
        return 0 if a >= 0 else -1
    return a if math.isinf(a) else a // b


def bounds(value) -> tuple[float, float]:
    """The smallest and largest value ``value`` takes over the accepted sizes (each dim
    ``>= 1``), or wider (intervals: sound, not always tight)."""
    terms, constant = _linear(value)
    low = high = constant
    for coefficient, atom in terms.values():
        a, b = _times(coefficient, _atom_bounds(atom))
        low, high = low + a, high + b
    return low, high


def _atom_bounds(atom: RunSize) -> tuple[float, float]:
    name, *operands = atom.expr
    if name == "dim":
        return 1, INF
    (a_low, a_high), (b_low, b_high) = (bounds(o) for o in operands)
    if name == "mul":
        corners = [_product(x, y) for x in (a_low, a_high) for y in (b_low, b_high)]
        return min(corners), max(corners)
    if name in ("min", "max"):
        pick = min if name == "min" else max
        return pick(a_low, b_low), pick(a_high, b_high)
    if name == "floordiv" and b_low >= 1:  # a divisor that is never 0 or negative
        corners = [_floordiv(x, y) for x in (a_low, a_high) for y in (b_low, b_high)]
        return (min(corners), max(corners)) if None not in corners else (-INF, INF)
    if name == "mod" and b_low >= 1:  # Python's %: in [0, divisor - 1]
        if a_low >= 0 and a_high < b_low:
            return a_low, a_high
        return 0, b_high - 1
    if name == "mod" and b_high <= -1:
        return b_low + 1, 0
    return -INF, INF


def constant(name: str, left, right) -> bool:
    """Whether ``left <name> right`` has one outcome at every accepted size."""
    if not all(isinstance(v, (int, float)) for v in (left, right)):
        return False
    left, right = (int(v) if isinstance(v, bool) else v for v in (left, right))
    low, high = _difference_bounds(left, right)
    outcomes = {"lt": (high < 0, low >= 0), "le": (high <= 0, low > 0),
                "gt": (low > 0, high <= 0), "ge": (low >= 0, high < 0),
                "eq": (low == high == 0, low > 0 or high < 0),
                "ne": (low > 0 or high < 0, low == high == 0)}[name]
    return any(outcomes)


def _difference_bounds(left, right) -> tuple[float, float]:
    """The bounds of ``left - right``: exact terms cancel for ints (``n + 1 - n``), a float
    operand is a constant."""
    if not isinstance(left, float) and not isinstance(right, float):
        return bounds(left - right)
    (a_low, a_high), (b_low, b_high) = bounds(left), bounds(right)
    return a_low - b_high, a_high - b_low


def extremum(name: str, a, b):
    """``min(a, b)`` / ``max(a, b)`` of sizes: the operand that is always the smaller /
    larger one where that is proven, else a RunSize computing it at run time."""
    pick = min if name == "min" else max
    if not isinstance(a, RunSize) and not isinstance(b, RunSize):
        return pick(a, b)
    low, high = bounds(a - b)
    if high <= 0:
        return a if name == "min" else b
    if low >= 0:
        return b if name == "min" else a
    return RunSize(pick(int(a), int(b)), (name, a, b))


# -- recording ----------------------------------------------------------------------------

@contextmanager
def watching() -> Iterator[list]:
    """The conditions of one traced call that are not constant, each ``(where,
    condition)`` (:func:`observe` appends them; :func:`refusal` says them)."""
    previous = getattr(_STATE, "records", None)
    _STATE.records = records = []
    try:
        yield records
    finally:
        _STATE.records = previous


def observe(name: str, left, right, frame) -> None:
    """A comparison ``left <name> right`` (``name`` ``"bool"``: a truth test) of a RunSize
    made in ``frame``: recorded unless it is constant over the accepted sizes, made by a
    library's shape inference, or guards a raise only. The trace goes on (the example's
    outcome), so one refusal lists every branch of the layer."""
    records = getattr(_STATE, "records", None)
    if records is None or not active() or not _layer_code(frame):
        return
    op, right = ("ne", 0) if name == "bool" else (name, right)
    if constant(op, left, right) or _in_shape_inference(frame) or raise_guard(frame):
        return
    outcome = COMPARISONS[op](int(left), int(right) if isinstance(right, RunSize) else right)
    condition = (f"bool({describe(left)})" if name == "bool"
                 else f"{describe(left)} {_SYMBOLS[name]} {describe(right)}")
    path = frame.f_code.co_filename.replace("\\", "/").rsplit("/", 1)[-1]
    code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    record = (f"at {path}:{frame.f_lineno}: `{code}`", f"`{condition}` was {outcome}")
    if record not in records:
        records.append(record)


def refusal(records: list) -> str:
    """The refusal of a call whose Python branches on run-time sizes (``records`` from
    :func:`watching`): every branch, where, and what to do."""
    branches = "; ".join(f"{where}: {condition}" for where, condition in records)
    many = "es" if len(records) > 1 else ""
    return (f"its call() branches on a run-time size ({branches} at the example's sizes): "
            f"the trace records only the branch{many} taken there, wrong at sizes taking the "
            f"other; {ADVICE}")


def _layer_code(frame) -> bool:
    from crossport.to_torch.lift import _user_code

    return _user_code(frame)


def _in_shape_inference(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_name in _SHAPE_INFERENCE:
            return True
        frame = frame.f_back
    return False


# -- a condition guarding a raise ---------------------------------------------------------

def raise_guard(frame) -> bool:
    """Whether the condition being evaluated in ``frame`` is the test of an ``assert`` or
    of an ``if`` one branch of which only raises (``if n > self.max_len: raise ...``). The
    trace ran the other branch; a size on the raising side is one Keras rejects (the module
    computes there instead of raising)."""
    position = _position(frame)
    if position is None:
        return False
    statement = _statement_at(frame.f_code.co_filename, position)
    if isinstance(statement, ast.Assert):
        return _within(statement.test, position)
    if isinstance(statement, ast.If) and _within(statement.test, position):
        return any(len(branch) == 1 and isinstance(branch[0], ast.Raise)
                   for branch in (statement.body, statement.orelse))
    return False


def _position(frame) -> tuple | None:
    """(line, end line, column, end column) of the instruction ``frame`` executes."""
    try:
        positions = list(frame.f_code.co_positions())
        line, end, column, end_column = positions[frame.f_lasti // 2]
    except (AttributeError, IndexError, ValueError):
        return None
    return None if None in (line, end, column, end_column) else (line, end, column, end_column)


def _within(node, position) -> bool:
    start, end = (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)
    line, end_line, column, end_column = position
    return start <= (line, column) and (end_line, end_column) <= end


@functools.lru_cache(maxsize=64)
def _parsed(filename: str, size: int):
    try:
        return ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return None


def _statement_at(filename: str, position: tuple):
    """The innermost statement of ``filename`` containing ``position``."""
    tree = _parsed(filename, len(linecache.getlines(filename)))
    found = None
    pending = [tree] if tree is not None else []
    while pending:
        node = pending.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt) and _within(child, position):
                found = child
                pending.append(child)
    return found
