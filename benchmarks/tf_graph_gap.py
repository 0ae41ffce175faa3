"""Is crossport's TF-graph gap to nobuco the graph or the TensorFlow release?

nobuco needs Keras 2, so ``peers.py`` runs it on TF 2.15 while crossport runs on the
project's TF. This script takes the version out of the comparison: each converter's graph is
saved as a plain TF SavedModel (a ``tf.function`` with a fixed NHWC input signature), and
both SavedModels are loaded and timed in one process, interleaved with torch eager, in
either venv (so each TF release times both graphs):

    python tf_graph_gap.py prepare DIR --model resnet18            # project venv
    python tf_graph_gap.py export crossport DIR --model resnet18   # project venv
    NOBUCO_PY tf_graph_gap.py export nobuco DIR --model resnet18   # nobuco's venv (TF 2.15)
    python tf_graph_gap.py time DIR --model resnet18 --runs 30     # either venv (or both)

``time`` also counts each loaded graph's op types (before Grappler) and prints JSON;
``ops CONVERTER DIR`` counts the op types TF actually executes (the graph TF dumps after
Grappler, placement and its oneDNN rewrite, via ``TF_DUMP_GRAPH_PREFIX``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # sets TF/Keras/OpenMP env vars before those libraries load
import numpy as np
import peer_worker
import torch

CONVERTERS = ("crossport", "nobuco")


def load_module(name: str, directory: Path) -> tuple[torch.nn.Module, torch.Tensor]:
    """The module with the state_dict ``prepare`` saved, and the NCHW input."""
    module = peer_worker.build_model(name)
    module.load_state_dict(torch.load(directory / f"{name}.state.pt"))
    return module.eval(), torch.load(directory / f"{name}.input.pt")


def to_keras(converter: str, module: torch.nn.Module, x: torch.Tensor):
    """The converter's Keras model, NHWC in and out (as ``peer_worker`` converts it)."""
    if converter == "crossport":
        import crossport

        return crossport.convert(module, (x,), channels_last_io=True)
    import nobuco
    from nobuco import ChannelOrder

    return nobuco.pytorch_to_keras(module, args=[x],
                                   inputs_channel_order=ChannelOrder.TENSORFLOW,
                                   outputs_channel_order=ChannelOrder.TENSORFLOW)


def export(converter: str, name: str, directory: Path) -> None:
    """Convert and save ``serve(x)`` = ``model(x, training=False)`` as a SavedModel."""
    import tensorflow as tf

    module, x = load_module(name, directory)
    model = to_keras(converter, module, x)
    x_nhwc = x.permute(0, 2, 3, 1).contiguous().numpy()
    holder = tf.Module()
    holder.model = model
    holder.serve = tf.function(lambda t: model(t, training=False),
                               input_signature=[tf.TensorSpec(x_nhwc.shape, tf.float32)])
    with torch.no_grad():
        want = module(x).numpy()
    got = np.asarray(holder.serve(tf.constant(x_nhwc)))
    print(f"{converter}: max |keras - torch| = {np.abs(got - want).max():.2e}")
    tf.saved_model.save(holder, str(directory / f"{name}.{converter}.savedmodel"))


def time_all(name: str, directory: Path, runs: int) -> dict:
    """Both SavedModels and torch eager, interleaved, 1 thread; medians and op counts."""
    import tensorflow as tf

    common.configure_runtime(1)
    module, x = load_module(name, directory)
    x_tf = tf.constant(x.permute(0, 2, 3, 1).contiguous().numpy())
    with torch.no_grad():
        want = module(x).numpy()
    fns, ops, kept = {}, {}, []
    for converter in CONVERTERS:
        loaded = tf.saved_model.load(str(directory / f"{name}.{converter}.savedmodel"))
        serve = loaded.serve
        err = float(np.abs(np.asarray(serve(x_tf)) - want).max())
        print(f"{converter}: max |loaded - torch| = {err:.2e}")
        fns[converter] = functools.partial(serve, x_tf)
        ops[converter] = graph_ops(serve.get_concrete_function(x_tf).graph)
        kept.append(loaded)  # the restored object owns the variables

    def eager():
        with torch.no_grad():
            return module(x)
    fns["torch_eager"] = eager
    samples = common.interleaved_latency(fns, runs=runs, warmup=3)
    med = {k: common.summarize(v)["median_ms"] for k, v in samples.items()}
    return {"tf": tf.__version__, "model": name, "runs": runs,
            "load_avg": os.getloadavg(), "median_ms": med,
            "ratio_to_torch": {k: med[k] / med["torch_eager"] for k in CONVERTERS},
            "graph_ops": ops}


def graph_ops(graph) -> dict[str, int]:
    """Op-type counts of a function graph, including the functions it calls."""
    from collections import Counter

    counts = Counter(op.type for op in graph.get_operations())
    for fdef in graph.as_graph_def().library.function:
        counts.update(node.op for node in fdef.node_def)
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def executed_ops(converter: str, name: str, directory: Path) -> dict:
    """Op counts of the final partitioned graph TF runs for the converter's SavedModel."""
    import re
    import tempfile

    dump = Path(tempfile.mkdtemp(prefix=f"dump-{converter}-", dir=directory))
    os.environ["TF_DUMP_GRAPH_PREFIX"] = str(dump)  # read when TF first runs a function
    os.environ["TF_DUMP_GRAPH_NAME_FILTER"] = "*"
    import tensorflow as tf

    common.configure_runtime(1)
    loaded = tf.saved_model.load(str(directory / f"{name}.{converter}.savedmodel"))
    _, x = load_module(name, directory)
    loaded.serve(tf.constant(x.permute(0, 2, 3, 1).contiguous().numpy()))
    (final,) = [p for p in dump.iterdir() if p.name.endswith("after_partition_passes.pbtxt")]
    ops = re.findall(r'^  op: "(\w+)"', final.read_text(), flags=re.MULTILINE)
    counts = {op: ops.count(op) for op in sorted(set(ops), key=lambda o: -ops.count(o))}
    return {"tf": tf.__version__, "converter": converter,
            "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"), "ops": counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("prepare", "export", "time", "ops"))
    parser.add_argument("args", nargs="+", help="[CONVERTER] DIR")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--runs", type=int, default=30)
    opts = parser.parse_args()
    directory = Path(opts.args[-1])
    directory.mkdir(parents=True, exist_ok=True)
    if opts.step == "prepare":
        import peers

        peers.prepare(opts.model, directory)
    elif opts.step == "export":
        export(opts.args[0], opts.model, directory)
    elif opts.step == "ops":
        print(json.dumps(executed_ops(opts.args[0], opts.model, directory)))
    else:
        print(json.dumps(time_all(opts.model, directory, opts.runs), indent=1))


if __name__ == "__main__":
    main()
