"""Walk the exported fx graph and build the Keras functional model.

For every node the emitter looks up the converter, lays out the tensor arguments as the
converter's policy asks (the layout pass lives in ``crossport.layout`` and here), binds
the arguments to the ATen schema by name and records what the converter returns.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import keras
import numpy as np
import torch
from torch.export.graph_signature import OutputKind
from torch.utils import _pytree as pytree

from crossport.capture import describe
from crossport.errors import ConversionError, CrossportError, DynamicDimError, UnsupportedOpError
from crossport.layout import Layout, canonical, channels_last, io_layout, keras_kernel
from crossport.layout.assign import preferred_channels_last
from crossport.options import ConvertOptions
from crossport.to_keras.complex_nodes import (
    complex_io_problems,
    complex_refusal,
    converter_for,
    reads_or_makes_complex,
)
from crossport.to_keras.context import LayerNames, NodeContext
from crossport.to_keras.dynamic_dims import input_symbols, is_dynamic_size
from crossport.to_keras.fold import as_numpy, evaluate, input_dependent, mark_constants
from crossport.to_keras.origins import operation_origins
from crossport.to_keras.outputs import (
    held_constant,
    not_a_tensor_output,
    unflatten_plain,
    writes_back_unchanged,
)
from crossport.to_keras.refusal_reasons import no_converter, with_way_out
from crossport.to_keras.registry import (
    Policy,
    bind_arguments,
    passes_layout,
    wants_channels_last,
)
from crossport.to_keras.sizes import RuntimeSizes
from crossport.to_keras.values import (
    ComplexParts,
    ComplexValue,
    TensorValue,
    Transposes,
    complex_parts,
    constant_in_layout,
    is_symbolic,
    keras_dtype,
    unsupported_dtype,
)


def parameter_dtype(exported: torch.export.ExportedProgram) -> str:
    """The float dtype the module's layers compute in: float16 or float64 when every
    floating parameter has it (``module.half()``, ``module.double()``), else float32."""
    dtypes = {p.dtype for p in exported.parameters() if p.is_floating_point()}
    if not dtypes:  # no float weights (F.leaky_relu of a float64 input): the inputs' dtype
        dtypes = {value.dtype for value in _user_input_values(exported)
                  if value.is_floating_point()}
    if len(dtypes) == 1 and dtypes <= {torch.float16, torch.float64}:
        return keras_dtype(dtypes.pop())
    return "float32"


def _user_input_values(exported: torch.export.ExportedProgram) -> list[torch.Tensor]:
    user = {spec.arg.name for spec in exported.graph_signature.input_specs
            if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT}
    return [node.meta["val"] for node in exported.graph.nodes
            if node.op == "placeholder" and node.name in user
            and isinstance(node.meta.get("val"), torch.Tensor)]


@contextmanager
def layer_dtype(name: str) -> Iterator[None]:
    """Keras layers created inside compute and keep weights in ``name``.

    Keras casts a layer's float inputs to its compute dtype, float32 by default: a
    ``module.double()`` Linear became a float32 Dense (and the check failed on the output
    dtype). The global policy is what every layer reads at construction, converters'
    own layers included; it is restored afterwards.
    """
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


@dataclass
class EmittedModel:
    """The Keras model plus what the parity check needs to compare node by node."""

    model: keras.Model
    node_values: dict[str, tuple[object, Layout]] = field(default_factory=dict)
    input_names: list[str] = field(default_factory=list)
    transposes: int = 0          # all transposes in the model
    boundary_transposes: int = 0  # those at the model's inputs and outputs
    origins: dict = field(default_factory=dict)  # Keras operation -> origins.Origin


class Emitter:
    def __init__(self, exported: torch.export.ExportedProgram, names: list[str],
                 options: ConvertOptions):
        self.ep = exported
        self.graph = exported.graph_module.graph
        self.options = options
        self.input_names = names
        self.values: dict[torch.fx.Node, object] = {}
        self.names = LayerNames()
        self.transposes = Transposes(self.names.unique)
        self.boundary = 0
        self.constants: dict = {}
        self.sizes = RuntimeSizes()
        self.folded: set | None = None  # set by preflight()
        self.prefer_cl = preferred_channels_last(
            self.graph, wants_channels_last, passes_layout
        )

    # -- entry point ----------------------------------------------------------------------
    def preflight(self) -> None:
        """Fold constants and refuse, before building anything, every node without a
        faithful converter or dynamic-size support (one error listing them all)."""
        if self.folded is not None:
            return
        self.folded = mark_constants(self.ep)
        self.dependent = input_dependent(self.ep)
        check_supported(self.graph, skip=self.folded, user_inputs=self._user_placeholders())
        check_dynamic(self.graph, skip=self.folded,
                      symbols=input_symbols(self.ep, self.input_names))

    def emit(self) -> EmittedModel:
        with layer_dtype(parameter_dtype(self.ep)):
            return self._emit()

    def _emit(self) -> EmittedModel:
        self.preflight()
        inputs = self._inputs()
        for node in self.graph.nodes:
            with converting(node):
                if node in self.folded:
                    self.values[node] = evaluate(node, self.values)
                elif node.op == "call_function":
                    self.values[node] = self._call(node)
                elif node.op == "get_attr":
                    self.values[node] = as_numpy(getattr(self.ep.graph_module, node.target))
        with converting(next(n for n in self.graph.nodes if n.op == "output")):
            outputs = self._outputs()
            model = keras.Model(inputs=inputs if len(inputs) > 1 else inputs[0],
                                outputs=outputs)
        node_values = {  # a complex value as its ComplexValue (the check reads its parts)
            n.name: (v.tensor if isinstance(v, TensorValue) else v, v.layout)
            for n, v in self.values.items()
            if isinstance(v, (TensorValue, ComplexValue)) and n.op != "placeholder"
        }
        origins = operation_origins(self.graph, self.values, list(model.outputs))
        return EmittedModel(model, node_values, self.input_names, self.transposes.count,
                            self.boundary, origins)

    # -- inputs, parameters, outputs --------------------------------------------------------
    def _user_placeholders(self) -> set[str]:
        """The placeholder names of forward's tensor arguments (not parameters/buffers)."""
        return set(self.ep.graph_signature.user_inputs)

    def _inputs(self) -> list:
        signature = self.ep.graph_signature
        lifted = {**signature.inputs_to_parameters, **signature.inputs_to_buffers,
                  **signature.inputs_to_lifted_tensor_constants}
        state = {**self.ep.state_dict, **self.ep.constants}
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        keras_inputs = []
        user = iter(self.input_names)
        for node in placeholders:
            if node.name in lifted:
                self.values[node] = as_numpy(state[lifted[node.name]])
            elif isinstance(node.meta.get("val"), torch.Tensor):
                keras_input, value = self._user_input(node, next(user))
                keras_inputs.append(keras_input)
                self.values[node] = value
            else:
                raise UnsupportedOpError(
                    f"forward argument {node.name!r} is not a tensor; crossport converts "
                    "tensor inputs only (bake Python values into the module)."
                )
        self.constants["__anchor__"] = keras_inputs[0]
        return keras_inputs

    def _user_input(self, node: torch.fx.Node, name: str):
        val = node.meta["val"]
        shape = tuple(val.shape)
        rank = len(shape)
        fixed = [d for d, size in enumerate(shape)
                 if is_symbolic(size) and not is_dynamic_size(size)]
        if fixed:  # a None input dim must be dynamic in every converter's view
            raise DynamicDimError(
                f"dim(s) {fixed} of input {name!r} were dynamic when captured but became fixed "
                "sizes while the ops were checked (a converter's check read the size as a "
                "number, which makes torch specialise it): a crossport bug, please report it; "
                "meanwhile convert with those dims static")
        held = io_layout(rank, self.options.channels_last_io)
        keras_shape = [None if is_symbolic(shape[p]) else int(shape[p]) for p in held.perm]
        # a 0-dim tensor is a 0-dim input: Input(shape=()) would add a batch dim (None,)
        keras_input = keras.Input(batch_shape=tuple(keras_shape), name=name,
                                  dtype=keras_dtype(val.dtype))
        self.names.reserve(name)  # a layer of the same name (input `t`, module `t`) clashes
        for axis, p in enumerate(held.perm):
            if is_symbolic(shape[p]) and shape[p].node.expr.is_Symbol:
                self.sizes.bind(shape[p].node.expr, keras_input, axis)
        value = TensorValue(keras_input, held, shape, val.dtype)
        want = channels_last(rank) if node in self.prefer_cl else canonical(rank)
        if want != held:
            before = self.transposes.count
            value = TensorValue(self.transposes.to_layout(value, want), want, shape, val.dtype)
            self.boundary += self.transposes.count - before
        return keras_input, value

    def _outputs(self):
        """The user outputs in the requested layout. A mutated input is not an output (the
        caller's arrays stay as they are); a mutated buffer or parameter is state the
        stateless Keras model cannot keep: refused."""
        out_node = next(n for n in self.graph.nodes if n.op == "output")
        flat = []
        for spec, arg in zip(self.ep.graph_signature.output_specs, out_node.args[0]):
            if spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.PARAMETER_MUTATION):
                if writes_back_unchanged(self.ep, spec.target, self.values.get(arg)):
                    continue  # a QAT observer switched off copies its statistics back
                raise UnsupportedOpError(
                    f"forward updates {spec.target!r} in place "
                    f"{describe(arg) if isinstance(arg, torch.fx.Node) else ''}: a buffer or "
                    "parameter changed by forward is state across calls, which a Keras "
                    "functional model does not keep. Compute the new value without writing "
                    "it to the module (or return it as an output).")
            if spec.kind is not OutputKind.USER_OUTPUT:
                continue
            value = self.values.get(arg) if isinstance(arg, torch.fx.Node) else arg
            if isinstance(arg, torch.fx.Node) and held_constant(value) is not None:
                # a converter computed it from constants alone (matrix_power(x, 0) is eye)
                value = held_constant(value)
            if isinstance(value, np.ndarray) and isinstance(arg, torch.fx.Node):
                value = self._constant_output(arg, value)  # a buffer, or folded from one
            if not isinstance(value, TensorValue):
                raise UnsupportedOpError(not_a_tensor_output(len(flat), arg, value))
            rank = value.rank
            want = io_layout(rank, self.options.channels_last_io)
            before = self.transposes.count
            flat.append(self.transposes.to_layout(value, want))
            self.boundary += self.transposes.count - before
        if not flat:  # Keras cannot build a model without outputs
            raise UnsupportedOpError(
                "forward returns no tensors (an empty tuple, list or dict); a Keras model "
                "needs at least one output. Return the tensors the model computes.")
        return unflatten_plain(flat, self.ep.call_spec.out_spec)

    def _constant_output(self, node: torch.fx.Node, array: np.ndarray) -> TensorValue:
        from crossport.layers import Constant

        tensor = Constant(array, name=self.names.unique(f"{node.name}_output"))(
            self.constants["__anchor__"])
        val = node.meta["val"]
        return TensorValue(tensor, canonical(array.ndim), tuple(val.shape), val.dtype)

    # -- one op ---------------------------------------------------------------------------
    def _call(self, node: torch.fx.Node):
        if node.target is operator.getitem:
            container, index = node.args
            return self.values[container][index]
        converter = converter_for(node)
        for observe in _CONVERTER_OBSERVERS:
            observe(converter)
        if not hasattr(node.target, "_schema"):  # Python callables (SymInt arithmetic)
            args = [self._resolve(a) for a in node.args]
            ctx = NodeContext(node, self.names, self.transposes, self.constants, self.sizes)
            return converter.fn(ctx, *args)
        arguments = bind_arguments(node)
        resolved = {k: self._resolve(v) for k, v in arguments.items()}
        ctx = NodeContext(node, self.names, self.transposes, self.constants, self.sizes)
        if converter.policy is Policy.AGNOSTIC:  # sizes used as numbers: run-time scalars
            resolved = {k: _runtime_scalar(ctx, v, node) for k, v in resolved.items()}
        dependent = {k for k, v in arguments.items()
                     if isinstance(v, torch.fx.Node) and v in self.dependent}
        default_layout = self._apply_policy(converter.policy, node, resolved, dependent)
        result = converter.fn(ctx, **resolved)
        layout = ctx.out_layout if ctx.out_layout is not None else default_layout
        return _wrap(result, node.meta.get("val"), layout)

    def _resolve(self, arg):
        if isinstance(arg, torch.fx.Node):
            return self.values[arg]
        if isinstance(arg, (list, tuple)):
            return type(arg)(self._resolve(a) for a in arg)
        return arg

    def _apply_policy(self, policy: Policy, node, resolved: dict, dependent=frozenset()):
        """Lay out the tensor arguments in place; returns the output's default layout.

        ``dependent``: the arguments whose values depend on a user input's values.
        """
        if policy is Policy.CUSTOM:
            return None
        tensors = [(k, v) for k, v in resolved.items()
                   if isinstance(v, (TensorValue, ComplexValue))]
        if policy is Policy.CHANNELS_LAST:
            for key, value in tensors:
                # a conv weight computed in the graph: straight to Keras' kernel layout
                target = (keras_kernel(value.rank) if key == "weight" and value.rank >= 3
                          else channels_last(value.rank))
                resolved[key] = self.transposes.to_layout(value, target)
            _constant_input_channels_last(resolved)
            return "channels_last"
        if policy is Policy.CANONICAL:
            for key, value in tensors:
                resolved[key] = self._laid_out(value, canonical(value.rank))
            for key, value in resolved.items():
                if isinstance(value, (list, tuple)):
                    resolved[key] = type(value)(
                        self.transposes.to_layout(v, canonical(v.rank))
                        if isinstance(v, TensorValue) else v for v in value)
            return "canonical"
        return self._harmonise(resolved, tensors, node, dependent)

    def _harmonise(self, resolved: dict, tensors, node, dependent=frozenset()) -> Layout | str:
        """AGNOSTIC: every tensor and constant argument in the layout of the widest tensor
        whose values depend on a user input (else of the widest tensor).

        Transposing the input-independent operands instead is free (TF folds them) and
        keeps a transposed activation from meeting a constant in a Sub or Div: TF's TFLite
        converter (push-transpose-through-ewise, TF 2.21) rewrites ``ewise(c, transpose(x))``
        as ``transpose(ewise(x, c'))``, swapping the operands, so ``c - T(x)`` became
        ``T(x - c')`` and ``c / T(x)`` became ``T(x / c')`` (YOLO's anchor decode).
        """
        out_rank = len(node.meta["val"].shape)
        if not tensors:
            return "canonical"
        lead = max((v for k, v in tensors if k in dependent),
                   key=lambda v: v.rank, default=None)
        lead = lead or max((v for _k, v in tensors), key=lambda v: v.rank)
        target = lead.layout if lead.rank == out_rank else _padded(lead.layout, out_rank)
        if target.flat is not None and any(v.layout != target for _k, v in tensors):
            # features in block order meet a tensor in torch order: back to torch order
            target = canonical(out_rank)
        for key, value in list(resolved.items()):
            if isinstance(value, ComplexValue):  # both parts, the same way
                resolved[key] = ComplexParts(
                    self._broadcast_to_layout(value.real, target, out_rank),
                    self._broadcast_to_layout(value.imag, target, out_rank))
            elif isinstance(value, TensorValue):
                resolved[key] = self._broadcast_to_layout(value, target, out_rank)
            elif isinstance(value, np.ndarray) and np.iscomplexobj(value):
                parts = complex_parts(value)
                resolved[key] = ComplexParts(constant_in_layout(parts.real, target, out_rank),
                                             constant_in_layout(parts.imag, target, out_rank))
            elif isinstance(value, np.ndarray):
                resolved[key] = constant_in_layout(value, target, out_rank)
        return target

    def _laid_out(self, value, target: Layout):
        """A tensor's Keras tensor in ``target``; a complex value's parts, both moved."""
        if isinstance(value, ComplexValue):
            return ComplexParts(self.transposes.to_layout(value.real, target),
                                self.transposes.to_layout(value.imag, target))
        return self.transposes.to_layout(value, target)

    def _broadcast_to_layout(self, value: TensorValue, target: Layout, rank: int):
        if value.layout == target:
            return value.tensor
        if value.rank < rank:  # torch broadcasting pads leading dims, in the held layout
            held = value.layout if value.layout.flat is None else canonical(value.rank)
            x = self.transposes.to_layout(value, held)
            for _ in range(rank - value.rank):
                x = keras.ops.expand_dims(x, 0)
            value = TensorValue(x, _padded(held, rank), (1,) * (rank - value.rank)
                                + tuple(value.shape), value.dtype)
        return self.transposes.to_layout(value, target)


