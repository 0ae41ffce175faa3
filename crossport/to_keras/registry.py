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

from collections.abc import Callable
from dataclasses import dataclass

import torch

from crossport.layout.policy import Policy  # re-exported: converters import it from here

__all__ = ["Converter", "Policy", "lookup", "native_overloads", "register", "registered_ops"]


SupportsFn = Callable[[torch.fx.Node], "str | None"]


@dataclass(frozen=True)
class Converter:
    op: torch._ops.OpOverload
    fn: Callable
    policy: Policy
    supports: SupportsFn | None = None
    keeps_layout: bool = False  # CUSTOM ops whose output takes the input's layout

    @property
    def passes_layout(self) -> bool:
        """Whether the layout analysis may look through this op (elementwise-like)."""
        return self.policy is Policy.AGNOSTIC or self.keeps_layout

    def unsupported_reason(self, node: torch.fx.Node) -> str | None:
        return self.supports(node) if self.supports is not None else None


_REGISTRY: dict[object, Converter] = {}


def register(*ops, policy: Policy, supports: SupportsFn | None = None, override: bool = False,
             keeps_layout: bool = False):
    """Register the decorated function as the converter of each overload in ``ops``.

    Args:
        ops: ATen overloads (``torch.ops.aten.conv2d.default``) or Python callables
            (``operator.getitem``) that appear as fx node targets.
        policy: the layout policy.
        supports: ``supports(node) -> reason | None``; a reason makes the node unsupported
            and is shown to the user by the pre-flight check.
        override: allow replacing an existing converter (user extensions).
        keeps_layout: a CUSTOM converter that hands its first input's layout on (pad,
            slice, dropout): the layout analysis looks through it like an elementwise op.
    """

    def decorate(fn: Callable) -> Callable:
        for op in ops:
            if op in _REGISTRY and not override:
                raise ValueError(
                    f"{op} already has a converter ({_REGISTRY[op].fn.__name__}); "
                    "pass override=True to replace it"
                )
            _REGISTRY[op] = Converter(op, fn, policy, supports, keeps_layout)
        return fn

    return decorate


def lookup(op) -> Converter | None:
    _load_builtin_converters()
    return _REGISTRY.get(op)


def registered_ops() -> dict[object, Converter]:
    _load_builtin_converters()
    return dict(_REGISTRY)


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
    return [op for op in registered_ops() if isinstance(op, torch._ops.OpOverload)]


_loaded = False


def _load_builtin_converters() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        from crossport.to_keras import ops  # noqa: F401  (registers on import)
