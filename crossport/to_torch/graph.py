"""Capture: a Keras functional/Sequential model as a flat, topologically sorted node list.

Nested models are inlined (their layers get dotted paths, ``inner.dense``), shared layers stay
one object called several times, and ``keras.ops`` calls inside a functional graph are nodes
like layers. The pre-flight check then lists every layer or op without a faithful converter
in ONE :class:`~crossport.errors.UnsupportedLayerError`.

Keras keeps the functional graph in attributes without a public accessor (``_nodes_by_depth``,
``_functional``); they are read here and nowhere else.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any

import keras
import torch

from crossport.errors import InputError, UnsupportedLayerError
from crossport.to_torch import sizes
from crossport.to_torch.lift import PRECISION_ADVICE, PRECISION_PREFIX, precision_refusal
from crossport.to_torch.registry import LayerConverter, lookup
from crossport.to_torch.sizes import RunSize
from crossport.to_torch.trace import custom_activation, trace_call, trace_function


@dataclass(eq=False)
class KNode:
    """One call of a Keras layer or keras.ops operation."""

    operation: object
    path: str                 # dotted torch module path (nested models give prefixes)
    args: tuple               # call arguments, KerasTensors inside
    kwargs: dict
    outputs: list             # KerasTensors
    converter: LayerConverter | None = None
    refusal: str | None = None   # why it cannot convert, found while capturing

    @property
    def class_name(self) -> str:
        return type(self.operation).__name__

    def input_tensors(self) -> list:
        return [t for t in keras.tree.flatten((self.args, self.kwargs)) if _is_tensor(t)]


@dataclass
class KGraph:
    inputs: list              # KerasTensors of the outer model
    outputs: Any              # the structure model(x) returns (KerasTensors inside)
    nodes: list[KNode] = field(default_factory=list)
    aliases: dict[int, object] = field(default_factory=dict)  # inner/outer tensor identities
    # The same identities in call order: (position in ``nodes``, alias, tensor). A nested
    # model called twice binds its inner tensors once per call, so emission applies each
    # binding just before the node at that position (``aliases`` keeps only the last call's).
    bindings: list[tuple[int, object, object]] = field(default_factory=list)
    # Keras masks at run time: MultiHeadAttention clears its inputs' masks (for later layers)
    cleared: set[int] = field(default_factory=set)   # tensors whose mask is None from then on
    suspect: set[int] = field(default_factory=set)   # masks derived from a cleared one

    paths: dict[tuple[str, int], str] = field(default_factory=dict)  # (prefix, id(op))
    # the example's sizes of tensors whose Keras shape has None dims (traced calls run at them)
    concrete: dict[int, tuple] = field(default_factory=dict)
    synthetic: set[int] = field(default_factory=set)  # tensors Keras' graph does not hold
    linear_copies: dict[int, object] = field(default_factory=dict)  # see _linear_copy
    # outputs Keras' graph records that a traced call returns as None (XLNet's query
    # stream): the traced layer's path; reading one is refused
    absent: dict[int, str] = field(default_factory=dict)

    def path_of(self, operation, prefix: str = "") -> str:
        """The torch module path of a Keras layer: its cleaned name, made unique.

        Two layers whose names clean to the same identifier (``a.b`` and ``a_b``), or a name
        ``nn.Module`` already uses (``forward``, ``to``), get a numbered suffix; one layer
        called twice keeps one path (its module is shared).
        """
        key = (prefix, id(operation))
        if key not in self.paths:
            base = prefix + module_name(operation.name)
            taken = set(self.paths.values())
            path, n = base, 0
            while path in taken or path.rsplit(".", 1)[-1] in _RESERVED:
                n += 1
                path = f"{base}_{n}"
            self.paths[key] = path
        return self.paths[key]

    def resolve(self, tensor):
        while id(tensor) in self.aliases:
            tensor = self.aliases[id(tensor)]
        return tensor


def _is_tensor(value) -> bool:
    return isinstance(value, keras.KerasTensor)


def input_name(tensor) -> str:
    """The placeholder name of a model input: its InputLayer's name."""
    history = getattr(tensor, "_keras_history", None)
    return module_name(history.operation.name if history else tensor.name)


_RESERVED = frozenset(dir(torch.nn.Module())) | {"_modules", "_parameters", "_buffers"}