def _padded(layout: Layout, rank: int) -> Layout:
    """``layout`` after torch broadcasting pads leading size-1 dims up to ``rank``."""
    if layout.flat is not None:
        return canonical(rank)
    lead = rank - layout.rank
    return Layout((*range(lead), *(lead + p for p in layout.perm)))


_CONVERTER_OBSERVERS: list = []


@contextmanager
def converters_ran() -> Iterator[Counter]:
    """Count, by function name, the converters that run inside the block.

    Example:
        >>> import torch, crossport
        >>> from crossport.to_keras.emit import converters_ran
        >>> with converters_ran() as ran:
        ...     _ = crossport.convert(torch.nn.Linear(3, 2).eval(), (torch.randn(1, 3),))
        >>> ran["aten_linear_default"]
        1
    """
    seen: Counter = Counter()
    observer = lambda converter: seen.update([converter.fn.__name__])
    _CONVERTER_OBSERVERS.append(observer)
    try:
        yield seen
    finally:
        _CONVERTER_OBSERVERS.remove(observer)


@contextmanager
def converting(node: torch.fx.Node) -> Iterator[None]:
    """Re-raise any exception but a ``CrossportError`` as a ``ConversionError`` naming the
    node, its op, module path and source line (as ``torch.fx.Interpreter.run_node`` does)."""
    try:
        yield
    except CrossportError:
        raise
    except Exception as exc:  # a converter's own failure: any type, wrapped once here
        raise conversion_error(node, exc) from exc


