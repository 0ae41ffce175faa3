"""Which dynamic dims a converter may see: the contract behind ``register(dynamic=...)``.

A ``None`` dim in a converted model is a promise that the model is right at every size torch
accepts. A converter that reads a size from the example (a window, a divisor, a count)
breaks it silently, so every converter declares what it handles:

- ``dynamic=True``: it computes every size at run time (``ctx.size``,
  ``crossport.layers.dynamic``); any dim of any input may be dynamic.
- ``dynamic=False`` (the default, also for user converters): no dynamic dim at all.
- ``dynamic=fn``: ``fn(node) -> reason | None`` for converters that handle some dims only;
  build it with :func:`static_dims`.

The pre-flight check asks every node that touches a dynamic size and refuses the rest with
one :class:`crossport.errors.DynamicDimError` naming the op, the dim and the source line,
before anything is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

DynamicSpec = bool | Callable[[torch.fx.Node], "str | None"]


def is_dynamic_size(size) -> bool:
    """A SymInt/SymFloat whose value is only known at run time."""
    return isinstance(size, (torch.SymInt, torch.SymFloat)) and not size.node.expr.is_number


def same_size(a, b) -> bool:
    """Whether two traced sizes are equal at every size (one symbol, or equal numbers)."""
    if is_dynamic_size(a) or is_dynamic_size(b):
        return is_dynamic_size(a) and is_dynamic_size(b) and a.node.expr == b.node.expr
    return int(a) == int(b)


def _tensor_inputs(node: torch.fx.Node) -> list[tuple[str, torch.Tensor]]:
    """``(argument name, fake tensor)`` for each tensor argument of ``node``."""
    schema = getattr(node.target, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    found = []
    for i, arg in enumerate(node.args):
        name = names[i] if i < len(names) else f"arg{i}"
        items = arg if isinstance(arg, (list, tuple)) else [arg]
        for j, item in enumerate(items):
            val = item.meta.get("val") if isinstance(item, torch.fx.Node) else None
            if isinstance(val, torch.Tensor):
                found.append((f"{name}[{j}]" if len(items) > 1 else name, val))
    for key, item in node.kwargs.items():
        val = item.meta.get("val") if isinstance(item, torch.fx.Node) else None
        if isinstance(val, torch.Tensor):
            found.append((key, val))
    return found


def _scalar_sizes(node: torch.fx.Node) -> list:
    """SymInt arguments (``end`` of a slice, ``size`` of a view)."""
    flat = []
    for arg in list(node.args) + list(node.kwargs.values()):
        items = arg if isinstance(arg, (list, tuple)) else [arg]
        for item in items:
            if isinstance(item, torch.fx.Node) and not isinstance(item.meta.get("val"),
                                                                  torch.Tensor):
                item = item.meta.get("val")
            flat.append(item)
    return [s for s in flat if is_dynamic_size(s)]


def touches_dynamic(node: torch.fx.Node) -> bool:
    """Whether ``node`` reads or produces a size known only at run time."""
    if any(is_dynamic_size(d) for _n, t in _tensor_inputs(node) for d in t.shape):
        return True
    if _scalar_sizes(node):
        return True
    outs = node.meta.get("val")
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    return any(isinstance(o, torch.Tensor) and any(is_dynamic_size(d) for d in o.shape)
               for o in outs)


def dynamic_dims(node: torch.fx.Node, argument: str) -> list[int]:
    """Indices of the dynamic dims of ``node``'s tensor ``argument`` (by schema name)."""
    for name, val in _tensor_inputs(node):
        if name == argument:
            return [d for d, size in enumerate(val.shape) if is_dynamic_size(size)]
    return []


def tensor_argument(node: torch.fx.Node, argument: str) -> torch.Tensor | None:
    """The fake tensor of ``node``'s ``argument`` (by schema name), or None."""
    return next((val for name, val in _tensor_inputs(node) if name == argument), None)


def tied_to_static(what: str, dim, size) -> str:
    """Why a run-time size ``dim`` meeting a static ``size`` is refused: torch.export keeps
    such a dim only as an expression of several dynamic dims that a guard pins to the static
    size (``flatten(conv(x), 1)`` with dynamic H and W into 256 features holds where
    ``4*H*W == 256``), so those dims cannot vary freely."""
    return (f"{what} ({dim}) meets a static {int(size)}: the model holds only where {dim} == "
            f"{int(size)} (dynamic dims flattened into static features), so those dims "
            "cannot vary freely")


def static_dims(argument: str, dims: Callable[[torch.fx.Node], Iterable[int]],
                why: str) -> Callable[[torch.fx.Node], str | None]:
    """A ``dynamic=`` predicate: the ``dims(node)`` of ``argument`` must be static.

    Example:
        ``static_dims("self", lambda node: range(2, rank(node)), "ceil_mode=True")``
        refuses a pool whose spatial dims are dynamic, naming the dim.
    """

    def check(node: torch.fx.Node) -> str | None:
        wanted = {d % max(_rank(node, argument), 1) for d in dims(node)}
        bad = [d for d in dynamic_dims(node, argument) if d in wanted]
        if not bad:
            return None
        which = ", ".join(f"dim {d} of {argument!r} ({_symbol(node, argument, d)})" for d in bad)
        return f"{why} needs a static size in {which}"

    return check


def _rank(node: torch.fx.Node, argument: str) -> int:
    for name, val in _tensor_inputs(node):
        if name == argument:
            return val.ndim
    return 0


def _symbol(node: torch.fx.Node, argument: str, dim: int) -> str:
    for name, val in _tensor_inputs(node):
        if name == argument:
            return f"size {val.shape[dim]}"
    return "a dynamic size"


def dynamic_reason(node: torch.fx.Node, spec: DynamicSpec) -> str | None:
    """Why the converter (declared ``spec``) cannot take ``node``'s dynamic sizes, or None."""
    if spec is True or not touches_dynamic(node):
        return None
    if spec is False:
        return ("this converter reads sizes from the example only; it needs every dim of "
                "its inputs static")
    return spec(node)


def input_symbols(exported: torch.export.ExportedProgram, names: list[str]) -> dict[str, str]:
    """``{"s0": "x dim 1", ...}``: which user input dim each size symbol stands for."""
    user = set(exported.graph_signature.user_inputs)
    where: dict[str, str] = {}
    placeholders = [n for n in exported.graph_module.graph.nodes
                    if n.op == "placeholder" and n.name in user]
    for node, name in zip(placeholders, names):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        for d, size in enumerate(val.shape):
            if is_dynamic_size(size) and size.node.expr.is_Symbol:
                where.setdefault(str(size.node.expr), f"{name} dim {d}")
    return where