def module_name(name: str) -> str:
    """A Keras layer name as a torch submodule name (no dots, a valid identifier)."""
    clean = re.sub(r"\W", "_", name)
    return f"_{clean}" if clean[:1].isdigit() else clean


_IGNORED_KWARGS = ("training",)
_MASK_KWARGS = ("mask", "query_mask", "value_mask", "key_mask")


def capture(model, example_shapes: list | None = None) -> KGraph:
    """Walk ``model`` (functional or Sequential, nested models inlined) into a :class:`KGraph`.

    ``example_shapes`` (one per model input, Keras' flatten order) are the sizes custom
    layers' calls are traced at (:func:`trace_call`); without them a traced call sees ``None``
    for the model's unknown sizes."""
    functional = _functional(model)
    if functional is None:
        raise UnsupportedLayerError(
            f"{type(model).__name__} {model.name!r} is a subclassed model without a functional "
            "graph; only functional and Sequential models (nested ones included) convert. "
            "Rebuild it with keras.Input and the functional API.",
            [(model.name, type(model).__name__, "subclassed model")],
        )
    graph = KGraph(list(functional.inputs), _called_structure(functional.output))
    for tensor, shape in zip(graph.inputs, example_shapes or ()):
        graph.concrete[id(tensor)] = tuple(int(s) for s in shape)
    _walk(functional, "", graph)
    return graph


def _called_structure(outputs):
    """The output structure ``model(x)`` returns: Functional.call unpacks a top-level list
    or tuple of one output (``keras.Model(inp, [out])(x)`` is the tensor), like predict."""
    if isinstance(outputs, (list, tuple)) and len(outputs) == 1:
        return outputs[0]
    return outputs


def _functional(model):
    if isinstance(model, keras.Sequential):
        inner = getattr(model, "_functional", None)
        if inner is None:
            raise InputError(f"Sequential model {model.name!r} is not built: give its first "
                             "layer an input shape or call it on keras.Input first")
        return inner
    if isinstance(model, keras.Model) and hasattr(model, "_nodes_by_depth"):
        return model
    return None


def _walk(model, prefix: str, graph: KGraph) -> None:
    for depth in sorted(model._nodes_by_depth, reverse=True):
        for node in model._nodes_by_depth[depth]:
            op = node.operation
            if isinstance(op, keras.layers.InputLayer):
                continue
            path = graph.path_of(op, prefix)
            args = tuple(node.arguments.args)
            kwargs = {k: v for k, v in node.arguments.kwargs.items()
                      if k not in _IGNORED_KWARGS and not (k == "mask" and v is None)}
            if isinstance(op, keras.Model) and _functional(op) is not None:
                _inline(op, path, args, node.outputs, graph)
                continue
            refusal = None
            if isinstance(op, keras.layers.Layer):
                refusal = _add_implicit_masks(op, args, kwargs, graph)
            converter = lookup(op)
            activation = custom_activation(op) if converter is not None else None
            if activation is not None and refusal is None:
                refusal = _split_activation(op, activation, path, node, args, kwargs, graph)
                if refusal is None:
                    continue
            if converter is None and refusal is None and _custom_layer(op):
                refusal = precision_refusal(op)
            if converter is None and refusal is None and _custom_layer(op):
                traced = trace_call(op, args, kwargs, graph)
                if not isinstance(traced, str):
                    _inline_traced(traced, path, args, kwargs, node.outputs, graph)
                    continue
                refusal = traced
            knode = KNode(op, path, args, kwargs, list(node.outputs), converter, refusal)
            _track_cleared_masks(knode, graph)
            graph.nodes.append(knode)


def _split_activation(layer, activation, path: str, node, args: tuple, kwargs: dict,
                      graph: KGraph) -> str | None:
    """A layer whose activation is a plain Python function (keras_hub's ``gelu_approximate``):
    the layer converted with a linear activation, then the function traced into keras.ops
    and inlined on its output (an ``Activation`` layer is the function alone). A reason
    string when the function cannot be traced."""
    output = node.outputs[0]
    traced = trace_function(activation, output, graph)
    if isinstance(traced, str):
        return traced
    if type(layer).__name__ == "Activation":
        _inline_traced(traced, path, args, kwargs, node.outputs, graph)
        return None
    try:
        linear = _linear_copy(layer, graph)
    except AttributeError as exc:  # an activation that is not a plain attribute
        return f"its activation cannot be split off the layer ({exc})"
    pre = keras.KerasTensor(output.shape, dtype=output.dtype)  # the output before it
    graph.synthetic.add(id(pre))
    knode = KNode(linear, path, args, kwargs, [pre], lookup(layer))
    _track_cleared_masks(knode, graph)
    graph.nodes.append(knode)
    _inline_traced(traced, f"{path}_activation", (pre,), {}, node.outputs, graph)
    return None


