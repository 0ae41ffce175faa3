"""Benchmark crossport on text transformers and count transposes across the sequence zoo.

Part 1, BERT-base- and GPT-2-small-sized HF models (default configs, random weights made
live, eval), batch 1, 128 tokens with 16 padded:
  * conversion: ``crossport.convert_with_report`` with its parity check, static and with a
    dynamic sequence dim, vs ``torch.export.export`` alone;
  * latency: the converted model vs torch eager and vs a hand-written Keras model of the
    same architecture (``keras_refs.bert_encoder`` / ``gpt2_decoder``), interleaved;
  * transposes (emitter count and traced TF graph) and parity vs torch fp32 and fp64.

Part 2, transposes per model for the sequence zoo of ``tests/zoo/test_hf_zoo.py`` (tiny HF
configs and torchvision vit_b_16 / swin_t / maxvit_t), built by the zoo's own builders.

Writes the "text" section of ``RESULTS.md`` and ``results_text.json``. From the repo root:

    .venv/bin/python benchmarks/bench_text.py            # full run (~10 min on 2 cores)
    .venv/bin/python benchmarks/bench_text.py --quick    # smoke run: 2 layers, few runs
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # run as a script from anywhere
sys.path.insert(1, str(HERE.parent))  # the zoo builders in tests/zoo

import common  # first: sets the TF/Keras/OpenMP env vars before those libraries load
import numpy as np
import torch

THREADS = 2
SEQ, PADDED, SECOND_SEQ = 128, 16, 64


class Text(torch.nn.Module):
    """``forward(input_ids, attention_mask) -> last_hidden_state``."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def text_inputs(vocab: int, length: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Valid token ids and a padding mask (the last ``PADDED`` positions masked)."""
    ids = torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones(1, length, dtype=torch.long)
    mask[0, length - PADDED:] = 0
    return ids, mask


def torch_text_model(name: str, layers: int | None) -> tuple[torch.nn.Module, int]:
    """BERT-base- or GPT-2-small-sized HF model (``layers`` overrides the depth), and its vocab."""
    from crossport.parity.live import make_live

    common.load_torchvision()  # transformers imports torchvision
    import transformers as T

    torch.manual_seed(0)
    if name == "bert-base":
        config = T.BertConfig(**({"num_hidden_layers": layers} if layers else {}))
        model = Text(T.BertModel(config, add_pooling_layer=False))
    else:
        config = T.GPT2Config(**({"n_layer": layers} if layers else {}))
        model = Text(T.GPT2Model(config))
    make_live(model, text_inputs(config.vocab_size, SEQ))
    return model.eval(), config.vocab_size


def keras_reference(name: str, layers: int | None):
    """The hand-written Keras model with the same sizes (random weights)."""
    import keras_refs

    depth = {"num_layers": layers} if layers else {}
    return keras_refs.bert_encoder(**depth) if name == "bert-base" else keras_refs.gpt2_decoder(
        **depth)


def keras_runner(model, inputs: list[np.ndarray]):
    """``model(inputs, training=False)`` in a graph-mode tf.function with a fixed signature."""
    import tensorflow as tf

    specs = [tf.TensorSpec(x.shape, tf.as_dtype(x.dtype)) for x in inputs]
    fn = tf.function(lambda *xs: model(list(xs), training=False), jit_compile=False,
                     input_signature=specs)
    tensors = [tf.constant(x) for x in inputs]
    return fn, specs, (lambda: fn(*tensors).numpy())


def graph_transposes(fn, specs) -> int:
    """Transpose ops in the traced graph of the timed tf.function (before Grappler).

    Not ``crossport.parity.graph.graph_transposes(model)``: that traces ``model.inputs``'
    signature, and with a ``None`` sequence dim Keras' MultiHeadAttention lowers through
    Transpose + BatchMatMul (4 per layer) instead of the Einsum op the fixed-shape graph has.
    """
    return common.graph_op_counts(fn, *specs).get("Transpose", 0)


def timed_conversion(module, example, **options) -> tuple[Any, float]:
    import crossport

    start = time.perf_counter()
    conversion = crossport.convert_with_report(module, example, check=True, **options)
    return conversion, time.perf_counter() - start


def parity(module, model, example) -> dict[str, float]:
    """Normalized error of the Keras model vs torch fp32 and vs torch fp64 (fp32 vs fp64 too)."""
    import copy

    from crossport.parity import normalized_error
    from crossport.parity.verify import run_keras

    with torch.no_grad():
        ref = module(*example).numpy()
        ref64 = copy.deepcopy(module).double()(*example).numpy()
    got = run_keras(model, example, False, like=torch.from_numpy(ref))[0]
    return {"vs_fp32": normalized_error(ref, got), "vs_fp64": normalized_error(ref64, got),
            "torch_fp32_vs_fp64": normalized_error(ref64, ref)}


