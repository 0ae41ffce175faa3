"""``crossport to-torch``: a Keras model file -> torch.export program or state_dict.

Registered on the main app by crossport/cli.py (``register``); the same one-line errors,
progress and JSON as ``crossport convert``. Nothing is left at the output path when a step fails.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from crossport.compat import quiet_tensorflow


def _fail(message: str):
    from crossport.cli import _fail as fail

    fail(message)


def save_module(module, args: tuple, output: Path) -> str:
    """Write ``module`` to ``output``: ``.pt2`` a torch.export program, ``.pt`` a state_dict."""
    import torch

    suffix = output.suffix.lower()
    if suffix not in (".pt2", ".pt", ".pth"):
        _fail(f"{output}: expected a .pt2 (torch.export program) or .pt (state_dict) path")
    fd, tmp = tempfile.mkstemp(suffix=suffix, dir=output.parent or Path("."))
    os.close(fd)
    try:
        if suffix == ".pt2":
            program = torch.export.export(module, args)
            torch.export.save(program, tmp)
            reloaded = torch.export.load(tmp).module()
            with torch.no_grad():
                for want, got in zip(torch.utils._pytree.tree_leaves(module(*args)),
                                     torch.utils._pytree.tree_leaves(reloaded(*args))):
                    torch.testing.assert_close(got, want)
            kind = "torch.export program"
        else:
            torch.save(module.state_dict(), tmp)
            kind = "state_dict"
        os.replace(tmp, output)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return kind


def register(app: typer.Typer) -> None:
    """Add the ``to-torch`` command to ``app`` (crossport/cli.py calls this)."""
    app.command("to-torch")(to_torch)


def to_torch(
    model: Annotated[Path, typer.Argument(help="a Keras model file (.keras or .h5)")],
    input: Annotated[list[str] | None, typer.Option(
        "--input", "-i", help="input shape in the Keras layout, repeatable: 1x224x224x3, "
                             "int32:1x128:30522")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="model.pt2 (torch.export program) or model.pt (state_dict)")] = None,
    channels_first_io: Annotated[bool, typer.Option(help="NCHW inputs and outputs")] = False,
    atol: Annotated[float, typer.Option(help="parity tolerance (normalized max error)")] = 1e-4,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    emit_source: Annotated[Path | None, typer.Option(
        help="also write readable PyTorch source (model_torch.py + model_torch.pt)")] = None,
):
    """Convert a Keras model to a PyTorch module and check parity; exit 0 only if it passed."""
    quiet_tensorflow()
    import crossport
    from crossport.cli import _example_args, console

    if not model.exists():
        _fail(f"{model}: no such file")
    if not input:
        _fail("give the input shape(s) with --input, e.g. --input 1x224x224x3")
    args = _example_args(input)
    saved = None
    try:
        with console.status("converting the Keras model and checking parity ..."):
            conversion = crossport.to_torch_with_report(
                str(model), args, channels_first_io=channels_first_io, atol=atol)
        if output is not None:
            with console.status(f"writing {output} ..."):
                saved = save_module(conversion.module, args, output)
        if emit_source is not None:
            with console.status(f"writing {emit_source} and re-checking it ..."):
                crossport.to_torch_source(conversion, emit_source)
    except crossport.CrossportError as exc:
        _fail(f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001  (torch.export / saving: one line, nothing left)
        _fail(f"writing {output} failed: {type(exc).__name__}: {exc}")
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
