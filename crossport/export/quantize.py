"""Full-integer TFLite (int8 or int16x8 activations, int8 per-channel weights).

The TF converter calibrates activation ranges on the user's examples; for int8,
``tf.lite.experimental.QuantizationDebugger`` then quantizes (keeping ``float_layers`` in
float through its denylisted nodes) and measures, op by op, the error each quantized op
introduces by itself: the float op runs on the same (dequantized) inputs beside it.
TFLite tensor names carry the Keras layer names (``functional/layer3.0.conv1_1/...``), and
crossport names Keras layers after torch module paths, so each row is mapped back to one.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from crossport.compat import quiet_tflite_interpreter
from crossport.errors import CrossportError, ExportError, InputError
from crossport.export import formats
from crossport.export.images import ImageFolder
from crossport.export.quant_report import (
    QuantizationReport,
    QuantizedLayer,
    layer_error,
    torch_path,
)
from crossport.to_keras.origins import SCOPE, named_scopes

FULL_INTEGER = {"tflite-int8-full": "int8", "tflite-int16x8": "int16x8"}
# Whole-model acceptance: output SQNR (dB) vs torch fp32 on the calibration examples.
MIN_SQNR_DB = {"tflite-int8-full": 15.0, "tflite-int16x8": 30.0}
# The per-op metrics run float and quantized ops side by side on TF's reference kernels:
# a few examples measure them well and keep the export quick.
REPORT_EXAMPLES = 4
# The SQNR re-check holds its examples out of calibration from this many times as many on.
HOLD_OUT_FACTOR = 10


@dataclass
class FullIntegerPlan:
    """What a full-integer export needs besides the model."""

    format: str
    samples: list[list[np.ndarray]]  # Keras input arrays, one list per example
    torch_samples: list[tuple]  # the same examples as forward's arguments
    input_names: list[str]
    int8_io: bool = False
    float_layers: tuple[str, ...] = ()
    held_out: int = 0  # the last examples, kept out of calibration for the re-check

    @property
    def activations(self) -> str:
        return FULL_INTEGER[self.format]

    @property
    def calibration(self) -> list[list[np.ndarray]]:
        """The examples the converter calibrates on (all but the held-out ones)."""
        return self.samples[:len(self.samples) - self.held_out]

    def hold_out(self, count: int) -> None:
        """Keep the last ``count`` examples out of calibration when at least
        ``HOLD_OUT_FACTOR`` times as many are given: the re-check then measures data the
        activation ranges were not fitted to. Checked in-sample, SQNR read ~10 dB high on
        fresh data of the same kind (timm resnet18 at 64x64, int16x8: 39.5 dB on its 8
        examples, 27.0 on new ones). Smaller sets (tests, demos) keep every example for
        calibration and the report says the check was in-sample."""
        self.held_out = count if len(self.samples) >= HOLD_OUT_FACTOR * count else 0


def plan(conversion, format: str, calibration, int8_io: bool,
         float_layers: Iterable[str]) -> FullIntegerPlan | None:
    """Validate the quantization arguments; ``None`` for formats that take none."""
    if isinstance(float_layers, str):  # one module path, not its characters
        float_layers = (float_layers,)
    float_layers = tuple(float_layers or ())
    if not all(isinstance(name, str) for name in float_layers):
        raise InputError(f"float_layers takes torch module paths (strings, e.g. "
                         f"['layer4.1.conv2']), not {list(float_layers)!r}")
    if format not in FULL_INTEGER:
        given = [n for n, v in (("calibration", calibration is not None),
                                ("int8_io", int8_io), ("float_layers", float_layers)) if v]
        if given:
            raise InputError(f"{', '.join(given)} only apply to the full-integer formats "
                             f"{sorted(FULL_INTEGER)}, not {format!r}")
        return None
    if calibration is None:
        raise InputError(f"format {format!r} needs calibration=: an iterable of example "
                         "inputs (tuples of arrays, or arrays) in the conversion's input "
                         "layout, or crossport.calibration_images(folder, mean=, std=)")
    if format == "tflite-int16x8" and float_layers:
        raise InputError("float_layers is supported for tflite-int8-full only (the TF "
                         "quantizer keeps layers in float for int8 activations only)")
    _refuse_recurrent(conversion, format)
    samples = calibration_samples(conversion, calibration)
    torch_samples = [_to_torch(s, conversion) for s in samples]
    names = formats.signature_names(conversion.model)  # the converter's dataset keys
    return FullIntegerPlan(format, samples, torch_samples, names, bool(int8_io), float_layers)


def _refuse_recurrent(conversion, format: str) -> None:
    """LSTM/GRU/RNN layers become TFLite ``WHILE`` loops, and TF's calibrator (TF 2.21)
    crashes the process (a segfault in ``_feed_tensors``) on a model with one: refused
    before it runs, naming the torch modules."""
    import keras

    modules = set(dict(conversion.module.named_modules())) if hasattr(conversion, "module") \
        else set()
    recurrent = []
    for layer in conversion.model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.RNN):
            path = torch_path(re.sub(r"\.l\d+(_reverse)?$", "", layer.name), modules)
            if path not in recurrent:
                recurrent.append(path)
    if recurrent:
        raise ExportError(
            f"{format} cannot quantize recurrent layers: {', '.join(recurrent)} (LSTM/GRU/RNN "
            "run as a TFLite WHILE loop, which TF's full-integer calibrator does not "
            "support; it crashes). Export tflite, tflite-fp16 or tflite-int8 (dynamic "
            "range) instead")


def calibration_samples(conversion, calibration) -> list[list[np.ndarray]]:
    """:func:`calibration_examples` against the conversion's Keras inputs."""
    return calibration_examples(calibration, conversion.model.inputs,
                                conversion.options.channels_last_io)