def bench_text_model(name: str, layers: int | None, runs: int, warmup: int) -> dict[str, Any]:
    """Conversion time, latency ratios, transposes and parity of one text model."""
    module, vocab = torch_text_model(name, layers)
    example = text_inputs(vocab, SEQ)
    conversion, convert_s = timed_conversion(module, example)
    dims = {"input_ids": {1: "seq"}, "attention_mask": {1: "seq"}}
    dynamic, dynamic_s = timed_conversion(module, example, dynamic_dims=dims)
    export_s = common.time_once(lambda: torch.export.export(module, example, strict=False))
    arrays = [t.numpy() for t in example]
    reference = keras_reference(name, layers)
    ours_fn, ours_specs, ours = keras_runner(conversion.model, arrays)
    _dyn_fn, _dyn_specs, dyn = keras_runner(dynamic.model, arrays)
    ref_fn, ref_specs, ref = keras_runner(reference, [a.astype(np.int32) for a in arrays])

    def eager():
        with torch.no_grad():
            return module(*example).numpy()

    samples = common.interleaved_latency({"torch": eager, "ours": ours, "ours_dynamic": dyn,
                                          "keras": ref}, runs, warmup)
    paired = {f"{a}/{b}": float(np.median(np.divide(samples[a], samples[b])))
              for a, b in (("ours", "torch"), ("ours", "keras"), ("ours_dynamic", "ours"),
                           ("keras", "torch"))}
    return {
        "model": name, "layers": layers or (12), "seq": SEQ, "padded": PADDED,
        "params_m": sum(p.numel() for p in module.parameters()) / 1e6,
        "convert_s": convert_s, "convert_dynamic_s": dynamic_s, "export_s": export_s,
        "stages_s": dict(conversion.seconds),
        "latency": {k: common.summarize(v) for k, v in samples.items()}, "paired": paired,
        "transposes": conversion.transposes,
        "graph_transposes": graph_transposes(ours_fn, ours_specs) - conversion.boundary_transposes,
        "keras_graph_transposes": graph_transposes(ref_fn, ref_specs),
        "parity": parity(module, conversion.model, example),
        "parity_dynamic_second_length": parity(module, dynamic.model,
                                                text_inputs(vocab, SECOND_SEQ, seed=1)),
    }


# -- transposes across the sequence zoo ------------------------------------------------------
def zoo_transposes() -> list[dict[str, Any]]:
    """Emitter, torch-graph and TF-graph transpose counts for every sequence-zoo model."""
    import crossport
    from crossport.parity.graph import graph_transposes as tf_graph_transposes
    from tests.zoo import test_hf_zoo as hf
    from tests.zoo.test_torchvision_zoo import build_live

    torchvision = common.load_torchvision()
    builds = [(name, lambda name=name: hf.build(name)) for name, *_ in hf.MODELS]
    builds += [(f"torchvision {name}", lambda n=name, k=kwargs, s=shape: build_live(
        torchvision, n, k, s, False)) for name, kwargs, shape in hf.TORCHVISION]
    rows = []
    for name, build in builds:
        module, example = build()
        conversion = crossport.convert_with_report(module, example, check=False)
        rows.append({"model": name, "transposes": conversion.transposes,
                     "torch_transposes": hf.own_transposes(conversion.exported),
                     "tf_graph_transposes": tf_graph_transposes(conversion.model)
                     - conversion.boundary_transposes})
        gc.collect()
    return rows


# -- report ----------------------------------------------------------------------------------
SECTION = "text"
METHOD = [
    ("Models: HF `BertModel(BertConfig())` without pooler (BERT-base: 12 layers, hidden 768, "
    "12 heads) and `GPT2Model(GPT2Config())` (GPT-2 small: 12 layers, hidden 768), random "
    "weights made live with `crossport.parity.live.make_live`, eval, wrapped as "
    "`forward(input_ids, attention_mask) -> last_hidden_state`; batch 1, 128 tokens, the last "
    "16 padded."),
    ("Conversion: `convert_with_report(..., check=True)` wall time (capture, convert, verify on "
    "3 inputs), static and with `dynamic_dims` marking the sequence dim of both inputs; "
    "baseline `torch.export.export(strict=False)` alone."),
    ("Latency: torch eager under `torch.no_grad()`; the converted models and the hand-written "
    "Keras reference (`keras_refs.bert_encoder` / `gpt2_decoder`: keras.layers "
    "MultiHeadAttention, Dense, LayerNormalization; int32 inputs) each called as a "
    "`tf.function(jit_compile=False)` with a fixed input signature, output fetched with "
    "`.numpy()`; variants interleaved round-robin; ratios are medians of per-round ratios."),
    ("Transposes: `Conversion.transposes` (layout transposes crossport emits) and Transpose ops "
    "in the traced TF graph minus the boundary ones. On the TF backend `keras.ops.einsum` "
    "lowers the two head-split attention products (crossport's attention converter) to "
    "Transpose + BatchMatMul, 4 Transpose ops per layer; `keras.layers.MultiHeadAttention` "
    "calls `tf.einsum`, whose Einsum kernel does the same transposes inside one op, so the "
    "hand-written graph shows none. Same work either way (see the latency ratio)."),
    ("Parity: max normalized error `max|d|/max(1,max|ref|)` of the static conversion vs torch "
    "fp32 and fp64 on the example, and of the dynamic conversion at a second length "
    f"({SECOND_SEQ} tokens)."),
]


