"""Benchmark crossport on torchvision CNNs: conversion time, latency, transposes, parity.

For each model (random weights, BN calibrated, eval, 1x3x224x224) in one process:
  * conversion: ``crossport.convert_with_report`` (total and per stage) vs
    ``torch.export.export`` alone;
  * latency: the converted model (NCHW and ``channels_last_io=True``) vs the matching
    ``keras.applications`` model and vs torch eager, all Keras models called the same way
    (``tf.function(jit_compile=False)`` around ``model(x, training=False)``), and the
    ``channels_last_io`` conversion exported to TFLite fp32 on the LiteRT interpreter;
  * transposes inside the converted model and the parity error (vs torch fp32 and fp64).

Writes ``RESULTS.md`` and ``results.json`` next to this file. Run from the repo root:

    .venv/bin/python benchmarks/bench_cnn.py            # full run
    .venv/bin/python benchmarks/bench_cnn.py --quick    # smoke run: 2 models, few runs
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script from anywhere

import common  # first: sets the TF/Keras/OpenMP env vars before those libraries load
import torch

HERE = Path(__file__).resolve().parent
SHAPE = (1, 3, 224, 224)
THREADS = 2
TARGET_RATIO = 1.05


@dataclass(frozen=True)
class ModelSpec:
    """A torchvision model and its keras.applications counterpart."""

    name: str
    torchvision: str
    keras: str
    keras_kwargs: dict = field(default_factory=dict)
    note: str = ""
    same_arch: str | None = None  # builder in keras_refs when keras.applications differs


MODELS = [
    ModelSpec("resnet50", "resnet50", "ResNet50",
              note="torchvision is ResNet v1.5 (stride in the 3x3 conv, no conv bias); "
                   "keras ResNet50 is v1 (stride in the first 1x1, conv bias + BN), ~6% "
                   "fewer FLOPs; keras_refs.resnet50_v15 is the same-architecture reference",
              same_arch="resnet50_v15"),
    ModelSpec("mobilenet_v2", "mobilenet_v2", "MobileNetV2"),
    ModelSpec("efficientnet_b0", "efficientnet_b0", "EfficientNetB0",
              note="keras EfficientNetB0 always includes Rescaling+Normalization at the input"),
    ModelSpec("densenet121", "densenet121", "DenseNet121"),
    ModelSpec("convnext_tiny", "convnext_tiny", "ConvNeXtTiny",
              {"include_preprocessing": False},
              note="keras ConvNeXtTiny built with include_preprocessing=False; it writes the "
                   "7x7 depthwise convs as Conv2D(groups=C), which Keras runs through XLA on CPU"),
]


# -- building the models -------------------------------------------------------------------
def torch_model(spec: ModelSpec) -> torch.nn.Module:
    """Random-weight torchvision model, BN calibrated, in eval mode (seeded)."""
    torch.manual_seed(0)
    module = getattr(common.load_torchvision().models, spec.torchvision)(weights=None)
    return common.calibrate_batchnorm(module, SHAPE)


def keras_model(spec: ModelSpec):
    """The keras.applications model, random weights, logits out like torchvision."""
    import keras

    ctor = getattr(keras.applications, spec.keras)
    return ctor(weights=None, input_shape=SHAPE[2:] + SHAPE[1:2], classifier_activation=None,
                **spec.keras_kwargs)


def keras_runner(model, shape: tuple[int, ...]):
    """``model(x, training=False)`` in a graph-mode tf.function with a fixed signature."""
    import tensorflow as tf

    spec = tf.TensorSpec(shape, tf.float32)
    fn = tf.function(lambda x: model(x, training=False), jit_compile=False,
                     input_signature=[spec])
    x = tf.random.stateless_normal(shape, seed=(0, 1))
    return fn, spec, (lambda: fn(x).numpy())


def tflite_runner(conversion, directory: Path) -> tuple[Any, dict[str, Any]]:
    """``crossport.export`` to TFLite fp32 (re-checked), then ``invoke()`` on LiteRT.

    The interpreter is allocated once and fed one fixed input; a call is ``invoke()`` plus
    fetching the output (as the Keras runners fetch theirs with ``.numpy()``).
    """
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    import crossport

    start = time.perf_counter()
    exported = crossport.export(conversion, directory / "model.tflite", format="tflite")
    export_s = time.perf_counter() - start
    interpreter = Interpreter(model_path=str(exported.path), num_threads=THREADS)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    x = np.random.default_rng(0).standard_normal(inp["shape"]).astype(np.float32)
    interpreter.set_tensor(inp["index"], x)

    def run():
        interpreter.invoke()
        return interpreter.get_tensor(out["index"])
    return run, {"tflite_export_s": export_s, "tflite_max_error": exported.max_error,
                 "tflite_bytes": exported.path.stat().st_size}


def torch_runner(module: torch.nn.Module, x: torch.Tensor):
    """Eager torch call without autograd (same threads as TF)."""
    def run():
        with torch.no_grad():
            return module(x).numpy()
    return run


# -- measuring -----------------------------------------------------------------------------
def convert(module: torch.nn.Module, x: torch.Tensor, channels_last_io: bool) -> dict[str, Any]:
    """Timed crossport conversion with the parity check; a failed check is recorded."""
    import crossport

    start = time.perf_counter()
    try:
        conv = crossport.convert_with_report(module, (x,), check=True,
                                             channels_last_io=channels_last_io)
        report, error = conv.report, None
    except crossport.ParityError as exc:  # keep benchmarking; the report says why
        conv, report, error = None, exc.report, str(exc)
    except crossport.CrossportError as exc:  # unsupported op, capture error: record, go on
        conv, report, error = None, None, f"{type(exc).__name__}: {exc}"
    total = time.perf_counter() - start
    return {"conversion": conv, "total_s": total, "report": report, "error": error}


def export_seconds(module: torch.nn.Module, x: torch.Tensor) -> float:
    """``torch.export.export`` alone, as crossport calls it (non-strict, static shapes)."""
    return common.time_once(lambda: torch.export.export(module, (x,), strict=False))


def fp64_parity(module: torch.nn.Module, model, x: torch.Tensor) -> dict[str, Any]:
    """Normalized errors vs a float64 torch run, and the rounding/semantic verdict."""
    from crossport.parity.metrics import normalized_error, rounding_verdict

    with torch.no_grad():
        ref32 = module(x).numpy()
        ref64 = copy.deepcopy(module).double()(x.double()).numpy()
    got = model(x.numpy(), training=False).numpy()
    keras64, torch64 = normalized_error(ref64, got), normalized_error(ref64, ref32)
    return {"vs_torch_fp32": normalized_error(ref32, got), "keras_vs_fp64": keras64,
            "torch_vs_fp64": torch64, "verdict": rounding_verdict(keras64, torch64),
            "output_absmax": float(abs(ref32).max())}


def op_diff(ours: dict[str, int], native: dict[str, int]) -> dict[str, list[int]]:
    """Op types whose counts differ between the converted and native graphs."""
    keys = sorted(set(ours) | set(native))
    return {k: [ours.get(k, 0), native.get(k, 0)] for k in keys
            if ours.get(k, 0) != native.get(k, 0)}


def bench_model(spec: ModelSpec, runs: int, warmup: int) -> dict[str, Any]:
    """Everything measured for one model, as a JSON-ready dict."""
    x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(0))
    module = torch_model(spec)
    nchw = convert(module, x, channels_last_io=False)
    nhwc = convert(module, x, channels_last_io=True)
    export_s = export_seconds(module, x)  # after crossport: any warm cache favours the baseline
    result: dict[str, Any] = {"model": spec.name, "keras_app": spec.keras, "note": spec.note,
                              "export_s": export_s, **_conversion_fields(nchw, nhwc, export_s)}
    ours = {"converted_nchw": nchw["conversion"], "converted_nhwc": nhwc["conversion"]}
    ours = {k: c.model for k, c in ours.items() if c is not None}
    if "converted_nchw" in ours:
        result["parity_fp64"] = fp64_parity(module, ours["converted_nchw"], x)
    # baselines are measured even when the conversion failed
    with tempfile.TemporaryDirectory() as tmp:
        extra = {}
        if nhwc["conversion"] is not None:
            extra["tflite"], fields = tflite_runner(nhwc["conversion"], Path(tmp))
            result.update(fields)
        result.update(_latencies(spec, module, x, ours, runs, warmup, extra))
    return result


def _conversion_fields(nchw: dict, nhwc: dict, export_s: float) -> dict[str, Any]:
    conv = nchw["conversion"]
    fields = {
        "convert_total_s": nchw["total_s"], "convert_ratio_vs_export": nchw["total_s"] / export_s,
        "convert_total_s_nhwc": nhwc["total_s"],
        "parity_max_error": nchw["report"].max_error if nchw["report"] else None,
        "parity_max_error_nhwc": nhwc["report"].max_error if nhwc["report"] else None,
        "error": nchw["error"] or nhwc["error"],
    }
    if conv is not None:
        fields.update(stages_s=conv.seconds, transposes=conv.transposes,
                      boundary_transposes=conv.boundary_transposes)
    if nhwc["conversion"] is not None:
        fields.update(transposes_nhwc=nhwc["conversion"].transposes,
                      boundary_transposes_nhwc=nhwc["conversion"].boundary_transposes)
    return fields


def _keras_variants(spec: ModelSpec, ours: dict[str, Any]) -> dict[str, Any]:
    """The Keras models to time, by variant name: converted ones, native, same-arch."""
    models = {"keras_native": keras_model(spec), **ours}
    if spec.same_arch:
        import keras_refs

        models["keras_same_arch"] = getattr(keras_refs, spec.same_arch)()
    return models


def _latencies(spec: ModelSpec, module, x, ours: dict[str, Any], runs: int,
               warmup: int, extra: dict[str, Any]) -> dict[str, Any]:
    nhwc_shape = (SHAPE[0], *SHAPE[2:], SHAPE[1])
    models = _keras_variants(spec, ours)
    runners = {k: keras_runner(m, SHAPE if k == "converted_nchw" else nhwc_shape)
               for k, m in models.items()}
    samples = common.interleaved_latency(
        {"torch_eager": torch_runner(module, x), **{k: r[2] for k, r in runners.items()},
         **extra},
        runs, warmup)
    latency = {k: common.summarize(v) for k, v in samples.items()}
    ops = {k: common.graph_op_counts(fn, sig) for k, (fn, sig, _run) in runners.items()}
    diffs = {f"graph_op_diff_nhwc_vs_{ref.removeprefix('keras_')}":
             op_diff(ops["converted_nhwc"], ops[ref])
             for ref in ("keras_native", "keras_same_arch")
             if ref in ops and "converted_nhwc" in ops}
    return {"latency": latency, "ratios": _ratios(latency, samples),
            "params": {"torch": _torch_param_count(module),
                       **{k: int(m.count_params()) for k, m in models.items()}},
            "graph_ops": ops, **diffs}


def _ratios(latency: dict[str, dict], samples: dict[str, list[float]]) -> dict[str, float]:
    """Converted/reference latency ratios, three ways.

    ``name``: median of per-round ratios; round r of both variants ran back to back, so
    background load mostly cancels (the headline figure). ``name_median``: ratio of the
    medians. ``name_min``: ratio of the minimums (least load-sensitive single sample).
    """
    pairs = {"nhwc_vs_native": ("converted_nhwc", "keras_native"),
             "nchw_vs_native": ("converted_nchw", "keras_native"),
             "nhwc_vs_same_arch": ("converted_nhwc", "keras_same_arch"),
             "nhwc_vs_torch": ("converted_nhwc", "torch_eager"),
             "nchw_vs_torch": ("converted_nchw", "torch_eager"),
             "native_vs_torch": ("keras_native", "torch_eager"),
             "tflite_vs_nhwc": ("tflite", "converted_nhwc"),
             "tflite_vs_torch": ("tflite", "torch_eager")}
    out = {}
    for name, (a, b) in pairs.items():
        if a in latency and b in latency:
            out[name] = statistics.median(x / y for x, y in zip(samples[a], samples[b]))
            out[f"{name}_median"] = latency[a]["median_ms"] / latency[b]["median_ms"]
            out[f"{name}_min"] = latency[a]["min_ms"] / latency[b]["min_ms"]
    return out


def _torch_param_count(module: torch.nn.Module) -> int:
    """Parameters plus BN running stats, which Keras counts as (non-trainable) weights."""
    stats = sum(b.numel() for n, b in module.named_buffers() if n.endswith(("running_mean",
                                                                            "running_var")))
    return sum(p.numel() for p in module.parameters()) + stats


# -- reporting -----------------------------------------------------------------------------
def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "n/a" if value is None else format(value, spec) + suffix


LATENCY_LABELS = {"torch_eager": "torch eager", "keras_native": "keras.applications",
                  "keras_same_arch": "Keras same-architecture reference",
                  "converted_nhwc": "converted, NHWC io", "converted_nchw": "converted, NCHW io",
                  "tflite": "TFLite fp32 on LiteRT (from the NHWC-io conversion)"}


def _ratio_pair(rat: dict, a: str, b: str) -> str:
    return f"{_fmt(rat.get(a), '.3f')} / {_fmt(rat.get(b), '.3f')}"


def _conversion_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [("torch.export alone", f"{r['export_s']:.2f} s"),
            ("crossport total (check=True)", (f"{r['convert_total_s']:.2f} s "
             f"({r['convert_ratio_vs_export']:.1f}x export)"))]
    if "stages_s" in r:
        rows.append(("  stages", ", ".join(f"{k} {v:.2f} s" for k, v in r["stages_s"].items())))
        rows.append(("transposes inside (NCHW io / NHWC io)",
                     f"{r['transposes']} / {r.get('transposes_nhwc', 'n/a')}"))
    rows.append(("parity max error vs torch fp32 (NCHW / NHWC io)",
                 (f"{_fmt(r['parity_max_error'], '.2e')} / "
                 f"{_fmt(r['parity_max_error_nhwc'], '.2e')}")))
    if "parity_fp64" in r:
        p = r["parity_fp64"]
        rows.append(("vs fp64: converted / torch fp32 -> verdict",
                     f"{p['keras_vs_fp64']:.2e} / {p['torch_vs_fp64']:.2e} -> {p['verdict']}"))
    return rows


def _latency_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    lat, rat = r["latency"], r["ratios"]
    rows = [(f"latency {label} (median [IQR])",
             f"{lat[k]['median_ms']:.1f} ms [{lat[k]['q1_ms']:.1f}-{lat[k]['q3_ms']:.1f}]")
            for k, label in LATENCY_LABELS.items() if k in lat]
    if "nhwc_vs_native" in rat:
        verdict = "OK" if rat["nhwc_vs_native"] <= TARGET_RATIO else f"ABOVE {TARGET_RATIO}"
        rows += [("converted/keras.applications, paired (NHWC / NCHW io)",
                  f"{_ratio_pair(rat, 'nhwc_vs_native', 'nchw_vs_native')} {verdict}"),
                 ("  same, ratio of medians",
                  _ratio_pair(rat, "nhwc_vs_native_median", "nchw_vs_native_median")),
                 ("  same, ratio of minimums",
                  _ratio_pair(rat, "nhwc_vs_native_min", "nchw_vs_native_min"))]
    if "nhwc_vs_same_arch" in rat:
        rows.append(("converted NHWC / same-architecture Keras (paired / medians / mins)",
                     _ratio_pair(rat, "nhwc_vs_same_arch", "nhwc_vs_same_arch_median")
                     + f" / {_fmt(rat.get('nhwc_vs_same_arch_min'), '.3f')}"))
    if "nhwc_vs_torch" in rat:
        rows.append(("converted/torch eager, paired (NHWC / NCHW io)",
                     _ratio_pair(rat, "nhwc_vs_torch", "nchw_vs_torch")))
    rows.append(("keras.applications/torch eager, paired", _fmt(rat.get("native_vs_torch"),
                                                                ".3f")))
    if "tflite_vs_nhwc" in rat:
        rows.append(("TFLite fp32/converted NHWC Keras, TFLite/torch eager, paired",
                     _ratio_pair(rat, "tflite_vs_nhwc", "tflite_vs_torch")))
        rows.append(("TFLite export s, re-loaded error vs torch, size",
                     (f"{r['tflite_export_s']:.1f} s, {_fmt(r['tflite_max_error'], '.2e')}, "
                     f"{r['tflite_bytes'] / 2**20:.1f} MiB")))
    pr = r["params"]
    rows.append(("params incl. BN stats: " + " / ".join(pr), " / ".join(f"{v:,}"
                                                                       for v in pr.values())))
    return rows


def model_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """(metric, value) rows of one model's table, shared by the console and markdown."""
    rows = _conversion_rows(r) + (_latency_rows(r) if "latency" in r else [])
    if r.get("error"):
        first = r["error"].splitlines()
        rows.append(("conversion FAILED", " ".join(first[:2]).replace("|", "/")))
    return rows


