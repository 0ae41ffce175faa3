"""``crossport to-torch``: a Keras model file -> torch.export program or state_dict.

Registered on the main app by crossport/cli.py (``register``); the same one-line errors,
progress and JSON as ``crossport convert``. Bad options and existing outputs are refused
before converting; outputs (``-o`` and ``--emit-source``) are staged and land together or
not at all, and an existing file is replaced only with ``--overwrite``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from crossport.cli import (  # all defined before cli.py imports this module
    _OVERWRITE_HELP,
    _Command,
    _example_args,
    _fail,
    check_free,
    check_source_suffix,
    console,
)
from crossport.compat import quiet_tensorflow

if TYPE_CHECKING:
    from crossport.export.staging import Staging

OUTPUT_SUFFIXES = {".pt2": "torch.export program", ".pt": "state_dict", ".pth": "state_dict"}


def stage_module(module, args: tuple, output: Path, staging: Staging) -> str:
    """Write ``module`` for ``output`` in ``staging``: ``.pt2`` a torch.export program
    (re-loaded and compared), ``.pt``/``.pth`` a state_dict. Returns the kind written."""
    import torch

    from crossport.errors import ExportError

    kind = OUTPUT_SUFFIXES[output.suffix.lower()]
    temp = staging.claim(output)
    try:
        if kind == "state_dict":
            torch.save(module.state_dict(), temp)
            return kind
        torch.export.save(torch.export.export(module, args), temp)
        reloaded = torch.export.load(temp).module()
        with torch.no_grad():
            for want, got in zip(torch.utils._pytree.tree_leaves(module(*args)),
                                 torch.utils._pytree.tree_leaves(reloaded(*args))):
                torch.testing.assert_close(got, want)
    except Exception as exc:  # torch.export / saving / the re-check: one line, nothing lands
        raise ExportError(f"writing {output} failed: {type(exc).__name__}: {exc}") from exc
    return kind


def register(app: typer.Typer) -> None:
    """Add the ``to-torch`` command to ``app`` (crossport/cli.py calls this)."""
    app.command("to-torch", cls=_Command)(to_torch)


def to_torch(
    model: Annotated[Path, typer.Argument(help="a Keras model file (.keras or .h5)")],
    input: Annotated[list[str] | None, typer.Option(
        "--input", "-i", help="input shape in the Keras layout, repeatable: 1x224x224x3, "
                             "int32:1x128:30522 (default: from the model's Input specs, "
                             "a None batch as 2)")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="model.pt2 (torch.export program) or model.pt/.pth "
                               "(state_dict)")] = None,
    channels_first_io: Annotated[bool, typer.Option(help="NCHW inputs and outputs")] = False,
    atol: Annotated[float, typer.Option(
        help="parity tolerance (normalized max error), a finite number >= 0")] = 1e-4,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    emit_source: Annotated[Path | None, typer.Option(
        help="also write readable PyTorch source (model_torch.py + model_torch.pt); "
             "written together with -o: both land or neither")] = None,
    overwrite: Annotated[bool, typer.Option(help=_OVERWRITE_HELP)] = False,
):
    """Convert a Keras model to a PyTorch module and check parity; exit 0 only if it passed."""
    quiet_tensorflow()
    args = _checked_args(model, input, output, emit_source, atol, overwrite)
    conversion = _convert(model, args, channels_first_io, atol)
    saved = _write(conversion, output, emit_source, overwrite)
    if as_json:
        print(json.dumps({
            "parity": conversion.report.to_dict() if conversion.report else None,
            "permutes": conversion.permutes,
            "boundary_permutes": conversion.boundary_permutes,
            "seconds": conversion.seconds,
            "output": str(output) if output else None, "format": saved,
            "source": str(emit_source) if emit_source else None,
        }, indent=2))
        return
    _print_summary(conversion, output, saved, emit_source)


def _checked_args(model: Path, input: list[str] | None, output: Path | None,
                  emit_source: Path | None, atol: float, overwrite: bool) -> tuple:
    """Every check that needs no conversion, in one line each; the example inputs."""
    from crossport.capture import normalize_example_args
    from crossport.errors import CrossportError
    from crossport.export.staging import FILE
    from crossport.options import ConvertOptions
    from crossport.to_torch.source import torch_source_files

    if not model.exists():
        _fail(f"{model}: no such file")
    if output is not None and output.suffix.lower() not in OUTPUT_SUFFIXES:
        _fail(f"-o {output}: expected a .pt2 (torch.export program) or .pt/.pth (state_dict) "
              "path")
    check_source_suffix(emit_source)
    targets = [output] if output is not None else []
    targets += torch_source_files(emit_source) if emit_source is not None else []
    check_free([(path, FILE) for path in targets], overwrite)
    try:
        ConvertOptions(atol=atol).validate()  # the same atol rule as convert
        if not input:
            return None  # made from the model's Input specs (to_torch_with_report)
        return normalize_example_args(_example_args(input))  # refuses a dim of size 0
    except CrossportError as exc:
        _fail(f"{type(exc).__name__}: {exc}")


def _convert(model: Path, args: tuple, channels_first_io: bool, atol: float):
    import crossport

    try:
        with console.status("converting the Keras model and checking parity ..."):
            return crossport.to_torch_with_report(
                str(model), args, channels_first_io=channels_first_io, atol=atol)
    except crossport.CrossportError as exc:
        _fail(f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001  (a crossport bug: one line, traceback with --debug)
        _fail(f"converting {model} failed: {type(exc).__name__}: {exc} (rerun with --debug "
              "for the traceback and please report it)")


def _write(conversion, output: Path | None, emit_source: Path | None,
           overwrite: bool) -> str | None:
    """Stage -o and --emit-source and commit them together; the kind written to -o."""
    import crossport
    from crossport.export.staging import Staging
    from crossport.to_torch.source import stage_torch_source

    saved = None
    try:
        with Staging(overwrite) as staging:  # every output lands, or none does
            if output is not None:
                with console.status(f"writing {output} ..."):
                    saved = stage_module(conversion.module, conversion.example_args, output,
                                         staging)
            if emit_source is not None:
                with console.status(f"writing {emit_source} and re-checking it ..."):
                    stage_torch_source(conversion, emit_source, staging)
            staging.commit()
    except crossport.CrossportError as exc:
        _fail(f"{type(exc).__name__}: {exc}")
    return saved


def _print_summary(conversion, output: Path | None, saved: str | None,
                   emit_source: Path | None) -> None:

    table = Table(title="crossport to-torch", show_header=False)
    report = conversion.report
    table.add_row("parity", f"{report.max_error:.2e} normalized max error "
                  f"({'PASS' if report.passed else 'FAIL'}, tolerance {report.atol:.0e})")
    table.add_row("permutes", f"{conversion.permutes} inside the module, "
                  f"{conversion.boundary_permutes} at inputs/outputs")
    for stage, seconds in conversion.seconds.items():
        table.add_row(f"time: {stage}", f"{seconds:.2f} s")
    if saved:
        table.add_row("saved to", f"{output} ({saved})")
    if emit_source:
        table.add_row("source", f"{emit_source} (build_model(); weights beside it)")
    console.print(table)