def calibration_examples(calibration, inputs: list,
                         channels_last_io: bool) -> list[list[np.ndarray]]:
    """Each example as Keras input arrays, checked against ``inputs`` (the model's Keras
    inputs, or ``calibration.calibration_inputs`` before converting).

    An example is one array (single-input models), a tuple/list of arrays in forward's
    argument order, or a dict keyed by forward's argument names. Values must be finite
    numbers (the quantizer derives each tensor's range from them: a NaN or inf example
    made TF's calibrator fail obscurely or crash the process) and, for an integer input,
    whole numbers.
    """
    if isinstance(calibration, ImageFolder):
        calibration = calibration.examples(inputs, channels_last_io)
    if isinstance(calibration, (str, bytes, os.PathLike)):
        raise InputError(
            f"calibration={str(calibration)!r} is a path; pass the examples themselves (an "
            "iterable of arrays or tuples of arrays), crossport.calibration_images(folder) "
            "for a folder of images, or crossport.export.calibration.load_calibration(path, "
            "conversion.model.inputs) for .npy/.npz files")
    if isinstance(calibration, Mapping) or not isinstance(calibration, Iterable):
        raise InputError(f"calibration must be an iterable of examples (a list of arrays, "
                         f"of tuples of arrays, or of dicts keyed by input name), not a "
                         f"{type(calibration).__name__}")
    names = [t.name for t in inputs]
    samples = []
    for i, item in enumerate(calibration):
        arrays = [_example_array(a, i, t) for a, t in zip(_example_items(item, i, names),
                                                           inputs)]
        samples.append(arrays)
    if not samples:
        raise InputError("calibration is empty: give at least one example (100+ for real use)")
    for i, sample in enumerate(samples[1:], 1):
        for a, first, t in zip(sample, samples[0], inputs):
            if a.shape != first.shape:  # a dynamic dim: TF's calibrator takes one shape
                raise InputError(
                    f"calibration example {i}: input {t.name!r} has shape {a.shape}, example "
                    f"0 has {first.shape}; TF's calibrator runs every example at one shape, "
                    "so give them all the same size (crop or pad them, or resize images)")
    return samples


def _example_items(item, i: int, names: list[str]) -> list:
    """One example's arrays in the model's input order."""
    if isinstance(item, Mapping):
        missing = [n for n in names if n not in item]
        extra = [str(k) for k in item if k not in names]
        if missing or extra:
            raise InputError(f"calibration example {i} is a dict with keys "
                             f"{[str(k) for k in item]}; expected one array per input, keyed "
                             f"{names}")
        return [item[n] for n in names]
    arrays = list(item) if isinstance(item, (tuple, list)) else [item]
    if len(arrays) != len(names):
        raise InputError(f"calibration example {i} has {len(arrays)} arrays; the model "
                         f"takes {len(names)} ({', '.join(names)})")
    return arrays