def text_section(results: list[dict], zoo: list[dict], meta: dict) -> list[str]:
    lines = ["## Text transformers (benchmarks/bench_text.py)", "",
             f"Date: {meta['date']}  ", f"Command: `{meta['command']}`  ",
             f"{meta['runs']} interleaved runs after {meta['warmup']} warm-up calls per variant.",
             "", *[f"- {m}" for m in METHOD], "",
             ("| model | params | convert s (dynamic s; export s) | torch ms | ours ms | "
             "hand Keras ms | ours/torch | ours/hand Keras | dynamic/static | transposes "
             "(TF graph; hand Keras graph) | err vs fp32 | err vs fp64 (torch fp32 vs fp64) | "
             f"dynamic err at {SECOND_SEQ} tokens |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lat, p, q = r["latency"], r["paired"], r["parity"]
        lines.append(
            f"| {r['model']} ({r['layers']} layers) | {r['params_m']:.0f}M | "
            f"{r['convert_s']:.1f} ({r['convert_dynamic_s']:.1f}; {r['export_s']:.1f}) | "
            f"{lat['torch']['median_ms']:.1f} | {lat['ours']['median_ms']:.1f} | "
            f"{lat['keras']['median_ms']:.1f} | {p['ours/torch']:.3f} | {p['ours/keras']:.3f} | "
            f"{p['ours_dynamic/ours']:.3f} | {r['transposes']} ({r['graph_transposes']}; "
            f"{r['keras_graph_transposes']}) | {q['vs_fp32']:.1e} | {q['vs_fp64']:.1e} "
            f"({q['torch_fp32_vs_fp64']:.1e}) | "
            f"{r['parity_dynamic_second_length']['vs_fp32']:.1e} |")
    if zoo:
        lines += ["", "### Transposes per model (sequence zoo, tests/zoo/test_hf_zoo.py sizes)",
                  "", ("crossport = layout transposes the converter emits; torch = transposes/"
                  "permutes of rank > 2 the torch model itself performs (its exported graph); "
                  "TF graph = Transpose ops in the converted model's traced graph, boundary "
                  "excluded (includes keras.ops.einsum's lowering of attention, see Method)."),
                  "",
                  "| model | crossport | torch | TF graph |", "|---|---|---|---|"]
        lines += [f"| {z['model']} | {z['transposes']} | {z['torch_transposes']} | "
                  f"{z['tf_graph_transposes']} |" for z in zoo]
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=["bert-base", "gpt2-small"],
                        default=["bert-base", "gpt2-small"])
    parser.add_argument("--runs", type=int, default=None, help="timed runs per variant (30)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up calls (3)")
    parser.add_argument("--layers", type=int, default=None, help="override the depth (12)")
    parser.add_argument("--no-zoo", action="store_true", help="skip the transpose table")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 2 layers, 3 runs, no zoo table")
    parser.add_argument("--out", type=Path, default=HERE, help="directory for the outputs")
    args = parser.parse_args(argv)
    if args.quick:
        args.layers, args.no_zoo = args.layers or 2, True
    args.runs = args.runs or (3 if args.quick else 30)
    args.warmup = args.warmup or (1 if args.quick else 3)
    return args


def main(argv: list[str] | None = None) -> None:
    from rich.console import Console

    args = parse_args(argv)
    common.configure_runtime(THREADS)
    console = Console()
    meta = common.run_metadata(args.runs, args.warmup, THREADS)
    results = []
    for name in args.models:
        with console.status(f"benchmarking {name}"):
            results.append(bench_text_model(name, args.layers, args.runs, args.warmup))
        console.print(results[-1]["model"], results[-1]["paired"], results[-1]["parity"])
        gc.collect()
    zoo = [] if args.no_zoo else zoo_transposes()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results_text.json").write_text(
        json.dumps({**meta, "results": results, "zoo_transposes": zoo}, indent=1))
    common.write_section(args.out / "RESULTS.md", SECTION, text_section(results, zoo, meta))
    console.print(f"wrote {args.out / 'RESULTS.md'} ({SECTION} section) and results_text.json")


if __name__ == "__main__":
    main()