def conversion_error(node: torch.fx.Node, exc: Exception) -> ConversionError:
    op = str(node.target) if node.op == "call_function" else node.op
    converter = converter_for(node) if node.op == "call_function" else None
    by = f" by {converter.fn.__name__}" if converter is not None else ""
    detail = " ".join(str(exc).split())
    if len(detail) > 300:
        detail = detail[:300] + " ..."
    return ConversionError(
        f"converting node {node.name!r} ({op}){by} {describe(node)} failed: "
        f"{type(exc).__name__}: {detail}. This is a case crossport's converter does not "
        "handle: please report it with this message (crossport.register(..., "
        "override=True) can replace the converter meanwhile).",
        node=node.name, op=op)


def _constant_input_channels_last(resolved: dict) -> None:
    """A constant as the data input (the first argument) of a channels-last op: held
    channels-last like any tensor input. It reaches the converter only when the op also
    reads a run-time size (a position table resized to the image's size); otherwise the
    whole op is folded. Later constant arguments (weights) keep torch's layout."""
    first = next(iter(resolved), None)
    value = resolved.get(first)
    if isinstance(value, np.ndarray) and value.ndim >= 3:
        resolved[first] = np.ascontiguousarray(
            np.transpose(value, channels_last(value.ndim).perm))


def _runtime_scalar(ctx: NodeContext, value, node: torch.fx.Node):
    """A symbolic size in arithmetic with tensors: its Keras scalar, in the tensors' dtype
    (comparisons give bool; the size is compared as a number of the tensor's type)."""
    if not isinstance(value, (torch.SymInt, torch.SymFloat)) or not ctx.is_dynamic(value):
        return value
    tensors = [a.meta["val"] for a in node.all_input_nodes
               if isinstance(a.meta.get("val"), torch.Tensor)]
    dtype = tensors[0].dtype if tensors else node.meta["val"].dtype
    if dtype == torch.bool:
        dtype = torch.int64
    return keras.ops.cast(ctx.size(value), keras_dtype(dtype))


