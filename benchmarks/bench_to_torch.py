"""Benchmark Keras -> PyTorch on keras.applications: conversion time, torch latency, permutes.

For each model (weights=None, constant weights randomised, 1x224x224x3):
  * conversion: ``crossport.to_torch_with_report`` (total and per stage, parity check included);
  * latency (batch 1, 2 threads, median): the converted module (NHWC in, and
    ``channels_first_io=True``), the torchvision twin where the architecture matches
    (MobileNetV2, DenseNet121, ConvNeXt-T; its weights are not these), and the same ``.keras``
    file run by Keras' torch backend in a subprocess (``KERAS_BACKEND=torch``);
  * permutes inside the converted module.

Writes ``RESULTS_to_torch.md`` next to this file. From the repo root:

    .venv/bin/python benchmarks/bench_to_torch.py            # MobileNetV2, DenseNet121, ConvNeXtTiny
    .venv/bin/python benchmarks/bench_to_torch.py --quick    # MobileNetV2 only, few runs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
KERAS_TORCH = """
import os, sys, time, statistics
os.environ["KERAS_BACKEND"] = "torch"
import torch, keras
torch.set_num_threads(2)
model = keras.models.load_model(sys.argv[1], compile=False)
x = torch.randn(1, 224, 224, 3)
with torch.no_grad():
    for _ in range(2):
        model(x, training=False)
    times = []
    for _ in range(int(sys.argv[2])):
        t = time.perf_counter(); model(x, training=False); times.append(time.perf_counter() - t)
print(statistics.median(times) * 1000)
"""


def median_ms(fn, runs: int) -> float:
    with torch.no_grad():
        for _ in range(2):
            fn()
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def keras_on_torch_ms(model, runs: int) -> float | None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.keras")
        model.save(path)
        env = {**os.environ, "KERAS_BACKEND": "torch"}
        result = subprocess.run([sys.executable, "-c", KERAS_TORCH, path, str(runs)],
                                capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        print(result.stderr[-2000:])
        return None
    return float(result.stdout.strip().splitlines()[-1])


def bench(name: str, runs: int) -> dict:
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
    row["torch_ms"] = median_ms(lambda: conv.module(x), runs)
    nchw = crossport.to_torch(model, (x.permute(0, 3, 1, 2).contiguous(),),
                              channels_first_io=True, check=False)
    x_nchw = x.permute(0, 3, 1, 2).contiguous()
    row["torch_nchw_ms"] = median_ms(lambda: nchw(x_nchw), runs)
    if name in TWINS:
        twin = getattr(common.load_torchvision().models, TWINS[name])().eval()
        row["twin_ms"] = median_ms(lambda: twin(x_nchw), runs)
    row["keras_torch_ms"] = keras_on_torch_ms(model, runs)
    print(json.dumps(row))
    return row


def markdown(rows: list[dict]) -> str:
    def fmt(v):
        return "—" if v is None else f"{v:.1f}"

    info = common.machine_info(2)
    header = ("| model | convert s | parity | permutes | torch NHWC ms | torch NCHW io ms | "
              "torchvision twin ms | Keras on torch ms |")
    machine = (f"{info['cpu']}, {info['threads']} threads, torch {info['torch']}, "
               f"Keras {info['keras']}; batch 1, 224x224, median latency.")
    lines = ["# Keras → PyTorch benchmark", "", machine, "", header,
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['convert_s']:.1f} | {r['parity']:.1e} | "
                     f"{r['permutes']} | {fmt(r['torch_ms'])} | {fmt(r['torch_nchw_ms'])} | "
                     f"{fmt(r.get('twin_ms'))} | {fmt(r['keras_torch_ms'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    common.configure_runtime(2)
    names = ["MobileNetV2"] if args.quick else list(TWINS)
    rows = [bench(n, 5 if args.quick else 20) for n in names]
    (HERE / "RESULTS_to_torch.md").write_text(markdown(rows))


if __name__ == "__main__":
    main()
