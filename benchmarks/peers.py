"""crossport vs the peer converters (litert-torch, nobuco): latency ratios and export times.

For each model: the torch module is built here (seeded, BN calibrated, eval) and its
state_dict and input saved; then one ``peer_worker.py`` process per converter, each in that
converter's own venv (``peer_venvs.py`` creates the peers' venvs on first use; they are never
crossport dependencies), rebuilds the module, loads the state, converts it and times torch
eager interleaved with the converted model (1 thread, batch 1). Every number in the table is
a ratio to torch eager measured in the same process.

Writes the ``peers`` section of ``RESULTS.md`` and ``results_peers.json``. From the repo root:

    .venv/bin/python benchmarks/peers.py             # all models, 20 runs
    .venv/bin/python benchmarks/peers.py --quick     # resnet18 + mobilenet_v2, 5 runs
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # sets TF/Keras/OpenMP env vars first
import peer_venvs
import peer_worker
import torch

HERE = Path(__file__).resolve().parent
SHAPE = (1, 3, 224, 224)
MODELS = ["deeplabv3_mobilenet_v3_large", "swin_t", "vit_b_16", "regnet_y_400mf",
          "convnext_tiny", "efficientnet_b0", "resnet18", "mobilenet_v2"]
QUICK_MODELS = ["resnet18", "mobilenet_v2"]
CONVERTERS = ["crossport", "litert-torch", "nobuco"]
WORKER_TIMEOUT_S = 3600


def prepare(name: str, directory: Path) -> tuple[Path, Path]:
    """Save the seeded, BN-calibrated state_dict and the input every converter gets."""
    torch.manual_seed(0)
    module = common.calibrate_batchnorm(peer_worker.build_model(name), SHAPE)
    state, inp = directory / f"{name}.state.pt", directory / f"{name}.input.pt"
    torch.save(module.state_dict(), state)
    torch.save(torch.randn(SHAPE, generator=torch.Generator().manual_seed(0)), inp)
    return state, inp


def python_for(converter: str, venv_dir: Path) -> Path:
    """The project venv's python for crossport, the peer's own venv's for a peer."""
    if converter == "crossport":
        return Path(sys.executable)
    return peer_venvs.ensure_venv(converter, venv_dir)


def run_worker(converter: str, name: str, files: tuple[Path, Path], directory: Path,
               args: argparse.Namespace) -> dict[str, Any]:
    """One worker process; a failed install or crash becomes an error row."""
    out = directory / f"{name}.{converter}.json"
    try:
        python = python_for(converter, args.venv_dir)
    except Exception as exc:  # noqa: BLE001 (a failed peer install is an error row)
        return {"converter": converter, "model": name, "errors": {"install": repr(exc)}}
    work = directory / f"{name}.{converter}"
    work.mkdir(exist_ok=True)
    cmd = [str(python), str(HERE / "peer_worker.py"), "--converter", converter,
           "--model", name, "--state", str(files[0]), "--input", str(files[1]),
           "--workdir", str(work), "--out", str(out), "--runs", str(args.runs),
           "--warmup", str(args.warmup)]
    env = {**_clean_env(), "PYTHONPATH": str(HERE.parent)} if converter == "crossport" \
        else _clean_env()
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False,
                          timeout=WORKER_TIMEOUT_S)
    (directory / f"{name}.{converter}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"converter": converter, "model": name,
                "errors": {"process": f"exit {proc.returncode}: " + " / ".join(tail)}}
    result = json.loads(out.read_text())
    result["process_s"] = time.perf_counter() - start
    return result


def _clean_env() -> dict[str, str]:
    """The environment minus this venv's PYTHONPATH/VIRTUAL_ENV, so a peer sees only its own."""
    import os

    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def bench_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {"model": name}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        files = prepare(name, directory)
        for converter in args.converters:
            print(f"[{time.strftime('%H:%M:%S')}] {name}: {converter}", flush=True)
            row[converter] = run_worker(converter, name, files, directory, args)
            if args.keep_logs:  # the worker's log and JSON, kept should the run be cut short
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                for kept in (f"{name}.{converter}.log", f"{name}.{converter}.json"):
                    if (directory / kept).exists():
                        (args.keep_logs / kept).write_text((directory / kept).read_text())
    print(json.dumps(summary(row)), flush=True)
    return row


