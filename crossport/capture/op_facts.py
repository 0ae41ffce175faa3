"""Facts about ATen ops that more than one pass reads (the tie check, integer bounds)."""

from __future__ import annotations

import torch

# Ops returning (values, indices): element 1 indexes the op's first input (along its dim)
# at the values of element 0.
VALUE_AND_INDEX_OPS = frozenset({"sort", "topk", "max", "min", "kthvalue", "median",
                                 "nanmedian", "mode", "cummax", "cummin"})


def op_name(node: torch.fx.Node) -> str | None:
    """The ATen overload packet's name of a call node (``aten.sort.stable`` -> ``sort``).

    Example:
        >>> import torch
        >>> ep = torch.export.export(torch.nn.ReLU(), (torch.randn(2),))
        >>> [op_name(n) for n in ep.graph.nodes]
        [None, 'relu', None]
    """
    return getattr(getattr(node.target, "_overloadpacket", None), "__name__", None)
