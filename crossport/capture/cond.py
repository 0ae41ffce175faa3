"""``torch.cond`` as both branches and a select: the graph Keras can build.

``torch.cond(pred, true_fn, false_fn, operands)`` is how data-dependent control flow
becomes exportable (crossport's own capture errors advise it). Its branches are
subgraphs returning tensors of the same shapes and dtypes (torch.export checks that), so
``cond`` equals computing both and selecting: ``out_i = where(pred, true_i, false_i)``.
:func:`inline_cond` rewrites the exported graph that way, so every op in the branches goes
through the converters, the layout pass and the check like any other.

Both branches run in the converted model. A branch that only fails when it is not taken
(an index out of range there) fails in Keras, and the untaken branch's values never reach
the output (``where`` selects, it does not add).
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from crossport.capture.source import module_path, source_line
from crossport.errors import UnsupportedOpError

_COND = torch.ops.higher_order.cond


def inline_cond(exported: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``exported`` with every ``torch.cond`` inlined as both branches and ``where`` selects
    (in place; nested conds too)."""
    graph_module = exported.graph_module
    changed = False
    while (node := next((n for n in graph_module.graph.nodes
                         if n.op == "call_function" and n.target is _COND), None)) is not None:
        _inline(graph_module, node)
        changed = True
    if changed:
        graph_module.graph.eliminate_dead_code()
        graph_module.recompile()
    return exported


def _inline(graph_module: GraphModule, node: Node) -> None:
    pred, true_attr, false_attr, operands = node.args[:4]
    graph = graph_module.graph
    tensor_pred = isinstance(pred, Node) and isinstance(pred.meta.get("val"), torch.Tensor)
    if not tensor_pred and not isinstance(pred, bool):
        raise UnsupportedOpError(
            f"torch.cond on a size condition ({pred}) at {_where(node)}: the branch depends "
            "on a dynamic size; convert with that size static, or branch on a tensor")
    with graph.inserting_before(node):
        taken = [true_attr, false_attr] if tensor_pred else [true_attr if pred else false_attr]
        branches = [_copy_branch(graph_module, getattr(graph_module, attr.target), operands)
                    for attr in taken]
        for user in list(node.users):
            index = user.args[1]
            if tensor_pred:
                select = graph.call_function(torch.ops.aten.where.self,
                                             (pred, branches[0][index], branches[1][index]))
                select.meta = dict(user.meta)
            else:
                select = branches[0][index]
            user.replace_all_uses_with(select)
            graph.erase_node(user)
    graph.erase_node(node)


def _where(node: Node) -> str:
    return f"{module_path(node) or '<root module>'} ({source_line(node)})"


def _copy_branch(graph_module: GraphModule, branch: GraphModule, operands) -> list:
    """The branch's nodes copied before the insertion point, its placeholders bound to
    ``operands``; returns its outputs (the main graph's nodes)."""
    placeholders = [n for n in branch.graph.nodes if n.op == "placeholder"]
    values: dict[Node, object] = dict(zip(placeholders, operands))
    for sub in branch.graph.nodes:
        if sub.op == "placeholder":
            continue
        if sub.op == "output":
            return list(torch.fx.node.map_arg(sub.args[0], lambda n: values[n]))
        if sub.op == "get_attr":  # a constant (or a nested cond's branch) of the branch
            name = _unique_attribute(graph_module, sub.target)
            setattr(graph_module, name, getattr(branch, sub.target))
            copied = graph_module.graph.get_attr(name)
            copied.meta = dict(sub.meta)
        else:
            copied = graph_module.graph.node_copy(sub, lambda n: values[n])
        values[sub] = copied
    raise ValueError("a torch.cond branch without an output")


def _unique_attribute(graph_module: GraphModule, name: str) -> str:
    base, index = name, 0
    while hasattr(graph_module, name):
        index += 1
        name = f"{base}_{index}"
    return name