def _wrap(result, val, layout):
    """Converter output -> TensorValue(s) with torch shapes from the node's fake value; the
    parts of a complex result -> a ComplexValue (each part real, in one layout)."""
    if isinstance(result, (tuple, list)):
        layouts = layout if isinstance(layout, (tuple, list)) else [layout] * len(result)
        return tuple(_wrap(r, v, lay) for r, v, lay in zip(result, val, layouts))
    if result is None or isinstance(result, np.ndarray) or not isinstance(val, torch.Tensor):
        return result  # numpy: a constant the converter computed
    shape = tuple(val.shape)
    if layout == "channels_last":
        layout = channels_last(len(shape))
    elif layout == "canonical" or layout is None:
        layout = canonical(len(shape))
    if isinstance(result, ComplexParts) and val.is_complex():
        real = val.dtype.to_real()
        return ComplexValue(TensorValue(result.real, layout, shape, real),
                            TensorValue(result.imag, layout, shape, real))
    return TensorValue(result, layout, shape, val.dtype)


def _converted_nodes(graph: torch.fx.Graph, skip):
    for node in graph.nodes:
        if node.op == "call_function" and node.target is not operator.getitem and node not in skip:
            yield node


def _listing(problems: dict) -> list[str]:
    lines = []
    for (op, reason), places in problems.items():
        lines.append(f"  {op} x{len(places)}: {reason}")
        lines.extend(f"      {p}" for p in places[:5])
        if len(places) > 5:
            lines.append(f"      ... and {len(places) - 5} more")
    return lines


