"""The ``crossport`` command line: ``demo``, ``convert``, ``check``, ``ops``, ``to-torch``,
``generate-export``.

Every failure prints one clear line on stderr and exits non-zero; nothing is left at the
output paths. Outputs of one command (``-o`` and ``--emit-source``) land together or not at
all, and an existing file or SavedModel is replaced only with ``--overwrite``. ``--debug``
adds the traceback and keeps TensorFlow's and torch's log noise. Parsing imports neither
torch, TensorFlow, Keras nor crossport's converters (``import crossport`` defers them in this
process), so ``--help`` and usage errors answer at once; a command loads them when it runs
(``_Command``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import re
import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape as rich_escape
from rich.table import Table
from rich.text import Text
from typer.core import TyperCommand

from crossport.compat import quiet_tensorflow, quiet_warnings, stderr_fd_silenced

if __name__ == "__main__":  # python -m crossport.cli: one module, so to-torch shares _debug
    sys.modules.setdefault("crossport.cli", sys.modules[__name__])

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Port models between PyTorch and Keras 3 with proven numerical parity.")
console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # soft_wrap: never break an error line
_debug = False

_DTYPES = {"float32": "float32", "float": "float32", "float64": "float64", "double": "float64",
           "float16": "float16", "half": "float16", "int64": "int64", "long": "int64",
           "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool"}
# integer dtypes: the largest HIGH (exclusive bound of the example's values) each can hold
_INTEGERS = {"int64": 2**63, "int32": 2**31, "int16": 2**15, "int8": 2**7, "uint8": 2**8}


INT_HIGH = 100  # integer example inputs are drawn from [0, INT_HIGH) unless the spec says


def parse_input_spec(spec: str):
    """``1x3x224x224``, ``int64:1x128`` or ``int64:1x128:30522`` -> (dtype, shape, high).

    ``high`` bounds integer inputs: values are drawn from ``[0, high)`` (token ids below the
    vocabulary size, ``2`` for a 0/1 mask).
    """
    match = re.fullmatch(r"(?:(\w+):)?(\d+(?:x\d+)*)(?::(\d+))?", spec.strip())
    if (not match or (match.group(1) and match.group(1) not in _DTYPES)
            or (match.group(3) and _DTYPES[match.group(1) or "float32"] not in _INTEGERS)):
        raise typer.BadParameter(
            f"{spec!r}: expected SHAPE, DTYPE:SHAPE or INTDTYPE:SHAPE:HIGH, e.g. 1x3x224x224, "
            f"int64:1x128 or int64:1x128:30522 (dtypes: {', '.join(sorted(_DTYPES))})")
    dtype = _DTYPES[match.group(1) or "float32"]
    high = int(match.group(3)) if match.group(3) else INT_HIGH
    if not 1 <= high <= _INTEGERS.get(dtype, high):
        raise typer.BadParameter(f"{spec!r}: HIGH must be in [1, {_INTEGERS[dtype]}] for {dtype}")
    return dtype, tuple(int(d) for d in match.group(2).split("x")), high


def _error_line(message: str) -> None:
    """``error: message`` as one line (whitespace and newlines collapsed), markup-free."""
    err_console.print(Text.assemble(("error:", "bold red"), " ", " ".join(message.split())),
                      highlight=False)


def _fail(message: str, code: int = 1):
    if _debug and sys.exc_info()[1] is not None:
        traceback.print_exc()
    _error_line(message)
    raise typer.Exit(code)


@app.callback()
def _global_options(
    debug: Annotated[bool, typer.Option(
        "--debug", help="show tracebacks and TensorFlow/torch logs on errors")] = False,
):
    """Port models between PyTorch and Keras 3 with proven numerical parity."""
    global _debug
    _debug = _debug or debug


class _Command(TyperCommand):
    """A crossport command: it prepares the run (:func:`_prepare_run`) only once its
    arguments parsed, so ``--help`` and usage errors answer without importing the frameworks
    (seconds); every command is registered with ``cls=_Command``."""

    def invoke(self, ctx):
        _prepare_run()
        return super().invoke(ctx)


def _prepare_run() -> None:
    """What ``import crossport`` does elsewhere (the public API loaded: TensorFlow imported
    quietly, crossport's Keras layers registered), then, without ``--debug``, torch's and
    Keras' warnings and TensorFlow's logs quieted."""
    import crossport

    crossport._load_api()
    if not _debug:
        quiet_warnings()
        quiet_tensorflow()


def main() -> None:
    """The console entry point: one error line, tracebacks only with ``--debug``.

    ``--debug`` is accepted anywhere on the command line. Usage errors and unexpected
    exceptions (crossport bugs) are one line too; Ctrl-C is ``crossport: interrupted``
    and exit status 130, with nothing left at the outputs (crossport/cli_interrupt.py).
    """
    from crossport.cli_interrupt import reported

    with reported():
        _main()


def _main() -> None:
    global _debug
    args = sys.argv[1:]
    _debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    if not args:
        app(args=["--help"])
    try:
        code = app(args=args, prog_name="crossport", standalone_mode=False)
    except typer.Abort:
        _error_line("aborted")
        sys.exit(1)
    except typer.TyperException as exc:  # malformed options: click's message, one line
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        _error_line(f"{message} (see crossport {' '.join(args[:1])} --help)")
        sys.exit(getattr(exc, "exit_code", 2))
    except Exception as exc:  # a crossport bug: still one line, the traceback with --debug
        if _debug:
            traceback.print_exc()
        _error_line(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for "
                    "the traceback and please report it)")
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


def load_callable(target: str):
    """``path/to/file.py:build`` or ``package.module:build`` -> the callable."""
    if ":" not in target:
        _fail(f"{target!r}: expected MODULE_OR_FILE:CALLABLE, e.g. my_model.py:build")
    where, name = target.rsplit(":", 1)
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            _fail(f"{where}: no such file")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.parent.resolve()))
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # the user's file failed to import: say so, in one line
            _fail(f"importing {where} failed: {type(exc).__name__}: {exc}")
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            _fail(f"cannot import {where!r}: {exc}")
    if not hasattr(module, name):
        _fail(f"{where} has no attribute {name!r}")
    return getattr(module, name)


def _example_args(inputs: list[str]):
    import torch

    from crossport.parity.verify import random_tensor

    args = []
    for spec in inputs:
        dtype, shape, high = parse_input_spec(spec)
        try:
            args.append(random_tensor(shape, getattr(torch, dtype), (0, high)))
        except (RuntimeError, MemoryError) as exc:  # overflowing or out-of-memory sizes
            _fail(f"--input {spec}: cannot make an example tensor of that size "
                  f"({str(exc).splitlines()[0]}); give the shape of one real input")
    return tuple(args)


def _summary_table(conversion, exported) -> Table:
    table = Table(title="crossport conversion", show_header=False)
    report = conversion.report
    if report is not None:
        table.add_row("parity", f"{report.max_error:.2e} normalized max error "
                      f"({'PASS' if report.passed else 'FAIL'}, tolerance {report.atol:.0e}, "
                      f"rule {report.rule})")
        table.add_row("checked at shapes", "; ".join(report.shapes))
        if report.verdict is not None:
            table.add_row("float64 evidence", f"Keras {report.keras_vs_fp64:.2e}, torch fp32 "
                          f"{report.torch_vs_fp64:.2e} from fp64: {report.verdict}")
        for note in report.notes:
            table.add_row("note", note)
    table.add_row("transposes", f"{conversion.transposes} inside the model, "
                  f"{conversion.boundary_transposes} at inputs/outputs")
    for stage, seconds in conversion.seconds.items():
        table.add_row(f"time: {stage}", f"{seconds:.2f} s")
    if exported is not None:
        table.add_row("time: export + re-check", f"{exported.seconds:.2f} s ("
                      + ", ".join(f"{k} {v:.2f} s" for k, v in exported.stages.items()) + ")")
        table.add_row("saved to", f"{exported.path} ({exported.format})")
        if exported.quantization is not None:
            _quantization_rows(table, exported.quantization)
        else:
            table.add_row("re-loaded parity", f"{exported.max_error:.2e} (tolerance "
                          f"{exported.tolerance:.0e} for {exported.format})")
        if exported.special_values is not None:
            table.add_row("NaN/inf vs torch", _special_values_cell(exported.special_values))
    return table


def _special_values_cell(special) -> str:
    if not special.agrees:
        return "[yellow]differs[/yellow]: " + rich_escape(special.describe())
    return rich_escape(special.describe()) if special.skipped else "same positions"


def _quantization_rows(table: Table, report, top: int = 5) -> None:
    if report.sqnr_db is not None:
        table.add_row("output SQNR vs torch fp32", f"{report.sqnr_db:.1f} dB (at least "
                      f"{report.min_sqnr_db:.0f} dB for {report.format}), normalized max "
                      f"error {report.max_error:.2e}"
                      + (f", on {report.checked_on}" if report.checked_on else ""))
    if report.float_layers:
        table.add_row("kept in float", ", ".join(report.float_layers))
    for i, row in enumerate(report.layers[:top]):
        table.add_row("worst quantized ops" if i == 0 else "",
                      f"{row.name} ({row.op}): error {row.error:.2e}")


_STAGE_TEXT = {
    "capture": "capturing with torch.export ...",
    "convert": "building the Keras model ...",
    "verify": "checking parity against torch (fp32, fp64 on divergence) ...",
}


def _run_conversion(module, args, output: Path | None, as_json: bool, format: str | None = None,
                    emit_source: Path | None = None, overwrite: bool = False,
                    quantization: dict | None = None, html: Path | None = None, **options):
    quiet_tensorflow()
    import crossport
    from crossport.cli_calibration import check_export_options, export_options, read_calibration
    from crossport.codegen import stage_source
    from crossport.export import stage_export
    from crossport.export.staging import Staging

    _check_targets(output, format, emit_source, overwrite, html)  # before minutes of work
    check_export_options(output, format, quantization)
    exported = source = None
    try:
        with _native_logs_silenced():
            # read and check --calibration against the torch inputs now, not after converting
            quantization = read_calibration(module, args, output, quantization, options)
            conversion = _convert_with_status(crossport, module, args, options)
            with Staging(overwrite) as staging:  # every output lands, or none does
                # --html is staged too (never over -o or a file the user keeps), and claimed
                # first: an unwritable path fails before the export
                html_temp = staging.claim(html) if html is not None else None
                if output is not None:
                    with console.status(f"exporting {output} and re-checking parity ..."):
                        exported = stage_export(conversion, output, format, staging,
                                                **export_options(quantization))
                if emit_source is not None:
                    with console.status(f"writing {emit_source} and re-checking parity ..."):
                        source = stage_source(conversion, emit_source, staging)
                if html_temp is not None:
                    from crossport.parity.render import export_html

                    export_html(conversion, exported, html_temp)
                staging.commit()
    except crossport.CrossportError as exc:
        _fail(f"{type(exc).__name__}: {exc}")
    if as_json:
        print(json.dumps({
            "parity": conversion.report.to_dict() if conversion.report else None,
            "transposes": conversion.transposes,
            "boundary_transposes": conversion.boundary_transposes,
            "seconds": conversion.seconds, "output": str(output) if output else None,
            "export": _export_json(exported) if exported else None,
            "source": str(source) if source else None,
        }, indent=2, allow_nan=False))  # every number is finite: NaN would be invalid JSON
    else:
        console.print(_summary_table(conversion, exported))
        if source is not None:
            console.print(f"source: {source} (build_model(); weights beside it; rebuilt "
                          "model re-checked against torch)", highlight=False)
    return conversion


def _convert_with_status(crossport, module, args, options):
    with console.status("capturing with torch.export ...") as status:
        return crossport.convert_with_report(
            module, args, on_stage=lambda name: status.update(_STAGE_TEXT[name]), **options)


@contextlib.contextmanager
def _native_logs_silenced():
    """Without ``--debug``, what native code writes to stderr while converting and
    exporting is dropped: the TFLite converter's and calibrator's C++ logs (``I0000 ...
    Reading SavedModel``, ``fully_quantize: 0, ...``) and LiteRT's ``INFO: Created
    TensorFlow Lite XNNPACK delegate``, which TF_CPP_MIN_LOG_LEVEL does not reach. An error
    stays one line: it is printed after this block."""
    if _debug:
        yield
        return
    with stderr_fd_silenced():
        yield


def _check_targets(output: Path | None, format: str | None, emit_source: Path | None,
                   overwrite: bool, html: Path | None = None) -> None:
    """Fail now, in one line, if an output exists and ``--overwrite`` was not given, or
    two outputs (``-o``, ``--emit-source`` and its weights, ``--html``) are one path."""
    from crossport.codegen import source_files
    from crossport.errors import CrossportError
    from crossport.export import target_kind
    from crossport.export.staging import FILE

    check_source_suffix(emit_source)
    try:
        targets = [(output, target_kind(output, format))] if output is not None else []
    except CrossportError as exc:
        _fail(f"{type(exc).__name__}: {exc}")
    targets += [(path, FILE) for path in source_files(emit_source)] if emit_source else []
    targets += [(html, FILE)] if html is not None else []
    check_free(targets, overwrite)


def check_source_suffix(emit_source: Path | None) -> None:
    """``--emit-source`` must name a .py file (both directions)."""
    if emit_source is not None and emit_source.suffix != ".py":
        _fail(f"--emit-source {emit_source}: the generated source must be a .py file")


def check_free(targets: list[tuple[Path, str]], overwrite: bool) -> None:
    """Fail now, in one line, if a ``(path, kind)`` target exists without ``--overwrite``
    or two outputs are the same file (``Staging`` would refuse that only after converting)."""
    from crossport.errors import CrossportError
    from crossport.export.staging import check_target

    seen: set[Path] = set()
    for path, kind in targets:
        if path.resolve() in seen:
            _fail(f"{path} would be written twice: two outputs (-o, --emit-source, which "
                  f"also writes the weights beside its .py, or --html) name the same file; "
                  f"choose different paths")
        seen.add(path.resolve())
        try:
            check_target(path, kind, overwrite)
        except CrossportError as exc:
            _fail(f"{type(exc).__name__}: {exc}")


_OVERWRITE_HELP = ("replace existing outputs (a file by a file, a SavedModel by a SavedModel); "
                   "without it an existing output is an error and nothing is written")


def _export_json(exported) -> dict:
    """The export re-check as plain data: every number finite (valid JSON)."""
    recheck = exported.recheck
    evidence = recheck.evidence if recheck is not None else None
    return {"format": exported.format, "error": exported.max_error,
            "tolerance": exported.tolerance, "rule": recheck.rule if recheck else None,
            "mismatches": recheck.mismatches if recheck else [],
            "keras_vs_fp64": evidence.keras_vs_fp64 if evidence else None,
            "torch_vs_fp64": evidence.torch_vs_fp64 if evidence else None,
            "verdict": evidence.verdict if evidence else None,
            "quantization": exported.quantization.to_dict() if exported.quantization else None,
            "seconds": exported.seconds, "stages": exported.stages,
            "special_values": None if exported.special_values is None else {
                "agrees": exported.special_values.agrees,
                "file": exported.special_values.file,
                "keras": exported.special_values.keras,
                "skipped": exported.special_values.skipped}}


@app.command(cls=_Command)
def demo(
    output: Annotated[Path, typer.Option("-o", "--output", help="where to save the model")] = Path(
        "crossport-out/resnet18.keras"),
    overwrite: Annotated[bool, typer.Option(help=_OVERWRITE_HELP)] = False,
):
    """Convert a torchvision ResNet-18 (random weights), check parity, save it as .keras."""
    from crossport.compat import import_torchvision

    quiet_tensorflow()
    import torch

    torchvision = import_torchvision()
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    console.print("converting torchvision resnet18 (random weights), input 1x3x224x224")
    _run_conversion(model, (torch.randn(1, 3, 224, 224),), output, as_json=False,
                    overwrite=overwrite)


@app.command(cls=_Command)
def convert(
    target: Annotated[str, typer.Argument(help="MODULE_OR_FILE:CALLABLE returning an nn.Module "
                                               "or a (module, example_args) pair")],
    input: Annotated[list[str], typer.Option(
        "--input", "-i", help="input shape, repeatable: 1x3x224x224, int64:1x128 (ids in "
                             "[0, 100)) or int64:1x128:30522 (ids in [0, 30522))")] = None,
    output: Annotated[Path, typer.Option(
        "-o", "--output", help="output: .keras, .tflite, or a SavedModel directory; an "
                               "existing folder is refused, never written into (only a "
                               "SavedModel is replaced, with --overwrite)")] = None,
    format: Annotated[str, typer.Option(
        help="keras, saved_model, tflite, tflite-fp16, tflite-int8 (dynamic range), "
             "tflite-int8-full, tflite-int16x8 (full integer; need --calibration) "
             "(default: from -o)")] = None,
    calibration: Annotated[Path, typer.Option(
        help="full-integer formats: a folder of .npy/.npz examples (one per file), one .npz "
             "of stacked examples (in the model's input layout), or a folder of images "
             "(.jpg/.png/...; preprocessed by the --calibration-* options)")] = None,
    calibration_mean: Annotated[str, typer.Option(
        help="image calibration: per-channel mean after scaling, RGB "
             "(default ImageNet 0.485,0.456,0.406)")] = None,
    calibration_std: Annotated[str, typer.Option(
        help="image calibration: per-channel std (default ImageNet 0.229,0.224,0.225)")] = None,
    calibration_scale: Annotated[float, typer.Option(
        help="image calibration: pixel (0..255) multiplier before mean/std (default 1/255)")
    ] = None,
    calibration_resize: Annotated[int, typer.Option(
        help="image calibration: shorter side before the center crop to the input's H x W "
             "(default H/0.875: 256 for 224)")] = None,
    calibration_crop: Annotated[str, typer.Option(
        help="image calibration: HxW crop, only for inputs of dynamic height/width")] = None,
    float_layer: Annotated[list[str], typer.Option(
        help="tflite-int8-full: keep this torch module in float, repeatable "
             "(e.g. layer3.0.conv1)")] = None,
    int8_io: Annotated[bool, typer.Option(
        help="full-integer formats: integer inputs and outputs")] = False,
    dynamic_batch: Annotated[bool, typer.Option(help="batch dim None in the Keras model")] = False,
    dynamic_dim: Annotated[list[str], typer.Option(
        help="a dim of run-time size, repeatable: INPUT:DIM[:NAME], INPUT a forward argument "
             "name or index, dims sharing NAME one size; e.g. input_ids:1:seq")] = None,
    channels_last_io: Annotated[bool, typer.Option(help="NHWC inputs and outputs")] = False,
    weights: Annotated[Path, typer.Option(help="a state_dict file (torch.save) to load")] = None,
    atol: Annotated[float, typer.Option(
        help="parity tolerance (normalized max error): at or below it the check passes")] = 1e-4,
    tolerance: Annotated[str, typer.Option(
        help="above --atol: 'rounding' passes when float64 evidence says rounding (Keras no "
             "further from torch float64 than 100x torch float32); 'atol' makes --atol a "
             "hard bound")] = "rounding",
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    emit_source: Annotated[Path | None, typer.Option(
        help="also write the model as Keras Python source (model_keras.py + weights); "
             "written together with -o: both land or neither")] = None,
    overwrite: Annotated[bool, typer.Option(help=_OVERWRITE_HELP)] = False,
    html: Annotated[Path, typer.Option(
        help="write a self-contained HTML report: parity, export re-check and times, the "
             "per-layer quantization report (worst first)")] = None,
):
    """Convert a PyTorch module to Keras and check parity; exit 0 only if it passed."""
    from crossport.cli_calibration import parse_image_preprocessing

    dynamic_dims = parse_dynamic_dims(dynamic_dim or [])
    preprocessing = parse_image_preprocessing(calibration_mean, calibration_std,
                                              calibration_scale, calibration_resize,
                                              calibration_crop)
    if preprocessing and calibration is None:
        _fail("the --calibration-* options preprocess a folder of images: pass "
              "--calibration DIR too")
    module, args = module_and_inputs(target, weights, input)
    quantization = {"calibration": calibration, "float_layers": float_layer or [],
                    "int8_io": int8_io, "preprocessing": preprocessing}
    _run_conversion(module.eval(), args, output, as_json, format, emit_source, overwrite,
                    quantization, html=html,
                    dynamic_batch=dynamic_batch, dynamic_dims=dynamic_dims,
                    channels_last_io=channels_last_io, atol=atol, tolerance=tolerance)


def parse_dynamic_dims(specs: list[str]) -> dict:
    """``["input_ids:1:seq", "0:2"]`` -> ``{"input_ids": {1: "seq"}, 0: {2: "d0_2"}}``."""
    dims: dict = {}
    for spec in specs:
        parts = spec.split(":")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1].isdigit():
            _fail(f"--dynamic-dim {spec!r}: expected INPUT:DIM[:NAME], e.g. input_ids:1:seq")
        key = int(parts[0]) if parts[0].isdigit() else parts[0]
        name = parts[2] if len(parts) == 3 and parts[2] else f"d{parts[0]}_{parts[1]}"
        dims.setdefault(key, {})[int(parts[1])] = name
    return dims


def module_and_inputs(target: str, weights: Path | None, inputs: list[str] | None):
    """The module ``target`` builds (weights loaded) and its example inputs; exits on error."""
    import torch

    built = _call_builder(target)
    if isinstance(built, tuple) and len(built) != 2:  # was a raw "too many values to unpack"
        _fail(f"{target} returned a tuple of {len(built)}; expected an nn.Module or a "
              "(module, example_args) pair")
    module, args = built if isinstance(built, tuple) else (built, None)
    if not isinstance(module, torch.nn.Module):
        _fail(f"{target} returned {type(module).__name__}, not a torch.nn.Module")
    if weights is not None:
        load_weights(module, weights)
    if inputs:
        args = _example_args(inputs)
    if args is None:
        _fail("no example inputs: pass --input SHAPE (repeatable) or return (module, args)")
    return module, args


def _call_builder(target: str):
    builder = load_callable(target)
    if not callable(builder):
        _fail(f"{target} is a {type(builder).__name__}, not a callable")
    try:
        return builder()
    except Exception as exc:  # the user's builder failed: one line, not a traceback
        _fail(f"{target}() raised {type(exc).__name__}: {exc}")


def load_weights(module, path: Path) -> None:
    """Load a state_dict saved with ``torch.save`` (``weights_only=True``: no code runs)."""
    import torch

    if not path.is_file():
        _fail(f"{path}: no such weights file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # not a torch file, or it holds code objects
        _fail(f"{path} is not a loadable state_dict: {type(exc).__name__}: {str(exc)[:200]}")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        _fail(f"{path} does not hold a state_dict (a dict of tensors)")
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        _fail(f"{path} does not fit the module: {' '.join(str(exc).split())[:300]}")


from crossport.cli_check import register as _register_check

_register_check(app)


@app.command(cls=_Command)
def ops():
    """List the supported ATen ops, their layout policy and converter."""
    from crossport.to_keras.optable import rows

    table = Table(title="crossport: supported ATen ops")
    for column in ("op", "policy", "family", "converter"):
        table.add_column(column)
    for row in rows():
        table.add_row(*row)
    console.print(table)


from crossport.cli_to_torch import register as _register_to_torch

_register_to_torch(app)


def _register_generate_export() -> None:
    from crossport.cli_generate import generate_export

    app.command("generate-export", cls=_Command)(generate_export)


_register_generate_export()

if __name__ == "__main__":
    main()