def _example_array(value, i: int, tensor) -> np.ndarray:
    where = f"calibration example {i}: input {tensor.name!r}"
    try:
        a = np.asarray(value.detach().cpu() if isinstance(value, torch.Tensor) else value)
    except (TypeError, ValueError) as exc:  # ragged lists, objects numpy cannot hold
        raise InputError(f"{where} is not an array: {exc}") from exc
    if a.dtype.kind not in "biuf":
        raise InputError(f"{where} has dtype {a.dtype}; expected numbers "
                         f"(the model takes {tensor.dtype})")
    if a.ndim != len(tensor.shape) or any(d is not None and d != s
                                         for d, s in zip(tensor.shape, a.shape)):
        raise InputError(f"{where} has shape {a.shape}, the model expects "
                         f"{tuple(tensor.shape)} (None: any)")
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise InputError(f"{where} holds NaN or inf values; calibration sets each tensor's "
                         "quantization range from the examples, which must be finite")
    if np.dtype(tensor.dtype).kind in "iu" and a.dtype.kind == "f" and (
            a != np.round(a)).any():
        raise InputError(f"{where} holds fractional values; the input is {tensor.dtype} "
                         "(token ids, indices): give integers")
    return a.astype(tensor.dtype)


def _to_torch(arrays: list[np.ndarray], conversion) -> tuple:
    """Keras-layout arrays -> forward's arguments (undoing channels-last I/O)."""
    out = []
    for a in arrays:
        if conversion.options.channels_last_io and a.ndim >= 3:
            a = np.moveaxis(a, -1, 1)
        out.append(torch.from_numpy(np.ascontiguousarray(a)))
    return tuple(out)


def write_full_integer(model, path: Path, plan: FullIntegerPlan, conversion=None,
                       stages: dict | None = None) -> QuantizationReport:
    """Calibrate, quantize and write ``path``; the report's ``layers`` filled for int8.

    ``stages`` (when given) receives the seconds of ``saved_model`` and ``quantize``.
    """
    from crossport.export.formats import timed, write_saved_model
    from crossport.export.tflite import converter_from_saved_model, run_converter

    stages = {} if stages is None else stages
    origins = getattr(conversion, "origins", None) or {}
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "saved_model"
        with timed(stages, "saved_model"), named_scopes(origins):  # ops named by torch node
            write_saved_model(model, saved)
        with timed(stages, "quantize"), quantizer_errors(plan):
            converter = converter_from_saved_model(saved, plan.activations)
            _configure(converter, plan)
            with quiet_tflite_interpreter():
                if plan.activations == "int16x8":
                    path.write_bytes(run_converter(converter.convert, conversion))
                    return QuantizationReport(plan.format, layers=[], per_layer_note=(
                        "per-layer errors are measured for tflite-int8-full only"))
                return _quantize_with_debugger(model, converter, path, plan, conversion)


@contextmanager
def quantizer_errors(plan: FullIntegerPlan, stage: str = "quantize"):
    """TF's quantizer failing on the model (``stage="quantize"``), or LiteRT failing to run
    the file it wrote (``stage="run"``), is an ``ExportError`` saying so in a few words.

    Its messages repeat one line per op (``Quantization to 16x8-bit not yet supported for
    op: 'HARD_SWISH'`` x 12), and when no op can be quantized the debugger only says
    ``Please check if the quantized model is in debug mode``.
    """
    alternatives = ("tflite-int8-full (with float_layers=[...] for the layers it cannot "
                    "quantize)" if plan.format == "tflite-int16x8"
                    else "tflite-int16x8") + ", tflite-fp16 or tflite-int8 (dynamic range)"
    try:
        yield
    except CrossportError:
        raise
    except Exception as exc:  # noqa: BLE001  (TF's converter/calibrator/debugger)
        text = str(exc)
        if stage == "run" and not re.search(r"failed to (invoke|prepare)", text):
            raise  # not LiteRT refusing the file (torch, say): stage_export reports it
        if "debug mode" in text:
            reason = (f"none of the model's ops has an {plan.activations} TFLite kernel, so "
                      "there is nothing to quantize")
        else:
            lines = [" ".join(line.split()) for line in re.split(r"\n|(?<=\.)(?=Node)", text)]
            unique = list(dict.fromkeys(line for line in lines if line))
            reason = "; ".join(unique[:3]) + (f" (+{len(unique) - 3} more)"
                                              if len(unique) > 3 else "")
        lead = (f"TF's {plan.activations} quantizer cannot quantize this model"
                if stage == "quantize" else
                f"the {plan.format} file TF's quantizer wrote does not run on LiteRT")
        raise ExportError(f"{lead}: {reason.rstrip('.')}. Export {alternatives} "
                          "instead") from exc


def _configure(converter, plan: FullIntegerPlan) -> None:
    import tensorflow as tf

    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: (dict(zip(plan.input_names, s))
                                                for s in plan.calibration)
    if plan.int8_io:
        io_type = tf.int8 if plan.activations == "int8" else tf.int16
        converter.inference_input_type = converter.inference_output_type = io_type


