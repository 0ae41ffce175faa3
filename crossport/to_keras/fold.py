"""Constant folding: graph nodes computed from parameters and constants only.

Position ids (``arange``), relative-position indices (Swin's ``table[index]``), weight-norm
reparametrisations (wav2vec2's positional conv) and masks built from fixed sizes depend on
no model input: they are evaluated once with torch at conversion time and become constants
of the Keras model (numpy arrays to the converters). A node folds when every tensor it
reads is constant, its output shape is static and it draws no random numbers.
"""

from __future__ import annotations

import operator

import numpy as np
import torch
from torch.utils import _pytree as pytree

CONSTANT = "crossport_constant"


def is_constant(node) -> bool:
    """Whether an fx node is a parameter, buffer or constant, or folds to one."""
    return isinstance(node, torch.fx.Node) and bool(node.meta.get(CONSTANT))


def mark_constants(exported: torch.export.ExportedProgram) -> set[torch.fx.Node]:
    """Mark (``node.meta[CONSTANT]``) and return the nodes that fold to constants."""
    signature = exported.graph_signature
    lifted = {*signature.inputs_to_parameters, *signature.inputs_to_buffers,
              *signature.inputs_to_lifted_tensor_constants}
    folded: set[torch.fx.Node] = set()
    for node in exported.graph.nodes:
        node.meta.pop(CONSTANT, None)
        if node.op == "placeholder":
            constant = node.name in lifted
        elif node.op == "get_attr":
            constant = True
        elif node.op == "call_function":
            constant = _foldable(node)
            if constant:
                folded.add(node)
        else:
            constant = False
        if constant:
            node.meta[CONSTANT] = True
    return folded


def _static_size(node: torch.fx.Node) -> int | None:
    """The value of a size node torch.export specialised (``sym_size`` of a static dim)."""
    val = node.meta.get("val")
    if isinstance(val, bool) or not isinstance(val, (int, torch.SymInt)):
        return None
    if isinstance(val, torch.SymInt):
        return int(val.node.expr) if val.node.expr.is_number else None
    return val


def _foldable(node: torch.fx.Node) -> bool:
    if _static_size(node) is not None:
        return True
    inputs = node.all_input_nodes
    if not all(n.meta.get(CONSTANT) for n in inputs):
        return False
    if node.target is operator.getitem:
        return True
    tags = getattr(node.target, "tags", ())
    if torch.Tag.nondeterministic_seeded in tags:
        return False
    if not hasattr(node.target, "_schema"):
        return False  # SymInt arithmetic stays symbolic
    values = pytree.tree_leaves(node.meta.get("val"))
    if not values or not all(isinstance(v, torch.Tensor) for v in values):
        return False
    return all(isinstance(d, int) for v in values for d in v.shape)


def evaluate(node: torch.fx.Node, values: dict) -> object:
    """Run a folded node with torch on the numpy values of its inputs."""

    def to_torch(arg):
        # A folded permute hands on a strided (Fortran-order) array; the graph after it
        # was traced on contiguous tensors (``.contiguous()`` is gone after capture), so a
        # ``view`` must see a row-major copy, never the strides numpy kept.
        if isinstance(arg, torch.fx.Node):
            value = values[arg]
            if isinstance(value, np.ndarray):
                return torch.from_numpy(np.array(value, order="C"))
            return value
        return arg

    if _static_size(node) is not None:
        return _static_size(node)
    if node.target is operator.getitem:
        container, index = node.args
        return values[container][index]
    args = pytree.tree_map(to_torch, node.args, is_leaf=lambda a: isinstance(a, torch.fx.Node))
    kwargs = pytree.tree_map(to_torch, node.kwargs,
                             is_leaf=lambda a: isinstance(a, torch.fx.Node))
    with torch.no_grad():
        result = node.target(*args, **kwargs)
    return pytree.tree_map(lambda t: as_numpy(t) if isinstance(t, torch.Tensor) else t, result)


def as_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A constant's values (a parameter's too): a ``.conj()``/negated view is materialised,
    which ``.numpy()`` refuses to read lazily."""
    return tensor.detach().cpu().resolve_conj().resolve_neg().numpy()


# ops that read only the shape and dtype of these positional arguments, never their values
_METADATA_ARGS = {
    torch.ops.aten.type_as.default: (1,),
    torch.ops.aten.sym_size.int: (0,),
    **{op: (0,) for op in (torch.ops.aten.full_like.default, torch.ops.aten.zeros_like.default,
                           torch.ops.aten.ones_like.default, torch.ops.aten.empty_like.default)},
}


def input_dependent(exported: torch.export.ExportedProgram) -> set[torch.fx.Node]:
    """The nodes whose values depend on the values of a user input.

    The rest (folded constants, and values such as ``arange(w).type_as(x)`` that read only
    an input's shape or dtype) are, at static sizes, constants to TF's graph optimiser,
    which folds a transpose of them: the layout pass transposes those, not activations.
    """
    signature = exported.graph_signature
    lifted = {*signature.inputs_to_parameters, *signature.inputs_to_buffers,
              *signature.inputs_to_lifted_tensor_constants}
    dependent: set[torch.fx.Node] = set()
    for node in exported.graph.nodes:
        if node.op == "placeholder":
            if node.name not in lifted:
                dependent.add(node)
        elif node.op == "call_function" and not is_constant(node):
            metadata = {node.args[i] for i in _METADATA_ARGS.get(node.target, ())
                        if i < len(node.args)}
            if any(n in dependent for n in node.all_input_nodes if n not in metadata):
                dependent.add(node)
    return dependent
