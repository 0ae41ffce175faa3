"""Export a converted model and prove the artifact still matches torch.

Every export writes to a temporary sibling path, re-loads the artifact from disk, runs it on
fresh inputs against the torch module, and only then moves it to the target path; on any
failure nothing is left there. An existing target is replaced only with ``overwrite=True``
(see :mod:`crossport.export.staging`).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from crossport.capture.borrow import borrowed
from crossport.errors import ExportError, InputError
from crossport.export import formats, quantize, special_values, tflite
from crossport.export.images import ImageFolder, calibration_images  # noqa: F401
from crossport.export.quant_report import QuantizationReport, QuantizedLayer  # noqa: F401
from crossport.export.special_values import SpecialValues
from crossport.export.staging import FILE, SAVED_MODEL, Staging
from crossport.parity import normalized_error
from crossport.parity.accept import Recheck, recheck
from crossport.parity.ties import artifact_excuse
from crossport.parity.verify import (
    from_keras_outputs,
    leaves,
    recheck_inputs,
    run_keras,
    to_keras_inputs,
    torch_order,
    torch_outputs,
)

# Stated tolerances (normalized max error vs torch fp32). Quantised formats change the
# function on purpose: fp16 weights keep ~3 significant digits, dynamic-range int8 ~2.
FORMATS = {
    "keras": None,          # None: the conversion's own atol
    "saved_model": None,
    "tflite": None,
    "tflite-fp16": 1e-2,
    "tflite-int8": 1e-1,
    # full integer: gated on output SQNR instead (quantize.MIN_SQNR_DB), max error reported
    "tflite-int8-full": None,
    "tflite-int16x8": None,
}


@dataclass
class ExportResult:
    """What an export wrote and how far the re-loaded artifact is from torch.

    ``max_error`` is finite (``None`` when not re-checked); ``recheck`` holds the details:
    mismatches (none, or the export would have failed), the rule and the float64 evidence.
    """

    path: Path
    format: str
    max_error: float | None
    tolerance: float | None
    seconds: float
    recheck: Recheck | None = None
    quantization: QuantizationReport | None = None  # full-integer formats: SQNR, per-op rows
    stages: dict[str, float] = field(default_factory=dict)  # seconds per stage of the export
    # float .tflite files: NaN/inf positions against torch on inputs holding them (None:
    # not checked, or no float input)
    special_values: SpecialValues | None = None

    @property
    def passed(self) -> bool:
        if self.quantization is not None and self.quantization.sqnr_db is not None:
            return self.quantization.sqnr_db >= self.quantization.min_sqnr_db
        return self.recheck is None or self.recheck.passed

    def summary(self) -> str:
        if self.quantization is not None:
            return f"{self.path}\n{self.quantization.summary()}"
        if self.max_error is None:
            return f"{self.format}: {self.path} (not re-checked)"
        text = (f"{self.format}: {self.path}, re-loaded error {self.max_error:.2e} "
                f"(tolerance {self.tolerance:.0e} for this format)")
        if self.special_values is not None and not self.special_values.agrees:
            text += f"\nwarning: {self.special_values.describe()}"
        return text


def infer_format(path: Path) -> str:
    if path.suffix == ".keras":
        return "keras"
    if path.suffix == ".tflite":
        return "tflite"
    if path.suffix == "":
        return "saved_model"
    raise InputError(f"{path}: cannot tell the format from the suffix; pass format= one of "
                     f"{sorted(FORMATS)}")


def resolve_format(path: Path, format: str | None) -> str:
    """``format``, or the one ``path``'s suffix names; an unknown format, or one that
    contradicts a ``.keras``/``.tflite`` suffix, is an ``InputError``: a TFLite flatbuffer
    named ``m.keras`` (or a Keras archive named ``m.tflite``) is a file no loader of that
    suffix reads, and Keras loads only ``.keras`` archives."""
    if format is None:
        return infer_format(path)
    if format not in FORMATS:
        raise InputError(f"unknown format {format!r}; expected one of {sorted(FORMATS)}")
    suffix = path.suffix
    if (suffix == ".keras") != (format == "keras") or (
            suffix == ".tflite" and not format.startswith("tflite")):
        raise InputError(f"{path}: format {format!r} does not fit the {suffix or 'missing'} "
                         f"suffix; name the file for its format (.keras for keras, .tflite "
                         f"for the tflite formats, a folder without a suffix for "
                         f"saved_model), or drop the format to take it from the suffix")
    return format


def export(conversion, path: str | Path, format: str | None = None, *, check: bool = True,
           check_inputs: int | None = None, overwrite: bool = False, calibration=None,
           int8_io: bool = False, float_layers: list[str] | tuple[str, ...] = ()) -> ExportResult:
    """Write ``conversion.model`` to ``path`` and re-check parity of the written artifact.

    Args:
        conversion: a :class:`crossport.Conversion` (from ``convert_with_report``).
        path: ``.keras`` file, ``.tflite`` file, or a SavedModel directory.
        format: one of ``keras``, ``saved_model``, ``tflite``, ``tflite-fp16``,
            ``tflite-int8`` (dynamic range), ``tflite-int8-full``, ``tflite-int16x8``
            (full integer); inferred from ``path`` when omitted.
        check: re-load and compare with torch (``ExportError`` beyond the tolerance).
        check_inputs: how many fresh input sets the re-check runs besides the example
            inputs (``0``: the examples only, for inputs fresh random ones cannot stand in
            for, such as ``embedding_bag`` offsets); ``None``: as many as the conversion's
            own check (``convert_with_report(check_inputs=...)``, 2 by default).
        overwrite: replace an existing artifact at ``path`` (a file by a file, a SavedModel
            by a SavedModel; atomically for files, and the old one is kept until the new one
            passed). Without it an existing ``path`` is an ``ExportError``; a directory that
            is not a SavedModel is never replaced.
        calibration: full-integer formats only: an iterable of examples (tuples of arrays
            or tensors, or one array per example) in the conversion's input layout, or
            ``crossport.calibration_images(folder, mean=..., std=...)`` (images resized,
            cropped and normalized to the model's input). The file is re-checked on (up to
            ``check_inputs`` of) these examples.
        int8_io: full-integer formats: integer inputs and outputs (int8, int16 for int16x8).
        float_layers: ``tflite-int8-full``: torch module paths to keep in float.

    Example:
        >>> import torch, crossport, tempfile, pathlib
        >>> conv = crossport.convert_with_report(torch.nn.Conv2d(3, 4, 3).eval(),
        ...                                      (torch.randn(1, 3, 8, 8),))
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "conv.keras"
        >>> crossport.export(conv, out).passed
        True
        >>> crossport.export(conv, out, overwrite=True).passed
        True
    """
    with Staging(overwrite) as staging:
        result = stage_export(conversion, path, format, staging, check=check,
                              check_inputs=check_inputs, calibration=calibration,
                              int8_io=int8_io, float_layers=float_layers)
        staging.commit()
    return result


def target_kind(path: Path, format: str | None) -> str:
    """``saved_model`` for a SavedModel directory, ``file`` for every other format."""
    return SAVED_MODEL if (format or infer_format(Path(path))) == "saved_model" else FILE


def stage_export(conversion, path: str | Path, format: str | None, staging: Staging, *,
                 check: bool = True, check_inputs: int | None = None, calibration=None,
                 int8_io: bool = False, float_layers=()) -> ExportResult:
    """Write and re-check the artifact at a temporary path claimed in ``staging``.

    Nothing reaches ``path`` until ``staging.commit()``; the CLI commits an export and the
    generated source together.
    """
    if not hasattr(conversion, "report") or not hasattr(conversion, "options"):
        raise InputError(
            f"export takes the Conversion returned by crossport.convert_with_report (it holds "
            f"the torch module the artifact is re-checked against), not a "
            f"{type(conversion).__name__}; for a bare Keras model use its own "
            "model.save(...) / model.export(...) (unchecked)")
    for name, value in (("check", check), ("int8_io", int8_io)):
        if not isinstance(value, bool):
            raise InputError(f"{name}={value!r}: expected True or False")
    if check_inputs is None:
        check_inputs = conversion.options.check_inputs
    if check and (isinstance(check_inputs, bool) or not isinstance(check_inputs, int)
                  or check_inputs < 0):
        raise InputError(f"check_inputs={check_inputs!r}: expected an int >= 0 (how many "
                         "fresh input sets the re-check runs besides the example inputs); "
                         "check=False skips the re-check")
    path = Path(path).expanduser()  # "~/m.tflite" is the home folder, not a folder "~"
    format = resolve_format(path, format)
    _refuse_tflite_precision(conversion, format)
    if format.startswith("tflite"):
        tflite.refuse_unsupported_fft(conversion)
        tflite.refuse_inexact_ops(conversion)
    tolerance = FORMATS[format] or conversion.options.atol
    plan = quantize.plan(conversion, format, calibration, int8_io, float_layers)
    if plan is not None:
        tolerance = None  # gated on output SQNR: result.quantization.min_sqnr_db
    report = specials = None
    start = time.perf_counter()
    tmp = staging.claim(path, target_kind(path, format))
    result = None
    stages: dict[str, float] = {}
    try:
        if plan is not None:
            with borrowed(conversion.module):  # eval mode; the user's module is left as it was
                report = _write_full_integer(conversion, tmp, plan, check, check_inputs,
                                             stages)
        else:
            _write(conversion, tmp, format, stages)
            if check:
                with borrowed(conversion.module), formats.timed(stages, "re-check"):
                    run = _loader(conversion, tmp, format)
                    result = _recheck(conversion, run, format, check_inputs, tolerance)
                if format.startswith("tflite") and result.passed:
                    with borrowed(conversion.module), formats.timed(stages, "special values"):
                        specials = _special_values(conversion, run)
    except (ExportError, InputError):
        raise
    except Exception as exc:  # any writer/loader failure: report it, leave nothing behind
        raise ExportError(f"exporting {format} to {path} failed: {type(exc).__name__}: {exc}") from exc
    if result is not None and not result.passed:
        raise ExportError(
            f"the {format} artifact re-loaded from disk differs from torch: "
            f"{result.describe()}; nothing was written to {path}")
    error = report.max_error if report is not None else (result.error if result else None)
    return ExportResult(path, format, error, tolerance, time.perf_counter() - start, result,
                        report, stages, specials)


def _refuse_tflite_precision(conversion, format: str) -> None:
    """TFLite's builtin kernels compute in float32 (or quantized integers): a float64 or
    float16 conversion (``module.double()``/``.half()``) has no TFLite form."""
    from crossport.to_keras.emit import parameter_dtype

    dtype = parameter_dtype(conversion.exported)
    if format.startswith("tflite") and dtype != "float32":
        raise ExportError(
            f"the conversion computes in {dtype} (the module's parameters are {dtype}); "
            "TFLite's builtin ops compute in float32, so there is no faithful TFLite file of "
            "it. Convert the float32 module (module.float()) for TFLite (format tflite-fp16 "
            "stores half-precision weights), or export .keras / SavedModel, which keep "
            f"{dtype}.")


def _write(conversion, path: Path, format: str, stages: dict) -> None:
    model = conversion.model
    if format == "keras":
        # Keras insists on the .keras suffix: save beside, then move into the temp name.
        staged = path.with_name(path.name + ".keras")
        with formats.timed(stages, "write"):
            formats.write_keras(model, staged)
        staged.replace(path)
    elif format == "saved_model":
        with formats.timed(stages, "write"):
            formats.write_saved_model(model, path)
    else:
        quantization = {"tflite": "float32", "tflite-fp16": "float16", "tflite-int8": "int8"}
        formats.write_tflite(model, path, quantization[format], conversion, stages)


def _loader(conversion, path: Path, format: str):
    if format == "keras":
        staged = path.with_name(path.name + ".keras")
        shutil.copyfile(path, staged)
        try:
            return formats.load_keras(staged)
        finally:
            staged.unlink(missing_ok=True)
    if format == "saved_model":
        return formats.load_saved_model(path)
    model = conversion.model
    return formats.load_tflite(path, formats.signature_names(model),
                               output_names=formats.output_names(model))


def _recheck(conversion, run, format: str, count: int, tolerance: float) -> Recheck:
    """The re-loaded artifact (``run``, from :func:`_loader`) against torch on fresh
    inputs, by the conversion's rule.

    Quantised formats change the function on purpose: their stated tolerance is a hard bound.
    """
    keras_leaves = _artifact_leaves(conversion, run)
    shape_sets = conversion.report.shape_sets if conversion.report is not None else None
    # the example inputs first: always valid, and the only ones for inputs that constrain
    # each other (embedding_bag's offsets), where check_inputs=0 leaves no fresh set
    input_sets = [tuple(conversion.example_args),
                  *recheck_inputs(conversion.example_args, shape_sets,
                                  conversion.options.seed + 100, count)]
    rule = conversion.options.tolerance if FORMATS[format] is None else "atol"
    return recheck(conversion.module, input_sets, keras_leaves, tolerance, rule,
                   examples_first=True, excuse=artifact_excuse(conversion))


def _artifact_leaves(conversion, run):
    """``leaves(args, torch_structure)``: the artifact's outputs in torch's leaf order."""
    channels_last_io = conversion.options.channels_last_io

    def artifact_leaves(args, structure):
        flat = run(to_keras_inputs(args, channels_last_io))
        order = torch_order(conversion.model, structure)
        return from_keras_outputs([flat[j] for j in order], channels_last_io)
    return artifact_leaves


def _special_values(conversion, run) -> SpecialValues | None:
    """The file (``run``), torch and the Keras model on inputs holding NaN, ±inf and -0.0
    (:mod:`crossport.export.special_values`), at the example's shapes."""
    channels_last_io = conversion.options.channels_last_io

    def keras_leaves(args, structure):
        return run_keras(conversion.model, args, channels_last_io, like=structure)
    return special_values.check(conversion.module, conversion.example_args,
                                conversion.options.seed + 200,
                                _artifact_leaves(conversion, run), keras_leaves)