def print_table(r: dict[str, Any], console) -> None:
    from rich.table import Table

    table = Table(title=f"{r['model']} vs keras.applications.{r['keras_app']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for metric, value in model_rows(r):
        table.add_row(metric, value)
    console.print(table)


SUMMARY_COLUMNS = [  # (header, function of (result, medians, ratios) -> cell)
    ("model", lambda r, m, q: r["model"]),
    ("convert s (x export)", lambda r, m, q: f"{r['convert_total_s']:.1f} "
                                             f"({r['convert_ratio_vs_export']:.1f}x)"),
    ("transposes", lambda r, m, q: str(r.get("transposes", "n/a"))),
    ("parity err", lambda r, m, q: _fmt(r["parity_max_error"], ".1e")),
    ("torch ms", lambda r, m, q: _fmt(m.get("torch_eager"), ".1f")),
    ("keras.app ms", lambda r, m, q: _fmt(m.get("keras_native"), ".1f")),
    ("ours NHWC ms", lambda r, m, q: _fmt(m.get("converted_nhwc"), ".1f")),
    ("ours NCHW ms", lambda r, m, q: _fmt(m.get("converted_nchw"), ".1f")),
    ("NHWC/keras (paired)", lambda r, m, q: _fmt(q.get("nhwc_vs_native"), ".3f")),
    ("NCHW/keras (paired)", lambda r, m, q: _fmt(q.get("nchw_vs_native"), ".3f")),
    ("NHWC/keras (medians)", lambda r, m, q: _fmt(q.get("nhwc_vs_native_median"), ".3f")),
    ("NHWC/keras (mins)", lambda r, m, q: _fmt(q.get("nhwc_vs_native_min"), ".3f")),
    ("NHWC/same-arch Keras (paired)", lambda r, m, q: _fmt(q.get("nhwc_vs_same_arch"), ".3f")),
    ("NHWC/torch (paired)", lambda r, m, q: _fmt(q.get("nhwc_vs_torch"), ".3f")),
    ("TFLite ms", lambda r, m, q: _fmt(m.get("tflite"), ".1f")),
    ("TFLite/ours NHWC (paired)", lambda r, m, q: _fmt(q.get("tflite_vs_nhwc"), ".3f")),
    ("TFLite/torch (paired)", lambda r, m, q: _fmt(q.get("tflite_vs_torch"), ".3f")),
]


def summary_rows(results: list[dict]) -> list[str]:
    """The markdown overview table, one line per model."""
    lines = ["| " + " | ".join(h for h, _ in SUMMARY_COLUMNS) + " |",
             "|---" * len(SUMMARY_COLUMNS) + "|"]
    for r in results:
        m = {k: v["median_ms"] for k, v in r.get("latency", {}).items()}
        q = r.get("ratios", {})
        lines.append("| " + " | ".join(f(r, m, q) for _, f in SUMMARY_COLUMNS) + " |")
    return lines


def write_markdown(results: list[dict], meta: dict, path: Path) -> None:
    """The "cnn" section of RESULTS.md: header, method, overview, one table per model.

    The text-model section (bench_text.py) and the hand-written analysis are kept.
    """
    info = meta["machine"]
    lines = [
        "# crossport benchmark results", "", "## CNNs (benchmarks/bench_cnn.py)", "",
        f"Date: {meta['date']}  ", f"Command: `{meta['command']}`", "",
        "### Machine", "",
        (f"- CPU: {info['cpu']}, {info['cores']} cores visible; torch and TF both set to "
        f"{info['threads']} intra-op and inter-op threads"),
        (f"- Python {info['python']}, torch {info['torch']}, TensorFlow {info['tensorflow']} "
        f"(oneDNN opts: {info['onednn_opts']}), Keras {info['keras']}, torchvision "
        f"{info['torchvision']}, crossport {info['crossport']}; "
        f"OMP_WAIT_POLICY={info['omp_wait_policy']}"),
        f"- {info['platform']}",
        ("- **Noise:** the machine is shared with other engineers running tests during the "
        "run, so absolute timings are noisy; ratios come from interleaved runs "
        "(see Method) and are more trustworthy than absolute numbers."), "",
        "### Method", "",
        *[f"- {line}" for line in METHOD], "",
        "### Overview", "",
        (f"Median latency (ms) over {meta['runs']} interleaved runs after {meta['warmup']} "
        f"warm-up calls per variant, batch 1, 224x224; ratios paired per round unless "
        f"marked. Target: converted/keras.applications <= {TARGET_RATIO}."), "",
        *summary_rows(results), "",
    ]
    for r in results:
        lines += [f"### {r['model']} (vs keras.applications.{r['keras_app']})", ""]
        if r["note"]:
            lines += [f"Architecture note: {r['note']}.", ""]
        lines += ["| metric | value |", "|---|---|"]
        lines += [f"| {m} | {v} |" for m, v in model_rows(r)]
        lines += [""] + _op_diff_lines(r)
    common.write_section(path, "cnn", lines)


def _op_diff_lines(r: dict[str, Any]) -> list[str]:
    lines = []
    for key, label in (("graph_op_diff_nhwc_vs_native", "keras.applications"),
                       ("graph_op_diff_nhwc_vs_same_arch", "same-architecture Keras")):
        diff = r.get(key)
        if diff is None:
            continue
        lines += [f"Traced-graph op types whose counts differ, converted (NHWC io) vs {label} "
                  "(before Grappler):" + (" none." if not diff else ""), ""]
        if diff:
            lines += [f"| op type | converted | {label} |", "|---|---|---|"]
            lines += [f"| {k} | {a} | {b} |" for k, (a, b) in diff.items()] + [""]
    return lines


METHOD = [
    ("Torch models: torchvision constructors with `weights=None`, seeded; BatchNorm running "
    "statistics calibrated on 3 random 4x3x224x224 batches in train mode (random init "
    "leaves activations degenerate, which makes parity errors meaningless, see "
    "docs/parity.md); ConvNeXt layer scales set to 1 (init 1e-6 makes residual branches "
    "invisible to the parity check); then `eval()`."),
    ("Conversion: `crossport.convert_with_report(module, (x,), check=True)` wall time, total "
    "and per stage (capture = torch.export + decompositions, convert = Keras model build, "
    "verify = parity check on the example plus 2 fresh inputs). Baseline: "
    "`torch.export.export(module, (x,), strict=False)` alone, timed after the crossport "
    "conversions so any warm cache favours the baseline. A tiny Conv2d is converted first "
    "so one-time initialisation is not charged to the first model."),
    ("Latency: every Keras model (converted NCHW io, converted `channels_last_io=True`, "
    "keras.applications with `weights=None`, `classifier_activation=None`) is called as "
    "`tf.function(lambda x: model(x, training=False), jit_compile=False, "
    "input_signature=[TensorSpec(fixed shape)])`, output fetched with `.numpy()`. Torch "
    "eager: `module(x)` under `torch.no_grad()`. Each variant is warmed up, then the "
    "variants run round-robin (order rotated every round) so background load hits all "
    "of them alike; the median per-call wall time is reported with the inter-quartile "
    "range. Ratios: the headline is *paired*, the median over rounds of "
    "`t_converted[r] / t_reference[r]` (both calls of round r ran back to back, so slow "
    "phases of background load cancel); ratios of medians and of minimums are given too."),
    ("TFLite: the `channels_last_io=True` conversion written with "
    "`crossport.export(conversion, path, format=\"tflite\")` (fp32; the export re-loads the "
    "file and re-checks it against torch on fresh inputs), run with "
    "`ai_edge_litert.interpreter.Interpreter(model_path=..., num_threads=2)` (LiteRT's "
    "default XNNPACK delegate), tensors allocated and the input set once; a call is "
    "`invoke()` plus `get_tensor(output)`, timed in the same interleaved rounds as the "
    "Keras and torch variants."),
    ("Torch runs with `OMP_WAIT_POLICY=PASSIVE` (set by benchmarks/common.py unless already "
    "set): with libgomp's default busy-waiting, torch eager on this loaded 2-core machine "
    "measured 5-40x slower and erratic (spin contention, not compute). TF does not use "
    "OpenMP, so the Keras timings are unaffected."),
    ("Transposes: `Conversion.transposes` (inside the model, not at inputs/outputs). Parity: "
    "crossport's own check (max normalized error `max|d|/max(1,max|ref|)` vs torch fp32 "
    "over 3 inputs), plus the converted model and torch fp32 against a float64 torch run, "
    "with crossport's rounding/semantic verdict."),
    ("Op counts: op types of each tf.function's traced graph "
    "(`get_concrete_function(...).graph.get_operations()`), i.e. before Grappler rewrites."),
]


# -- driver --------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    names = [m.name for m in MODELS]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=names, default=None,
                        help="models to run (default: all; --quick: resnet50 mobilenet_v2)")
    parser.add_argument("--runs", type=int, default=None, help="timed runs per variant (100)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up calls per variant (5)")
    parser.add_argument("--quick", action="store_true", help="smoke run: few runs, 2 models")
    parser.add_argument("--out", type=Path, default=HERE, help="directory for RESULTS.md/json")
    args = parser.parse_args(argv)
    args.models = args.models or (names[:2] if args.quick else names)
    args.runs = args.runs or (5 if args.quick else 100)
    args.warmup = args.warmup or (2 if args.quick else 5)
    return args


