"""The reverse self-check: Keras on its own runtime vs the converted torch module.

Same metric, tolerance and float64 verdict as the forward direction (docs/parity.md): the
converted module run in float64 stands for the truth; the verdict is ``rounding`` when Keras
(float32, TF) is about as far from it as torch float32 is. On divergence the top-level Keras
layers' outputs are compared one by one and the first past tolerance is named.
"""

from __future__ import annotations

import contextlib
import copy
import io
import sys

import keras
import numpy as np
import torch

from crossport.errors import ConversionError, InputError
from crossport.layout import Layout
from crossport.parity.compare import REVERSE, compare_outputs, keras_feed, to_numpy
from crossport.parity.metrics import normalized_error, rounding_verdict
from crossport.parity.report import NodeDivergence, ParityReport
from crossport.parity.verify import fresh_inputs
from crossport.to_torch.emit import EmittedModule, layer_error
from crossport.to_torch.graph import KGraph
from crossport.weights import flat_feature_order


def keras_arrays(args: tuple, channels_first_io: bool) -> list[np.ndarray]:
    """torch inputs as the Keras model takes them (NCHW -> NHWC with ``channels_first_io``)."""
    out = []
    for t in args:
        a = to_numpy(t)
        if channels_first_io and a.ndim >= 3:
            a = np.moveaxis(a, 1, -1)
        out.append(a)
    return out


def run_keras(model, args: tuple, channels_first_io: bool) -> list[np.ndarray]:
    arrays = keras_arrays(args, channels_first_io)
    structure = getattr(model, "_inputs_struct", None)  # dict inputs: in flatten order
    if isinstance(structure, dict):
        out = model(keras.tree.pack_sequence_as(structure, arrays), training=False)
    else:
        out = model(keras_feed(arrays), training=False)
    return [np.asarray(o) for o in keras.tree.flatten(out)]


def run_keras_or_refuse(model, args: tuple, channels_first_io: bool) -> list[np.ndarray]:
    """``run_keras``; Keras failing on the inputs (an op Keras cannot run in a functional
    graph, ids out of range in the example) is an InputError with Keras' own message: the
    conversion cannot be checked against a model that does not run."""
    try:
        return run_keras(model, args, channels_first_io)
    except Exception as exc:  # Keras' or TF's own error, any type
        detail = " ".join(str(exc).replace("\x1b[1m", "").replace("\x1b[0m", "").split())
        shapes = ", ".join(f"{tuple(a.shape)} {str(a.dtype).replace('torch.', '')}"
                           for a in args)
        raise InputError(
            f"Keras itself fails to run the model on the check inputs ({shapes}): "
            f"{type(exc).__name__}: {detail[:400]}. The converted module is checked against "
            "Keras: give example inputs Keras runs on, or change the layer Keras cannot "
            "run") from exc


def run_torch(module, args: tuple, channels_first_io: bool) -> list[np.ndarray]:
    with torch.no_grad():
        out = module(*args)
    leaves = [to_numpy(t) for t in keras.tree.flatten(out)]  # Keras' key order
    if channels_first_io:
        leaves = [np.moveaxis(a, 1, -1) if a.ndim >= 3 else a for a in leaves]
    return leaves


class _FailingLayer(torch.fx.Interpreter):
    """Runs the module node by node to name the Keras layer whose torch code fails."""

    def run_node(self, n):
        try:
            return super().run_node(n)
        except Exception as exc:
            what = (type(self.module.get_submodule(n.target)).__name__
                    if n.op == "call_module" else getattr(n.target, "__name__", str(n.target)))
            raise layer_error(n.meta.get("keras_layer") or n.name, f"torch {what}",
                              "running the torch code of", exc) from exc


def run_converted(module, args: tuple, channels_first_io: bool) -> list[np.ndarray]:
    """``run_torch`` on the converted module; a failure is a ``ConversionError`` naming the
    Keras layer whose torch code failed (say, an integer input to a float layer)."""
    printed = io.StringIO()  # fx prints the generated code on a failure: keep stderr clean
    try:
        with contextlib.redirect_stderr(printed):
            out = run_torch(module, args, channels_first_io)
    except Exception:
        with torch.no_grad():
            _FailingLayer(module).run(*args)
        raise  # the node-by-node run passed: the failure is outside the graph's nodes
    sys.stderr.write(printed.getvalue())
    return out