def _quantize_with_debugger(model, converter, path, plan, conversion) -> QuantizationReport:
    import tensorflow as tf

    from crossport.export.tflite import run_converter

    options = tf.lite.experimental.QuantizationDebugOptions(fully_quantize=plan.int8_io)
    with quiet_tflite_interpreter():
        debugger = run_converter(lambda: tf.lite.experimental.QuantizationDebugger(
            converter=converter, debug_dataset=_dataset(plan), debug_options=options),
            conversion)
    layer_names = [layer.name for layer in model.layers]
    module_paths = set(dict(conversion.module.named_modules())) if conversion else set()
    origins = getattr(conversion, "origins", None) or {}
    ops = _quantized_ops(debugger.calibrated_model, layer_names, origins)
    denied = _denylist(ops, plan.float_layers, module_paths)
    if denied:
        options = tf.lite.experimental.QuantizationDebugOptions(
            fully_quantize=plan.int8_io, denylisted_nodes=denied)
        with quiet_tflite_interpreter():
            debugger.options = options
    path.write_bytes(debugger.get_nondebug_quantized_model())
    layers = _layer_errors(debugger.quant_model, plan, options, layer_names, module_paths,
                           origins)
    return QuantizationReport(plan.format, layers=layers, float_layers=list(plan.float_layers))


def _dataset(plan: FullIntegerPlan, interpreter_inputs: list[str] | None = None):
    """The examples as the debugger feeds them: by position, in the interpreter's order."""
    positions = list(range(len(plan.input_names)))
    if interpreter_inputs is not None:
        positions = [next(i for i, n in enumerate(plan.input_names)
                          if name in (f"serving_default_{n}:0", n))
                     for name in interpreter_inputs]
    return lambda: ([sample[i] for i in positions]
                    for sample in plan.calibration[:REPORT_EXAMPLES])


@dataclass
class _Op:
    output: str  # output tensor name (what the debugger's denylisted_nodes names)
    layers: list[str]  # Keras layers fused into it, in model order
    modules: list[str]  # torch modules that ran its keras.ops calls (to_keras/origins.py)