def warm_up_tooling() -> None:
    """Pay torch.export/crossport/TF one-time start-up costs before anything is timed."""
    import crossport

    x = torch.randn(1, 3, 16, 16)
    crossport.convert_with_report(torch.nn.Conv2d(3, 4, 3).eval(), (x,), check=True)
    torch.export.export(torch.nn.Conv2d(3, 4, 3).eval(), (x,))


def main(argv: list[str] | None = None) -> None:
    from rich.console import Console
    from rich.progress import Progress

    args = parse_args(argv)
    common.configure_runtime(THREADS)
    console = Console()
    meta = common.run_metadata(args.runs, args.warmup, THREADS)
    warm_up_tooling()
    specs = [m for m in MODELS if m.name in args.models]
    results = []
    with Progress(console=console, transient=False) as progress:
        task = progress.add_task("benchmarking", total=len(specs))
        for spec in specs:
            progress.update(task, description=f"benchmarking {spec.name}")
            results.append(bench_model(spec, args.runs, args.warmup))
            print_table(results[-1], progress.console)
            write_outputs(results, meta, args.out)  # after each model: a crash keeps the rest
            gc.collect()
            progress.advance(task)
    console.print(f"wrote {args.out / 'RESULTS.md'} and {args.out / 'results.json'}")


def write_outputs(results: list[dict], meta: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({**meta, "results": results}, indent=1))
    write_markdown(results, meta, out / "RESULTS.md")


if __name__ == "__main__":
    main()
