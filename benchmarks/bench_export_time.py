"""Conversion and TFLite export time per stage, against plain ``torch.export.export``.

One process per run: builds each torchvision model (random weights), times
``torch.export.export``, ``crossport.convert_with_report`` (its ``seconds`` per stage) and
``crossport.export(conversion, "m.tflite")`` (``ExportResult.stages``), ``--repeats`` times,
and prints the medians as JSON (``--json``) or a markdown table. Section ``export time`` of
``RESULTS.md`` is written by hand from its output (the machine is shared: see the notes).

    .venv/bin/python benchmarks/bench_export_time.py --models resnet18 vit_b_16 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def _model(name: str):
    import torch

    from crossport.compat import import_torchvision

    torch.manual_seed(0)
    return getattr(import_torchvision().models, name)(weights=None).eval()


def measure(name: str, repeats: int, export: bool) -> dict:
    """Median seconds per stage over ``repeats`` runs of one model."""
    import torch

    import crossport

    module, x = _model(name), torch.randn(1, 3, 224, 224)
    runs: dict[str, list[float]] = {}

    def add(key: str, seconds: float) -> None:
        runs.setdefault(key, []).append(seconds)

    for _ in range(repeats):
        start = time.perf_counter()
        torch.export.export(module, (x,), strict=False)
        add("torch.export", time.perf_counter() - start)
        start = time.perf_counter()
        conversion = crossport.convert_with_report(module, (x,))
        add("convert_with_report", time.perf_counter() - start)
        for stage, seconds in conversion.seconds.items():
            add(f"convert: {stage}", seconds)
        if export:
            with tempfile.TemporaryDirectory() as tmp:
                result = crossport.export(conversion, Path(tmp) / "m.tflite")
            add("export", result.seconds)
            for stage, seconds in getattr(result, "stages", {}).items():
                add(f"export: {stage}", seconds)
    medians = {key: statistics.median(values) for key, values in runs.items()}
    medians["conversion / torch.export"] = (medians["convert_with_report"]
                                            / medians["torch.export"])
    return medians


def main() -> None:
    from crossport.compat import quiet_tensorflow

    quiet_tensorflow()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2", "vit_b_16"])
    parser.add_argument("--export", nargs="*", default=["resnet18", "vit_b_16"],
                        help="models whose TFLite export is timed too")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {name: measure(name, args.repeats, name in args.export) for name in args.models}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, stages in results.items():
        print(f"\n{name}\n| stage | seconds (median of {args.repeats}) |\n|---|---|")
        for key, value in stages.items():
            print(f"| {key} | {value:.2f} |")


if __name__ == "__main__":
    main()
