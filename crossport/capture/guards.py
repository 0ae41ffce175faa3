"""Size conditions a captured graph assumes: a dynamic dim must not hide one.

torch.export follows one side of a Python condition on a dynamic size (``if w % 4 != 0:
pad``) and records the condition as a guard, which ``ExportedProgram.module()`` checks on
every call. The graph, and so the Keras model built from it, carries no trace of it: at a
size on the other side it would compute something else, or fail. So when a divisibility or
equality guard fails at a size torch's own module accepts, conversion refuses the dynamic
dim (``DynamicDimError``). Order guards on derived sizes (``if pad > 0: x = F.pad(x, ...)``,
often a redundant branch: padding by 0) and the size ranges torch.export narrowed (``if w >
10`` traced at 8 keeps ``w <= 10``; ranges are also torch's own bookkeeping) are not refused:
the parity check runs on their other side, where torch accepts it, and fails if the graph
differs there. Guards that hold at every size tried are tautologies torch could
not simplify (``3*max(1, s - s//2) == 3*s - 3*(s//2)``); range guards (``>= 2``) and
``!=`` guards (a derived size is not 0 or 1) are left alone, as torch.export assumes them
of every dynamic dim. So are guards torch adds only to decide the *strides* of a fake
result (its contiguity checks in ``torch._prims_common``): after a crop of a padded image
(``F.pad(x, (0, (8 - w % 8) % 8))[..., :w]``, SwinIR's final crop) the next op asks whether
the crop is contiguous, which at an example of a multiple of 8 gives ``w + pad == w``.
Strides choose a memory layout, not values, and a Keras tensor has none.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import torch

from crossport.capture.borrow import borrowed
from crossport.errors import DynamicDimError

# Sizes tried for the dynamic dims: the example's size moved by 1, -1, 2, -2 ... 32 (near
# the example first: far smaller sizes are often ones the model rejects), then a few large
# ones; all dims together, then one at a time. A guard is a Python expression over sizes,
# so this costs microseconds; torch runs only where a guard fails, at most _TORCH_RUNS times.
_DELTAS = tuple(d for k in range(1, 33) for d in (k, -k))
_LARGE = (97, 128, 255)
_TORCH_RUNS = 8


class _Sized:
    def __init__(self, shape):
        self._shape = tuple(shape)

    def size(self):
        return self._shape


def size_conditions(exported: torch.export.ExportedProgram) -> list[str]:
    """The equality guards of ``exported`` (divisibility ``s % 4 == 0`` included) as Python
    source. ``!=`` guards are torch.export's size-oblivious assumptions that a derived size
    is not 0 or 1, like the range guards; guards only a stride computation added are not
    conditions on the values (see the module docstring)."""
    return [g for g in _value_guards(exported) if "==" in g and "!=" not in g]


def order_conditions(exported: torch.export.ExportedProgram) -> list[str]:
    """The order guards on derived sizes (``if pad > 0`` is kept as ``(8 - s % 8) % 8 <= 0``).

    Unlike an equality, such a branch is often redundant (padding by 0 is no padding), so
    the check runs on the other side of it (:func:`other_side_shapes`) instead of refusing.
    """
    return [g for g in _value_guards(exported)
            if _ORDER.search(g) and "==" not in g and "!=" not in g]


_ORDER = re.compile(r"<=|>=|(?<![<>=!])[<>](?![<>=])")


def _value_guards(exported) -> list[str]:
    guards = getattr(exported, "_guards_code", None) or []  # private, torch 2.13
    strides_only = _stride_only_guards(exported)
    return [g for g in guards if g not in strides_only]


# torch._prims_common / torch._prims functions that only decide a fake result's strides
# (contiguity, memory format, whether a flatten can be a view): their guards change the
# layout torch picks, never a value.
_STRIDE_FUNCTIONS = frozenset({
    "check_contiguous_sizes_strides", "is_contiguous", "is_channels_last_contiguous_2d",
    "is_channels_last_contiguous_3d", "are_strides_like_channels_last_or_false",
    "is_non_overlapping_and_dense", "compute_elementwise_output_logical_to_physical_perm",
    "_collapse_view_helper",
})


def _stride_only_guards(exported) -> set[str]:
    """The guard sources (as in ``_guards_code``) that only stride computations recorded;
    a guard also recorded elsewhere is kept. Empty when torch's private shape env or a
    guard's origin cannot be read (nothing is then left out)."""
    try:
        from torch.export.exported_program import _get_shape_env
        from torch.fx.experimental.symbolic_shapes import ShapeGuardPythonPrinter

        shape_env = _get_shape_env(exported.graph_module)
        if shape_env is None:
            return set()
        printer = ShapeGuardPythonPrinter(shape_env.var_to_sources, lambda s: s.name,
                                          shape_env.var_to_sources)
        origins: dict[str, bool] = {}
        for guard in shape_env.guards:
            code = printer.doprint(guard.expr)
            origins[code] = origins.get(code, True) and _from_stride_function(guard)
    except Exception:  # private API of torch 2.13; without it every guard counts
        return set()
    return {code for code, strides in origins.items() if strides}


