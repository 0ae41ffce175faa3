"""Where the time goes: per-op-type kernel time of the converted vs the native Keras model.

Freezes each model's ``tf.function`` graph, runs it in a TF1 session with full tracing
(after Grappler and the oneDNN rewrites, so fused kernels show under their real names)
and sums kernel time per op type over the traced runs. Used to explain a converted model
that is slower than its keras.applications counterpart.

Two modes. ``runtime`` (default) turns Grappler's constant folding and arithmetic
optimizer off: in the benchmarked ``tf.function`` the weights are variables, so nothing
folds into the convolutions, and this mode reproduces that. ``frozen`` leaves them on, as
a frozen deployment graph (SavedModel/TFLite conversion) would: BatchNorm then folds into
the convolutions. Native models get random BN statistics first (``weights=None`` leaves
them at 0/1, which folds differently from real weights and skews the comparison).

    .venv/bin/python benchmarks/op_profile.py resnet50 mobilenet_v2 --runs 10
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_cnn  # imports common first (env vars before TF/torch load)
import common
import torch


def frozen_graph_def(model, shape: tuple[int, ...]):
    """The model's inference graph with variables folded in, and its input/output names."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    fn = tf.function(lambda x: model(x, training=False),
                     input_signature=[tf.TensorSpec(shape, tf.float32)])
    frozen = convert_variables_to_constants_v2(fn.get_concrete_function())
    return (frozen.graph.as_graph_def(), frozen.inputs[0].name,
            [t.name for t in frozen.outputs])


def randomize_batchnorm(model, seed: int = 0) -> None:
    """Non-trivial BN gamma/beta/statistics, like a trained (or calibrated) model."""
    import keras
    import numpy as np

    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.set_weights([rng.uniform(0.5, 1.5, w.shape).astype("float32")
                               if "variance" in v.path or "gamma" in v.path
                               else rng.normal(0, 0.1, w.shape).astype("float32")
                               for v, w in zip(layer.weights, layer.get_weights())])


def session_config(fold: bool):
    """Same threads as the benchmark; without folding Grappler sees weights as opaque."""
    import tensorflow as tf
    from tensorflow.core.protobuf import rewriter_config_pb2

    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=bench_cnn.THREADS,
                                      inter_op_parallelism_threads=bench_cnn.THREADS)
    if not fold:
        rewrite = config.graph_options.rewrite_options
        rewrite.constant_folding = rewriter_config_pb2.RewriterConfig.OFF
        rewrite.arithmetic_optimization = rewriter_config_pb2.RewriterConfig.OFF
    return config


def traced_session(model, shape: tuple[int, ...], fold: bool):
    """A warmed-up TF1 session on the frozen graph, and a function doing one traced run."""
    import numpy as np
    import tensorflow as tf

    graph_def, inp, outs = frozen_graph_def(model, shape)
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    sess = tf.compat.v1.Session(graph=graph, config=session_config(fold))
    feed = {inp: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    for _ in range(3):  # warm-up: Grappler and the oneDNN rewrites run on the first call
        sess.run(outs, feed)
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)

    def run():
        meta = tf.compat.v1.RunMetadata()
        sess.run(outs, feed, options=options, run_metadata=meta)
        return meta
    return sess, run


def kernel_times(models: dict, shape: tuple[int, ...], runs: int,
                 fold: bool) -> dict[str, dict[str, tuple[int, float]]]:
    """Per model: op type -> (kernels per run, mean ms per run); runs interleaved."""
    sessions = {k: traced_session(m, shape, fold) for k, m in models.items()}
    totals = {k: defaultdict(lambda: [0, 0.0]) for k in models}
    for _ in range(runs):  # alternate models so background load hits them alike
        for key, (_sess, run) in sessions.items():
            _accumulate(run(), totals[key])
    for sess, _run in sessions.values():
        sess.close()
    return {k: {op: (round(n / runs), ms / runs) for op, (n, ms) in t.items()}
            for k, t in totals.items()}


def _accumulate(meta, totals) -> None:
    for device in meta.step_stats.dev_stats:
        if "stream" in device.device or "memcpy" in device.device:
            continue
        for node in device.node_stats:
            op = node.timeline_label.split("(")[0].split("=")[-1].strip() or node.node_name
            op = op.split(" ")[-1] if op else node.node_name
            if node.node_name in ("_SOURCE", "_SINK"):
                continue
            totals[op][0] += 1
            totals[op][1] += (node.op_end_rel_micros - node.op_start_rel_micros) / 1e3


def compare(name: str, runs: int, fold: bool) -> None:
    """Print the per-op-type table for one model: converted NHWC vs keras.applications."""
    from rich.console import Console
    from rich.table import Table

    import crossport

    spec = next(m for m in bench_cnn.MODELS if m.name == name)
    module = bench_cnn.torch_model(spec)
    x = torch.randn(bench_cnn.SHAPE)
    ours = crossport.convert(module, (x,), check=False, channels_last_io=True)
    nhwc = (1, *bench_cnn.SHAPE[2:], bench_cnn.SHAPE[1])
    models = {"converted": ours, "keras.applications": bench_cnn.keras_model(spec)}
    if spec.same_arch:
        import keras_refs

        models["same-arch Keras"] = getattr(keras_refs, spec.same_arch)()
    for key, model in models.items():
        if key != "converted":
            randomize_batchnorm(model)
    profiles = kernel_times(models, nhwc, runs, fold)
    mode = "frozen, BN folded" if fold else "runtime-like, no folding"
    table = Table(title=f"{name}: kernels per run (count / ms), after Grappler ({mode})")
    table.add_column("op type")
    for k in profiles:
        table.add_column(k, justify="right")
    ops = sorted({op for p in profiles.values() for op in p},
                 key=lambda op: -max(p.get(op, (0, 0.0))[1] for p in profiles.values()))
    for op in ops:
        table.add_row(op, *(f"{p[op][0]} / {p[op][1]:.2f}" if op in p else "-"
                            for p in profiles.values()))
    table.add_row("TOTAL", *(f"{sum(v[1] for v in p.values()):.1f} ms"
                             for p in profiles.values()))
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", choices=[m.name for m in bench_cnn.MODELS])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--mode", choices=["runtime", "frozen"], default="runtime")
    args = parser.parse_args()
    common.configure_runtime(bench_cnn.THREADS)
    for name in args.models:
        compare(name, args.runs, args.mode == "frozen")


if __name__ == "__main__":
    main()