# -- reporting -----------------------------------------------------------------------------
def _ratio(row: dict, converter: str, variant: str) -> float | None:
    return row.get(converter, {}).get("ratio_to_torch", {}).get(variant)


def _error(row: dict, converter: str, variant: str | None = None) -> str | None:
    errors = row.get(converter, {}).get("errors", {})
    msg = errors.get(variant) if variant else None
    msg = msg or errors.get("convert") or errors.get("process") or errors.get("install")
    return msg.splitlines()[0][:90].replace("|", "/") if msg else None


def summary(row: dict) -> dict[str, Any]:
    """The headline numbers of one model (ratios to torch eager, times in s)."""
    cp, lt = row.get("crossport", {}), row.get("litert-torch", {})
    out = {"model": row["model"],
           "crossport_tflite": _ratio(row, "crossport", "tflite"),
           "litert_torch_tflite": _ratio(row, "litert-torch", "tflite"),
           "crossport_tf_graph": _ratio(row, "crossport", "tf_graph"),
           "nobuco_tf_graph": _ratio(row, "nobuco", "tf_graph"),
           "keras_app_tf_graph": _ratio(row, "crossport", "keras_app"),
           "torch_export_s": cp.get("torch_export_s"),
           "crossport_convert_s": cp.get("convert_s"), "crossport_export_s": cp.get("export_s"),
           "litert_torch_convert_s": lt.get("convert_s"),
           "litert_torch_export_s": lt.get("export_s"),
           "nobuco_convert_s": row.get("nobuco", {}).get("convert_s")}
    out["targets"] = targets(out)
    return out


NOISE = 0.05  # latency ratios within 5% of the peer's count as a tie on this shared machine


def targets(s: dict) -> dict[str, str | None]:
    """Issue 13's targets: "yes", "tie" (latency within NOISE), "no"; None if missing."""
    def le(a, b, band=0.0):
        if a is None or b is None:
            return None
        return "yes" if a <= b else "tie" if a <= b * (1 + band) else "no"

    graph_refs = [v for v in (s["nobuco_tf_graph"], s["keras_app_tf_graph"]) if v is not None]
    lt_total = (None if s["litert_torch_convert_s"] is None or s["litert_torch_export_s"] is None
                else s["litert_torch_convert_s"] + s["litert_torch_export_s"])
    conv_limit = None if s["torch_export_s"] is None else 2 * s["torch_export_s"]
    return {"tflite_le_litert": le(s["crossport_tflite"], s["litert_torch_tflite"], NOISE),
            "tf_graph_le_best_peer": le(s["crossport_tf_graph"],
                                        min(graph_refs) if graph_refs else None, NOISE),
            "export_le_litert": le(s["crossport_export_s"], lt_total),
            "convert_le_2x_export": le(s["crossport_convert_s"], conv_limit)}


def _cell(row: dict, converter: str, variant: str, value: float | None) -> str:
    if value is not None:
        return f"{value:.2f}"
    err = _error(row, converter, variant)
    return f"failed: {err}" if err else "—"


def _mark(flag: str | None) -> str:
    return {"yes": "yes", "tie": "tie (≤5%)", "no": "**no**", None: "n/a"}[flag]


def table_lines(rows: list[dict]) -> list[str]:
    lines = [("| model | crossport TFLite | litert-torch TFLite | crossport TF graph | "
             "nobuco TF graph | keras.applications TF graph |"),
             "|---|---|---|---|---|---|"]
    for row in rows:
        s = summary(row)
        lines.append(
            f"| {row['model']} | {_cell(row, 'crossport', 'tflite', s['crossport_tflite'])} | "
            f"{_cell(row, 'litert-torch', 'tflite', s['litert_torch_tflite'])} | "
            f"{_cell(row, 'crossport', 'tf_graph', s['crossport_tf_graph'])} | "
            f"{_cell(row, 'nobuco', 'tf_graph', s['nobuco_tf_graph'])} | "
            f"{'—' if s['keras_app_tf_graph'] is None else format(s['keras_app_tf_graph'], '.2f')} |")
    return lines


