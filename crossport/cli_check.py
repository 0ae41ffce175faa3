"""``crossport check``: a torch module against a Keras model, layer by layer.

Registered on the main app by crossport/cli.py (``register``), with its one-line errors.
The ``--html`` / ``--json`` reports are refused before anything runs if they exist (replaced
only with ``--overwrite``) and are staged, so both land or neither does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from crossport.cli import (  # all defined before cli.py imports this module
    _Command,
    _fail,
    check_free,
    console,
    module_and_inputs,
)
from crossport.compat import quiet_tensorflow


def register(app: typer.Typer) -> None:
    """Add the ``check`` command to ``app`` (crossport/cli.py calls this)."""
    app.command("check", cls=_Command)(check)


def check(
    target: Annotated[str, typer.Argument(help="MODULE_OR_FILE:CALLABLE returning the torch "
                                               "nn.Module (or a (module, example_args) pair)")],
    keras_model: Annotated[Path, typer.Argument(help="the Keras model (.keras file)")],
    input: Annotated[list[str], typer.Option(
        "--input", "-i",
        help="input shape, repeatable: 1x3x32x32, int64:1x128 or int64:1x128:HIGH")] = None,
    weights: Annotated[Path, typer.Option(help="a state_dict file (torch.save) to load")] = None,
    transfer: Annotated[bool, typer.Option(
        "--transfer-weights", help="copy the torch weights into the Keras model first")] = False,
    atol: Annotated[float, typer.Option(help="per-layer tolerance (normalized error)")] = 1e-4,
    html: Annotated[Path, typer.Option(help="write a self-contained HTML report")] = None,
    json_path: Annotated[Path, typer.Option("--json", help="write the report as JSON")] = None,
    overwrite: Annotated[bool, typer.Option(
        help="replace existing --html / --json files")] = False,
):
    """Compare a torch module with a Keras model layer by layer; name the first divergence."""
    quiet_tensorflow()
    import keras

    import crossport
    from crossport.export.staging import FILE, Staging
    from crossport.parity import render

    reports = [path for path in (html, json_path) if path is not None]
    check_free([(path, FILE) for path in reports], overwrite)  # before running anything
    module, args = module_and_inputs(target, weights, input)
    if not keras_model.exists():
        _fail(f"{keras_model}: no such Keras model file")
    try:
        model = keras.models.load_model(keras_model, compile=False)
    except Exception as exc:  # not a Keras file, or an unknown custom layer
        _fail(f"cannot load {keras_model}: {type(exc).__name__}: {str(exc)[:200]}")
    try:
        if transfer:
            crossport.transfer_weights(module.eval(), model, verbose=True)
        with console.status("running torch and Keras layer by layer ..."):
            report = crossport.check(module.eval(), model, args, atol=atol)
    except crossport.CrossportError as exc:
        _fail(f"{type(exc).__name__}: {exc}")
    render.print_report(report, console)
    with Staging(overwrite) as staging:  # both reports land, or neither
        if html is not None:
            render.to_html(report, staging.claim(html))
        if json_path is not None:
            render.to_json(report, staging.claim(json_path))
        staging.commit()
    for kind, path in (("HTML", html), ("JSON", json_path)):
        if path is not None:
            console.print(f"{kind} report: {path}")
    if not report.passed:
        raise typer.Exit(1)
