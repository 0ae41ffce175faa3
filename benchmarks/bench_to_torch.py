"""Benchmark Keras -> PyTorch on keras.applications: conversion time, torch latency, permutes.

For each model (weights=None, constant weights randomised, 1x224x224x3):
  * conversion: ``crossport.to_torch_with_report`` (total and per stage, parity check included);
  * latency (batch 1, ``--threads`` (default 1), median): the converted module (NHWC in, and
    ``channels_first_io=True``), the torchvision twin where the architecture matches
    (MobileNetV2, DenseNet121, ConvNeXt-T; its weights are not these), and the same ``.keras``
    file run by Keras' torch backend, all timed round-robin in one subprocess
    (``KERAS_BACKEND=torch``) so the ratios are paired;
  * permutes inside the converted module.

Writes ``RESULTS_to_torch.md`` and ``results_to_torch.json`` next to this file. From the repo root:

    .venv/bin/python benchmarks/bench_to_torch.py            # MobileNetV2, DenseNet121, ConvNeXtTiny
    .venv/bin/python benchmarks/bench_to_torch.py --quick    # MobileNetV2 only, few runs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # sets TF/Keras/OpenMP env vars first
import torch

HERE = Path(__file__).resolve().parent
TWINS = {"MobileNetV2": "mobilenet_v2", "DenseNet121": "densenet121",
         "ConvNeXtTiny": "convnext_tiny"}
TIMING = """
import json, os, sys, statistics
sys.path.insert(0, os.environ["BENCH_DIR"])
import common  # KERAS_BACKEND=torch is already set by the caller
import torch, keras
from pathlib import Path
threads, runs, warmup, twin_name = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
torch.set_num_threads(threads)
directory = Path(sys.argv[1])
kmodel = keras.models.load_model(directory / "m.keras", compile=False)
def load_source(stem):
    import importlib.util
    spec = importlib.util.spec_from_file_location(stem, directory / f"{stem}.py")
    written = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(written)
    return written.build_model().eval()
nhwc, nchw = load_source("nhwc"), load_source("nchw")
x = torch.randn(1, 224, 224, 3, generator=torch.Generator().manual_seed(0))
x_nchw = x.permute(0, 3, 1, 2).contiguous()
fns = {"ours_nhwc": lambda: nhwc(x), "ours_nchw": lambda: nchw(x_nchw),
       "keras_torch": lambda: kmodel(x, training=False)}
if twin_name != "-":
    twin = getattr(common.load_torchvision().models, twin_name)().eval()
    fns["twin"] = lambda: twin(x_nchw)
with torch.no_grad():
    samples = common.interleaved_latency(fns, runs, warmup)
out = {"latency": {k: common.summarize(v) for k, v in samples.items()},
       "paired": {f"{a}_vs_{b}": statistics.median(p / q for p, q in zip(samples[a], samples[b]))
                  for a in ("ours_nhwc", "ours_nchw") for b in ("twin", "keras_torch")
                  if b in samples}}
