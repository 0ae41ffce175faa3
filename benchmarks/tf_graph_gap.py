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

or every step for several models at once (both TF releases timed, one JSON per model and
release in DIR; ``keras_app``, the model written in Keras by hand with random weights, is
timed too where there is one: a keras.applications twin, or ``keras_refs``' BERT / GPT-2).
Models: ``peer_worker``'s torchvision set (``peers.prepare`` weights) and the rest of
``tflite_files.MODELS`` (timm, BERT, GPT-2, Whisper encoder; text and audio models take
their torch inputs, image models NHWC):

    python tf_graph_gap.py set DIR --models resnet18 swin_t --nobuco-python NOBUCO_PY
    python tf_graph_gap.py table DIR      # the Markdown table of DIR's results

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
import tflite_files
import torch

CONVERTERS = ("crossport", "nobuco", "keras_app")
# keras.applications twins: peers.py's, and timm's MobileNetV3 (the same architecture)
IMAGE_TWINS = {**peer_worker.KERAS_TWINS,
               "timm_mobilenetv3_large_100": ("MobileNetV3Large",
                                              {"include_preprocessing": False})}
TEXT_TWINS = {"bert_base": "bert_encoder", "gpt2_small": "gpt2_decoder"}  # keras_refs


def prepare(name: str, directory: Path) -> None:
    """Save the seeded, live weights and the input every converter gets."""
    if name in peer_worker.TORCHVISION:
        import peers

        peers.prepare(name, directory)
    else:  # timm, HF text and audio models: tflite_files' builders (saved on first use)
        (directory / name).mkdir(exist_ok=True)
        tflite_files.model_and_input(name, directory / name)


def load_module(name: str, directory: Path) -> tuple[torch.nn.Module, torch.Tensor, bool]:
    """The module with the weights ``prepare`` saved, its torch input, and whether the
    converters take that input (and give spatial outputs) channels-last."""
    if name not in peer_worker.TORCHVISION:
        if not (directory / name / "state.pt").exists():  # never new weights per venv
            raise FileNotFoundError(f"run the prepare step for {name} first")
        return tflite_files.model_and_input(name, directory / name)
    module = peer_worker.build_model(name)
    module.load_state_dict(torch.load(directory / f"{name}.state.pt"))
    return module.eval(), torch.load(directory / f"{name}.input.pt"), True


def has_keras_twin(name: str) -> bool:
    return name in IMAGE_TWINS or name in TEXT_TWINS


def keras_twin(name: str, x: torch.Tensor):
    """The model written in Keras by hand, random weights: a keras.applications model, or
    ``keras_refs``' BERT / GPT-2 (every token unmasked), taking the converters' input."""
    import keras

    if name in TEXT_TWINS:
        import keras_refs

        ref = getattr(keras_refs, TEXT_TWINS[name])(seq=x.shape[1])
        ids = keras.Input(tuple(x.shape[1:]), batch_size=x.shape[0],
                          dtype=str(x.dtype).removeprefix("torch."))
        ids32 = keras.ops.cast(ids, "int32")
        return keras.Model(ids, ref([ids32, keras.ops.ones_like(ids32)]))
    ctor, kwargs = IMAGE_TWINS[name]
    return getattr(keras.applications, ctor)(
        weights=None, input_shape=tuple(x.shape[2:]) + (x.shape[1],),
        classifier_activation=None, **kwargs)


def graph_input(x: torch.Tensor, channels_last: bool) -> np.ndarray:
    """The converted graphs' input: NHWC for image models, the torch input otherwise."""
    return (x.permute(0, 2, 3, 1) if channels_last else x).contiguous().numpy()


def to_keras(converter: str, module: torch.nn.Module, x: torch.Tensor, name: str,
             channels_last: bool):
    """The converter's Keras model; image models NHWC in and out (as ``peer_worker``
    converts them), text and audio models on their torch layouts."""
    if converter == "keras_app":
        return keras_twin(name, x)
    if converter == "crossport":
        import crossport

        return crossport.convert(module, (x,), channels_last_io=channels_last)
    import nobuco
    from nobuco import ChannelOrder

    order = ChannelOrder.TENSORFLOW if channels_last else ChannelOrder.PYTORCH
    return nobuco.pytorch_to_keras(module, args=[x], inputs_channel_order=order,
                                   outputs_channel_order=order)


def torch_reference(module: torch.nn.Module, x: torch.Tensor, channels_last: bool) -> np.ndarray:
    """torch's output in the converted graphs' output layout (NHWC segmentation maps)."""
    with torch.no_grad():
        array = module(x).numpy()
    return array.transpose(0, 2, 3, 1) if channels_last and array.ndim == 4 else array


def export(converter: str, name: str, directory: Path) -> None:
    """Convert and save ``serve(x)`` = ``model(x, training=False)`` as a SavedModel."""
    import tensorflow as tf

    module, x, channels_last = load_module(name, directory)
    model = to_keras(converter, module, x, name, channels_last)
    x_in = graph_input(x, channels_last)
    holder = tf.Module()
    # The variables, not the Keras model: Keras 2 (nobuco's venv) would also trace its
    # legacy training-mode call functions, which its StochasticDepth (swin_t) cannot trace.
    holder.weights = list(model.weights)
    holder.serve = tf.function(lambda t: model(t, training=False),
                               input_signature=[tf.TensorSpec(x_in.shape, x_in.dtype)])
    want = torch_reference(module, x, channels_last)
    got = np.asarray(holder.serve(tf.constant(x_in)))
    if converter != "keras_app":  # the twin has its own (random) weights
        print(f"{converter}: max |keras - torch| = {np.abs(got - want).max():.2e}")
    tf.saved_model.save(holder, str(directory / f"{name}.{converter}.savedmodel"))


def time_all(name: str, directory: Path, runs: int) -> dict:
    """Every SavedModel and torch eager, interleaved, 1 thread; medians and op counts.

    The graph loaded first in a process runs 0.5-2% slower than the same SavedModel loaded
    later (resnet50, 60 rounds, 6 process runs), a bias the old single load order
    (crossport first) put on crossport. So a decoy copy of the first graph is loaded first
    and timed but not reported, and each graph is loaded twice more, in mirrored order
    (A B C C B A), its time taken over both copies' samples. The copies' medians are kept
    (``median_ms_by_copy``): how far apart the same graph lands is the run's noise floor.
    """
    import tensorflow as tf

    common.configure_runtime(1)
    module, x, channels_last = load_module(name, directory)
    x_tf = tf.constant(graph_input(x, channels_last))
    want = torch_reference(module, x, channels_last)
    fns, ops, kept = {}, {}, []
    present = [c for c in CONVERTERS if (directory / f"{name}.{c}.savedmodel").exists()]
    loads = [(0, present[0])] + [(1, c) for c in present] + [(2, c) for c in reversed(present)]
    for copy, converter in loads:
        loaded = tf.saved_model.load(str(directory / f"{name}.{converter}.savedmodel"))
        serve = loaded.serve
        if copy == 1:  # the same graph in every copy: check and count it once
            if converter != "keras_app":
                err = float(np.abs(np.asarray(serve(x_tf)) - want).max())
                print(f"{converter}: max |loaded - torch| = {err:.2e}")
            ops[converter] = graph_ops(serve.get_concrete_function(x_tf).graph)
        fns[f"{converter}#{copy}"] = functools.partial(serve, x_tf)
        kept.append(loaded)  # the restored object owns the variables

    def eager():
        with torch.no_grad():
            return module(x)
    fns["torch_eager"] = eager
    samples = common.interleaved_latency(fns, runs=runs, warmup=3)
    by_copy = {k: common.summarize(v)["median_ms"] for k, v in samples.items()}
    merged = {c: samples[f"{c}#1"] + samples[f"{c}#2"] for c in present}
    merged["torch_eager"] = samples["torch_eager"]
    med = {k: common.summarize(v)["median_ms"] for k, v in merged.items()}
    return {"tf": tf.__version__, "model": name, "runs": runs,
            "load_avg": os.getloadavg(), "median_ms": med, "median_ms_by_copy": by_copy,
            "ratio_to_torch": {k: med[k] / med["torch_eager"] for k in present},
            "graph_ops": ops}


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def copy_spread(result: dict) -> float | None:
    """The largest gap between the two loads of one graph, relative (the noise floor)."""
    by_copy = result.get("median_ms_by_copy")
    if not by_copy:
        return None
    gaps = [abs(by_copy[f"{c}#1"] - by_copy[f"{c}#2"]) / min(by_copy[f"{c}#1"], by_copy[f"{c}#2"])
            for c in result["ratio_to_torch"]]
    return max(gaps)


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
    _, x, channels_last = load_module(name, directory)
    loaded.serve(tf.constant(graph_input(x, channels_last)))
    (final,) = [p for p in dump.iterdir() if p.name.endswith("after_partition_passes.pbtxt")]
    ops = re.findall(r'^  op: "(\w+)"', final.read_text(), flags=re.MULTILINE)
    counts = {op: ops.count(op) for op in sorted(set(ops), key=lambda o: -ops.count(o))}
    return {"tf": tf.__version__, "converter": converter,
            "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"), "ops": counts}