def _linear_copy(layer, graph: KGraph):
    """A shallow copy of ``layer`` (same weights) with a linear activation, one per layer so
    a shared layer stays one module."""
    copy = graph.linear_copies.get(id(layer))
    if copy is None:
        copy = object.__new__(type(layer))
        copy.__dict__.update(layer.__dict__)
        object.__setattr__(copy, "activation", keras.activations.linear)
        graph.linear_copies[id(layer)] = copy
    return copy


def _track_cleared_masks(node: KNode, graph: KGraph) -> None:
    """MultiHeadAttention.call clears the masks of its query/value/key tensors (Keras reads
    them first): later consumers see none. Masks derived from a cleared one are suspect."""
    ids = {id(t) for t in node.input_tensors()}
    if node.class_name == "MultiHeadAttention":
        query = node.args[0] if node.args else node.kwargs.get("query")
        if id(query) in graph.cleared | graph.suspect:
            graph.suspect.update(id(t) for t in node.outputs)
        graph.cleared.update(id(t) for t in keras.tree.flatten((node.args, node.kwargs))
                             if _is_tensor(t) and not _is_mask_kwarg(t, node))
        return
    if ids & (graph.cleared | graph.suspect):
        graph.suspect.update(id(t) for t in node.outputs
                             if getattr(t, "_keras_mask", None) is not None)


def _is_mask_kwarg(tensor, node: KNode) -> bool:
    return any(node.kwargs.get(k) is tensor for k in _MASK_KWARGS)


def _add_implicit_masks(layer, args: tuple, kwargs: dict, graph: KGraph) -> str | None:
    """The masks Keras hands ``layer`` at run time without recording them in the node.

    A tensor from ``Embedding(mask_zero=True)`` / ``Masking`` (or a layer passing their mask
    on) carries a mask; ``Layer.__call__`` gives it to ``call(mask=...)`` (one tensor
    argument) or ``call(<name>_mask=...)`` (several) when the caller did not. The mask's own
    graph (``not_equal``, ``any`` ops) is captured too, before this node.
    """
    try:
        bound = inspect.signature(layer.call).bind_partial(*args, **kwargs).arguments
    except TypeError:
        return None
    params = inspect.signature(layer.call).parameters
    tensors = {k: v for k, v in bound.items() if any(_is_tensor(t) for t in keras.tree.flatten(v))}
    if len(tensors) == 1:
        targets = {"mask": next(iter(tensors.values()))} if "mask" in params else {}
    else:
        targets = {f"{k}_mask": v for k, v in tensors.items() if f"{k}_mask" in params}
    refusal = None
    for name, value in targets.items():
        if kwargs.get(name) is not None:
            continue
        if any(id(t) in graph.suspect for t in keras.tree.flatten(value)):
            refusal = ("its Keras mask at run time depends on a MultiHeadAttention upstream "
                       "clearing its inputs' masks; not reproduced")

        def runtime_mask(t):
            return None if id(t) in graph.cleared else getattr(t, "_keras_mask", None)

        masks = keras.tree.map_structure(runtime_mask, value)
        if all(m is None for m in keras.tree.flatten(masks)):
            continue
        for mask in keras.tree.flatten(masks):
            if mask is not None:
                _capture_producer(mask, graph)
        kwargs[name] = masks
    return refusal


def _capture_producer(tensor, graph: KGraph) -> None:
    """Append the nodes computing ``tensor`` that the graph does not hold yet."""
    known = {id(t) for t in graph.inputs} | {id(t) for n in graph.nodes for t in n.outputs}
    if id(graph.resolve(tensor)) in known or id(tensor) in known:
        return
    history = getattr(tensor, "_keras_history", None)
    if history is None:
        raise InputError(f"a Keras mask ({tensor.name}) has no producing operation to convert")
    op = history.operation
    node = op._inbound_nodes[history.node_index]
    args = tuple(node.arguments.args)
    kwargs = {k: v for k, v in node.arguments.kwargs.items() if k not in _IGNORED_KWARGS}
    for t in keras.tree.flatten((args, kwargs)):
        if _is_tensor(t):
            _capture_producer(t, graph)
    graph.nodes.append(KNode(op, graph.path_of(op), args, kwargs, list(node.outputs),
                             lookup(op)))


