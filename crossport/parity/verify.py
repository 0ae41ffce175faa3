"""The self-check of every conversion: torch and Keras on the same inputs, node by node.

``verify`` runs the eager torch module and the Keras model on the example inputs and on
fresh random inputs of the same shapes and compares the outputs with ``compare_outputs``
(shapes, dtypes, NaN/inf positions, exact integers, normalized float error). Above ``atol``
the acceptance rule asks torch in float64 (``accept.py``). When the check fails it replays
the exported graph node by node (float32 and float64, ``replay.py``) against a Keras model
that exposes every intermediate tensor, finds the first diverging node and gives the
verdict: rounding or semantic.
"""

from __future__ import annotations

from dataclasses import dataclass

import keras
import numpy as np
import torch
from torch.utils import _pytree as pytree

from crossport.capture import (
    dataclass_fields,
    input_names,
    module_path,
    requested_dim_groups,
    requested_dynamic_dims,
    source_line,
)
from crossport.capture.guards import other_side_shapes
from crossport.errors import ConversionError, CrossportError
from crossport.layout import Layout, channels_last
from crossport.parity.accept import float64_evidence
from crossport.parity.compare import (
    Comparison,
    as_real,
    compare_output,
    compare_outputs,
    keras_feed,
    to_numpy,
)
from crossport.parity.metrics import precision_of, rounding_verdict
from crossport.parity.nan import nan_notes
from crossport.parity.reference import TorchReference, torch_outputs
from crossport.parity.replay import stream
from crossport.parity.report import NodeDivergence, ParityReport
from crossport.parity.shapes import CheckShapes, check_shapes
from crossport.parity.ties import (
    excused,
    in_keras_layout,
    keras_intermediates,
    may_be_ties,
    rounding_decisions,
)


def _int_range(t: torch.Tensor) -> tuple[int, int]:
    """``randint``'s ``[low, high)`` covering ``t``'s values (all but the dtype's largest:
    ``high`` must fit in int64, which ``max + 1`` of an int64 tensor may not)."""
    if not t.numel():
        return 0, 1
    top = torch.iinfo(t.dtype).max
    low, high = int(t.min()), int(t.max()) + 1
    low = min(low, top - 1)
    return low, min(max(high, low + 1), top)


def fresh_inputs(example: tuple, seed: int, shapes: tuple | None = None) -> tuple:
    """Random inputs typed like ``example``: normal floats, ints within its range.

    Shaped like ``example``, or like ``shapes`` (one shape per input) to check other sizes
    of dynamic dims.
    """
    gen = torch.Generator().manual_seed(seed)
    return tuple(
        random_tensor(shape, t.dtype, _int_range(t) if drawn_from_range(t.dtype) else None, gen)
        for t, shape in zip(example, shapes or [t.shape for t in example]))


def drawn_from_range(dtype: torch.dtype) -> bool:
    """Whether :func:`random_tensor` needs an ``int_range`` for ``dtype`` (an integer one:
    not float, complex or bool)."""
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def random_tensor(shape, dtype: torch.dtype, int_range: tuple[int, int] | None = None,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """A random input: normal floats (complex: both parts), fair booleans, integers drawn
    from ``[low, high)``.

    Example:
        >>> random_tensor((2, 3), torch.int64, (0, 10)).dtype
        torch.int64
    """
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=generator, dtype=dtype)
    if not drawn_from_range(dtype):  # bool
        return torch.rand(shape, generator=generator) > 0.5
    if int_range is None:
        raise ValueError(f"a random {dtype} tensor needs a range of values")
    return torch.randint(*int_range, shape, generator=generator, dtype=dtype)


def recheck_inputs(example: tuple, shape_sets: list | None, seed: int, count: int) -> list:
    """Fresh inputs for a re-check: ``count`` at the example's shape, one at each other
    checked shape (``ParityReport.shape_sets``), so a dynamic dim is re-checked too."""
    sets = [fresh_inputs(example, seed + i) for i in range(count)]
    for j, shapes in enumerate((shape_sets or [])[1:]):
        sets.append(fresh_inputs(example, seed + count + j, tuple(shapes)))
    return sets