def run_set(models: list[str], directory: Path, nobuco_python: str, runs: int) -> None:
    """Every step for each model, each in its own process; ``time`` once per TF release,
    each result written to ``DIR/MODEL.tf-VERSION.json``."""
    import subprocess

    here, project = str(Path(__file__).resolve()), sys.executable

    def step(python: str, *positional: str, model: str) -> str:
        done = subprocess.run([python, here, *positional, str(directory), "--model", model,
                               "--runs", str(runs)], capture_output=True, text=True)
        if done.returncode:  # say which step failed and why; the caller decides
            tail = "\n".join(done.stderr.strip().splitlines()[-3:])
            raise RuntimeError(f"{model}: {' '.join(positional)} failed:\n{tail}")
        return done.stdout

    for name in models:
        step(project, "prepare", model=name)
        step(project, "export", "crossport", model=name)
        if has_keras_twin(name):
            step(project, "export", "keras_app", model=name)
        try:  # a model nobuco cannot convert is still timed against the others
            step(nobuco_python, "export", "nobuco", model=name)
        except RuntimeError as exc:
            print(exc, flush=True)
        for python in (project, nobuco_python):
            out = step(python, "time", model=name)
            result = json.loads(out[out.index("{"):])
            (directory / f"{name}.tf-{result['tf']}.json").write_text(json.dumps(result))
            print(name, result["tf"], {k: round(v, 3) for k, v in
                                       result["ratio_to_torch"].items()}, flush=True)