def _inline(model, path: str, args: tuple, outputs: list, graph: KGraph) -> None:
    inner = _functional(model)
    given = [t for t in keras.tree.flatten(args) if _is_tensor(t)]
    if len(given) != len(inner.inputs):
        raise InputError(f"nested model {path}: called with {len(given)} tensors, "
                         f"it takes {len(inner.inputs)}")
    for inner_input, outer in zip(inner.inputs, given):
        _bind(graph, inner_input, outer)
    _walk(inner, path + ".", graph)
    for outer, inner_output in zip(outputs, keras.tree.flatten(inner.outputs)):
        _bind(graph, outer, inner_output)


def _custom_layer(op) -> bool:
    """A layer class defined outside Keras (keras_hub's, a user's), or a ``Lambda`` (the
    user's function): its ``call`` is Python built from Keras layers and keras.ops, which
    :func:`trace_call` records (raw TF calls in it are refused by name)."""
    return (isinstance(op, keras.layers.Layer) and not isinstance(op, keras.Model)
            and (not type(op).__module__.startswith("keras.")
                 or isinstance(op, keras.layers.Lambda)))


def _inline_traced(traced, path: str, args: tuple, kwargs: dict, outputs: list,
                   graph: KGraph) -> None:
    """A traced custom layer's graph inlined at its call, like a nested model."""
    function, inputs = traced
    given = [t for t in keras.tree.flatten((args, kwargs)) if _is_tensor(t)]
    for inner_input, outer in zip(inputs, given):
        _bind(graph, inner_input, outer)
    _walk(function, path + ".", graph)
    inner_outputs = keras.tree.flatten(function.outputs)
    if len(inner_outputs) != len(outputs):
        raise InputError(f"{path}: its call() returned {len(inner_outputs)} tensors, the "
                         f"functional graph records {len(outputs)}")
    for outer, inner_output in zip(outputs, inner_outputs):
        if inner_output is None:  # an optional output the call returns as None
            graph.absent[id(outer)] = path
            continue
        _bind(graph, outer, inner_output)


def _bind(graph: KGraph, alias, tensor) -> None:
    graph.aliases[id(alias)] = tensor
    graph.bindings.append((len(graph.nodes), alias, tensor))


def preflight(graph: KGraph) -> None:
    """Raise ONE UnsupportedLayerError naming every node without a faithful converter."""
    problems = _absent_reads(graph)
    for node in graph.nodes:
        reason = _unsupported_reason(node)
        if reason and (node.path, node.class_name, reason) not in problems:  # shared: once
            problems.append((node.path, node.class_name, reason))
    if problems:
        lines = "\n".join(_problem_lines(problems))
        raise UnsupportedLayerError(
            f"{len(problems)} Keras layer(s)/op(s) cannot be converted to PyTorch exactly:\n"
            f"{lines}\nReplace them with supported layers, or register a converter with "
            "crossport.to_torch.register_layer(...).",
            problems,
        )


def _absent_reads(graph: KGraph) -> list[tuple[str, str, str]]:
    """Nodes (and model outputs) reading an output a traced call returned as None."""
    if not graph.absent:
        return []
    readers = [(node.path, node.class_name, node.input_tensors()) for node in graph.nodes]
    readers.append(("(model outputs)", "Model", keras.tree.flatten(graph.outputs)))
    problems = []
    for path, cls, tensors in readers:
        for tensor in tensors:
            source = graph.absent.get(id(tensor)) or graph.absent.get(id(graph.resolve(tensor)))
            if source:
                problems.append((path, cls, f"reads an output of {source} that its call() "
                                 "returns as None (Keras' graph records a tensor there)"))
                break
    return problems


