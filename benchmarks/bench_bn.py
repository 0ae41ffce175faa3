"""TF-graph latency of BatchNorm CNNs: Keras' BatchNormalization vs crossport's fused one.

crossport emits 4-D BatchNorm as ``crossport.layers.FusedBatchNormalization`` (one
``FusedBatchNormV3`` op, which Grappler's remapper folds into the preceding Conv2D). This
script converts each model once and times it against a clone whose BN layers are plain
``keras.layers.BatchNormalization`` with the same weights (the previous output), interleaved
in one process, as ``tf.function`` graphs, and counts the traced graph's ops (before
Grappler). It writes the ``bn`` section of RESULTS.md.

    .venv/bin/python benchmarks/bench_bn.py --models resnet50 regnet_y_400mf --runs 30
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import common  # noqa: I001  (sets the TF environment before TF/Keras are imported)
import keras
import numpy as np
import tensorflow as tf
import torch

import crossport
from crossport.layers import FusedBatchNormalization

HERE = Path(__file__).resolve().parent


def with_keras_bn(model: keras.Model) -> keras.Model:
    """The same model with every FusedBatchNormalization replaced by Keras' own layer."""

    def clone(layer):
        if isinstance(layer, FusedBatchNormalization):
            return keras.layers.BatchNormalization.from_config(layer.get_config())
        return layer.__class__.from_config(layer.get_config())

    twin = keras.models.clone_model(model, clone_function=clone)
    twin.set_weights(model.get_weights())
    return twin


def bench(name: str, runs: int, warmup: int) -> dict:
    torchvision = common.load_torchvision()
    shape = (1, 3, 224, 224)
    module = common.calibrate_batchnorm(getattr(torchvision.models, name)(weights=None), shape)
    x = torch.randn(shape)
    conversion = crossport.convert_with_report(module, (x,), check=False)
    fused, plain = conversion.model, with_keras_bn(conversion.model)
    spec = tf.TensorSpec(shape, tf.float32)
    fns = {label: tf.function(lambda t, m=m: m(t, training=False), jit_compile=False)
           for label, m in (("keras BN", plain), ("fused BN", fused))}
    arr = tf.constant(x.numpy())
    ref = np.asarray(fns["keras BN"](arr))
    got = np.asarray(fns["fused BN"](arr))
    samples = common.interleaved_latency({k: (lambda f=f: f(arr).numpy()) for k, f in fns.items()},
                                         runs, warmup)
    ops = {k: sum(common.graph_op_counts(f, spec).values()) for k, f in fns.items()}
    return {"model": name, "ops": ops,
            "latency": {k: common.summarize(v) for k, v in samples.items()},
            "max_abs_diff": float(np.abs(ref - got).max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50", "regnet_y_400mf"])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    common.configure_runtime(args.threads)
    results = [bench(m, args.runs, args.warmup) for m in args.models]
    meta = common.run_metadata(args.runs, args.warmup, args.threads)
    lines = ["## BatchNorm lowering (TF graph, batch 1, 224x224)", "",
             f"{meta['date']}, `{meta['command']}`, {args.threads} thread(s), {args.runs} "
             f"interleaved runs, load average {os.getloadavg()[0]:.1f} at the end; median ms "
             "(IQR). Ops: traced graph, before Grappler.", "",
             "| model | keras BN ms | fused BN ms | ratio | keras BN ops | fused BN ops | max diff |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        k, f = r["latency"]["keras BN"], r["latency"]["fused BN"]
        lines.append(f"| {r['model']} | {k['median_ms']:.1f} ({k['q1_ms']:.1f}-{k['q3_ms']:.1f}) "
                     f"| {f['median_ms']:.1f} ({f['q1_ms']:.1f}-{f['q3_ms']:.1f}) "
                     f"| {f['median_ms'] / k['median_ms']:.3f} | {r['ops']['keras BN']} "
                     f"| {r['ops']['fused BN']} | {r['max_abs_diff']:.1e} |")
    print("\n".join(lines))
    args.out.mkdir(parents=True, exist_ok=True)
    common.write_section(args.out / "RESULTS.md", "bn", lines)
    (args.out / "results_bn.json").write_text(json.dumps({"meta": meta, "results": results},
                                                         indent=2))


if __name__ == "__main__":
    main()