def set_table(directory: Path) -> str:
    """A Markdown table of every ``set`` result in ``directory``: ratio to torch eager per
    converter and TF release (smaller is faster), crossport's ratio to the best other, and
    the noise floor: how far apart the two loads of the same graph landed."""
    rows = ["| model | TF | crossport | nobuco | Keras by hand | crossport / best other "
            "| torch eager ms | load average | same graph, two loads |",
            "|---|---|---|---|---|---|---|---|---|"]
    for path in sorted(directory.glob("*.tf-*.json")):
        r = json.loads(path.read_text())
        ratio = r["ratio_to_torch"]
        others = [v for k, v in ratio.items() if k != "crossport"]
        cells = [f"{ratio[c]:.3f}" if c in ratio else "—" for c in CONVERTERS]
        best = f"{ratio['crossport'] / min(others):.3f}" if others else "—"
        rows.append(f"| {r['model']} | {r['tf']} | {' | '.join(cells)} | {best} | "
                    f"{r['median_ms']['torch_eager']:.1f} | {r['load_avg'][0]:.1f} | "
                    f"{_percent(copy_spread(r))} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("prepare", "export", "time", "ops", "set", "table"))
    parser.add_argument("args", nargs="+", help="[CONVERTER] DIR")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--models", nargs="+", help="the models of ``set``")
    parser.add_argument("--nobuco-python", help="nobuco's venv python (``set``)")
    parser.add_argument("--runs", type=int, default=30)
    opts = parser.parse_args()
    directory = Path(opts.args[-1])
    directory.mkdir(parents=True, exist_ok=True)
    if opts.step == "prepare":
        prepare(opts.model, directory)
    elif opts.step == "export":
        export(opts.args[0], opts.model, directory)
    elif opts.step == "table":
        print(set_table(directory))
    elif opts.step == "set":
        run_set(opts.models, directory, opts.nobuco_python, opts.runs)
    elif opts.step == "ops":
        print(json.dumps(executed_ops(opts.args[0], opts.model, directory)))
    else:
        print(json.dumps(time_all(opts.model, directory, opts.runs), indent=1))


if __name__ == "__main__":
    main()
