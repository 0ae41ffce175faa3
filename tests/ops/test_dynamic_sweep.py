"""Every op-table case with every dim dynamic: right at other sizes, or refused.

The op tables check each case at its example's shape. A converter that bakes the example's
size into a model with a ``None`` dim would pass them and be silently wrong at any other
size. This sweep converts every case of ``op_cases()`` (check off) with each dim of every
float/int input dynamic, as far as the model allows: torch.export is asked first which dims
the model's own code leaves free (``Dim.AUTO``), and those are requested with
``dynamic_dims`` (a Linear's in-features stay static, a batch or sequence dim goes free).
The outcomes allowed:

- conversion raises a ``CrossportError`` (``DynamicDimError``: the op cannot compute a
  run-time size) -- counted as "refused";
- the model matches torch (shapes, dtypes, NaN/inf positions, values at the case's
  tolerance under the default rounding rule, ``crossport.parity.accept.recheck``) at the
  example's size and at another size torch accepts: every size symbol moved by +1, else
  -1, +2, +3 (each dim keeps its ties, so a matmul's inner dims move together).

A model that runs and differs, or crashes, at a size torch accepts is a bug. The outcome
of each case is a user property (``dynamic_sweep``): the terminal summary counts them.
"""

from __future__ import annotations

import pytest
import sympy
import torch

import crossport
from crossport.capture.borrow import borrowed
from crossport.capture.export import _match_signature, capture_patches
from crossport.errors import CrossportError
from crossport.parity.accept import recheck
from crossport.parity.shapes import finite_bound, user_input_dims
from crossport.parity.verify import run_keras
from tests.ops.opcases import inputs, op_cases

_NOT_OPTIONS = {"atol", "expect_layers", "max_transposes", "kernel_transposes",
                "expect_converters", "dynamic_batch", "dynamic_dims"}
_DELTAS = (1, -1, 2, 3)  # each size symbol moves by one of these, first accepted wins
_SWEEP_ATOL = 1e-5  # the harness' default, for rows that state none
# rows whose other size shows a difference that is not a converter's size bug
_KNOWN = {
    "nan-nan-topk-largest": "a row with two NaNs: torch's topk orders tied indices as its "
                            "kernel happens to (7 before 4 at 9 columns, 4 before 7 at 8), "
                            "an order torch documents none of (parity.md, Ties)",
}


def _sweep_cases() -> list:
    return [pytest.param(*p.values, id=p.id, marks=pytest.mark.xfail(
                strict=True, reason=_KNOWN[p.id])) if p.id in _KNOWN else p
            for p in op_cases()]


def _sized(arg) -> bool:
    return isinstance(arg, torch.Tensor) and arg.ndim > 0 and arg.dtype != torch.bool


def _widened(args: tuple) -> tuple:
    """Size-1 dims doubled: torch.export specialises sizes 0 and 1 (crossport widens the
    example the same way for a dim requested dynamic)."""
    out = []
    for arg in args:
        if _sized(arg):
            for d, size in enumerate(arg.shape):
                if size == 1:
                    arg = torch.cat([arg, arg], dim=d)
        out.append(arg)
    return tuple(out)


def _free_dims(module, args: tuple) -> dict[int, dict[int, str]] | None:
    """``dynamic_dims`` for every dim the model leaves free, per torch.export's ``AUTO``
    dims (None when that export fails: then every dim is requested). A ``forward(*xs)``
    takes its specs as one tuple, as crossport's capture gives them: without it every
    such row's probe failed and asked for every dim, so torch refused the fixed ones."""
    auto = torch.export.Dim.AUTO
    for example in (_widened(args), args):
        spec = _match_signature(module, tuple(
            {d: auto for d in range(a.ndim)} if _sized(a) else None for a in example))
        try:
            with borrowed(module), capture_patches():
                exported = torch.export.export(module, example, dynamic_shapes=spec)
        except Exception:  # noqa: BLE001  (widening broke a broadcast, or no capture at all)
            continue
        return {i: {d: f"in{i}_dim{d}" for d, expr in enumerate(dims)
                    if _free(exported, expr)}
                for i, dims in enumerate(user_input_dims(exported)) if _sized(args[i])}
    return None


def _free(exported, expr) -> bool:
    """A traced dim torch left free: a symbol with more than one value in its range (a
    conv's input channels stay a symbol of range [3, 3])."""
    if isinstance(expr, int) or expr.is_number:
        return False
    ranges = [exported.range_constraints.get(s) for s in expr.free_symbols]
    return not any(r is not None and r.lower == r.upper for r in ranges)


def _every_dim(args: tuple) -> dict[int, dict[int, str]]:
    return {i: {d: f"in{i}_dim{d}" for d in range(a.ndim)}
            for i, a in enumerate(args) if _sized(a)}


