"""Integer and bool values that float32 rounding decided: ties, not a semantic difference.

A decision op (``x.long()``, ``argmax``, ``x > t``) turns floats into integers or bools.
When its float inputs differ between torch and Keras by rounding only, a value that sits
on the decision's boundary can land on either side, and the integer outputs differ although
both frameworks compute the same function (torch in float64 would decide some of them
differently again). ``rounding_decisions`` tells such ties from a wrong converter:

- it replays the exported graph node by node beside a Keras model exposing every
  intermediate (as the check's diagnosis does);
- every node must be within ``atol`` of torch, except decision nodes whose integers differ;
- at such a node torch's own op, run on *Keras'* input values, must give exactly Keras'
  output: the converter's op is faithful, only its inputs' rounding moved the boundary;
- the float32 replay then goes on with Keras' decision (sent into the stream), so what
  follows is compared given the same decision, not blamed on it.

Float ops that step at a boundary (:data:`FLOAT_DECISIONS`: ``floor``, ``round``, ``sign``,
``fmod``, ``angle``/``atan2`` at the negative real axis...) decide the same way: an FFT bin
whose imaginary part is exactly 0 in torch and -7e-9 in TF has angle pi in one and -pi in the
other. Such a node may differ past ``atol`` when torch's op on Keras' inputs gives Keras'
values within ``atol``.

The indices of a selection op (``sort``, ``topk``, ``max.dim``, ``median.dim``,
``cummax``...: element 1 of its tuple) are decisions too, of any input dtype: torch documents
no order among equal values (except ``sort(stable=True)``), so Keras' indices are faithful
when they pick from the op's input exactly the values torch's op selects from it.

A set of integer mismatches passes only when all of them are explained this way and every
output ends within ``atol``; anything else keeps the check's failure (conservative: a
difference past ``atol`` next to a tie is not excused by it).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import keras
import numpy as np
import torch

from crossport.capture import module_path, source_line
from crossport.capture.op_facts import VALUE_AND_INDEX_OPS, op_name
from crossport.layout import Layout
from crossport.parity.compare import (
    Comparison,
    OutputComparison,
    as_real,
    compare_output,
    compare_outputs,
    from_numpy,
    keras_feed,
    to_numpy,
)
from crossport.parity.replay import stream
from crossport.to_keras.values import ComplexValue
from crossport.weights import flat_feature_order

_EXACT = {"bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64"}
# Float ops whose value jumps where the input crosses a boundary: rounding of the input
# there moves the output by a step (an integer, 2*pi, the divisor), not by rounding.
FLOAT_DECISIONS = frozenset({"floor", "ceil", "round", "trunc", "fix", "frac", "sign", "sgn",
                             "angle", "atan2", "arctan2", "fmod", "remainder",
                             "floor_divide", "heaviside",
                             # fake quantization: a step of `scale` (output 0 of the tuple)
                             "fake_quantize_per_tensor_affine",
                             "fake_quantize_per_tensor_affine_cachemask",
                             "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams",
                             "fake_quantize_per_channel_affine",
                             "fake_quantize_per_channel_affine_cachemask",
                             "_fused_moving_avg_obs_fq_helper",
                             "_fused_moving_avg_obs_fq_helper_functional"})


@dataclass
class Ties:
    """The decision nodes whose integers rounding decided (``nodes``), the selection
    indices that order equal values otherwise (``selections``), and the outputs' error."""

    nodes: list[str] = field(default_factory=list)
    selections: list[str] = field(default_factory=list)
    values: int = 0          # integer/bool values that differ at those nodes
    output_error: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.nodes or self.selections)

    def describe(self) -> str:
        parts = []
        if self.nodes:
            parts.append(f"at {', '.join(self.nodes)} torch's op gives Keras' values on "
                         "Keras' inputs, which differ from torch's by rounding only (a tie on "
                         "the op's boundary, not a semantic difference)")
        if self.selections:
            parts.append(f"at {', '.join(self.selections)} Keras' indices select exactly "
                         "the values torch's op selects from Keras' inputs (torch documents "
                         "no order among equal values)")
        return (f"{self.values} integer/bool value(s) or step(s) differ where float32 "
                f"rounding or the order of equal values decided them: {'; '.join(parts)}")


