"""``crossport generate-export``: an HF causal LM to a generative TFLite/SavedModel.

Kept beside ``cli.py`` (registered there) so the heavy imports stay lazy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

_STAGE_TEXT = {
    "wrap": "wrapping the model with a functional KV cache ...",
    "capture": "capturing the cached step with torch.export ...",
    "convert": "building the Keras step model ...",
    "verify": "checking the step model against torch ...",
    "write": "writing the signatures (prefill/decode) ...",
    "generate-check": "greedy generation on the artifact vs HF generate ...",
}


def load_causal_lm(target: str):
    """A local HF model directory (``from_pretrained``, no downloads) or ``FILE.py:FN``."""
    from crossport import cli

    if Path(target).is_dir():
        from crossport.compat import import_torchvision

        import_torchvision()
        import transformers

        try:
            return transformers.AutoModelForCausalLM.from_pretrained(
                target, local_files_only=True, dtype="float32").eval()
        except Exception as exc:  # not an HF model directory: one line, not a traceback
            cli._fail(f"cannot load a causal LM from {target}: {type(exc).__name__}: {exc}")
    built = cli._call_builder(target)
    return (built[0] if isinstance(built, tuple) else built).eval()


def parse_lengths(text: str) -> tuple[int, ...]:
    try:
        lengths = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        lengths = ()
    if not lengths:
        raise typer.BadParameter(f"{text!r}: expected comma-separated lengths, e.g. 8,32")
    return lengths


def generate_export(
    target: Annotated[str, typer.Argument(help="a local HF model directory, or FILE.py:FN / "
                                               "package.module:FN returning a causal LM")],
    output: Annotated[Path, typer.Option("-o", "--output",
                                         help=".tflite file or SavedModel directory")],
    prefill: Annotated[str, typer.Option(help="prefill signature lengths")] = "8,32",
    cache: Annotated[int, typer.Option(help="KV cache length (prompt + new tokens)")] = 512,
    quantize: Annotated[str, typer.Option(help="none, int8-weights or fp16")] = "none",
    format: Annotated[str, typer.Option(help="tflite or saved_model (default: from -o)")] = None,
    check: Annotated[bool, typer.Option(help="verify by greedy generation vs HF")] = True,
):
    """Export an HF causal LM with prefill/decode signatures and a KV cache, verified by
    greedy generation against HF generate."""
    from crossport import cli
    from crossport.compat import quiet_tensorflow

    quiet_tensorflow()
    lengths = parse_lengths(prefill)
    model = load_causal_lm(target)
    import crossport
    from crossport import generative

    try:
        with cli.console.status("starting ...") as status:
            result = generative.export(
                model, output, lengths, cache, None if quantize == "none" else quantize,
                format=format, check=check, on_stage=lambda s: status.update(_STAGE_TEXT[s]))
    except crossport.CrossportError as exc:
        cli._fail(f"{type(exc).__name__}: {exc}")
    cli.console.print(result.summary(), highlight=False)
