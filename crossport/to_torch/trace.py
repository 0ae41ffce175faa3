"""Tracing a custom layer's ``call()`` (or a plain activation function) into the Keras
layers and keras.ops it runs, at the example's sizes with run-time sizes tracked
(``to_torch/sizes.py``, ``to_torch/lift.py``); ``graph.py`` inlines the result."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import keras

from crossport.to_torch import conditions, sizes
from crossport.to_torch.sizes import RunSize, tracing_sizes

if TYPE_CHECKING:
    from crossport.to_torch.graph import KGraph

_IGNORED_KWARGS = ("training",)


@contextmanager
def graph_kept(model) -> Iterator[None]:
    """``model``'s layers' graph bookkeeping as it was, afterwards (failure included).

    Tracing a custom layer's ``call()`` calls its sublayers on stand-in KerasTensors, which
    Keras records as inbound/outbound nodes of the user's layers: after a conversion
    ``layer.output`` named crossport's trace, and after a second one it raised (several
    inbound nodes). Weights and configs are never written; only these lists are restored.
    """
    layers = [model, *model._flatten_layers(include_self=False, recursive=True)]
    saved = [(layer, list(layer._inbound_nodes), list(layer._outbound_nodes))
             for layer in layers]
    try:
        yield
    finally:
        for layer, inbound, outbound in saved:
            layer._inbound_nodes[:] = inbound
            layer._outbound_nodes[:] = outbound


def _is_tensor(value) -> bool:
    return isinstance(value, keras.KerasTensor)


@dataclass
class TracedGraph:
    """A traced call's functional graph: what ``graph._walk`` reads of a Keras Function.
    (A keras.Function would insist on unique layer names, which inlined sublayers of
    several blocks do not have.)"""

    inputs: list
    outputs: object
    _nodes_by_depth: dict


def traced_graph(inputs: list, outputs) -> TracedGraph:
    """The nodes computing ``outputs`` from ``inputs``, in topological order; a node that
    reads a tensor the inputs do not reach is an error (a tensor from outside the call)."""
    from keras.src.ops.function import _build_map

    present = [t for t in keras.tree.flatten(outputs) if t is not None]  # (y, None)
    nodes, _ = _build_map(inputs, present)
    known = {id(t) for t in inputs}
    for node in nodes:
        if not node.is_input and any(id(t) not in known for t in node.input_tensors):
            raise ValueError(f"{node.operation.name} reads a tensor that is not computed "
                             "from the call's inputs")
        if not node.is_input or any(id(t) in known for t in node.outputs):
            known.update(id(t) for t in node.outputs)
    if any(id(t) not in known for t in present):
        raise ValueError("an output is not computed from the call's inputs")
    return TracedGraph(list(inputs), outputs, {0: [n for n in nodes if not n.is_input]})


def _symbolic_outputs(outputs, inputs: list):
    """A call's outputs, each eager tensor (a value not computed from the inputs, a
    positional table) a constant of the graph."""
    from crossport.to_torch.lift import TraceConstant, is_constant

    return keras.tree.map_structure(
        lambda v: TraceConstant(v)(inputs[0]) if is_constant(v) else v, outputs)


def trace_call(layer, args: tuple, kwargs: dict, graph: KGraph | None = None):
    """``layer.call`` run on stand-in KerasTensors: the layers and keras.ops it calls are
    recorded as a functional graph (``(function, stand-ins)``), or a reason it cannot be
    (a string naming what failed).

    The stand-ins have the example's sizes (``graph.concrete``), each size that is unknown
    in the Keras graph a :class:`~crossport.to_torch.sizes.RunSize` reading the stand-in's
    run-time shape, so ``ops.shape(x)[1]`` is a number for the layer's Python and an
    expression for the converters (``sizes.tracing_sizes``).

    What ``Layer.__call__`` adds to ``call`` is reproduced or refused: float inputs are
    cast to the layer's compute dtype as Keras autocasts them (``lift.autocast_inputs``); a
    float16 / bfloat16 or mixed dtype policy is refused before (``lift.precision_refusal``:
    Keras would also cast every variable read); a tensor argument carrying a Keras mask
    (``mask_zero``) is refused, since inside ``call`` Keras would hand that mask on to the
    sublayers the stand-ins feed.
    """
    from crossport.to_torch.lift import TraceRefused, autocast_inputs, guard_loops
    from crossport.to_torch.rawtf import raw_tf_refusal

    tensors = [t for t in keras.tree.flatten((args, kwargs)) if _is_tensor(t)]
    if any(getattr(t, "_keras_mask", None) is not None for t in tensors):
        return ("no converter for this layer, and its call() cannot be traced faithfully: "
                "an input carries a Keras mask (mask_zero / Masking)")
    names = _argument_names(layer, args, kwargs)
    branches: list = []
    not_traced = "no converter for this layer, and its call() is not traced: "
    try:
        with tracing_sizes(), conditions.watching() as branches:
            stand_ins = {id(t): _stand_in(t, graph, names.get(id(t))) for t in tensors}
            call_args, call_kwargs = autocast_inputs(layer, *keras.tree.map_structure(
                lambda v: stand_ins[id(v)] if _is_tensor(v) else v, (args, kwargs)))
            guard_loops(layer)
            outputs = layer.call(*call_args, **call_kwargs)
            inputs = [stand_ins[id(t)] for t in tensors]
            function = traced_graph(inputs, _symbolic_outputs(outputs, inputs))
    except TraceRefused as exc:
        also = f"{conditions.refusal(branches)}. Also, " if branches else ""
        return f"{not_traced}{also}{exc}"
    except Exception as exc:  # noqa: BLE001  (the layer's own Python, any failure)
        if branches:  # past a branch on a size, the example's branch may fail later
            return not_traced + conditions.refusal(branches)
        raw_tf = raw_tf_refusal(exc)
        if raw_tf:
            return f"no converter for this layer, and its call() is not traced: {raw_tf}"
        detail = " ".join(str(exc).split())[:200]
        return (f"no converter for this layer, and tracing its call() into Keras layers "
                f"and keras.ops failed ({type(exc).__name__}: {detail}); register a "
                "converter with crossport.to_torch.register_layer(...)")
    if branches:  # Python branches on run-time sizes (conditions.py)
        return not_traced + conditions.refusal(branches)
    return function, inputs


def _argument_names(layer, args: tuple, kwargs: dict) -> dict[int, str]:
    """The name of each tensor argument in ``call``'s signature (``x``, ``inputs[1]``):
    how a refusal names the tensor a run-time size is read from."""
    try:
        bound = inspect.signature(layer.call).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return {}
    names = {}
    for name, value in bound.arguments.items():
        if _is_tensor(value):
            names[id(value)] = name
        elif isinstance(value, (list, tuple)):
            names.update({id(v): f"{name}[{i}]" for i, v in enumerate(value) if _is_tensor(v)})
        elif isinstance(value, dict):
            names.update({id(v): f"{name}[{k!r}]" for k, v in value.items() if _is_tensor(v)})
    return names


def _stand_in(tensor, graph: KGraph | None, name: str | None = None):
    """A KerasTensor like ``tensor`` at the example's sizes, each unknown size a RunSize
    reading the stand-in's own shape (inlined, the stand-in is the tensor it stands for).

    A tensor a traced call computed is taken as that call returned it: a layer's
    ``compute_output_shape`` may declare another rank or dtype than its ``call`` returns
    (XLNet's mask layer declares its 3-d masks 2-d), and Keras runs the real tensor."""
    source = graph.resolve(tensor) if graph is not None else tensor
    if source is not tensor and (len(source.shape) != len(tensor.shape)
                                 or source.dtype != tensor.dtype):
        tensor = source
    values = concrete_shape(tensor, graph)
    shape = []
    for axis, (size, value) in enumerate(zip(tensor.shape, values)):
        known = size is not None and not isinstance(size, RunSize)
        shape.append(size if known or value is None else sizes.dim(value, None, axis))
    stand_in = keras.Input(batch_shape=tuple(shape), dtype=tensor.dtype)
    stand_in._crossport_argument = name  # how sizes.describe names it
    for size in shape:
        if isinstance(size, RunSize):
            size.expr = ("dim", stand_in, size.expr[2])
    return stand_in


def concrete_shape(tensor, graph: KGraph | None) -> tuple:
    """``tensor``'s shape at the example's sizes (``None`` where they are not known): Keras'
    own shape inference from the model inputs (``compute_output_spec``), memoised."""
    if None not in tensor.shape or graph is None:
        return tuple(tensor.shape)
    pending = [tensor]
    while pending:
        t = pending[-1]
        key = id(t)
        if key in graph.concrete or None not in t.shape:
            pending.pop()
            continue
        source = graph.resolve(t)
        history = getattr(source, "_keras_history", None)
        if source is not t:
            needed = [] if id(source) in graph.concrete or None not in source.shape else [source]
        elif history is None or isinstance(history.operation, keras.layers.InputLayer):
            graph.concrete[key] = tuple(t.shape)  # not known: a traced call sees None
            continue
        else:
            node = history.operation._inbound_nodes[history.node_index]
            needed = [a for a in keras.tree.flatten((node.arguments.args,
                                                     node.arguments.kwargs))
                      if _is_tensor(a) and None in a.shape and id(a) not in graph.concrete]
        if needed:
            pending.extend(needed)
            continue
        pending.pop()
        if source is not t:
            graph.concrete[key] = concrete_shape(source, graph)
        else:
            _infer(history.operation._inbound_nodes[history.node_index], graph)
    return graph.concrete.get(id(tensor), tuple(tensor.shape))


def _infer(node, graph: KGraph) -> None:
    """The example's sizes of ``node``'s outputs from those of its inputs."""
    def spec(value):
        if not _is_tensor(value):
            return value
        shape = graph.concrete.get(id(value), tuple(value.shape))
        return keras.KerasTensor(shape, dtype=value.dtype)

    args, kwargs = keras.tree.map_structure(
        spec, (tuple(node.arguments.args), dict(node.arguments.kwargs)))
    kwargs = {k: v for k, v in kwargs.items() if k not in _IGNORED_KWARGS}
    try:
        out = node.operation.compute_output_spec(*args, **kwargs)
    except Exception:  # noqa: BLE001  (Keras cannot infer: a traced call sees None)
        out = None
    results = keras.tree.flatten(out) if out is not None else []
    for tensor, result in zip(node.outputs, results):
        shape = tuple(getattr(result, "shape", tensor.shape))
        graph.concrete[id(tensor)] = shape if len(shape) == len(tensor.shape) \
            else tuple(tensor.shape)
    for tensor in node.outputs:
        graph.concrete.setdefault(id(tensor), tuple(tensor.shape))


# Keras layers whose call() ends with ``self.activation(outputs)``: the function can be
# split off (a recurrent layer's activation runs inside each step: not these)
_ACTIVATION_LAST = frozenset({
    "Dense", "EinsumDense", "Activation", "Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose",
    "Conv2DTranspose", "Conv3DTranspose", "DepthwiseConv1D", "DepthwiseConv2D",
    "SeparableConv1D", "SeparableConv2D"})


def custom_activation(layer):
    """The layer's ``activation`` when it is a plain Python function rather than one of
    Keras' (keras_hub's ``gelu_approximate``, a lambda), else None."""
    from crossport.errors import InputError
    from crossport.torch_layers.activation import activation_name

    fn = getattr(layer, "activation", None)
    if not isinstance(layer, keras.layers.Layer) or not callable(fn) or not any(
            c.__module__.startswith("keras.") and c.__name__ in _ACTIVATION_LAST
            for c in type(layer).__mro__):
        return None
    try:
        activation_name(fn)
    except InputError:
        return fn
    return None


def trace_function(fn, like, graph: KGraph | None):
    """``fn(x)`` (an activation function) traced like a layer's call: on a stand-in shaped
    like the KerasTensor ``like``; ``(function, [stand-in])`` or why it cannot be."""
    from crossport.to_torch.lift import TraceRefused

    try:
        with tracing_sizes(), conditions.watching() as refusals:
            stand_in = _stand_in(like, graph, "x")
            output = fn(stand_in)
            if not _is_tensor(output):
                raise TypeError(f"it returned {type(output).__name__}, not a tensor")
            function = traced_graph([stand_in], output)
        if refusals:
            raise TraceRefused(conditions.refusal(refusals))
    except TraceRefused as exc:
        return (f"its activation {getattr(fn, '__qualname__', fn)!r} is not one of Keras' "
                f"own functions, and it is not traced: {exc}")
    except Exception as exc:  # noqa: BLE001  (the function's own Python, any failure)
        detail = " ".join(str(exc).split())[:200]
        return (f"its activation {getattr(fn, '__qualname__', fn)!r} is not one of Keras' own "
                f"functions, and tracing it into keras.ops failed ({type(exc).__name__}: "
                f"{detail}); use a Keras activation or a separate layer")
    return function, [stand_in]
