"""The self-check of every conversion: torch and Keras on the same inputs, node by node.

``verify`` runs the eager torch module and the Keras model on the example inputs and on
fresh random inputs of the same shapes. When the outputs diverge it replays the exported
graph node by node (float32 and float64) against a Keras model that exposes every
intermediate tensor, finds the first node past tolerance and gives the verdict: rounding
or semantic.
"""

from __future__ import annotations

import copy

import keras
import numpy as np
import torch
from torch.utils import _pytree as pytree

from crossport.capture import module_path, source_line
from crossport.errors import InputError
from crossport.layout import Layout, channels_last
from crossport.parity.metrics import normalized_error, rounding_verdict
from crossport.parity.report import NodeDivergence, ParityReport
from crossport.weights import flat_feature_order


def fresh_inputs(example: tuple, seed: int) -> tuple:
    """Random inputs shaped and typed like ``example``: normal floats, ints within range."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in example:
        if t.dtype.is_floating_point:
            out.append(torch.randn(t.shape, generator=gen, dtype=t.dtype))
        elif t.dtype == torch.bool:
            out.append(torch.rand(t.shape, generator=gen) > 0.5)
        else:
            low, high = (int(t.min()), int(t.max()) + 1) if t.numel() else (0, 1)
            out.append(torch.randint(low, max(high, low + 1), t.shape, generator=gen,
                                     dtype=t.dtype))
    return tuple(out)


def to_keras_inputs(args: tuple, channels_last_io: bool) -> list[np.ndarray]:
    arrays = []
    for t in args:
        a = t.detach().cpu().numpy()
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
    if isinstance(ref, dict):
        return [leaf for k in ref for leaf in flatten_like(ref[k], got[k])]
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
    out = model(arrays if len(arrays) > 1 else arrays[0], training=False)
    return from_keras_outputs(out, channels_last_io, like)


def torch_outputs(module: torch.nn.Module, args: tuple):
    """``module(*args)`` on copies: a forward that writes to its inputs leaves ours intact."""
    with torch.no_grad():
        return module(*(a.clone() for a in args))


def leaves(out) -> list[np.ndarray]:
    return [t.detach().cpu().numpy() for t in pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor)]


def run_torch(module: torch.nn.Module, args: tuple) -> list[np.ndarray]:
    return leaves(torch_outputs(module, args))


def verify(module, exported, emitted, example_args: tuple, options) -> ParityReport:
    """Compare torch and Keras on the examples and ``options.check_inputs`` fresh inputs."""
    input_sets = [example_args] + [fresh_inputs(example_args, options.seed + 1 + i)
                                   for i in range(options.check_inputs)]
    errors = []
    for i, args in enumerate(input_sets):
        try:
            structure = torch_outputs(module, args)
        except Exception as exc:  # the user's model rejects the inputs: say which, in one line
            which = "example inputs" if i == 0 else f"fresh input set {i} (drawn like the example)"
            raise InputError(
                f"the torch module failed on the {which}: {type(exc).__name__}: {exc}. "
                "Give example inputs the model accepts (token ids below the vocabulary "
                "size, valid masks); fresh integer inputs are drawn within the example's "
                "range.") from exc
        ref = leaves(structure)
        got = run_keras(emitted.model, args, options.channels_last_io, like=structure)
        errors.append(max((normalized_error(r, g) for r, g in zip(ref, got)), default=0.0))
    worst = int(np.argmax(errors))
    report = ParityReport(max_error=errors[worst], errors=errors, atol=options.atol)
    if errors[worst] > options.atol:
        diagnose(report, module, exported, emitted, input_sets[worst], options)
    return report


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm):
        super().__init__(gm)
        self.values: dict[str, object] = {}

    def run_node(self, n):
        result = super().run_node(n)
        self.values[n.name] = result
        return result


def replay(exported, args: tuple, dtype: torch.dtype | None = None) -> dict[str, object]:
    """Every node's value when the exported graph runs on ``args`` (optionally in ``dtype``)."""
    signature = exported.graph_signature
    lifted = {**signature.inputs_to_parameters, **signature.inputs_to_buffers,
              **signature.inputs_to_lifted_tensor_constants}
    state = {**exported.state_dict, **exported.constants}
    user = iter(args)
    flat = []
    gm = exported.graph_module
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        value = state[lifted[node.name]] if node.name in lifted else next(user)
        if dtype is not None and isinstance(value, torch.Tensor) and value.is_floating_point():
            value = value.detach().to(dtype)
        flat.append(value)
    if dtype is not None:
        gm = copy.deepcopy(gm).to(dtype)
    recorder = _Recorder(gm)
    with torch.no_grad():
        recorder.run(*flat)
    return recorder.values


def _in_keras_layout(value: np.ndarray, layout: Layout) -> np.ndarray:
    if layout.flat is not None:
        order = flat_feature_order(layout.flat.block_shape, layout.flat.block_perm)
        return value[..., order]
    return np.transpose(value, layout.perm)


def diagnose(report: ParityReport, module, exported, emitted, args: tuple, options) -> None:
    """Fill ``report`` with the first diverging node and the fp64 verdict."""
    ref32 = replay(exported, args)
    ref64 = replay(exported, args, torch.float64)
    names = [n for n in emitted.node_values]
    debug = keras.Model(emitted.model.inputs, [emitted.node_values[n][0] for n in names])
    arrays = to_keras_inputs(args, options.channels_last_io)
    outs = debug(arrays if len(arrays) > 1 else arrays[0], training=False)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    nodes = {n.name: n for n in exported.graph_module.graph.nodes}
    for name, got in zip(names, outs):
        ref, ref_hi = ref32.get(name), ref64.get(name)
        if not isinstance(ref, torch.Tensor):
            continue
        layout = emitted.node_values[name][1]
        want = _in_keras_layout(ref.numpy(), layout)
        err = normalized_error(want, np.asarray(got))
        if err > options.atol:
            want64 = _in_keras_layout(ref_hi.numpy(), layout)
            keras_vs_64 = normalized_error(want64, np.asarray(got))
            torch_vs_64 = normalized_error(want64, want)
            node = nodes[name]
            report.first_divergent = NodeDivergence(
                node=name, op=str(node.target), module_path=module_path(node),
                source=source_line(node), error=err, keras_vs_fp64=keras_vs_64,
                torch_vs_fp64=torch_vs_64, verdict=rounding_verdict(keras_vs_64, torch_vs_64),
            )
            break
    _output_verdict(report, module, args, emitted, options)


def _output_verdict(report: ParityReport, module, args, emitted, options) -> None:
    module64 = copy.deepcopy(module).to(torch.float64)
    args64 = tuple(a.to(torch.float64) if a.is_floating_point() else a for a in args)
    ref64 = run_torch(module64, args64)
    structure = torch_outputs(module, args)
    ref32 = leaves(structure)
    got = run_keras(emitted.model, args, options.channels_last_io, like=structure)
    report.keras_vs_fp64 = max(normalized_error(r, g) for r, g in zip(ref64, got))
    report.torch_vs_fp64 = max(normalized_error(r, t) for r, t in zip(ref64, ref32))
    report.verdict = rounding_verdict(report.keras_vs_fp64, report.torch_vs_fp64)