def check_dynamic(graph: torch.fx.Graph, skip=frozenset(), symbols: dict | None = None) -> None:
    """Refuse, before building, every node whose converter cannot compute its dynamic sizes.

    Each converter declares the dynamic dims it handles (``register(dynamic=...)``); a
    ``None`` dim in the Keras model must be right at every size, so anything else is one
    ``DynamicDimError`` listing all such ops with the dim, module path and source line.
    """
    problems: dict[tuple[str, str], list[str]] = {}
    for node in _converted_nodes(graph, skip):
        converter = converter_for(node)
        reason = converter.dynamic_reason(node) if converter is not None else None
        if reason:
            problems.setdefault((str(node.target), reason), []).append(describe(node))
    if not problems:
        return
    named = ", ".join(f"{s} = {where}" for s, where in (symbols or {}).items())
    raise DynamicDimError(
        f"{len(problems)} op(s) cannot compute their result at every size of a dynamic "
        "dim; nothing was converted:\n" + "\n".join(_listing(problems))
        + (f"\nDynamic sizes: {named}." if named else "")
        + "\nConvert with those dims static (drop them from dynamic_dims / dynamic_batch, "
        "or --dynamic-dim on the command line), or change the model there.",
        problems=[{"op": op, "reason": r, "where": w} for (op, r), w in problems.items()],
    )