def _from_stride_function(guard) -> bool:
    location = getattr(getattr(guard, "sloc", None), "framework_loc", None)
    filename = getattr(location, "filename", "") or ""
    in_prims = re.search(r"torch[/\\]_prims(_common)?[/\\]", filename) is not None
    return in_prims and getattr(location, "name", None) in _STRIDE_FUNCTIONS


def readable(guard: str) -> str:
    """``L['x'].size()[3]`` as ``x dim 3``."""
    guard = re.sub(r"L\['(\w+)'\]\.size\(\)\[(\d+)\]", r"\1 dim \2", guard)
    return re.sub(r"L\['(\w+)'\]\[(\d+)\]\.size\(\)\[(\d+)\]", r"\1[\2] dim \3", guard)


# a float argument computed from a size (scale=1 / seq_len) is specialised to the example's
# value under a guard written with torch.sym_float
_BUILTINS = {"__builtins__": {"max": max, "min": min, "abs": abs}, "torch": torch,
             "math": math}


def _compiled(guard: str):
    try:
        return compile(guard, "<torch.export guard>", "eval")
    except SyntaxError:  # a guard form not handled here: no verdict
        return None


class _Scope(dict):
    """Inputs by forward's parameter name; any other name is forward's ``*args`` (torch
    writes its guards as ``L['a'][0].size()[1]`` for ``def forward(self, *a)``) when it has
    them, else unknown: the guard then has no verdict here, rather than a wrong one."""

    rest: list = []

    def __missing__(self, key):
        if not self.rest:
            raise KeyError(key)
        return self.rest


def _varargs_start(names: list[str]) -> int:
    """Where forward's ``*args`` begin: ``input_names`` numbers the inputs it has no
    parameter name for (``input_1``, ... at their positions)."""
    for i, name in enumerate(names):
        if name == f"input_{i}":
            return i
    return len(names)


def _holds(code, names: list[str], shapes: list[tuple]) -> bool | None:
    """The compiled guard at ``shapes`` (one per input); None if it cannot be evaluated
    here."""
    if code is None:
        return None
    sized = [_Sized(s) for s in shapes]
    scope = _Scope(zip(names, sized))
    scope.rest = sized[_varargs_start(names):]
    try:
        return bool(eval(code, _BUILTINS, {"L": scope}))
    except Exception:  # a guard form not handled here: no verdict
        return None


def _sample_shapes(args: tuple, groups: list[list[tuple[int, int]]]) -> Iterator[list[tuple]]:
    """Input shapes around the example: every group of dims moved together, then one group
    at a time (a group is one size: ``(input, dim)`` pairs the user named alike)."""
    base = [list(a.shape) for a in args]

    def moved(chosen, change) -> list[tuple] | None:
        shapes = [list(s) for s in base]
        for group in chosen:
            new = change(base[group[0][0]][group[0][1]])
            if new < 2:
                return None
            for i, d in group:
                shapes[i][d] = new
        return [tuple(s) for s in shapes]

    changes = [lambda n, k=k: n + k for k in _DELTAS] + [lambda _n, v=v: v for v in _LARGE]
    for chosen in [groups] + [[group] for group in groups]:
        for change in changes:
            shapes = moved(chosen, change)
            if shapes is not None:
                yield shapes


