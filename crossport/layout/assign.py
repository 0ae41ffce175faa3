"""Layout analysis: which tensors should take the target's native layout early.

Converters declare policies; this backward pass marks a tensor when some consumer wants the
native layout (channels-last for Keras, channels-first for torch) directly, or through a
chain of ops that hand their layout on (elementwise ops, pads, dropouts). The emitter then
lays out model inputs natively at once, so an elementwise prologue (``x * 2 - 1``) does not
cost a transpose inside the model.

The pass knows no converter table: each direction passes in what its registry says about a
consumer (``wants_native(user)``, ``passes_layout(user)``), so ``layout/`` depends on neither
direction.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Iterable

import torch

NodePredicate = Callable[[object], bool]


def preferred_native(
    nodes_in_order: Iterable[Hashable],
    users: Callable[[object], Iterable[Hashable]],
    rank: Callable[[object], int],
    wants_native: NodePredicate,
    passes_layout: NodePredicate,
) -> set:
    """Nodes of rank >= 3 with a consumer that wants the native layout (see module doc).

    Args:
        nodes_in_order: every node, topologically sorted.
        users: the consumers of a node.
        rank: a node's tensor rank (0 for non-tensors).
        wants_native: whether a consumer's converter wants the native layout.
        passes_layout: whether a consumer hands its input's layout on to its output.
    """
    wants: set = set()
    for node in reversed(list(nodes_in_order)):
        if rank(node) < 3:
            continue
        for user in users(node):
            if wants_native(user) or (passes_layout(user) and user in wants):
                wants.add(node)
                break
    return wants


def preferred_channels_last(
    graph: torch.fx.Graph, wants_channels_last: NodePredicate, passes_layout: NodePredicate
) -> set[torch.fx.Node]:
    """:func:`preferred_native` on an fx graph (PyTorch -> Keras).

    ``wants_channels_last`` and ``passes_layout`` are asked only about ``call_function``
    consumers other than ``getitem``. A ``getitem`` hands on the layout of the output it
    picks, so a multi-output op that passes its input's layout on (a QAT fake quantization
    returning its output and mask) is looked through too.
    """

    def considered(user: torch.fx.Node) -> bool:
        return user.op == "call_function" and user.target is not operator.getitem

    def picks_output(user: torch.fx.Node) -> bool:
        return user.op == "call_function" and user.target is operator.getitem

    return preferred_native(
        graph.nodes,
        lambda node: node.users,
        _rank,
        lambda user: considered(user) and wants_channels_last(user),
        lambda user: picks_output(user) or (considered(user) and passes_layout(user)),
    )


def _rank(node: torch.fx.Node) -> int:
    """A tensor's rank; a multi-output node's, its widest output's (0 for non-tensors)."""
    val = node.meta.get("val")
    values = val if isinstance(val, (list, tuple)) else [val]
    return max((v.dim() for v in values if isinstance(v, torch.Tensor)), default=0)