def _dtype_reason(node: torch.fx.Node, complex_ok: bool = False) -> str | None:
    vals = pytree.tree_leaves(node.meta.get("val"))
    reasons = [unsupported_dtype(v.dtype) for v in vals if isinstance(v, torch.Tensor)
               and not (complex_ok and v.dtype.is_complex)]
    return next((r for r in reasons if r), None)


def check_supported(graph: torch.fx.Graph, skip=frozenset(), user_inputs=None) -> None:
    """The pre-flight check: one error listing every unsupported op, count and locations.

    Nodes in ``skip`` (folded to constants at conversion time) need no converter.
    ``user_inputs``: the placeholder names of forward's arguments (None: every placeholder);
    a complex parameter or buffer is a constant like any other, a complex input is refused.
    """
    user_inputs = ({n.name for n in graph.nodes if n.op == "placeholder"}
                   if user_inputs is None else set(user_inputs))
    problems = complex_io_problems(graph, user_inputs)
    for node in graph.nodes:
        if node.op == "placeholder" and (reason := _dtype_reason(node, complex_ok=True)):
            problems.setdefault((f"input {node.name}", reason), []).append("forward argument")
        if node.op != "call_function" or node.target is operator.getitem or node in skip:
            continue
        converter = converter_for(node)
        touches_complex = reads_or_makes_complex(node)
        if converter is None:
            reason = complex_refusal(node) if touches_complex else no_converter(node)
        else:
            reason = converter.unsupported_reason(node)
            reason = reason and with_way_out(node, reason)
        reason = reason or _dtype_reason(node, complex_ok=touches_complex)
        if reason:
            problems.setdefault((str(node.target), reason), []).append(describe(node))
    if problems:
        raise UnsupportedOpError(
            f"{len(problems)} unsupported op(s); nothing was converted:\n"
            + "\n".join(_listing(problems))
            + "\nSee `crossport ops` for the supported table, or register a converter with "
            "crossport.register(...).",
            problems=[{"op": op, "reason": r, "where": w} for (op, r), w in problems.items()],
        )
