"""Which nodes touch a complex value, which converter runs them, and what is refused.

A complex torch tensor has no Keras twin: the emitter holds it as a ``ComplexValue`` (real
and imaginary ``TensorValue``s, values.py), and only converters registered with
``register_complex`` receive one (docs/architecture.md, "Complex values"). A node that reads
or produces a complex tensor runs its complex converter; without one it is refused by the
pre-flight check, and so are complex model inputs and outputs (a Keras model takes and
returns real tensors).
"""

from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

from crossport.capture import describe
from crossport.to_keras.registry import Converter, complex_ops, lookup, lookup_complex


def is_complex(value) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype.is_complex


def reads_or_makes_complex(node: torch.fx.Node) -> bool:
    """Whether a node reads or produces a complex tensor (then its complex converter runs)."""
    vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
    return any(is_complex(v) for val in vals for v in pytree.tree_leaves(val))


def converter_for(node: torch.fx.Node) -> Converter | None:
    """The converter that runs ``node``: its complex one when it touches a complex value."""
    if reads_or_makes_complex(node):
        return lookup_complex(node.target)
    return lookup(node.target)


def complex_refusal(node: torch.fx.Node) -> str:
    """Why a node touching a complex value has no converter: which consumers take one."""
    taken = sorted({str(op).removeprefix("aten.").split(".")[0] for op in complex_ops()})
    return ("no converter for complex values (a complex tensor is held as real/imag parts; "
            f"complex-aware ops: {', '.join(taken)}). Take .real/.imag/.abs() first, or "
            "torch.view_as_real; a converter for it is registered with "
            "crossport.to_keras.registry.register_complex")


def complex_io_problems(graph: torch.fx.Graph, user_inputs) -> dict:
    """Complex model inputs and outputs: a Keras model takes and returns real tensors."""
    problems: dict[tuple[str, str], list[str]] = {}
    for node in graph.nodes:
        if node.op == "placeholder" and node.name in user_inputs and is_complex(
                node.meta.get("val")):
            problems.setdefault((f"input {node.name}", (
                "a complex model input: Keras models take real tensors; pass "
                "torch.view_as_real(x) and call torch.view_as_complex inside forward")),
                []).append("forward argument")
        if node.op == "output":
            for arg in pytree.tree_leaves(node.args[0]):
                if isinstance(arg, torch.fx.Node) and is_complex(arg.meta.get("val")):
                    problems.setdefault(("output", (
                        "a complex model output: Keras models return real tensors; return "
                        "torch.view_as_real(x) (or .real, .imag, .abs())")),
                        []).append(describe(arg))
    return problems