def _problem_lines(problems: list[tuple[str, str, str]]) -> list[str]:
    """One line per problem, the dtype ones (every layer of a mixed-precision model, every
    op on float16 values) gathered on one line per kind naming the first layers."""
    def dtype_problem(why: str) -> bool:
        return why.startswith((PRECISION_PREFIX, HALF_PREFIX))

    lines = [f"  - {path} ({cls}): {why}" for path, cls, why in problems
             if not dtype_problem(why)]
    grouped: dict[str, list[str]] = {}
    for path, _, why in problems:
        if dtype_problem(why):
            grouped.setdefault(why, []).append(path)
    for why, paths in reversed(grouped.items()):
        names = ", ".join(paths[:6]) + (", ..." if len(paths) > 6 else "")
        advice = PRECISION_ADVICE if why.startswith(PRECISION_PREFIX) else HALF_ADVICE
        verb = why.replace("computes", "compute", 1) if len(paths) > 1 else why
        lines.insert(0, f"  - {len(paths)} layer(s)/op(s) {verb}: {names}; {advice}")
    return lines


def run_sizes(node: KNode) -> list[RunSize]:
    """The RunSizes a node's operation holds (its attributes) or is called with."""
    attributes = {k: v for k, v in vars(node.operation).items()
                  if not k.startswith("_") and k != "name"}
    return sizes.sizes_in([attributes, node.args, node.kwargs])


def _dtypes_among(node: KNode, dtypes: tuple[str, ...]) -> list[str]:
    """Which of ``dtypes`` the node's input and output tensors hold, sorted."""
    held = {keras.backend.standardize_dtype(t.dtype)
            for t in [*node.input_tensors(), *node.outputs] if _is_tensor(t)}
    return sorted(held & set(dtypes))


_HALF = ("float16", "bfloat16")


def _half_precision_reason(node: KNode) -> str | None:
    """A keras.ops op computing on float16 / bfloat16 values (a cast aside): TF's half
    precision arithmetic (its rounding, its reductions' accumulators, Keras' result dtypes
    with numpy operands) is not what torch's half kernels compute."""
    if isinstance(node.operation, keras.layers.Layer) or node.class_name == "Cast":
        return None
    half = _dtypes_among(node, _HALF)
    if not half:
        return None
    return f"{HALF_PREFIX} {half[0]} values"


_WIDE_UNSIGNED = ("uint16", "uint32", "uint64")


def _wide_unsigned_reason(node: KNode) -> str | None:
    """A node reading or making uint16/uint32/uint64 values: torch has those dtypes for
    storage only (its CPU kernels implement no arithmetic, comparison or reduction on them)."""
    wide = _dtypes_among(node, _WIDE_UNSIGNED)
    if not wide:
        return None
    return (f"holds {wide[0]} values, which torch stores but cannot compute on (no CPU "
            "kernels); cast to int32 / int64 first (keras.ops.cast)")


HALF_PREFIX = "computes on"
HALF_ADVICE = ("TF's float16 / bfloat16 arithmetic (its rounding, its reductions, Keras' "
               "result dtypes) is not reproduced: cast to float32 first (keras.ops.cast)")


def _index_policy(op) -> bool:
    """Whether ``op`` computes in a dtype that is not a float by design (Hashing: int64), so
    rebuilding the model under a float32 policy is no advice for it."""
    policy = getattr(op, "dtype_policy", None)
    return policy is not None and not keras.backend.is_float_dtype(policy.compute_dtype)


def _unsupported_reason(node: KNode) -> str | None:
    op = node.operation
    if node.refusal:
        return node.refusal
    if isinstance(op, keras.Model):
        return "subclassed model without a functional graph"
    precision = (precision_refusal(op, traced=False) or _half_precision_reason(node)
                 or _wide_unsigned_reason(node))
    if precision and not (node.converter is None and _index_policy(op)):
        return precision
    if node.converter is None:  # (Hashing's int64 policy: no converter, not a precision case)
        kind = "layer" if isinstance(op, keras.layers.Layer) else "keras.ops op"
        return f"no converter for this {kind}"
    held_sizes = run_sizes(node)
    if held_sizes and not node.converter.sizes:
        return (f"is given a size known only at run time ({sizes.describe(held_sizes[0])}, "
                "read with ops.shape in a traced call()) its converter does not compute at "
                "run time; not converted")
    if node.kwargs.get("return_attention_scores") and "return_attention_scores" not in \
            inspect.signature(node.converter.fn).parameters:
        return "return_attention_scores=True is not converted"
    if not node.converter.masks and isinstance(op, keras.layers.Layer) and any(
            node.kwargs.get(k) is not None for k in _MASK_KWARGS):
        return ("consumes a Keras mask (from mask_zero / Masking), which its converter does "
                "not reproduce; remove the mask or register a converter with masks=True")
    return node.converter.unsupported_reason(op)