def plan_shapes(module, exported, example_args: tuple, options) -> CheckShapes:
    """The example's shapes, a second shape moving every dynamic dim and shapes on the
    other side of order guards (``if pad > 0``), all torch-approved."""
    names = input_names(module, len(example_args))
    requested = requested_dynamic_dims(example_args, options, names)

    def accepts(shapes) -> bool:
        try:
            torch_outputs(module, fresh_inputs(example_args, options.seed + 50, shapes))
        except Exception:  # noqa: BLE001  (torch rejects that size: the model constrains it)
            return False
        return True

    shapes = check_shapes(exported, example_args, names, requested, accepts)
    groups = requested_dim_groups(example_args, options, names)
    for other, condition in other_side_shapes(exported, example_args, names, groups, accepts):
        if tuple(other) not in shapes.sets:  # a branch's other side, which torch runs
            shapes.branches[len(shapes.sets)] = condition
            shapes.sets.append(tuple(other))
    return shapes


def to_keras_inputs(args: tuple, channels_last_io: bool) -> list[np.ndarray]:
    arrays = []
    for t in args:
        a = to_numpy(t)
        if channels_last_io and a.ndim >= 3:
            a = np.transpose(a, channels_last(a.ndim).perm)
        arrays.append(a)
    return arrays


def flatten_like(ref, got) -> list:
    """Leaves of ``got`` in the order torch's pytree gives the leaves of ``ref``.

    Keras flattens dicts by sorted key, torch by insertion order: walk torch's structure.
    """
    if isinstance(ref, torch.Tensor) or ref is None:
        return [got]
    ref = dataclass_fields(ref)  # Keras holds a registered dataclass as a dict
    if isinstance(ref, dict):
        return [leaf for k in ref for leaf in flatten_like(ref[k], got[k])]
    if len(ref) == 1 and not isinstance(got, (list, tuple)):
        # a Keras model whose outputs are a 1-tuple returns the bare tensor: zipping it
        # walked its first axis (a 1x12x32 output compared as 12x32, a ParityError)
        got = [got]
    return [leaf for r, g in zip(ref, got) for leaf in flatten_like(r, g)]


def torch_order(model: keras.Model, reference) -> list[int]:
    """For each torch output leaf, its index in Keras' flat output order."""
    counter = iter(range(len(keras.tree.flatten(model.output))))
    indices = keras.tree.map_structure(lambda _: next(counter), model.output)
    return flatten_like(reference, indices)


def from_keras_outputs(outputs, channels_last_io: bool, like=None) -> list[np.ndarray]:
    leaves = flatten_like(like, outputs) if like is not None else keras.tree.flatten(outputs)
    flat = [np.asarray(o) for o in leaves]
    if channels_last_io:
        flat = [np.transpose(a, np.argsort(channels_last(a.ndim).perm)) if a.ndim >= 3 else a
                for a in flat]
    return flat


def run_keras(model: keras.Model, args: tuple, channels_last_io: bool,
              like=None) -> list[np.ndarray]:
    """Keras outputs for torch ``args``, flattened in torch's order when ``like`` is given."""
    arrays = to_keras_inputs(args, channels_last_io)
    try:
        out = model(keras_feed(arrays), training=False)
    except CrossportError:
        raise
    except Exception as exc:  # a model the converters built but TF cannot run: a crossport bug
        detail = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        raise ConversionError(
            f"the converted Keras model failed to run: {type(exc).__name__}: {detail} "
            "(a converter emitted something TensorFlow rejects at run time; please report it "
            "with this message)") from exc
    return from_keras_outputs(out, channels_last_io, like)