def _compare(conversion, run, args_sets):
    """``(torch, artifact)`` output leaf pairs for each set of forward arguments."""
    channels_last_io = conversion.options.channels_last_io
    for args in args_sets:
        structure = torch_outputs(conversion.module, args)
        flat = run(to_keras_inputs(args, channels_last_io))
        order = torch_order(conversion.model, structure)
        got = from_keras_outputs([flat[j] for j in order], channels_last_io)
        yield from zip(leaves(structure), got)


def _write_full_integer(conversion, path: Path, plan, check: bool, count: int,
                        stages: dict) -> QuantizationReport:
    """Quantize on the calibration examples; re-check the file on (the last) ``count`` of them.

    The gate is the output SQNR against torch fp32 (``quantize.MIN_SQNR_DB``): quantization
    changes the function on purpose, by an amount set by the data, not by rounding.
    """
    count = max(count, 1)  # the re-check's inputs are calibration examples here
    if check:
        plan.hold_out(count)
    report = quantize.write_full_integer(conversion.model, path, plan, conversion, stages)
    report.min_sqnr_db = quantize.MIN_SQNR_DB[plan.format]
    if not check:
        return report
    with formats.timed(stages, "re-check"), quantize.quantizer_errors(plan, "run"):
        run = _loader(conversion, path, "tflite")
        pairs = list(_compare(conversion, run, plan.torch_samples[-max(count, 1):]))
    report.checked_on = (f"{plan.held_out} examples held out from calibration"
                         if plan.held_out else
                         f"the last {min(count, len(plan.samples))} calibration examples "
                         f"(in-sample: with {quantize.HOLD_OUT_FACTOR * count} or more "
                         f"examples {count} are held out of calibration for this check)")
    report.sqnr_db = quantize.sqnr_db(pairs)
    report.max_error = float(max(normalized_error(r, g) for r, g in pairs))
    if report.sqnr_db < report.min_sqnr_db:
        raise ExportError(
            f"the {plan.format} file re-loaded from disk is too far from torch fp32: output "
            f"SQNR {report.sqnr_db:.1f} dB < {report.min_sqnr_db:.0f} dB (normalized max error "
            f"{report.max_error:.2e}); nothing was written. Worst quantized ops:\n"
            f"{report.summary(top=5)}\nKeep them in float with float_layers=[...], use "
            "tflite-int16x8, or calibrate on more representative data.")
    return report
