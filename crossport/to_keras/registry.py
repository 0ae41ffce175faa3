"""The converter table: ATen overload -> converter function, layout policy, supports check.

A converter is registered with :func:`register`::

    @register(aten.relu.default, policy=Policy.AGNOSTIC)
    def aten_relu_default(ctx, self):
        \"\"\"relu(Tensor self) -> Tensor\"\"\"
        return keras.layers.ReLU(name=ctx.name())(self)

The emitter binds the node's arguments to the schema **by name** (defaults filled in) and
calls ``converter(ctx, **arguments)``. Tensor arguments arrive as Keras tensors laid out
as the policy asks, or as numpy arrays when they are parameters, buffers or constants.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from crossport.layout.policy import Policy  # re-exported: converters import it from here
from crossport.to_keras.dynamic_dims import DynamicSpec, dynamic_reason

__all__ = ["Converter", "LibraryOp", "Policy", "bind_arguments", "capture_targets", "complex_ops",
           "lookup", "lookup_complex", "native_overloads", "register", "register_complex",
           "registered_ops"]


# supports(node) or supports(node, **arguments): a reason the node is unsupported, or None
SupportsFn = Callable[..., "str | None"]


@dataclass(frozen=True)
class LibraryOp:
    """A custom op of a library crossport does not import (``transformers::
    grouped_mm_fallback``): registered by its qualified name and schema, matched by name
    when a graph holds the op (the library defines it when it is imported)."""

    name: str  # "namespace::op"
    schema_text: str = field(default="", compare=False)  # "(Tensor input, ...) -> Tensor"
    overload: str = "default"

    @classmethod
    def of(cls, op: torch._ops.OpOverload) -> LibraryOp:
        return cls(op.name(), overload=op._overloadname)

    @property
    def _schema(self):
        return torch._C.parse_schema(self.name + self.schema_text)

    def resolve(self) -> torch._ops.OpOverload | None:
        """The op itself once its library defined it, else None."""
        namespace, name = self.name.split("::")
        try:
            return getattr(getattr(getattr(torch.ops, namespace), name), self.overload)
        except (AttributeError, RuntimeError):
            return None

    def __str__(self) -> str:  # as str() of the OpOverload reads: namespace.op.overload
        return f"{self.name.replace('::', '.')}.{self.overload}"


@dataclass(frozen=True)
class Converter:
    op: torch._ops.OpOverload | LibraryOp
    fn: Callable
    policy: Policy
    supports: SupportsFn | None = None
    keeps_layout: bool = False  # CUSTOM ops whose output takes the input's layout
    dynamic: DynamicSpec = False  # which dynamic dims it computes at run time

    @property
    def passes_layout(self) -> bool:
        """Whether the layout analysis may look through this op (elementwise-like)."""
        return self.policy is Policy.AGNOSTIC or self.keeps_layout

    def unsupported_reason(self, node: torch.fx.Node) -> str | None:
        return call_predicate(self.supports, node) if self.supports is not None else None

    def dynamic_reason(self, node: torch.fx.Node) -> str | None:
        """Why this converter cannot take ``node``'s dynamic sizes (None: it can)."""
        spec = self.dynamic
        if callable(spec):
            spec = functools.partial(call_predicate, spec)
        return dynamic_reason(node, spec)