def _as_double(args: tuple) -> tuple:
    return tuple(a.double() if a.is_floating_point() else a for a in args)


def _describe(args: tuple) -> str:
    return ", ".join("x".join(map(str, a.shape)) for a in args)


# how a second check shape moves each size the Keras inputs leave None (first Keras runs)
_MOVES = (lambda v: 2 * v, lambda v: v + 1, lambda v: v - 1, lambda v: v // 2)


def other_size(kmodel, graph: KGraph, example_args: tuple, channels_first_io: bool,
               seed: int) -> tuple[tuple | None, str | None]:
    """Inputs at a second size moving every size the Keras model leaves ``None`` (equal
    example sizes move together: ids and their padding mask), the first Keras runs on; or
    ``None`` and why. A size read at conversion time and fixed in the module fails there."""
    unknown = set()
    for tensor, arg in zip(graph.inputs, keras_arrays(example_args, channels_first_io)):
        unknown |= {arg.shape[d] for d, s in enumerate(tensor.shape) if s is None}
    if not unknown:
        return None, None
    for move in _MOVES:
        sizes = {v: move(v) for v in unknown}
        if any(new < 1 or new == old for old, new in sizes.items()):
            continue
        shapes = []
        for tensor, arg in zip(graph.inputs, example_args):
            shape = keras_arrays((arg,), channels_first_io)[0].shape
            shape = [sizes[n] if s is None else n for s, n in zip(tensor.shape, shape)]
            if channels_first_io and len(shape) >= 3:
                shape = [shape[0], shape[-1], *shape[1:-1]]
            shapes.append(tuple(shape))
        args = fresh_inputs(example_args, seed + 90, tuple(shapes))
        try:
            run_keras(kmodel, args, channels_first_io)
        except Exception:  # noqa: BLE001  (Keras does not run at that size: try another)
            continue
        return args, None
    return None, ("no second input size checked: Keras runs at none of the sizes tried "
                  "besides the example's")


def verify(kmodel, graph: KGraph, emitted: EmittedModule, example_args: tuple, *,
           channels_first_io: bool, atol: float, check_inputs: int, seed: int) -> ParityReport:
    """Compare Keras and the torch module on the example and ``check_inputs`` fresh inputs,
    and at a second size of every dim the Keras inputs leave ``None`` (:func:`other_size`).

    The forward direction's one compare routine, Keras as the reference: shapes, dtypes
    (exactly Keras'), NaN/inf positions and integer values are mismatches no tolerance
    excuses; floats give the normalized error.
    """
    input_sets = [example_args] + [fresh_inputs(example_args, seed + 1 + i)
                                   for i in range(check_inputs)]
    other, note = other_size(kmodel, graph, example_args, channels_first_io, seed)
    if other is not None:
        input_sets.append(other)
    comparisons = []
    for args in input_sets:
        ref = run_keras_or_refuse(kmodel, args, channels_first_io)
        got = _run_at(emitted.module, args, channels_first_io, args is other, example_args)
        comparisons.append(compare_outputs(ref, got, names=REVERSE))
    errors = [c.error for c in comparisons]
    worst = int(np.argmax(errors))
    mismatched = [c.mismatches for c in comparisons if c.mismatches]
    shapes = [_describe(example_args)] + ([_describe(other)] if other is not None else [])
    report = ParityReport(max_error=errors[worst], errors=errors, atol=atol,
                          mismatches=mismatched[0] if mismatched else [], shapes=shapes,
                          shape_sets=[[tuple(a.shape) for a in example_args]] + (
                              [[tuple(a.shape) for a in other]] if other is not None else []),
                          shape_note=note)
    if errors[worst] > atol or mismatched:
        report.worst_at = _describe(input_sets[worst if errors[worst] > atol else next(
            i for i, c in enumerate(comparisons) if c.mismatches)])
    if errors[worst] > atol:
        diagnose(report, kmodel, graph, emitted, input_sets[worst], channels_first_io)
    return report


def _run_at(module, args: tuple, channels_first_io: bool, second: bool,
            example_args: tuple) -> list[np.ndarray]:
    """``run_converted``; failing only at the second size, the error says so (a size the
    conversion fixed that the model reads at run time)."""
    try:
        return run_converted(module, args, channels_first_io)
    except Exception as exc:  # noqa: BLE001  (a ConversionError naming the layer, or torch's)
        if not second:
            raise
        raise ConversionError(
            f"the converted module runs at the example's input shapes ({_describe(example_args)}) "
            f"but fails at {_describe(args)}, where Keras runs: a size read at conversion "
            f"time was fixed in the module. {exc}", node=getattr(exc, "node", ""),
            op=getattr(exc, "op", "")) from exc


def diagnose(report: ParityReport, kmodel, graph: KGraph, emitted: EmittedModule,
             args: tuple, channels_first_io: bool) -> None:
    """Fill in the float64 verdict and the first top-level Keras layer past tolerance."""
    module64 = as_float64(emitted.module)
    ref = run_keras(kmodel, args, channels_first_io)
    got32 = run_torch(emitted.module, args, channels_first_io)
    got64 = run_torch(module64, _as_double(args), channels_first_io)
    report.keras_vs_fp64 = max(normalized_error(g, r) for g, r in zip(got64, ref))
    report.torch_vs_fp64 = max(normalized_error(g, t) for g, t in zip(got64, got32))
    report.verdict = rounding_verdict(report.keras_vs_fp64, report.torch_vs_fp64)
    report.first_divergent = first_divergent(graph, emitted, module64, args, channels_first_io,
                                             report.atol)


def as_float64(module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A float64 copy of the module whose float inputs stay float64 (the module casts its
    inputs to the Keras Input dtypes; float32 ones follow ``.double()``)."""
    module64 = copy.deepcopy(module).double()
    for node in module64.graph.nodes:
        if (node.meta.get("keras_input_cast") and isinstance(node.args[1], torch.dtype)
                and node.args[1].is_floating_point):
            node.args = (node.args[0], torch.float64)
        else:  # the model's own casts to float32 (ops.cast in a traced call) too
            node.args, node.kwargs = torch.fx.node.map_aggregate(
                (node.args, node.kwargs), _float64_dtype)
    module64.recompile()
    return module64


def _float64_dtype(value):
    return torch.float64 if value is torch.float32 else value


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm):
        super().__init__(gm)
        self.values: dict[torch.fx.Node, object] = {}

    def run_node(self, n):
        result = super().run_node(n)
        self.values[n] = result
        return result


def _record(module, args) -> dict:
    recorder = _Recorder(module)
    with torch.no_grad():
        recorder.run(*args)
    return recorder.values


def in_keras_layout(value: np.ndarray, layout: Layout) -> np.ndarray:
    """A held torch value back in the Keras layout."""
    if layout.flat is not None:
        order = flat_feature_order(layout.flat.block_shape, layout.flat.block_perm)
        out = np.empty_like(value)
        out[..., order] = value
        return out
    return np.transpose(value, np.argsort(layout.perm))


def first_divergent(graph: KGraph, emitted: EmittedModule, module64, args: tuple,
                    channels_first_io: bool, atol: float) -> NodeDivergence | None:
    """The first top-level Keras layer whose torch output is past ``atol`` (None if none)."""
    checked = [(n, t) for n in graph.nodes if "." not in n.path for t in n.outputs
               if id(t) in emitted.held and id(t) not in graph.synthetic]
    if not checked:
        return None
    probe = keras.Model(graph.inputs, [t for _n, t in checked])
    arrays = keras_arrays(args, channels_first_io)
    outs = probe(arrays if len(arrays) > 1 else arrays[0], training=False)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    values32 = _record(emitted.module, args)
    nodes64 = dict(zip(emitted.module.graph.nodes, module64.graph.nodes))
    values64 = _record(module64, _as_double(args))
    for (knode, tensor), ref in zip(checked, outs):
        held = emitted.held[id(tensor)]
        got = values32.get(held.node)
        if not isinstance(got, torch.Tensor):
            continue
        ref = np.asarray(ref)
        got = in_keras_layout(got.numpy(), held.layout)
        err = normalized_error(ref, got)
        if err <= atol:
            continue
        got64 = in_keras_layout(values64[nodes64[held.node]].numpy(), held.layout)
        keras_vs_64, torch_vs_64 = normalized_error(got64, ref), normalized_error(got64, got)
        return NodeDivergence(
            node=knode.path, op=knode.class_name, module_path=knode.path, source="",
            error=err, keras_vs_fp64=keras_vs_64, torch_vs_fp64=torch_vs_64,
            verdict=rounding_verdict(keras_vs_64, torch_vs_64))
    return None