def _quantized_ops(model_bytes: bytes, layer_names: list[str], origins: dict) -> list[_Op]:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    by_index = {origin.index: origin for origin in origins.values()}
    interpreter = Interpreter(
        model_content=model_bytes,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    tensors = {t["index"]: t["name"] for t in interpreter.get_tensor_details()}
    all_ops = interpreter._get_ops_details()
    produced = {out for op in all_ops for out in op["outputs"]}
    ops = []
    for op in all_ops:
        for index in op["outputs"]:
            ops.append(_Op(tensors.get(index, ""),
                           _op_layers(op, index, tensors, produced, layer_names),
                           [by_index[i].module for i in _op_nodes(op, index, tensors, produced)
                            if i in by_index]))
    return ops


def _op_layers(op: dict, output: int, tensors: dict, produced: set, layer_names) -> list[str]:
    """Keras layers an op computes: from its output's name, else its weights' names.

    A model output is renamed after the signature (``StatefulPartitionedCall:0``), but the
    op's constant inputs (kernel, bias) still carry the layer's scope.
    """
    layers = keras_layers_in(tensors.get(output, ""), layer_names)
    if not layers:
        constants = [tensors[i] for i in op["inputs"]
                     if i >= 0 and i not in produced and i in tensors]
        layers = keras_layers_in(";".join(constants), layer_names)
    return layers


def _denylist(ops: list[_Op], float_layers: tuple[str, ...], module_paths: set) -> list[str]:
    """Output tensors of the ops that compute the named torch modules."""
    denied = []
    for wanted in float_layers:
        hits = [op.output for op in ops if any(
            _within(torch_path(layer, module_paths), wanted) or layer == wanted
            for layer in op.layers) or any(_within(m, wanted) for m in op.modules)]
        if not hits:
            known = sorted({torch_path(layer, module_paths) for op in ops for layer in op.layers})
            raise InputError(f"float_layers: no quantized op computes {wanted!r}; torch "
                             f"modules with quantized ops: {', '.join(known[:30])}")
        denied.extend(hits)
    return list(dict.fromkeys(denied))


def _within(path: str, module: str) -> bool:
    return path == module or path.startswith(module + ".")


def keras_layers_in(tensor_name: str, layer_names: list[str]) -> list[str]:
    """Keras layers named in a (possibly fused, ``;``-joined) TFLite tensor name.

    Each part reads ``<model scope>/<layer scope>/<op>``. TF name scopes repeat a layer's
    name with a ``_N`` suffix (``layer1.0.conv1_1``); the model's own names may end in
    ``_N`` too (a module called twice): a scope is resolved by dropping one suffix first,
    then none, then more.
    """
    known = {name: i for i, name in enumerate(layer_names)}
    scopes = [part.split("/")[1] for part in tensor_name.split(";") if part.count("/") >= 2]
    found = []
    for scope in scopes:
        candidates = [re.sub(r"_\d+$", "", scope), scope]
        while re.search(r"_\d+$", candidates[-1]):
            candidates.append(re.sub(r"_\d+$", "", candidates[-1]))
        layer = next((c for c in candidates if c in known), None)
        if layer is not None and layer not in found:
            found.append(layer)
    return sorted(found, key=known.get)


def _layer_errors(debug_model: bytes, plan, options, layer_names, module_paths,
                  origins: dict) -> list[QuantizedLayer]:
    """Per quantized op: its own error vs the float op on the same inputs, worst first."""
    import tensorflow as tf

    metrics = tf.lite.experimental.QuantizationDebugOptions(
        layer_direct_compare_metrics={"error": layer_error},
        fully_quantize=options.fully_quantize, denylisted_nodes=options.denylisted_nodes)
    with quiet_tflite_interpreter():
        interpreter = tf.lite.Interpreter(model_content=debug_model)
        inputs = [d["name"] for d in interpreter.get_input_details()]
        debugger = tf.lite.experimental.QuantizationDebugger(
            quant_debug_model_content=debug_model, debug_dataset=_dataset(plan, inputs),
            debug_options=metrics)
        debugger.run()
    rows = _rows(interpreter, debugger.layer_statistics, layer_names, module_paths, origins)
    return sorted(rows, key=lambda r: -r.error)


def _rows(interpreter, statistics, layer_names, module_paths,
          origins: dict) -> list[QuantizedLayer]:
    details = {t["index"]: t for t in interpreter.get_tensor_details()}
    names = {index: t["name"] for index, t in details.items()}
    producer = {out: op for op in interpreter._get_ops_details() for out in op["outputs"]}
    produced = set(producer)
    by_layer = {operation.name: origin for operation, origin in origins.items()}
    by_index = {origin.index: origin for origin in origins.values()}
    rows = []
    for key, stats in statistics.items():
        index = int(key.rsplit(":", 1)[1])
        tensor = details[index]
        op = producer[index]
        layers = _op_layers(op, index, names, produced, layer_names)
        # what the op computes, first in torch graph order: layers by their module path,
        # keras.ops calls by their node (``layer1.0 (add)``); the tensor name if neither
        found = [(by_layer[layer].index, torch_path(layer, module_paths), by_layer[layer].node)
                 if layer in by_layer else (-1, torch_path(layer, module_paths), "")
                 for layer in layers]
        found += [(i, by_index[i].label, by_index[i].node)
                  for i in _op_nodes(op, index, names, produced) if i in by_index]
        found = sorted({name: (i, name, node) for i, name, node in reversed(found)}.values())
        params = tensor["quantization_parameters"]
        rows.append(QuantizedLayer(
            name=found[0][1] if found else tensor["name"],
            op=op["op_name"], error=float(stats["error"]),
            rmse=float(np.sqrt(stats["mean_squared_error"])),
            max_abs_error=float(stats["max_abs_error"]),
            scale=float(params["scales"][0]), zero_point=int(params["zero_points"][0]),
            fused=[f[1] for f in found[1:]], tensor=tensor["name"],
            node=found[0][2] if found else ""))
    return rows


def _op_nodes(op: dict, output: int, tensors: dict, produced: set) -> list[int]:
    """Origin indices (``to_keras/origins.py``) in an op's ``fx.<index>`` name scopes: from
    its output's name, else its constant inputs' names (a renamed model output)."""
    def scoped(name: str) -> list[int]:
        scopes = [p.split("/")[1] for p in name.split(";") if p.count("/") >= 2]
        return [int(m.group(1)) for m in map(SCOPE.match, scopes) if m]

    found = scoped(tensors.get(output, ""))
    if not found:
        found = scoped(";".join(tensors[i] for i in op["inputs"]
                                if i >= 0 and i not in produced and i in tensors))
    return list(dict.fromkeys(found))


def sqnr_db(pairs) -> float:
    """Signal-to-quantization-noise ratio over all ``(reference, quantized)`` float pairs."""
    signal = noise = 0.0
    for ref, got in pairs:
        if np.asarray(ref).dtype.kind != "f":
            continue
        ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
        signal += float(np.sum(ref ** 2))
        noise += float(np.sum((ref - got) ** 2))
    if noise == 0:
        return float("inf")
    return float(10 * np.log10(max(signal, 1e-300) / noise))
