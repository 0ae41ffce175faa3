"""Emit: walk the captured Keras graph, lay out each converter's inputs, build a GraphModule.

Layout mirrors the forward direction (docs/architecture.md): a backward preference pass
(``crossport.layout.assign.preferred_native``) decides which model inputs are held
channels-first from the start; then each converter receives its tensors as its policy asks
(CHANNELS_FIRST, AGNOSTIC harmonised to the widest input, CANONICAL, or CUSTOM as they are)
and its output's layout follows from the policy. Plain CNNs end with zero permutes inside.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import keras
import numpy as np
import torch

from crossport.errors import ConversionError, CrossportError
from crossport.layout import Layout, canonical, channels_first
from crossport.layout.assign import preferred_native
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.graph import KGraph, KNode, input_name
from crossport.to_torch.ops import augment, noise
from crossport.to_torch.penalties import add_activity_penalty
from crossport.to_torch.regularization import KerasGraphModule
from crossport.to_torch.sizes import RunSize, static_shape


@dataclass
class EmittedModule:
    module: KerasGraphModule
    held: dict[int, Held] = field(default_factory=dict)  # id(KerasTensor) -> Held
    permutes: int = 0                 # permutes inside the module (boundary ones excluded)
    boundary_permutes: int = 0


def emit(graph: KGraph, channels_first_io: bool = False) -> EmittedModule:
    ctx = Context()
    for knode in graph.nodes:
        ctx.calls.setdefault(id(knode.operation), []).append(knode)
    held: dict[int, Held] = ctx.held
    prefer = _preferred_channels_first(graph)
    boundary = 0
    for tensor in graph.inputs:
        shape = tuple(tensor.shape)
        node = ctx.graph.placeholder(input_name(tensor))
        dtype = getattr(torch, str(tensor.dtype), None)
        if dtype == torch.float32:  # Keras casts each input to its Input's dtype
            node = ctx.as_module_float(node)  # (follows the module's .double() / .half())
            node.meta["keras_input_cast"] = True
        elif isinstance(dtype, torch.dtype):  # (int64 ids for int32: int32)
            node = ctx.graph.call_method("to", (node, dtype))
            node.meta["keras_input_cast"] = True
        rank = len(shape)
        given = channels_first(rank) if channels_first_io else canonical(rank)
        value = Held(node, given, shape)
        want = channels_first(rank) if id(tensor) in prefer else canonical(rank)
        if value.layout != want:
            value = ctx.to_layout(value, want, boundary=True)
            boundary += 1
        held[id(tensor)] = value
    bindings = iter(graph.bindings)
    pending = next(bindings, None)
    for position, knode in enumerate(graph.nodes + [None]):
        while pending is not None and pending[0] == position:  # a nested model's call
            _position, alias, tensor = pending
            held[id(alias)] = held[id(tensor)]
            pending = next(bindings, None)
        if knode is None:
            break
        with converting(knode):
            outputs = _convert(ctx, knode, held)
            add_activity_penalty(ctx, knode, outputs)
        for tensor, value in zip(knode.outputs, outputs):
            held[id(tensor)] = value

    def finish(tensor):
        value = held[id(tensor)]
        want = channels_first(value.rank) if channels_first_io else canonical(value.rank)
        nonlocal boundary
        if value.layout != want:
            boundary += 1
        return ctx.to_layout(value, want, boundary=True).node

    ctx.graph.output(keras.tree.map_structure(finish, graph.outputs))
    module = KerasGraphModule(ctx.root, ctx.graph, class_name="KerasModel").eval()
    if ctx.float_dtype_used:  # (GraphModule copies every buffer as persistent)
        module._non_persistent_buffers_set.add("float_dtype")
    return EmittedModule(module, held, ctx.permutes, boundary)


@contextmanager
def converting(knode: KNode) -> Iterator[None]:
    """Re-raise any exception but a ``CrossportError`` as a ``ConversionError`` naming the
    Keras layer (the forward direction's ``to_keras.emit.converting``)."""
    try:
        yield
    except CrossportError:
        raise
    except Exception as exc:  # a converter's own failure: any type, wrapped once here
        raise layer_error(knode.path, knode.class_name, "converting", exc) from exc


def layer_error(path: str, class_name: str, doing: str, exc: Exception) -> ConversionError:
    """One line naming the Keras layer and the original exception."""
    detail = " ".join(str(exc).split())
    if len(detail) > 300:
        detail = detail[:300] + " ..."
    return ConversionError(
        f"{doing} Keras layer {path!r} ({class_name}) failed: {type(exc).__name__}: {detail}. "
        "This is a case crossport's converter does not handle: please report it with this "
        "message.", node=path, op=class_name)


def _preferred_channels_first(graph: KGraph) -> set[int]:
    """Ids of model input tensors that some channels-first converter consumes (transitively)."""
    producer: dict[int, object] = {id(t): ("input", id(t)) for t in graph.inputs}
    for node in graph.nodes:
        for t in node.outputs:
            producer[id(t)] = node
    users: dict[object, list] = {}
    for node in graph.nodes:
        for t in node.input_tensors():
            src = producer.get(id(graph.resolve(t)))
            if src is not None:
                users.setdefault(src, []).append(node)
    sources = [("input", id(t)) for t in graph.inputs] + graph.nodes
    rank_of = {("input", id(t)): len(t.shape) for t in graph.inputs}

    def rank(node):
        return rank_of[node] if isinstance(node, tuple) else len(node.outputs[0].shape)

    def wants(node):
        return (node.converter is not None
                and node.converter.policy_for(node.operation) is Policy.CHANNELS_FIRST)

    def passes(node):
        return node.converter is not None and node.converter.passes_layout

    chosen = preferred_native(sources, lambda n: users.get(n, []), rank, wants, passes)
    return {n[1] for n in chosen if isinstance(n, tuple)}


def _convert(ctx: Context, knode: KNode, held: dict) -> list[Held]:
    converter = knode.converter
    ctx.layer, ctx.path = knode.operation, knode.path
    tensors = knode.input_tensors()
    ctx.input_shape = static_shape(tensors[0].shape) if tensors else ()
    ctx.input_dtype = str(tensors[0].dtype) if tensors else ""
    ctx.input_dtypes = [str(t.dtype) for t in tensors]
    ctx.tensor_shapes = [static_shape(t.shape) for t in tensors]
    ctx.output_dtypes = [t.dtype for t in knode.outputs]
    ctx.output_shapes = [static_shape(t.shape) for t in knode.outputs]

    def value_of(x, data: bool = False):
        if isinstance(x, keras.Variable):  # read by a traced layer's call (trace_call)
            return ctx.variable(x)
        if keras.ops.is_tensor(x):  # a traced call's eager value (static ops on a variable)
            return ctx.constant(np.asarray(keras.ops.convert_to_numpy(x)))
        if not isinstance(x, keras.KerasTensor):
            return x
        return _as_layer_computes(ctx, knode, x, held[id(x)], data)

    args = tuple(keras.tree.map_structure(lambda x, first=(i == 0): value_of(x, first), a)
                 for i, a in enumerate(knode.args))
    kwargs = keras.tree.map_structure(value_of, knode.kwargs)
    if len(ctx.calls.get(id(knode.operation), ())) > 1 and converter.policy_for(
            knode.operation) is Policy.CUSTOM:
        args, kwargs = _as_first_call(ctx, knode.operation, args, kwargs)
    shapes = list(ctx.output_shapes)
    return apply_converter(ctx, converter, knode.operation, args, kwargs, shapes)


def _as_first_call(ctx: Context, layer, args, kwargs):
    """A shared layer's tensors held as at its first call, rank for rank.

    Its torch module is built once, from the first call, for the layouts it had then (an
    NCHW conv output, a flatten of one); a later call's tensor held otherwise (NHWC from
    another branch) is laid out the same, so the module computes the same function on it.
    A tensor of another rank than at the first call is left to the converter.
    """
    first = ctx.first_layouts.setdefault(id(layer), {})
    position = iter(range(1 << 30))

    def conform(value):
        if not isinstance(value, Held):
            return value
        i = next(position)
        want = first.setdefault(i, value.layout)
        if want.rank != value.rank or want == value.layout:
            return value
        if want.flat is not None and value.shape[-1] != int(np.prod(want.flat.block_shape)):
            return value
        return ctx.to_layout(value, want)

    return keras.tree.map_structure(conform, (args, kwargs))


# Layers whose data input is integer ids by design (not a value to compute with).
# identities at inference that return an int input unchanged (Keras declares float32)
_KEEPS_INPUT_DTYPE = augment.KEEPS_INPUT_DTYPE | noise.KEEPS_INPUT_DTYPE
_INDEX_LAYERS = frozenset({"Embedding", "ReversibleEmbedding", "CategoryEncoding",
                           "IntegerLookup", "StringLookup", "Hashing", "HashedCrossing",
                           "Discretization"})


def _as_layer_computes(ctx: Context, knode: KNode, tensor, value: Held, data: bool) -> Held:
    """An input in the dtype the Keras layer computes it in; torch's modules cast nothing.

    Keras' ``Layer.__call__`` casts float inputs to the compute dtype (a float64 tensor into
    a float32 conv), and its ops promote an integer data input of a layer computing in
    float (``Dense`` on int32 ids, a global average pool of counts); layers that take ids by
    design keep them, and so do the augmentations, dropouts and noise layers that return an
    int tensor unchanged at inference (though Keras declares them float32).
    """
    layer = knode.operation
    want = getattr(layer, "compute_dtype", None)
    if (not isinstance(layer, keras.layers.Layer) or want is None or tensor.dtype == want
            or not keras.backend.is_float_dtype(want)):
        return value
    if keras.backend.is_float_dtype(tensor.dtype):
        cast = getattr(layer, "autocast", True)
    else:
        cast = (data and keras.backend.is_int_dtype(tensor.dtype)
                and knode.class_name not in _INDEX_LAYERS
                and knode.class_name not in _KEEPS_INPUT_DTYPE
                and all(keras.backend.is_float_dtype(d) for d in ctx.output_dtypes))
    if not cast:
        return value
    node = (ctx.as_module_float(value.node) if want == "float32"
            else ctx.call_method("to", value.node, getattr(torch, want)))
    return Held(node, value.layout, value.shape)


def apply_converter(ctx: Context, converter, operation, args, kwargs, shapes: list) -> list[Held]:
    """Run ``converter`` on held arguments, laid out as its policy asks; the outputs held
    (Keras ``shapes``). Wrapper converters (TimeDistributed) call it for their inner layer."""
    policy = converter.policy_for(operation)
    if policy is Policy.CUSTOM:
        result = converter.fn(ctx, operation, *args, **kwargs)
        return [r for r in keras.tree.flatten(result)]
    if policy is Policy.AGNOSTIC:  # x * np.arange(6), x / np.sqrt(np.float32(4))
        args, kwargs = keras.tree.map_structure(lambda v: _numpy_operand(ctx, v),
                                                (args, kwargs))
        if any(c.__name__ == "Merge" for c in type(operation).__mro__):
            args = _merge_ranks(ctx, args)
    target = _target_layout(policy, args)
    args, kwargs = keras.tree.map_structure(lambda v: _lay_out(ctx, v, policy, target),
                                            (args, kwargs))
    result = converter.fn(ctx, operation, *args, **kwargs)
    nodes = result if isinstance(result, (list, tuple)) else [result]
    out = []
    for node, shape in zip(nodes, shapes):
        if policy is Policy.CHANNELS_FIRST:
            layout = channels_first(len(shape))
        elif policy is Policy.AGNOSTIC and target is not None and target.rank == len(shape):
            layout = target
        else:
            layout = canonical(len(shape))
        out.append(Held(node, layout, shape))
    return out


def _merge_ranks(ctx: Context, args):
    """A Keras merge layer (Add, Multiply ...) expands a lower-rank input at axis 1, after
    the batch, until the ranks agree (``[N, C]`` with ``[N, H, W, C]``: ``[N, 1, 1, C]``),
    where keras.ops broadcast from the right, batch included."""
    tensors = [v for v in keras.tree.flatten(args) if isinstance(v, Held)]
    top = max((v.rank for v in tensors), default=0)

    def expand(value):
        if not isinstance(value, Held) or value.rank == top:
            return value
        value = ctx.canonical(value)
        node = value.node
        for _ in range(top - value.rank):
            node = ctx.call_method("unsqueeze", node, 1)
        shape = (value.shape[0], *([1] * (top - value.rank)), *value.shape[1:])
        return Held(node, canonical(top), shape)

    return keras.tree.map_structure(expand, args)


def _numpy_operand(ctx: Context, value):
    """A numpy constant operand of an elementwise op: a 0-d one as a Python number, an
    array as a buffer held in Keras order (laid out like any tensor), in the dtype Keras
    computes in (a float64 ``np.sqrt`` times a float32 tensor is float32 in Keras); a
    run-time size (a traced ``x * ops.shape(x)[1]``) as the size read at run time."""
    if isinstance(value, RunSize):
        return ctx.size(value)
    if not isinstance(value, (np.ndarray, np.generic)):
        return value
    if np.ndim(value) == 0:
        return value.item()
    array = np.asarray(value)
    out_dtype = getattr(np, ctx.output_dtypes[0], None) if ctx.output_dtypes else None
    if out_dtype is not None and array.dtype.kind == "f" and np.dtype(out_dtype).kind == "f":
        array = array.astype(out_dtype)
    return ctx.constant(array)


def _target_layout(policy: Policy, args) -> Layout | None:
    if policy is not Policy.AGNOSTIC:
        return None
    tensors = [v for v in keras.tree.flatten(args) if isinstance(v, Held)]
    if not tensors:
        return None
    widest = max(tensors, key=lambda v: v.rank)
    if widest.layout.flat is not None and any(v.layout != widest.layout for v in tensors):
        return canonical(widest.rank)  # flat-permuted only passes through when all agree
    return widest.layout


def _lay_out(ctx: Context, value, policy: Policy, target: Layout | None):
    if not isinstance(value, Held):
        return value
    if policy is Policy.CHANNELS_FIRST:
        return ctx.to_layout(value, channels_first(value.rank)).node
    if policy is Policy.CANONICAL or target is None:
        return ctx.canonical(value).node
    if value.rank == target.rank:
        return ctx.to_layout(value, target).node
    return ctx.broadcast_to(value, target)