def is_value_only(comparison) -> bool:
    """Whether ``comparison``'s mismatches are integer/bool values only (no shape, dtype,
    NaN/inf position or structure difference): the only kind a tie can explain."""
    if comparison.structure or not comparison.mismatches:
        return False
    return all(o.torch_dtype == o.keras_dtype and o.torch_dtype in _EXACT
               for o in comparison.outputs if o.mismatches)


def may_be_ties(comparison, atol: float, exported) -> bool:
    """Whether ties could explain ``comparison``'s failure: integer/bool values only, or
    float values past ``atol`` with nothing else in a graph that has a float decision (the
    replay holds every intermediate: a deep net past ``atol`` by rounding, without one, is
    left to the float64 evidence)."""
    if is_value_only(comparison):
        return True
    return (not comparison.structure and not comparison.mismatches
            and comparison.error > atol
            and any(_is_float_decision(n) for n in exported.graph_module.graph.nodes))


def keras_intermediates(emitted, keras_args) -> dict:
    """Node name -> its Keras value on ``keras_args``, from one model exposing every graph
    value (a node computed from constants alone is an eager tensor, not a graph value)."""
    tensors, complex_names = {}, []
    for name, (value, _) in emitted.node_values.items():
        if isinstance(value, keras.KerasTensor):
            tensors[name] = value
        elif isinstance(value, ComplexValue) and all(
                isinstance(part.tensor, keras.KerasTensor) for part in (value.real, value.imag)):
            complex_names.append(name)  # held as its parts: read as one complex array
            tensors[(name, "real")], tensors[(name, "imag")] = value.real.tensor, value.imag.tensor
    names = list(tensors)
    # the model's own input structure (one tensor or a list), so keras_feed's args fit it
    debug = keras.Model(emitted.model.input, [tensors[n] for n in names])
    outs = debug(keras_args, training=False)
    values = dict(zip(names, outs if isinstance(outs, (list, tuple)) else [outs]))
    for name in complex_names:
        real, imag = (np.asarray(values.pop((name, part))) for part in ("real", "imag"))
        values[name] = real + 1j * imag
    return values


def rounding_decisions(exported, emitted, args: tuple, keras_args, atol: float) -> Ties | None:
    """The ties explaining every integer difference on ``args``, or None (not explained).

    ``keras_args`` are ``args`` as the Keras model takes them (layout already applied).
    """
    keras_values = keras_intermediates(emitted, keras_args)
    graph = exported.graph_module.graph
    nodes = {n.name: n for n in graph.nodes}
    outputs = {a.name for a in next(n for n in graph.nodes if n.op == "output").all_input_nodes}
    needed = {i.name for n in graph.nodes if _is_decision(n)
              for i in _decision_op(n).all_input_nodes}
    held: dict[str, torch.Tensor] = {}  # decision inputs: Keras' value in torch layout
    ties = Ties()
    replay = stream(exported, args)
    sent = None
    while True:
        try:
            name, ref = replay.send(sent)  # the first send(None) starts it, as next() does
        except StopIteration:
            break
        sent = None
        got = keras_values.pop(name, None)
        if not isinstance(ref, torch.Tensor):
            continue
        if got is None:  # a placeholder, parameter or constant: the same on both sides
            if name in needed:
                held[name] = ref
            continue
        layout = emitted.node_values[name][1]
        want, got = in_keras_layout(to_numpy(ref), layout), np.asarray(got)
        result = compare_output(as_real(want), as_real(got), check_dtype=False)
        if name in needed and layout.flat is None:
            held[name] = _in_torch_layout(got, layout, ref.dtype)
        if not result.mismatches and (result.error or 0.0) <= atol:
            if name in outputs:
                ties.output_error = max(ties.output_error, result.error or 0.0)
            continue
        node = nodes[name]
        jumped = not result.mismatches and _is_float_decision(node)  # past atol, no mismatch
        if layout.flat is not None or not (result.mismatches or jumped) or not _is_decision(node):
            return None
        why = _faithful(node, held, got, layout, atol)
        if why is None:
            return None
        (ties.nodes if why == "rounding" else ties.selections).append(_where(node))
        ties.values += _moved(want, got, atol) if jumped else int(np.count_nonzero(want != got))
        sent = _in_torch_layout(got, layout, ref.dtype)  # go on with Keras' decision
    return ties if ties else None