def bind_arguments(node: torch.fx.Node) -> dict:
    """The node's arguments by ATen schema name, defaults filled in ({} for Python callables)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return {}
    bound = {}
    for i, argument in enumerate(schema.arguments):
        if i < len(node.args) and not argument.kwarg_only:
            bound[argument.name] = node.args[i]
        elif argument.name in node.kwargs:
            bound[argument.name] = node.kwargs[argument.name]
        elif argument.has_default_value():
            bound[argument.name] = argument.default_value
        else:
            bound[argument.name] = None
    return bound


def call_predicate(fn: Callable, node: torch.fx.Node):
    """``fn(node)``, or ``fn(node, **arguments)`` (schema names) when it takes more."""
    if len(inspect.signature(fn).parameters) == 1:
        return fn(node)
    return fn(node, **bind_arguments(node))


_REGISTRY: dict[object, Converter] = {}


def register(*ops, policy: Policy, supports: SupportsFn | None = None, override: bool = False,
             keeps_layout: bool = False, dynamic: DynamicSpec = False):
    """Register the decorated function as the converter of each overload in ``ops``.

    Args:
        ops: ATen overloads (``torch.ops.aten.conv2d.default``), Python callables
            (``operator.getitem``) that appear as fx node targets, or ``LibraryOp``s (ops
            of a library crossport does not import, matched by name).
        policy: the layout policy.
        supports: ``supports(node) -> reason | None``, or ``supports(node, **arguments)``
            to receive the node's arguments by ATen schema name (defaults filled in); a
            reason makes the node unsupported and is shown by the pre-flight check.
        override: allow replacing an existing converter (user extensions).
        keeps_layout: a CUSTOM converter that hands its first input's layout on (pad,
            slice, dropout): the layout analysis looks through it like an elementwise op.
        dynamic: which dynamic dims the converter handles (``crossport.to_keras.
            dynamic_dims``): ``True`` all (it computes every size at run time), ``False``
            none (the default: a dynamic dim is refused before building), or
            ``fn(node) -> reason | None`` (or ``fn(node, **arguments)`` like ``supports``).

    Raises:
        InputError: an op is already registered (without ``override``), is not an op, or
            the function's parameters do not match the op's ATen schema.
    """

    def decorate(fn: Callable) -> Callable:
        for op in ops:
            _check_registration(op, fn, override)
            _REGISTRY[op] = Converter(op, fn, policy, supports, keeps_layout, dynamic)
        return fn

    return decorate


def _check_registration(op, fn: Callable, override: bool) -> None:
    from crossport.errors import InputError

    if op in _REGISTRY and not override:
        raise InputError(
            f"{op} already has a converter ({_REGISTRY[op].fn.__name__}); pass "
            "override=True to replace it")
    schema = getattr(op, "_schema", None)
    if schema is None:
        if not callable(op):
            raise InputError(f"cannot register {op!r}: expected an ATen overload such as "
                             "torch.ops.aten.relu.default, or a Python callable fx target")
        return
    problem = schema_mismatch(fn, schema)
    if problem:
        raise InputError(f"converter {fn.__name__} does not fit {op}: {problem}. Its "
                         f"parameters must be ctx, then the schema's: {schema}")


def schema_mismatch(fn: Callable, schema) -> str | None:
    """Why ``fn(ctx, **arguments)`` cannot take ``schema``'s arguments by name, or None."""
    params = list(inspect.signature(fn).parameters.values())[1:]  # after ctx
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    names = {p.name for p in params if p.kind is not p.VAR_POSITIONAL}
    missing = [a.name for a in schema.arguments if a.name not in names]
    if missing:
        return f"no parameter for {', '.join(missing)}"
    wanted = {a.name for a in schema.arguments}
    extra = [p.name for p in params if p.name not in wanted and p.default is p.empty
             and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if extra:
        return f"parameters {', '.join(extra)} are not in the schema and have no default"
    return None


@contextlib.contextmanager
def replaced(op, fn: Callable, **options):
    """Use ``fn`` as ``op``'s converter inside the block; the previous one comes back after.

    ``options`` override the previous converter's ``policy``, ``supports``, ``dynamic`` and
    ``keeps_layout``. For experiments and tests (a deliberately wrong converter shows what the
    parity check reports).

    Example:
        >>> import keras, torch
        >>> from crossport.to_keras.registry import lookup, replaced
        >>> relu = torch.ops.aten.relu.default
        >>> with replaced(relu, lambda ctx, self: keras.ops.relu(self)):
        ...     lookup(relu).fn.__name__
        '<lambda>'
        >>> lookup(relu).fn.__name__
        'aten_relu_default'
    """
    previous = _REGISTRY.get(op)
    kept = ({"policy": previous.policy, "supports": previous.supports,
             "dynamic": previous.dynamic, "keeps_layout": previous.keeps_layout}
            if previous is not None else {})
    register(op, override=True, **{**kept, **options})(fn)
    try:
        yield
    finally:
        if previous is None:
            _REGISTRY.pop(op, None)
        else:
            _REGISTRY[op] = previous


def lookup(op) -> Converter | None:
    found = _REGISTRY.get(op)
    if found is None and isinstance(op, torch._ops.OpOverload) and op.namespace != "aten":
        found = _REGISTRY.get(LibraryOp.of(op))
    return found


# Converters for nodes that read or produce a complex value (docs/architecture.md, "Complex
# values"): kept apart from _REGISTRY because add/mul/abs/clone have real converters too and
# the two must never be confused. A complex value reaches these as a ComplexValue (CUSTOM)
# or as ComplexParts laid out by the policy; any other converter never sees one.
_COMPLEX: dict[object, Converter] = {}


def register_complex(*ops, policy: Policy, supports: SupportsFn | None = None,
                     keeps_layout: bool = False, dynamic: DynamicSpec = False,
                     override: bool = False):
    """Register the decorated function as the converter of ``ops`` when a node reads or
    produces a complex tensor (the same arguments as :func:`register`)."""

    def decorate(fn: Callable) -> Callable:
        from crossport.errors import InputError

        for op in ops:
            if op in _COMPLEX and not override:
                raise InputError(f"{op} already has a complex converter "
                                 f"({_COMPLEX[op].fn.__name__}); pass override=True")
            problem = schema_mismatch(fn, op._schema)
            if problem:
                raise InputError(f"complex converter {fn.__name__} does not fit {op}: {problem}")
            _COMPLEX[op] = Converter(op, fn, policy, supports, keeps_layout, dynamic)
        return fn

    return decorate


def lookup_complex(op) -> Converter | None:
    return _COMPLEX.get(op)


def complex_ops() -> dict[object, Converter]:
    return dict(_COMPLEX)


def registered_ops() -> dict[object, Converter]:
    return dict(_REGISTRY)


def capture_targets() -> set:
    """The call targets capture keeps whole (every op with a converter): ``LibraryOp``s as
    their libraries' ops, where those are defined."""
    targets = set()
    for op in {**_REGISTRY, **_COMPLEX}:
        op = op.resolve() if isinstance(op, LibraryOp) else op
        if op is not None:
            targets.add(op)
    return targets


def wants_channels_last(node: torch.fx.Node) -> bool:
    """Whether the converter of ``node`` wants channels-last inputs (for the layout pass)."""
    converter = lookup(node.target)
    return converter is not None and converter.policy is Policy.CHANNELS_LAST


def passes_layout(node: torch.fx.Node) -> bool:
    """Whether the layout pass may look through ``node`` (elementwise-like converters)."""
    converter = lookup(node.target)
    return converter is not None and converter.passes_layout


def native_overloads() -> list[torch._ops.OpOverload]:
    """Overloads with a converter: these are kept whole by the decomposition step."""
    return [op for op in {**_REGISTRY, **_COMPLEX} if isinstance(op, torch._ops.OpOverload)]
