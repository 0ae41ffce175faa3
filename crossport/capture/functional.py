"""Skip ``run_decompositions`` when the exported graph needs nothing from it.

``torch.export`` returns the training IR: composite ops (``batch_norm``, ``flatten``,
``dropout``) whole, and in-place ops (``relu_``, ``add_``) as written. ``run_decompositions``
re-traces the whole program to make it functional core ATen, which costs 1-2x the export
itself. When every op already has a converter and every in-place op only overwrites a fresh
intermediate nothing else reads, that re-trace changes nothing a converter can see except the
in-place targets and dead values: the former are swapped for their out-of-place twins here,
in the graph, so the emitter, the float64 replay and the re-checks all see a functional graph;
the latter are removed (a converter may refuse an output it would have to compute).

An in-place dropout with ``train=False`` (``nn.Dropout(inplace=True)`` in eval, as
torchvision's EfficientNet head has) writes nothing and returns its input, whatever that
aliases: it is removed, its users read its input.

Anything else (a mutated input, buffer or view, a higher-order op, an op without converter,
an in-place op whose out-of-place twin would promote dtypes) keeps the full decomposition.
"""

from __future__ import annotations

import operator
from collections.abc import Collection

import torch
from torch.fx import Node


def as_functional(exported: torch.export.ExportedProgram,
                  converted: Collection) -> torch.export.ExportedProgram | None:
    """``exported`` with in-place ops made out-of-place, or None when it needs decomposing.

    ``converted``: the call targets that have a converter (overloads and Python callables).
    """
    signature = exported.graph_signature
    if signature.buffers_to_mutate or signature.user_inputs_to_mutate:
        return None
    swaps: dict[Node, torch._ops.OpOverload] = {}
    no_ops: list[Node] = []
    fresh: set[Node] = set()  # values no other value aliases
    for node in exported.graph.nodes:
        if node.op != "call_function":
            continue
        if _eval_dropout(node):
            no_ops.append(node)
            continue
        if node.target is operator.getitem:
            if node.args[0] in fresh:
                fresh.add(node)
            continue
        if node.target not in converted:
            return None
        if not isinstance(node.target, torch._ops.OpOverload):
            continue  # SymInt arithmetic
        schema = node.target._schema
        if schema.is_mutable:
            twin = _out_of_place_twin(node, fresh)
            if twin is None or twin not in converted:
                return None
            swaps[node] = twin
            fresh.add(node)
        elif not any(r.alias_info is not None for r in schema.returns):
            fresh.add(node)
    for node, twin in swaps.items():
        node.target = twin
    for node in no_ops:
        node.replace_all_uses_with(node.args[0])
        exported.graph.erase_node(node)
    # as the re-trace would: unused outputs (a max pool's indices) must not reach converters
    exported.graph.eliminate_dead_code()
    exported.graph_module.recompile()
    return exported


_IN_PLACE_DROPOUTS = (torch.ops.aten.dropout_.default, torch.ops.aten.alpha_dropout_.default,
                      torch.ops.aten.feature_dropout_.default,
                      torch.ops.aten.feature_alpha_dropout_.default)


def _eval_dropout(node: Node) -> bool:
    """An in-place dropout that does nothing: ``train`` is False (its schema's third
    argument, ``dropout_(Tensor(a!) self, float p, bool train)``)."""
    if node.target not in _IN_PLACE_DROPOUTS:
        return False
    train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train")
    return train is False


def _out_of_place_twin(node: Node, fresh: set[Node]) -> torch._ops.OpOverload | None:
    """``aten.relu.default`` for a ``relu_`` that overwrites a fresh value read only by it."""
    schema = node.target._schema
    written = [a for a in schema.arguments
               if a.alias_info is not None and a.alias_info.is_write]
    if [a.name for a in written] != [schema.arguments[0].name] or not node.args:
        return None  # out= variants, several written arguments
    target = node.args[0]
    if not isinstance(target, Node) or target not in fresh or len(target.users) != 1:
        return None
    packet = schema.name.split("::")[-1]
    if not packet.endswith("_"):
        return None
    twin_packet = getattr(torch.ops.aten, packet[:-1], None)
    twin = getattr(twin_packet, node.target._overloadname, None) if twin_packet else None
    if twin is None or twin._schema.is_mutable or not _same_result_type(node, twin):
        return None
    return twin


def _same_result_type(node: Node, twin: torch._ops.OpOverload) -> bool:
    """The out-of-place op gives the in-place one's dtype and rank (``int.add_(0.5)`` stays
    int; ``add`` would promote to float). Checked on tiny meta tensors."""

    def meta(value):
        if isinstance(value, Node):
            val = value.meta.get("val")
            if not isinstance(val, torch.Tensor):
                raise TypeError
            return torch.empty((1,) * val.dim(), dtype=val.dtype, device="meta")
        if isinstance(value, (list, tuple)):
            return type(value)(meta(v) for v in value)
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise TypeError
        return value

    want = node.meta.get("val")
    try:
        got = twin(*meta(node.args), **{k: meta(v) for k, v in node.kwargs.items()})
    except Exception:  # a twin that will not run on meta tensors: keep the decomposition
        return False
    return (isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor)
            and got.dtype == want.dtype and got.dim() == want.dim())