def artifact_excuse(conversion):
    """For a re-check of an artifact (exported file, generated source): ``excuse(args,
    structure, got, comparison)`` -> the comparison to use when the artifact's integer differences
    from torch are ties the conversion's check allows, else None. The ties are proven on
    the conversion's Keras model, and the artifact must give exactly its values (floats
    within ``atol``): a different kernel deciding a tie otherwise is not excused."""
    emitted = getattr(conversion, "emitted", None)
    options = conversion.options
    if emitted is None or options is None or options.tolerance != "rounding":
        return None

    def excuse(args: tuple, structure, got: list, comparison):
        from crossport.parity.verify import run_keras, to_keras_inputs

        if not may_be_ties(comparison, options.atol, conversion.exported):
            return None
        arrays = to_keras_inputs(args, options.channels_last_io)
        ties = rounding_decisions(conversion.exported, emitted, args,
                                  keras_feed(arrays), options.atol)
        if ties is None:
            return None
        keras = run_keras(conversion.model, args, options.channels_last_io, like=structure)
        same = compare_outputs(keras, got)
        if same.mismatches or same.error > options.atol:
            return None
        return excused(same, ties.output_error + same.error)

    return excuse


def excused(comparison: Comparison, error: float) -> Comparison:
    """``comparison`` with its tie mismatches dropped and every comparable output's error
    set to ``error`` (the outputs' error given Keras' decisions)."""
    return Comparison(outputs=[OutputComparison(o.index, error if o.error is not None else None,
                                                o.torch_dtype, o.keras_dtype)
                               for o in comparison.outputs])


def _is_decision(node: torch.fx.Node) -> bool:
    """A node that makes integers or bools out of floats: a cast, argmax, a comparison, or
    the indices element of a multi-output op (``sort``, ``topk``, ``max.dim``); or a float
    op that jumps at a boundary (:data:`FLOAT_DECISIONS`)."""
    value = node.meta.get("val")
    if node.op != "call_function" or not isinstance(value, torch.Tensor):
        return False
    if value.dtype.is_floating_point or value.dtype.is_complex:
        return _is_float_decision(node)
    op = _decision_op(node)
    if op.op != "call_function":
        return False
    if _selection_indices(op, node):  # equal values: torch documents no order, any dtype
        return True
    return any(isinstance(i.meta.get("val"), torch.Tensor) and i.meta["val"].is_floating_point()
               for i in op.all_input_nodes)


def _is_float_decision(node: torch.fx.Node) -> bool:
    """A float op of float (or complex) inputs that jumps where its input crosses a
    boundary: ``floor(2.9999999)`` and ``floor(3.0000002)``, ``angle(-1 -0j)`` and
    ``angle(-1 +0j)`` (-pi and pi)."""
    op = _decision_op(node)  # fake quantization's output is element 0 of a tuple
    value = node.meta.get("val")
    return (op.op == "call_function" and op_name(op) in FLOAT_DECISIONS
            and isinstance(value, torch.Tensor)
            and (value.is_floating_point() or value.is_complex())
            and any(isinstance(i.meta.get("val"), torch.Tensor)
                    and (i.meta["val"].is_floating_point() or i.meta["val"].is_complex())
                    for i in op.all_input_nodes))


def _moved(want: np.ndarray, got: np.ndarray, atol: float) -> int:
    """How many values of a float decision moved past ``atol`` (normalized as the check)."""
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    return int(np.count_nonzero(np.abs(as_real(want) - as_real(got)) > atol * scale))


def _decision_op(node: torch.fx.Node) -> torch.fx.Node:
    """The op that decides ``node``'s values: the tuple-valued op a ``getitem`` reads from
    (``sort(x)[1]``), else the node itself."""
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) \
            and isinstance(node.args[0].meta.get("val"), (tuple, list)):
        return node.args[0]
    return node