def _torch_accepts(module: torch.nn.Module, args: tuple, shapes: list[tuple]) -> bool:
    from crossport.parity.verify import fresh_inputs

    try:
        with torch.no_grad(), borrowed(module):
            module(*fresh_inputs(args, 0, shapes))
        return True
    except Exception:  # the model's own limit there: not a size it accepts
        return False


def range_conditions(exported: torch.export.ExportedProgram, names: list[str]) -> list[str]:
    """The size ranges torch.export inferred for the dynamic dims, as guard source.

    A branch on a size compared with a number (``if w > 10: ...``) is not a guard in
    ``_guards_code``: torch.export narrows the dim's range instead (``w <= 10``), and the
    graph may hold only there. A range is also torch.export's own bookkeeping (a derived
    size is not 0 or 1: ``h // 2`` gives ``h >= 4``; ``x[:, 2:8]`` at 6 gives ``s <= 7``
    where the converted slice clamps at run time), so the check runs outside the range
    rather than refusing. Bounds every dynamic dim has (2, no upper one) are left out.
    """
    from crossport.parity.shapes import finite_bound, user_input_dims

    conditions = []
    for name, dims in zip(names, user_input_dims(exported)):
        for d, expr in enumerate(dims):
            ranges = exported.range_constraints.get(expr) if not isinstance(expr, int) else None
            if ranges is None:
                continue
            size = f"L['{name}'].size()[{d}]"
            lower, upper = finite_bound(ranges.lower, 0), finite_bound(ranges.upper, None)
            if lower > 2:
                conditions.append(f"{size} >= {lower}")
            if upper is not None:
                conditions.append(f"{size} <= {upper}")
    return conditions


def refuse_unmet_conditions(module: torch.nn.Module, exported, args: tuple,
                            names: list[str], groups: list[list[tuple[int, int]]]) -> None:
    """Raise ``DynamicDimError`` if an equality guard fails at a size torch accepts."""
    conditions = [(g, _compiled(g)) for g in size_conditions(exported)]
    if not conditions:
        return
    runs = 0
    for shapes in _sample_shapes(args, groups):
        failing = [g for g, code in conditions if _holds(code, names, shapes) is False]
        if not failing:
            continue
        if runs >= _TORCH_RUNS:
            return
        runs += 1
        if _torch_accepts(module, args, shapes):
            raise _unmet(failing, shapes)


def other_side_shapes(exported, args: tuple, names: list[str],
                      groups: list[list[tuple[int, int]]], accepts,
                      limit: int = 2) -> list[tuple[list[tuple], str]]:
    """Up to ``limit`` input shapes on the other side of an order guard that torch
    ``accepts``, each with the guard in words, for the parity check to run at: the graph
    took one side of the branch and must still match torch there."""
    guards = order_conditions(exported) + range_conditions(exported, names)
    conditions = [(g, _compiled(g)) for g in guards]
    found, runs = [], 0
    for guard, code in conditions:
        for shapes in _sample_shapes(args, groups):
            if _holds(code, names, shapes) is not False:
                continue
            if runs >= _TORCH_RUNS or len(found) >= limit:
                return found
            runs += 1
            if accepts(shapes):
                found.append((shapes, readable(guard)))
                break
    return found


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."


def _unmet(failing: list[str], shapes: list[tuple]) -> DynamicDimError:
    shown = "; ".join(_short(readable(g)) for g in failing[:3])
    more = f" (and {len(failing) - 3} more)" if len(failing) > 3 else ""
    at = ", ".join("x".join(map(str, s)) for s in shapes)
    cause = ("torch.export followed one side of a Python condition on a dynamic size (such "
             "as `if w % 4 != 0: pad`)")
    if any("sym_float" in g for g in failing):  # F.sdpa(..., scale=1 / seq_len)
        cause = ("a float computed from a dynamic size (an op's float argument, such as "
                 "`scale=1 / x.shape[1]`) was fixed at the example's value, or " + cause)
    return DynamicDimError(
        f"the captured graph holds only where {shown}{more}, and torch runs the model at "
        f"input shapes {at} where it does not: {cause}, so the converted "
        "model would be wrong there. Convert with that dim static, or compute the size "
        "without a branch (pad by (4 - w % 4) % 4 always).",
        problems=[{"op": "size condition", "reason": readable(g), "where": at}
                  for g in failing])