def _s(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}"


def time_lines(rows: list[dict]) -> list[str]:
    lines = [("| model | torch.export s | crossport convert+check s (x export) | crossport "
             "export s | litert-torch convert + export s | nobuco convert s | TFLite ≤ litert | "
             "TF graph ≤ best peer | export ≤ litert | convert ≤ 2x export |"),
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        s, t = summary(row), summary(row)["targets"]
        x = (f" ({s['crossport_convert_s'] / s['torch_export_s']:.1f}x)"
             if s["crossport_convert_s"] and s["torch_export_s"] else "")
        lt = (f"{_s(s['litert_torch_convert_s'])} + {_s(s['litert_torch_export_s'])}"
              if s["litert_torch_convert_s"] is not None else "—")
        lines.append(f"| {row['model']} | {_s(s['torch_export_s'])} | "
                     f"{_s(s['crossport_convert_s'])}{x} | {_s(s['crossport_export_s'])} | "
                     f"{lt} | {_s(s['nobuco_convert_s'])} | {_mark(t['tflite_le_litert'])} | "
                     f"{_mark(t['tf_graph_le_best_peer'])} | {_mark(t['export_le_litert'])} | "
                     f"{_mark(t['convert_le_2x_export'])} |")
    return lines


def detail_lines(rows: list[dict]) -> list[str]:
    """Absolute medians per process and the parity of each converted model."""
    lines = [("| model | converter | torch eager ms | converted ms (variant) | max error vs "
             "torch | errors |"), "|---|---|---|---|---|---|"]
    for row in rows:
        for conv in CONVERTERS:
            r = row.get(conv)
            if r is None:
                continue
            lat = r.get("latency", {})
            eager = lat.get("torch_eager", {}).get("median_ms")
            others = ", ".join(f"{v['median_ms']:.1f} ({k})" for k, v in lat.items()
                               if k != "torch_eager")
            # the keras.applications twin has its own random weights: no parity to show
            errs = ", ".join(f"{k}: {v:.1e}" for k, v in r.get("max_error", {}).items()
                             if k != "keras_app")
            problems = "; ".join(f"{k}: {v.splitlines()[0][:120]}"
                                 for k, v in r.get("errors", {}).items()).replace("|", "/")
            lines.append(f"| {row['model']} | {conv} | {_s(eager)} | {others or '—'} | "
                         f"{errs or '—'} | {problems or '—'} |")
    return lines


def write_results(rows: list[dict], meta: dict, out_dir: Path) -> None:
    load = meta["load_average"]
    lines = [
        "## Peers: crossport vs litert-torch and nobuco (benchmarks/peers.py)", "",
        f"Date: {meta['date']}  ", f"Command: `{meta['command']}`", "",
        (f"Machine: {meta['cpu']}, {meta['cores']} cores, **1 thread** for torch, TF and "
         f"LiteRT; 1-minute load average between {min(load):.1f} and {max(load):.1f} (the "
         "machine is shared with other engineers, so absolute times are noisy: every number "
         "below is a ratio to torch eager timed interleaved in the same process, which is "
         "what to compare)."),
        "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + ".", "",
        ("Method: the torch module (torchvision, `weights=None`, seeded, BatchNorm statistics "
        "calibrated on random batches, layer scales / zero-init weights made live, eval, "
        "1x3x224x224) is built once in the project venv and its state_dict saved; each "
        "converter then runs in its own process and venv (`peer_venvs.py` creates the "
        "litert-torch and nobuco venvs: torch 2.13 CPU pinned, torchvision `--no-deps`), "
        "loads the state, converts with NHWC input (crossport `channels_last_io=True`, "
        "`litert_torch.to_channel_last_io`, nobuco `ChannelOrder.TENSORFLOW`) and times torch "
        "eager and the converted model round-robin "
        f"({meta['runs']} runs after {meta['warmup']} warm-up calls). Ratio = median over "
        "rounds of t_converted / t_torch. TFLite: `ai_edge_litert` Interpreter, "
        "`num_threads=1` (XNNPACK), invoke + output fetch. TF graph: `tf.function("
        "model(x, training=False), jit_compile=False)` with a fixed signature. Times: "
        "crossport convert = `convert_with_report(check=True)`, export = `crossport.export("
        "format='tflite')` (re-check included); litert-torch = `litert_torch.convert` + "
        "`.export`; torch.export = `torch.export.export(strict=False)` in crossport's "
        "process; each converter first converts a tiny model, untimed."), "",
        "Latency, ratio to torch eager in the same process (smaller is faster):", "",
        *table_lines(rows), "",
        "Conversion and export times (seconds) and issue 13's targets:", "",
        *time_lines(rows), "",
        "Absolute medians per process and max error `max|d|/max(1,max|ref|)` vs torch:", "",
        *detail_lines(rows), "",
    ]
    common.write_section(out_dir / "RESULTS.md", "peers", lines)
    (out_dir / "results_peers.json").write_text(json.dumps(
        {"meta": meta, "summary": [summary(r) for r in rows], "rows": rows}, indent=1))


def metadata(args: argparse.Namespace, load_start: float) -> dict[str, Any]:
    import os

    info = common.run_metadata(args.runs, args.warmup, 1)
    versions = {"torch": torch.__version__}
    for peer in peer_venvs.RECIPES:
        versions.update({k: v for k, v in peer_venvs.versions(peer, args.venv_dir).items()
                         if k == peer})
    m = info["machine"]
    versions.update(tensorflow=m["tensorflow"], keras=m["keras"], crossport=m["crossport"])
    return {"date": info["date"], "command": info["command"], "runs": args.runs,
            "warmup": args.warmup, "cpu": m["cpu"], "cores": m["cores"],
            "load_average": [load_start, os.getloadavg()[0]], "versions": versions}


def merge(files: list[Path], out_dir: Path) -> None:
    """One report from several runs' JSON (rows in MODELS order; meta of the first run)."""
    loaded = [json.loads(f.read_text()) for f in files]
    workers = [d for d in loaded if "converter" in d]  # single worker JSONs (--keep-logs)
    loaded = [d for d in loaded if "rows" in d]
    rows = [row for data in loaded for row in data["rows"]]
    for result in workers:
        row = next((r for r in rows if r["model"] == result["model"]), None)
        if row is None:
            rows.append(row := {"model": result["model"]})
        row[result["converter"]] = result
    rows.sort(key=lambda r: MODELS.index(r["model"]) if r["model"] in MODELS else len(MODELS))
    meta = dict(loaded[0]["meta"])
    loads = [x for data in loaded for x in data["meta"]["load_average"]]
    meta["load_average"] = [min(loads), max(loads)]
    meta["command"] = " + ".join(sorted({d["meta"]["command"] for d in loaded}))
    write_results(rows, meta, out_dir)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(peer_worker.TORCHVISION))
    parser.add_argument("--converters", nargs="+", choices=CONVERTERS, default=CONVERTERS)
    parser.add_argument("--quick", action="store_true", help="2 models, 5 runs")
    parser.add_argument("--runs", type=int)
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--venv-dir", type=Path, default=peer_venvs.DEFAULT_DIR)
    parser.add_argument("--out", type=Path, default=HERE, help="where RESULTS.md and "
                        "results_peers.json go")
    parser.add_argument("--keep-logs", type=Path, help="copy each worker's log here")
    parser.add_argument("--from-json", type=Path, nargs="+", help="only write the report "
                        "from these results_peers.json files (e.g. runs split over models) "
                        "and/or worker JSONs kept by --keep-logs; the first must be a "
                        "results_peers.json (its metadata heads the report)")
    args = parser.parse_args(argv)
    args.models = args.models or (QUICK_MODELS if args.quick else MODELS)
    args.runs = args.runs or (5 if args.quick else 20)
    args.warmup = args.warmup or (2 if args.quick else 3)
    return args


def main(argv: list[str] | None = None) -> None:
    import os

    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        return merge(args.from_json, args.out)
    load_start = os.getloadavg()[0]
    torch.set_num_threads(1)
    rows = [bench_model(name, args) for name in args.models]
    write_results(rows, metadata(args, load_start), args.out)


if __name__ == "__main__":
    main()