def _faithful(node: torch.fx.Node, held: dict, got: np.ndarray, layout: Layout,
              atol: float) -> str | None:
    """Why Keras' output ``got`` is a faithful decision: ``"rounding"`` when torch's op on
    Keras' input values gives exactly ``got`` (a float decision: within ``atol`` of it, no
    NaN/inf moved), ``"selection"`` when they are a selection
    op's indices picking exactly torch's values (the order among equal values is not part
    of ``sort``'s or ``topk``'s contract); None when it is not faithful."""
    op = _decision_op(node)
    if any(i.name not in held for i in op.all_input_nodes):
        return None
    args = torch.fx.node.map_arg(op.args, lambda n: held[n.name])
    kwargs = torch.fx.node.map_arg(op.kwargs, lambda n: held[n.name])
    try:
        with torch.no_grad():
            result = op.target(*args, **kwargs)
    except Exception:
        return None
    value = result
    if op is not node:
        value = result[node.args[1]] if isinstance(result, (tuple, list)) else None
    if not isinstance(value, torch.Tensor):
        return None
    mine = in_keras_layout(to_numpy(value), layout)
    if mine.shape != got.shape:
        return None
    if np.all(mine == got):
        return "rounding"
    if _is_float_decision(node):
        same = compare_output(as_real(mine), as_real(got), check_dtype=False)
        return "rounding" if not same.mismatches and same.error <= atol else None
    if op is not node and _selects_the_same(op, node, args, kwargs, result[0], got, layout):
        return "selection"
    return None


def _selects_the_same(op: torch.fx.Node, node: torch.fx.Node, args, kwargs,
                      values: torch.Tensor, got: np.ndarray, layout: Layout) -> bool:
    """Whether Keras' indices ``got`` pick, from the op's input (Keras' values), exactly the
    ``values`` torch's op selects from it: equal values may come from either position."""
    if not _selection_indices(op, node):
        return False
    bound = _bound_arguments(op.target, args, kwargs)
    if bound.get("stable"):  # sort(stable=True) orders equal values by index: exact only
        return False
    source, dim = bound.get("self"), bound.get("dim", -1)
    if not isinstance(source, torch.Tensor) or not isinstance(dim, int):
        return False
    with torch.no_grad():
        indices = _in_torch_layout(got, layout, torch.int64)
        if source.ndim == 0:
            return bool(torch.all(indices == 0)) and torch.equal(values, source)
        dim %= source.ndim
        if indices.ndim < source.ndim:  # a reduction without keepdim
            indices = indices.unsqueeze(dim)
        if indices.numel() and (indices.min() < 0 or indices.max() >= source.shape[dim]):
            return False
        picked = torch.take_along_dim(source, indices, dim).reshape(values.shape)
    if op_name(op) == "topk" and not bound.get("sorted", True):
        picked, values = picked.sort(dim).values, values.sort(dim).values
    return bool(torch.all((picked == values) | (picked.isnan() & values.isnan())))


def _selection_indices(op: torch.fx.Node, node: torch.fx.Node) -> bool:
    """Whether ``node`` reads the indices element of a selection op (``sort(x)[1]``)."""
    return op is not node and node.args[1] == 1 and op_name(op) in VALUE_AND_INDEX_OPS


def _bound_arguments(target, args, kwargs) -> dict:
    """The op's arguments by schema name, defaults filled in."""
    schema = target._schema
    bound = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    positional = [a for a in schema.arguments if not a.kwarg_only]
    bound.update({a.name: v for a, v in zip(positional, args)})
    bound.update(kwargs)
    return bound


def in_keras_layout(value: np.ndarray, layout: Layout) -> np.ndarray:
    """A torch-layout value in the order Keras holds it (a flattened block's features too):
    what the check's diagnosis and the tie replay compare a Keras intermediate with."""
    if layout.flat is not None:
        return value[..., flat_feature_order(layout.flat.block_shape, layout.flat.block_perm)]
    return np.transpose(value, layout.perm)


def _in_torch_layout(value: np.ndarray, layout: Layout, dtype: torch.dtype) -> torch.Tensor:
    array = np.transpose(value, np.argsort(layout.perm)).copy()  # writable, torch-owned
    return from_numpy(array).to(dtype)


def _where(node: torch.fx.Node) -> str:
    op = _decision_op(node)
    what = f"{op.target}" if op is node else f"{op.target} element {node.args[1]}"
    path = module_path(node) or "<root module>"
    source = source_line(node)
    return f"node {node.name} [{what}] in {path}" + (f" ({source})" if source else "")