def _moved_shapes(exported, args: tuple, delta: int) -> tuple | None:
    """Input shapes with every size symbol moved by ``delta`` (by ``abs(delta)`` where
    that leaves its range), None when the move changes nothing."""
    dims = user_input_dims(exported)
    values = {}
    for traced, arg in zip(dims, args):
        for expr, size in zip(traced, arg.shape):
            if isinstance(expr, sympy.Symbol):
                values.setdefault(expr, max(int(size), 2))  # a widened unit dim is 2
    moved = {}
    for symbol, value in values.items():
        ranges = exported.range_constraints.get(symbol)
        lower = max(finite_bound(ranges.lower, 2), 2) if ranges is not None else 2
        upper = finite_bound(ranges.upper, float("inf")) if ranges is not None else float("inf")
        new = value + delta if lower <= value + delta <= upper else value + abs(delta)
        moved[symbol] = new if lower <= new <= upper else value
    shapes = tuple(tuple(int(expr.subs(moved)) if isinstance(expr, sympy.Expr) else int(size)
                         for expr, size in zip(traced, arg.shape))
                   for traced, arg in zip(dims, args))
    return None if shapes == tuple(tuple(a.shape) for a in args) else shapes


def _resized(arg, shape, gen: torch.Generator):
    """``arg`` at ``shape``: a shrunk dim drops its last entries, a grown one repeats its
    first ones (so inputs keep their values' domain and their pairing with each other:
    a divisor stays non-zero, an index in range), repeated floats jittered by 1e-3 so no
    ties appear that the example lacks."""
    if not isinstance(arg, torch.Tensor) or tuple(arg.shape) == tuple(shape):
        return arg
    out, repeated = arg, torch.zeros((), dtype=torch.bool)
    for d, (old, new) in enumerate(zip(arg.shape, shape)):
        index = torch.arange(new)
        out = out.index_select(d, index % old) if old else torch.zeros(
            (*out.shape[:d], new, *out.shape[d + 1:]), dtype=arg.dtype)
        view = [1] * len(shape)
        view[d] = new
        repeated = repeated | (index >= old).reshape(view)
    if out.is_floating_point():
        # a repeated float is scaled by 0.5..1.5 (sign and domain kept, no ties, rows no
        # multiple of each other); a repeated inf/NaN becomes a normal draw (no tie of
        # non-finite values, which torch orders as its kernel happens to)
        factor = 0.5 + torch.rand(out.shape, generator=gen, dtype=out.dtype)
        fresh = torch.randn(out.shape, generator=gen, dtype=out.dtype)
        out = torch.where(repeated, torch.where(out.isfinite(), out * factor, fresh), out)
    return out


def _other_size(module, exported, args: tuple):
    """Inputs at the first moved size torch accepts, or None."""
    gen = torch.Generator().manual_seed(7)
    for delta in _DELTAS:
        shapes = _moved_shapes(exported, args, delta)
        if shapes is None:
            continue
        moved = tuple(_resized(a, s, gen) for a, s in zip(args, shapes))
        try:
            with torch.no_grad():
                module(*(a.clone() for a in moved))
        except Exception:  # noqa: BLE001  (torch rejects that size: the op constrains it)
            continue
        return moved
    return None


@pytest.mark.slow
@pytest.mark.parametrize(("module", "shapes", "kwargs"), _sweep_cases())
def test_op_case_right_at_other_sizes(record_property, module, shapes, kwargs):
    module = module.eval()
    torch.manual_seed(0)
    args = shapes() if callable(shapes) else inputs(shapes)
    dims = _free_dims(module, args)
    dims = _every_dim(args) if dims is None else dims
    if not any(dims.values()):
        record_property("dynamic_sweep", "no free dim")
        return
    atol = kwargs.get("atol", _SWEEP_ATOL)
    options = {k: v for k, v in kwargs.items() if k not in _NOT_OPTIONS}
    try:
        conversion = crossport.convert_with_report(module, args, check=False, atol=atol,
                                                   dynamic_dims=dims, **options)
    except CrossportError as refusal:
        record_property("dynamic_sweep", f"refused ({type(refusal).__name__})")
        return
    other = _other_size(module, conversion.exported, args)
    channels_last_io = options.get("channels_last_io", False)
    result = recheck(module, [args] + ([other] if other else []),
                     lambda xs, like: run_keras(conversion.model, xs, channels_last_io, like=like),
                     atol, options.get("tolerance", "rounding"), examples_first=True)
    sizes = [[tuple(a.shape) for a in xs] for xs in [args] + ([other] if other else [])]
    assert result.passed, f"dims {dims}, sizes {sizes}: {result.describe()}"
    record_property("dynamic_sweep", "checked at two sizes" if other else "example size only")