def leaves(out) -> list[np.ndarray]:
    return [to_numpy(t) for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def run_torch(module: torch.nn.Module, args: tuple) -> list[np.ndarray]:
    return leaves(torch_outputs(module, args))


@dataclass
class CheckPlan:
    """What the check runs: the shapes it checks and one input set per run (the example,
    ``options.check_inputs`` fresh sets, one set at each other shape)."""

    shapes: CheckShapes
    input_sets: list[tuple]


def plan_check(module, exported, example_args: tuple, options) -> CheckPlan:
    """The check's shapes and input sets (torch runs here only to try dynamic sizes)."""
    shapes = plan_shapes(module, exported, example_args, options)
    input_sets = [example_args] + [fresh_inputs(example_args, options.seed + 1 + i)
                                   for i in range(options.check_inputs)]
    input_sets += [fresh_inputs(example_args, options.seed + 60 + i, other)
                   for i, other in enumerate(shapes.sets[1:])]
    return CheckPlan(shapes, input_sets)


def verify(module, exported, emitted, example_args: tuple, options,
           plan: CheckPlan | None = None,
           reference: TorchReference | None = None) -> ParityReport:
    """Compare torch and Keras on the examples and ``options.check_inputs`` fresh inputs.

    ``plan`` and ``reference`` let the caller start torch's forwards early
    (``convert_with_report`` runs them while the Keras model is built); without them the
    plan is made here and torch runs on this thread.
    """
    plan = plan or plan_check(module, exported, example_args, options)
    if reference is None:
        with TorchReference(module, plan.input_sets, concurrent=False) as own:
            return verify(module, exported, emitted, example_args, options, plan, own)
    shapes, input_sets = plan.shapes, plan.input_sets
    comparisons, runs = [], []
    for i in range(len(input_sets)):
        structure = reference.outputs(i)
        args = input_sets[i]  # after torch ran it: a rejected fresh set may be replaced
        ref = leaves(structure)
        got = run_keras(emitted.model, args, options.channels_last_io, like=structure)
        comparisons.append(compare_outputs(ref, got))
        runs.append((ref, got))
    tie_notes = _excuse_ties(comparisons, exported, emitted, input_sets, options)
    errors = [c.error for c in comparisons]
    largest, explain = int(np.argmax(errors)), worst_input_set(comparisons)
    report = ParityReport(max_error=errors[largest], errors=errors, atol=options.atol,
                          rule=options.tolerance, mismatches=comparisons[explain].mismatches,
                          notes=nan_notes(exported, input_sets), shapes=shapes.describe(),
                          shape_sets=shapes.sets, fixed_dims=shapes.fixed,
                          shape_note=shapes.untried)
    report.notes += reference.notes + tie_notes
    if report.max_error > options.atol:
        add_float64_evidence(report, module, input_sets[largest], *runs[largest])
    if not report.passed:
        report.worst_at = ", ".join("x".join(map(str, a.shape)) for a in input_sets[explain])
        _explain_branches(report, shapes, comparisons, options)
        diagnose(report, module, exported, emitted, input_sets[explain], options)
    return report


def _excuse_ties(comparisons: list[Comparison], exported, emitted, input_sets: list,
                 options) -> list[str]:
    """Integer/bool differences that float32 rounding decided (``ties.py``): each input set
    whose differences are all such ties is replaced by its comparison given Keras'
    decisions; returns one note per excused set."""
    notes = []
    for i, comparison in enumerate(comparisons):
        if options.tolerance != "rounding" or not may_be_ties(comparison, options.atol,
                                                             exported):
            continue
        arrays = to_keras_inputs(input_sets[i], options.channels_last_io)
        ties = rounding_decisions(exported, emitted, input_sets[i],
                                  keras_feed(arrays), options.atol)
        if ties is None:
            continue
        comparisons[i] = excused(comparison, ties.output_error)
        shapes = ", ".join("x".join(map(str, a.shape)) for a in input_sets[i])
        notes.append(f"input set {i} ({shapes}): {ties.describe()}")
    return notes


def _explain_branches(report: ParityReport, shapes: CheckShapes, comparisons: list,
                      options) -> None:
    """Failures on the other side of a size condition: say each is a branch on a size."""
    for index, condition in shapes.branches.items():
        failed = comparisons[options.check_inputs + index]
        if failed.mismatches or failed.error > options.atol:
            at = ", ".join("x".join(map(str, s)) for s in shapes.sets[index])
            report.notes.append(
                f"the model differs at input shapes {at}, where {condition} does not hold: "
                "torch.export traced one side of that size condition (a Python branch on a "
                "dynamic size in forward). Convert with that dim static, or compute the size "
                "without the branch")


def worst_input_set(comparisons: list[Comparison]) -> int:
    """The input set to explain: the first with a mismatch, else the largest error."""
    for i, c in enumerate(comparisons):
        if c.mismatches:
            return i
    return int(np.argmax([c.error for c in comparisons]))


def add_float64_evidence(report: ParityReport, module, args: tuple, torch32, keras32) -> None:
    """Fill ``report``'s float64 distances and verdict (the acceptance rule's evidence)."""
    evidence = float64_evidence(module, args, torch32, keras32)
    if evidence is None:
        report.notes.append("no float64 evidence: the torch module does not run in float64 "
                            "(it fixes a float32 dtype in forward); atol is a hard bound")
        return
    report.keras_vs_fp64 = evidence.keras_vs_fp64
    report.torch_vs_fp64 = evidence.torch_vs_fp64
    report.verdict = evidence.verdict


def diagnose(report: ParityReport, module, exported, emitted, args: tuple, options) -> None:
    """Fill ``report`` with the first diverging node (replayed in float32 and float64).

    Streams: the float32 and float64 replays advance node by node together and keep only the
    values later nodes still read, and each Keras intermediate is let go once compared, so
    the peak is about one forward per runtime (SwinUNETR at 96³ held > 21 GB at once).
    """
    arrays = to_keras_inputs(args, options.channels_last_io)
    keras_values = keras_intermediates(emitted, keras_feed(arrays))
    nodes = {n.name: n for n in exported.graph_module.graph.nodes}
    current32: dict = {}  # the float32 value of the node being compared: the fp64 fallback
    ref64s = stream(exported, args, torch.float64, fallback=current32)
    first = None
    for name, ref in stream(exported, args):
        current32.clear()
        current32[name] = ref
        ref64, ref64s = _next_float64(ref64s, name, report)
        got = keras_values.pop(name, None)
        if got is None or not isinstance(ref, torch.Tensor):
            continue
        divergence = _node_divergence(nodes[name], ref, ref64, np.asarray(got),
                                      emitted.node_values[name][1], options.atol)
        if divergence is None:
            continue
        first = first or divergence
        if options.tolerance == "atol" or divergence.verdict != "rounding":
            first = divergence
            break
    report.first_divergent = first


def _next_float64(ref64s, name: str, report: ParityReport):
    """The float64 replay's value of node ``name`` and the stream to go on with (``None``
    once it failed: explaining must never crash, later verdicts are then unknown)."""
    if ref64s is None:
        return None, None
    try:
        name64, ref64 = next(ref64s)
    except Exception as exc:
        report.notes.append(f"the float64 replay failed at node {name} ({type(exc).__name__}: "
                            f"{exc}); node verdicts from there on are unknown")
        return None, None
    return (ref64 if name64 == name else None), ref64s


def _node_divergence(node, ref, ref64, got: np.ndarray, layout: Layout,
                     atol: float) -> NodeDivergence | None:
    """The node's divergence when its Keras value is past ``atol`` or mismatched, else None."""
    want, got = as_real(in_keras_layout(to_numpy(ref), layout)), as_real(got)
    result = compare_output(want, got, check_dtype=False)
    if not result.mismatches and result.error <= atol:
        return None
    keras_vs_64 = torch_vs_64 = None
    verdict = "semantic" if result.mismatches else "unknown"
    if isinstance(ref64, torch.Tensor) and not result.mismatches:
        want64 = as_real(in_keras_layout(to_numpy(ref64), layout))
        keras_vs_64 = compare_output(want64, got, check_dtype=False).error
        torch_vs_64 = compare_output(want64, want, check_dtype=False).error
        verdict = rounding_verdict(keras_vs_64, torch_vs_64, precision_of(want))
    return NodeDivergence(
        node=node.name, op=str(node.target), module_path=module_path(node),
        source=source_line(node), error=result.error if result.error is not None else 0.0,
        keras_vs_fp64=keras_vs_64, torch_vs_fp64=torch_vs_64, verdict=verdict,
        mismatches=[m.replace("output 0", "value") for m in result.mismatches])