print(json.dumps(out))
"""


def timings(model, conv, nchw, name: str, threads: int, runs: int, warmup: int) -> dict:
    """Latency of the converted modules, the twin and Keras on torch, in ONE subprocess.

    The subprocess runs with ``KERAS_BACKEND=torch`` so the ``.keras`` file runs on Keras'
    torch backend; the converted modules (pickled) and the torchvision twin are timed
    round-robin in the same process, so the ratios are paired per round.
    """
    import crossport

    with tempfile.TemporaryDirectory() as tmp:
        model.save(os.path.join(tmp, "m.keras"))
        # the modules are not picklable (lambdas in torch_layers): ship them as the
        # generated source + state_dict, which to_torch_source re-checks bit-exactly
        crossport.to_torch_source(conv, Path(tmp) / "nhwc.py")
        crossport.to_torch_source(nchw, Path(tmp) / "nchw.py")
        env = {**os.environ, "KERAS_BACKEND": "torch", "BENCH_DIR": str(HERE),
               "PYTHONPATH": str(HERE.parent)}
        result = subprocess.run([sys.executable, "-c", TIMING, tmp, str(threads), str(runs),
                                 str(warmup), TWINS.get(name, "-")],
                                capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        print(result.stderr[-3000:])
        return {"error": result.stderr.strip().splitlines()[-1][:300]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def bench(name: str, threads: int, runs: int, warmup: int) -> dict:
    import keras

    import crossport
    from tests.to_torch.harness import make_live

    model = make_live(getattr(keras.applications, name)(weights=None,
                                                        classifier_activation=None))
    x = torch.randn(1, 224, 224, 3)
    start = time.perf_counter()
    conv = crossport.to_torch_with_report(model, (x,))
    row = {"model": name, "convert_s": time.perf_counter() - start, "stages": conv.seconds,
           "parity": conv.report.max_error, "permutes": conv.permutes}
    nchw = crossport.to_torch_with_report(model, (x.permute(0, 3, 1, 2).contiguous(),),
                                          channels_first_io=True, check=False)
    row.update(timings(model, conv, nchw, name, threads, runs, warmup))
    print(json.dumps(row))
    return row


def markdown(rows: list[dict], threads: int, runs: int, warmup: int) -> str:
    def ms(r, key):
        v = r.get("latency", {}).get(key)
        return "—" if v is None else f"{v['median_ms']:.1f}"

    def ratio(r, key, good):
        v = r.get("paired", {}).get(key)
        return "—" if v is None else f"{v:.2f}" + ("" if good(v) else " **no**")

    info = common.machine_info(threads)
    load = os.getloadavg()
    header = ("| model | convert s | parity | permutes | ours NHWC ms | ours NCHW io ms | "
              "torchvision twin ms | Keras on torch ms | NCHW io / twin (≤ 1.05) | "
              "NHWC / Keras-on-torch (< 1) | NCHW io / Keras-on-torch (< 1) |")
    machine = (f"{info['cpu']}, {threads} thread(s) for torch, torch {info['torch']}, "
               f"Keras {info['keras']}; batch 1, 224x224; load average {load[0]:.1f} "
               f"(shared machine: absolute times are noisy).")
    method = ("All four variants are timed in one subprocess with `KERAS_BACKEND=torch` "
              f"(the `.keras` file on Keras' torch backend, the converted modules written by `crossport.to_torch_source` and rebuilt from that source, "
              f"the torchvision twin with its own random weights), round-robin, {runs} runs "
              f"after {warmup} warm-up calls each; ms are medians, ratios are medians of "
              "per-round ratios (paired). The twin takes NCHW, so NCHW io is the "
              "like-for-like comparison with it.")
    lines = ["# Keras → PyTorch benchmark", "", machine, "", method, "", header,
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['convert_s']:.1f} | {r['parity']:.1e} | "
                     f"{r['permutes']} | {ms(r, 'ours_nhwc')} | {ms(r, 'ours_nchw')} | "
                     f"{ms(r, 'twin')} | {ms(r, 'keras_torch')} | "
                     f"{ratio(r, 'ours_nchw_vs_twin', lambda v: v <= 1.05)} | "
                     f"{ratio(r, 'ours_nhwc_vs_keras_torch', lambda v: v < 1)} | "
                     f"{ratio(r, 'ours_nchw_vs_keras_torch', lambda v: v < 1)} |"
                     + (f" timing failed: {r['error']}" if "error" in r else ""))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--models", nargs="+", choices=list(TWINS))
    args = parser.parse_args()
    common.configure_runtime(args.threads)
    names = args.models or (["MobileNetV2"] if args.quick else list(TWINS))
    runs = args.runs or (5 if args.quick else 20)
    rows = [bench(n, args.threads, runs, args.warmup) for n in names]
    (HERE / "RESULTS_to_torch.md").write_text(markdown(rows, args.threads, runs, args.warmup))
    (HERE / "results_to_torch.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
