"""A/B timing of ``.tflite`` files of one model in one process, each loaded twice.

``peers.py`` times each converter in its own process against torch eager there. On this
shared 2-core machine two interpreters of the *same* file in one process measured up to
±10% apart depending on load order, which is as large as some gaps between converters. This
script loads every file twice, in the order A B A' B' (so each converter has an early and a
late copy), runs all copies round-robin with the order rotated every round (1 thread, batch
1, XNNPACK), and reports each converter's time as the mean of its two copies' medians and the
spread between its copies (the noise floor of the comparison).

    .venv/bin/python benchmarks/tflite_ab.py --runs 40 crossport=/tmp/a.tflite \
        litert-torch=/tmp/b.tflite

Writes nothing; prints a Markdown table row per file (used for RESULTS.md, section
``tflite-ab``).

With ``--models`` it makes the files itself, one process per converter and model
(``tflite_files.py``: crossport in this venv, litert-torch in the venv ``peer_venvs.py``
creates), times each pair as above and writes RESULTS.md section ``tflite-set`` with the
latency ratio and both converters' convert and export seconds:

    .venv/bin/python benchmarks/tflite_ab.py --models bert_base whisper_encoder --runs 30
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # sets env vars before TF loads
import numpy as np
from peer_worker import tflite_runner

HERE = Path(__file__).resolve().parent


def time_files(named: list[tuple[str, str]], runs: int, warmup: int) -> list[dict]:
    """Each file's two copies' medians, their mean, and its ratio and max diff
    (``max|d| / max(1, max|first|)``) to the first file's."""
    fns, outputs = {}, {}
    for copy in ("", "'"):
        for name, path in named:
            fns[name + copy] = tflite_runner(Path(path))  # 1 thread, seeded input
            outputs[name] = fns[name + copy]()
    samples = common.interleaved_latency(fns, runs, warmup)
    first = named[0][0]
    rows = []
    for name, _path in named:
        copies = [common.summarize(samples[name + c])["median_ms"] for c in ("", "'")]
        rows.append({"name": name, "copies_ms": copies, "ms": statistics.mean(copies),
                     "max_diff": float(np.abs(outputs[name] - outputs[first]).max()
                                       / max(1.0, np.abs(outputs[first]).max()))})
    for row in rows:
        row["ratio"] = row["ms"] / rows[0]["ms"]
    return rows


def make_files(model: str, workdir: Path, venv_dir: Path) -> dict[str, dict]:
    """crossport's and litert-torch's files of ``model`` (``tflite_files.py``, one process
    each), with their convert/export seconds; an error is recorded, not raised."""
    from peer_venvs import ensure_venv

    pythons = {"crossport": Path(sys.executable),
               "litert-torch": ensure_venv("litert-torch", venv_dir)}
    made = {}
    for converter, python in pythons.items():
        cmd = [str(python), str(HERE / "tflite_files.py"), "--converter", converter,
               "--model", model, "--workdir", str(workdir)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        result = workdir / f"{converter}.json"
        if done.returncode == 0 and result.exists():
            made[converter] = json.loads(result.read_text())
        else:
            tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            made[converter] = {"error": tail[:300]}
            print(f"{model}: {converter} failed: {tail}", file=sys.stderr)
    return made


def run_models(models: list[str], runs: int, warmup: int, venv_dir: Path,
               keep: Path | None) -> list[str]:
    """The ``tflite-set`` section: per model, the A/B of both files and the seconds."""
    lines = [
        "| model | crossport ms (copies) | litert-torch ms (copies) | litert-torch / crossport "
        "| max diff (normalized) | torch.export s | crossport convert s (x export) | crossport export s "
        "| litert-torch convert + export s |",
        "|---|---|---|---|---|---|---|---|---|"]
    root = keep or Path(tempfile.mkdtemp(prefix="tflite-set-"))
    for model in models:
        workdir = root / model
        workdir.mkdir(parents=True, exist_ok=True)
        made = make_files(model, workdir, venv_dir)
        cp, lt = made["crossport"], made["litert-torch"]
        if "error" in cp or "error" in lt:
            lines.append(f"| {model} | {cp.get('error', 'ok')} | {lt.get('error', 'ok')} "
                         "| — | — | — | — | — | — |")
            continue
        a, b = time_files([("crossport", str(workdir / "crossport.tflite")),
                           ("litert-torch", str(workdir / "litert-torch.tflite"))],
                          runs, warmup)
        lines.append(
            f"| {model} | {a['copies_ms'][0]:.1f} / {a['copies_ms'][1]:.1f} "
            f"| {b['copies_ms'][0]:.1f} / {b['copies_ms'][1]:.1f} | {b['ratio']:.3f} "
            f"| {b['max_diff']:.1e} | {cp['torch_export_s']:.2f} | {cp['convert_s']:.2f} "
            f"({cp['convert_s'] / cp['torch_export_s']:.1f}x) | {cp['export_s']:.2f} "
            f"| {lt['convert_s']:.2f} + {lt['export_s']:.2f} |")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="NAME=PATH, files of one model (one input "
                        "each, same shape; seeded values, so every file gets the same)")
    parser.add_argument("--models", nargs="+", help="make crossport's and litert-torch's "
                        "files of these models (tflite_files.MODELS) and time them")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--venv-dir", type=Path, default=HERE / ".venvs")
    parser.add_argument("--keep", type=Path, help="--models: keep the files and JSONs here")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    args = parser.parse_args()
    if args.models:
        load_before = os.getloadavg()[0]
        lines = run_models(args.models, args.runs, args.warmup, args.venv_dir, args.keep)
        meta = common.run_metadata(args.runs, args.warmup, 1)
        load = f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
        header = [f"## TFLite vs litert-torch over the benchmark set (benchmarks/tflite_ab.py "
                  f"--models, {meta['date']})", "",
                  f"Command: `python benchmarks/tflite_ab.py --runs {args.runs} --models "
                  f"{' '.join(args.models)}`; 1-minute load average {load}. "
                  "Each file loaded twice, 1 thread, XNNPACK; convert and export seconds "
                  "from one process per converter (1 thread), crossport's convert includes "
                  "its parity check and its export the re-check.", ""]
        common.write_section(args.out, "tflite-set", header + lines)
        return
    if len(args.files) < 2:
        parser.error("give two or more NAME=PATH files, or --models")
    rows = time_files([f.split("=", 1) for f in args.files], args.runs, args.warmup)
    first = rows[0]["name"]
    print("| file | median ms (copy 1 / copy 2) | mean of copies | ratio to "
          f"{first} | normalized max diff to {first} |")
    print("|---|---|---|---|---|")
    for row in rows:
        a, b = row["copies_ms"]
        print(f"| {row['name']} | {a:.1f} / {b:.1f} | {row['ms']:.1f} | {row['ratio']:.3f} "
              f"| {row['max_diff']:.1e} |")


if __name__ == "__main__":
    main()
