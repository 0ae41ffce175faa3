"""Capture a module with ``torch.export`` and decompose only what has no native converter."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import re
import traceback
from collections.abc import Collection, Iterator

import torch
from torch._subclasses.fake_tensor import UnsupportedOperatorException
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from crossport.capture.borrow import borrowed
from crossport.capture.cond import inline_cond
from crossport.capture.covariance import traceable_covariance
from crossport.capture.distributions import unvalidated_distributions
from crossport.capture.fake_quant import fixed_fake_quantize_switches
from crossport.capture.functional import as_functional
from crossport.capture.guards import refuse_unmet_conditions
from crossport.capture.packed import padded_packed_sequences
from crossport.capture.pad import opaque_dynamic_pads
from crossport.capture.recurrent import opaque_recurrent_ops
from crossport.capture.transformer import eager_transformers
from crossport.errors import CaptureError, CrossportError, DynamicDimError, InputError
from crossport.options import ConvertOptions

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_CROSSPORT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def normalize_example_args(example_args) -> tuple:
    """Accept one tensor or a tuple/list of tensors; anything else is an ``InputError``."""
    if isinstance(example_args, torch.Tensor):
        return (example_args,)
    if not isinstance(example_args, (tuple, list)):
        raise InputError(
            f"example_args must be a tensor or a tuple of tensors in forward's argument order, "
            f"got {type(example_args).__name__}. Example: crossport.convert(model, "
            f"(torch.randn(1, 3, 224, 224),))"
        )
    for i, arg in enumerate(example_args):
        if not isinstance(arg, torch.Tensor):
            raise InputError(
                f"example_args[{i}] is a {type(arg).__name__}, not a torch.Tensor; pass "
                f"example inputs as tensors (numpy arrays: torch.from_numpy(a))."
            )
        if 0 in arg.shape:
            raise InputError(
                f"example_args[{i}] has shape {tuple(arg.shape)}: a dim of size 0 holds no "
                f"values, so the parity check would be vacuous; give an example with every "
                f"dim at least 1 (use dynamic_batch / dynamic_dims for sizes that vary).")
    # torch.export cannot trace an inference tensor (torch.inference_mode()'s output): a
    # normal copy has the same values and leaves the caller's tensor as it was
    return tuple(arg.clone() if arg.is_inference() else arg for arg in example_args)


def unwrap_module(module):
    """The ``nn.Module`` to capture: ``torch.compile``'s wrapper gives its original (whose
    module paths are the layer names, not ``_orig_mod.*``); TorchScript, which
    ``torch.export`` cannot capture, is an ``InputError``."""
    compiled = getattr(getattr(torch, "_dynamo", None), "eval_frame", None)
    if compiled is not None and isinstance(module, compiled.OptimizedModule):
        return module._orig_mod
    if isinstance(module, torch.jit.ScriptModule):
        raise InputError(
            f"{type(module).__name__} is a TorchScript module (torch.jit.script/trace), "
            "which torch.export cannot capture: pass the nn.Module you scripted or traced")
    scripted = next((path for path, sub in module.named_modules()
                     if isinstance(sub, torch.jit.ScriptModule)), None) if isinstance(
        module, torch.nn.Module) else None
    if scripted is not None:  # torch.export failed inside it with an unrelated TypeError
        raise InputError(
            f"submodule {scripted!r} of {type(module).__name__} is a TorchScript module "
            "(torch.jit.script/trace), which torch.export cannot capture: build the model "
            "with the nn.Module you scripted or traced there")
    quantized = (_first_quantized_submodule(module)
                 if isinstance(module, torch.nn.Module) else None)  # else refused after
    if quantized is not None:
        path, kind = quantized
        raise InputError(
            f"{path or type(module).__name__} ({kind}) is an eager-mode quantized torch module "
            "(torch.ao.quantization), whose packed int8 weights torch.export cannot capture: "
            "convert the float model and quantize at export (crossport.export(..., "
            "format='tflite-int8' or 'tflite-int8-full'))")
    return module


def _check_forward_takes(module: torch.nn.Module, args: tuple) -> None:
    """The example inputs must bind to forward's positional parameters: a count that does
    not fit, or a keyword-only input, was a CaptureError pointing into ``inspect.py``."""
    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError):  # a builtin or C forward: torch.export will tell
        return
    try:
        signature.bind(*args)
    except TypeError as exc:
        params = ", ".join(str(p) for p in signature.parameters.values())
        raise InputError(
            f"{type(module).__name__}.forward({params}) cannot take the {len(args)} example "
            f"input(s) ({exc}): crossport passes example_args to forward in order, as "
            "positional arguments. Give one tensor per positional parameter (keyword-only "
            "ones: wrap the module in one whose forward takes them positionally).") from None


def _first_quantized_submodule(module: torch.nn.Module) -> tuple[str, str] | None:
    """The path and class of the first ``torch.ao.nn.quantized`` (dynamic or static)
    submodule, or None."""
    for path, sub in module.named_modules():
        if type(sub).__module__.startswith(("torch.ao.nn.quantized", "torch.nn.quantized")):
            return path, type(sub).__name__
    return None


def input_names(module: torch.nn.Module, count: int) -> list[str]:
    """Names of forward's first ``count`` positional parameters (``x``, ``input_ids``, ...)."""
    try:
        params = [
            p.name
            for p in inspect.signature(module.forward).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    names = params[:count]
    return names + [f"input_{i}" for i in range(len(names), count)]


def _dynamic_shapes(args: tuple, options: ConvertOptions, names: list[str] | None = None):
    """``torch.export`` dynamic shapes: batch dims and the user's named dims.

    ``options.dynamic_dims`` is keyed by input index or forward parameter name. Dims are
    ``Dim.DYNAMIC``: torch.export infers their ranges (``max_position_embeddings``) and
    equalities (a sequence length shared by ids and mask) instead of failing on them.
    """
    if not options.dynamic_batch and not options.dynamic_dims:
        return None
    requested = requested_dynamic_dims(args, options, names)
    return tuple({d: torch.export.Dim.DYNAMIC for d in sorted(requested.get(i, ()))} or None
                 for i in range(len(args)))


def requested_dynamic_dims(args: tuple, options: ConvertOptions,
                           names: list[str] | None = None) -> dict[int, set[int]]:
    """``{input index: dims}`` the user asked to be dynamic (``dynamic_batch``/``_dims``)."""
    by_index = _dynamic_dims_by_index(args, options, names or [])
    requested: dict[int, set[int]] = {}
    for i, arg in enumerate(args):
        dims = {0} if options.dynamic_batch and arg.ndim > 0 else set()
        _check_dims_exist(arg, by_index.get(i, {}), (names or [])[i:i + 1] or [i])
        dims |= {d % arg.ndim for d in by_index.get(i, {})}
        if dims:
            requested[i] = dims
    return requested


def _check_dims_exist(arg: torch.Tensor, dims, name: list) -> None:
    """A dim past the input's rank is the user's mistake, not a dim to wrap around to
    (dim 5 of a 2-D input was taken as dim 1; any dim of a 0-D input divided by zero)."""
    missing = [d for d in dims if not -arg.ndim <= d < arg.ndim]
    if missing:
        raise InputError(f"dynamic_dims: input {name[0]!r} has shape {tuple(arg.shape)} "
                         f"({arg.ndim} dims), so it has no dim {missing[0]} (dims count "
                         f"from 0; -1 is the last)")


def _dynamic_dims_by_index(args: tuple, options: ConvertOptions,
                           names: list[str]) -> dict[int, dict[int, str]]:
    """``options.dynamic_dims`` keyed by input index (it takes indices or forward names)."""
    unknown = [k for k in options.dynamic_dims
               if not (isinstance(k, int) and -len(args) <= k < len(args)) and k not in names]
    if unknown:
        raise InputError(f"dynamic_dims names unknown inputs {unknown}; the inputs are "
                         f"{names or list(range(len(args)))} (use an index or a name)")
    return {(names.index(k) if not isinstance(k, int) else k % len(args)): v
            for k, v in options.dynamic_dims.items()}


def requested_dim_groups(args: tuple, options: ConvertOptions,
                         names: list[str] | None = None) -> list[list[tuple[int, int]]]:
    """The requested dynamic dims as groups of ``(input index, dim)`` that are one size:
    dims sharing a name in ``dynamic_dims`` (a sequence length of ids and mask), and the
    batch dims of ``dynamic_batch``. A dim named nowhere else is a group of its own."""
    requested = requested_dynamic_dims(args, options, names)
    by_index = _dynamic_dims_by_index(args, options, names or [])
    groups: dict[object, list[tuple[int, int]]] = {}
    for i, dims in sorted(requested.items()):
        named = {d % args[i].ndim: name for d, name in by_index.get(i, {}).items()}
        for d in sorted(dims):
            if d in named:
                key = ("name", named[d])
            else:
                key = ("batch",) if d == 0 and options.dynamic_batch else ("dim", i, d)
            groups.setdefault(key, []).append((i, d))
    return list(groups.values())


def _match_signature(module: torch.nn.Module, shapes: tuple) -> tuple:
    """torch.export wants one entry per forward parameter: ``*args`` takes a tuple."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return shapes
    named = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_POSITIONAL for p in params) and len(shapes) > len(named):
        return shapes[:len(named)] + (shapes[len(named):],)
    return shapes


def _widen_unit_dynamic_dims(args: tuple, dynamic) -> tuple:
    """torch.export specialises size-1 dims; a dynamic dim needs an example of size >= 2."""
    widened = []
    for arg, spec in zip(args, dynamic):
        for d in (spec or {}):
            if arg.shape[d] == 1:
                arg = torch.cat([arg, arg], dim=d)
        widened.append(arg)
    return tuple(widened)


_SPECIALIZED = re.compile(r"You marked (\S+) as dynamic but your code specialized it to be "
                         r"a constant \(([^)]*)\)")


def _specialized(module: torch.nn.Module, exc: Exception) -> DynamicDimError:
    """torch.export's "Constraints violated": the model's code fixes dims asked to be
    dynamic (a reshape to a constant, a conv's channels); each dim with its fixed size."""
    from crossport.capture.guards import readable

    fixed = [(readable(dim), size) for dim, size in _SPECIALIZED.findall(str(exc))]
    listed = ", ".join(f"{dim} is always {size}" for dim, size in fixed)
    return DynamicDimError(
        f"{type(module).__name__}'s code fixes dim(s) asked to be dynamic: {listed} (torch."
        "export specialised them to the example's size: a constant size in a reshape or "
        "view, a layer's channels or features, or a size the model checks). Convert with "
        "those dims static (drop them from dynamic_dims / dynamic_batch), or make the model "
        "read the size from its input there (TORCH_LOGS=+dynamic shows the line torch "
        "fixed each at).",
        problems=[{"op": "size fixed by the model", "reason": f"always {size}", "where": dim}
                  for dim, size in fixed])


def _no_symbolic_kernel(module: torch.nn.Module, exc: Exception) -> DynamicDimError:
    """An ATen op with no meta kernel under dynamic dims: torch's fake tensors run such an
    op's real kernel at static sizes, and refuse it (``UnsupportedOperatorException``)
    when a size is symbolic (``aten.histogram.bin_ct``)."""
    op = exception_line(exc)
    return DynamicDimError(
        f"torch.export could not capture {type(module).__name__}{user_frame(exc)} with "
        f"dynamic dims: torch has no kernel that computes {op}'s result from run-time sizes "
        "(torch traces it at static sizes only). Convert with the dims of that op's inputs static (drop them from "
        "dynamic_dims / dynamic_batch).",
        problems=[{"op": op, "reason": "no symbolic-shape kernel in torch",
                   "where": user_frame(exc).strip()}])


def _widening_refused(module: torch.nn.Module, exc: Exception, given: tuple,
                      widened: tuple) -> DynamicDimError:
    """A size-1 dim asked to be dynamic, at 2, breaks the model (it broadcasts against
    another tensor, or is read as a single value): that dim cannot be dynamic. torch.export
    fixes a size of 1, so capture traces such a dim at 2; the model's failure there was
    reported as a failure on the user's own example inputs."""
    names = input_names(module, len(given))
    dims = [f"{names[i]} dim {d}" for i, (a, w) in enumerate(zip(given, widened))
            if isinstance(a, torch.Tensor) for d in range(a.ndim) if a.shape[d] != w.shape[d]]
    return DynamicDimError(
        f"{type(module).__name__} runs on the example inputs but raises "
        f"{type(exc).__name__} ({exception_line(exc)}{user_frame(exc)}) when the size-1 "
        f"dim(s) asked to be dynamic ({', '.join(dims)}) are 2, the size crossport traces "
        "them at (torch.export fixes a size of 1): the model needs them to be 1 (a dim "
        "that broadcasts against another tensor). Convert with those dims static (drop "
        "them from dynamic_dims / dynamic_batch), or give an example where they are "
        "at least 2 if the model takes other sizes there.",
        problems=[{"op": "size-1 dim", "reason": "the model needs it to be 1", "where": d}
                  for d in dims])


def _unaliased(args: tuple) -> tuple:
    """``args`` with every tensor that shares memory with an earlier one cloned.

    torch.export traces the Python code the example inputs take, and that code may test
    identity: ``nn.MultiheadAttention(q, k, v)`` takes its self-attention path when
    ``query is key is value``, reading ``v`` alone. ``(x, x, x)`` as the example would
    capture a graph that ignores two of the Keras model's three inputs, which the check
    then fails with fresh, distinct inputs. The Keras model's inputs are distinct, so
    the capture is made with distinct tensors of the same values.
    """
    seen, out = set(), []
    for arg in args:
        if isinstance(arg, torch.Tensor) and arg.numel():
            key = arg.untyped_storage().data_ptr()
            if key in seen:
                arg = arg.clone()
            seen.add(key)
        out.append(arg)
    return tuple(out)


# What eager torch computes, in a form torch.export can trace; each is undone on exit.
CAPTURE_PATCHES = (
    opaque_recurrent_ops,  # RNNs as one op each: a sequence length can stay dynamic
    padded_packed_sequences,  # packed sequences as padded batches and masked RNNs
    opaque_dynamic_pads,  # a circular pad's amounts can stay dynamic
    eager_transformers,  # nn.Transformer* as eager computes them
    unvalidated_distributions,  # distributions without their value checks
    traceable_covariance,  # cov/corrcoef without a branch on the degrees of freedom
)


@contextlib.contextmanager
def capture_patches(module: torch.nn.Module | None = None) -> Iterator[None]:
    """Within the block, every patch of :data:`CAPTURE_PATCHES` is on, and ``module``'s
    FakeQuantize switches are fixed as set (capture/fake_quant.py)."""
    with contextlib.ExitStack() as stack:
        for patch in CAPTURE_PATCHES:
            stack.enter_context(patch())
        if module is not None:
            stack.enter_context(fixed_fake_quantize_switches(module))
        yield


def capture(module: torch.nn.Module, args: tuple, options: ConvertOptions,
            keep_ops: Collection) -> torch.export.ExportedProgram:
    """Export ``module`` and decompose every op not in ``keep_ops`` to core ATen.

    ``keep_ops``: every call target with a converter. When the exported graph needs no
    decomposition (see ``capture/functional.py``), the re-trace is skipped.

    Raises:
        CaptureError: torch.export rejected the module; the message keeps torch's reason
            and points at the user's source line when torch names one.
    """
    if not isinstance(module, torch.nn.Module):
        raise InputError(f"expected a torch.nn.Module, got {type(module).__name__}")
    _check_forward_takes(module, args)
    args = _unaliased(args)
    dynamic = _dynamic_shapes(args, options, input_names(module, len(args)))
    given = args
    if dynamic is not None:
        args = _widen_unit_dynamic_dims(args, dynamic)
        dynamic = _match_signature(module, dynamic)
    try:  # eval semantics (dropout, BN); whatever forward writes on self is undone after
        # no grad, as the check runs torch: forward may branch on torch.is_grad_enabled()
        with borrowed(module), torch.no_grad(), capture_patches(module):
            exported = torch.export.export(
                module, args, dynamic_shapes=dynamic,
                strict=options.strict_export,
            )
    except CrossportError as exc:  # a capture patch's refusal: say where it was met
        exc.args = (f"{type(module).__name__}{user_frame(exc)}: {exc}", *exc.args[1:])
        raise
    except Exception as exc:  # torch raises many unrelated types here; all mean "no capture"
        if args is not given and _fails_eagerly(module, args) and not _fails_eagerly(
                module, given):
            raise _widening_refused(module, exc, given, args) from exc
        if _SPECIALIZED.search(str(exc)):
            raise _specialized(module, exc) from exc
        if isinstance(exc, UnsupportedOperatorException) and dynamic is not None and (
                exception_line(exc).startswith("aten.")):
            raise _no_symbolic_kernel(module, exc) from exc
        raise CaptureError(_capture_message(module, exc, args)) from exc
    exported = inline_cond(without_effect_tokens(exported))
    if dynamic is not None:
        names = input_names(module, len(args))
        refuse_unmet_conditions(module, exported, args, names,
                                requested_dim_groups(args, options, names))
    functional = as_functional(exported, keep_ops)
    if functional is not None:
        return drop_value_assertions(functional)
    table = torch.export.default_decompositions()
    for op in keep_ops:
        if op in table:
            del table[op]
    try:
        decomposed = exported.run_decompositions(table)
    except Exception as exc:
        raise CaptureError(f"decomposing the captured graph failed: {exc}") from exc
    # the re-trace threads the effect tokens again
    return drop_value_assertions(without_effect_tokens(decomposed))


def without_effect_tokens(exported: torch.export.ExportedProgram):
    """Side-effecting ops as plain calls, without the tokens that order them.

    torch.export threads an effect token through ops registered with side effects
    (``torch.linalg.inv``/``solve`` check LAPACK's error code with
    ``_linalg_check_errors``): a ``with_effects`` call, a token input and a token output,
    which a Keras model has no use for. torch's own pass rewrites them as the plain calls
    (they then reach their converters, or are refused by name).
    """
    if not any(n.target is torch.ops.higher_order.with_effects for n in exported.graph.nodes):
        return exported
    from torch.export._remove_effect_tokens_pass import _remove_effect_tokens

    return _remove_effect_tokens(exported)


_VALUE_READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default}


def drop_value_assertions(exported: torch.export.ExportedProgram):
    """Remove runtime assertions on tensor *values* and what only they compute.

    ``assert lengths.max().item() <= slen`` (XLM, FlauBERT) is captured as ``max`` ->
    ``_local_scalar_dense`` -> ``le`` -> ``_assert_scalar``: input validation that changes
    no output, like ``_assert_async`` (already dropped by its converter), but the scalar
    read in between has no Keras twin and would refuse the model. Assertions on sizes
    only stay in the graph (the dynamic-dim guards read them).
    """
    graph = exported.graph
    asserts = [n for n in graph.nodes if n.target is torch.ops.aten._assert_scalar.default
               and _reads_a_value(n)]
    if not asserts:
        return exported
    for node in asserts:
        graph.erase_node(node)
    graph.eliminate_dead_code()
    exported.graph_module.recompile()
    return exported


def _reads_a_value(node) -> bool:
    """Whether the scalar ``node`` asserts on comes from a tensor's value (not a size)."""
    stack, seen = [a for a in node.args if isinstance(a, torch.fx.Node)], set()
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        if current.target in _VALUE_READS:
            return True
        if isinstance(current.meta.get("val"), torch.Tensor) or current.op != "call_function":
            continue  # a tensor or an input: not a scalar chain
        stack.extend(a for a in current.args if isinstance(a, torch.fx.Node))
    return False


def dataclass_fields(value):
    """A registered dataclass output as the dict of its fields (Keras takes no dataclass);
    anything else, a ModelOutput (already a dict) included, unchanged."""
    if (dataclasses.is_dataclass(value) and not isinstance(value, type)
            and not isinstance(value, dict)):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return value


_UNKNOWN_OUTPUT_TYPE = re.compile(r"Found <class '([\w.]+)'> in output, which is not a known type")
_DATA_DEPENDENT = ("data-dependent", "data dependent", "dynamic control flow")


def _capture_message(module: torch.nn.Module, exc: Exception, args: tuple = ()) -> str:
    """What torch.export's failure means: data-dependent control flow, a dim that cannot
    be dynamic, or an error of the module itself (it fails on the example inputs)."""
    first_line = exception_line(exc)
    where = user_frame(exc)
    name = type(module).__name__
    if "Constraints violated" in first_line:  # a form _specialized does not read
        hint = ("a dim marked dynamic is fixed by the model (or equal to another dim): "
                "convert with that dim static, or make the model shape-generic there.")
    elif isinstance(exc, GuardOnDataDependentSymNode) or any(
            marker in str(exc).lower() for marker in _DATA_DEPENDENT):
        hint = ("crossport converts what torch.export captures: data-dependent Python "
                "control flow (an `if` or loop on tensor values) must become torch.cond / "
                "tensor ops, or be moved out of forward." + _eager_experts_hint(module))
    elif (unknown := _UNKNOWN_OUTPUT_TYPE.search(first_line)) is not None:
        kind = unknown.group(1).rsplit(".", 1)[-1]
        hint = (f"forward returns a {kind}, which torch.export cannot flatten: return a "
                f"tensor, tuple, list or dict of tensors, or register the class first "
                f"(torch.export.register_dataclass({kind}) for a dataclass, "
                "torch.utils._pytree.register_pytree_node otherwise).")
        if unknown.group(1).startswith("transformers.") and kind.endswith("Cache"):
            hint = (f"forward returns its KV cache (a {kind}; transformers models do when "
                    "config.use_cache is on): convert with the cache off (set "
                    "model.config.use_cache = False), or export a causal LM with its KV "
                    "cache for generation through crossport.generative.export.")
    elif args and _fails_eagerly(module, args):
        return (f"{name} raised {type(exc).__name__}: {first_line}{where} when run on the "
                "example inputs (it fails without crossport too): give example inputs of "
                "the shapes and dtypes forward expects, or fix the module.")
    else:
        hint = ("torch.export cannot trace this code although the module runs on the example "
                "inputs: see the torch.export documentation for the construct at that line, "
                "or move it out of forward.")
    return (f"torch.export could not capture {name}{where}: {type(exc).__name__}: "
            f"{first_line}\n{hint}")


def exception_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def user_frame(exc: Exception) -> str:
    """`` at file:line (source)`` of the innermost user frame of ``exc``'s traceback."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not _is_library_frame(f.filename)]
    return f" at {frames[-1].filename}:{frames[-1].lineno} ({frames[-1].line})" if frames else ""


def _eager_experts_hint(module: torch.nn.Module) -> str:
    """transformers' experts modules (``use_experts_implementation``) on their eager path
    loop over the experts the data hits; the grouped_mm and batched_mm paths convert."""
    for sub in module.modules():
        config = getattr(sub, "config", None)
        if hasattr(sub, "_is_expert_parallel") and getattr(
                config, "_experts_implementation", None) == "eager":
            return (f" {type(sub).__name__} runs transformers' eager experts loop (a loop "
                    "over the experts the tokens hit): build the model with "
                    "experts_implementation='grouped_mm' (the default of most families) or "
                    "'batched_mm' in its config, which convert.")
    return ""


def _is_library_frame(filename: str) -> bool:
    if filename.startswith(("<string>", "<eval_with_key")):  # code torch generates
        return True
    path = os.path.abspath(filename)
    return path.startswith(_TORCH_DIR) or path.startswith(_CROSSPORT_DIR)


def _fails_eagerly(module: torch.nn.Module, args: tuple) -> bool:
    """Whether ``module`` raises on (copies of) ``args`` without torch.export."""
    try:
        with torch.no_grad():
            module(*(a.clone() for a in args))
    except Exception:  # any failure of the user's own forward counts
        return True
    return False
