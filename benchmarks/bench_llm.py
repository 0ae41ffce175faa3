"""Benchmark the generative export: tokens/s on LiteRT vs torch eager, conversion time, peak
memory and file size, for small HF decoder configs (random weights).

Each model runs in its own subprocess so its peak RSS (``ru_maxrss``: torch model + export
+ LiteRT) is its own. In that process, same threads for both runtimes:
  * export: ``crossport.generative.export`` with its greedy generation check, per stage;
  * prefill: one ``prefill_<P>`` call on ``P`` tokens vs HF eager ``model(ids)`` filling a
    ``DynamicCache`` -> tokens/s;
  * decode: ``decode`` calls vs HF eager one-token steps with the cache (per step).
Timings are the fastest of interleaved runs (see ``best_seconds``).

Writes ``RESULTS_LLM.md`` and ``results_llm.json`` beside this file. From the repo root:

    .venv/bin/python benchmarks/bench_llm.py            # small configs (~5 min on 2 cores)
    .venv/bin/python benchmarks/bench_llm.py --quick    # smoke run: tiny configs, few runs
    .venv/bin/python benchmarks/bench_llm.py --config tinyllama-1.1b   # ~20 min, ~11 GB RAM

``--config tinyllama-1.1b``: a TinyLlama-sized Llama (1.1B parameters, random weights)
exported with ``quantize="int8-weights"``; its row goes to ``results_llm_1b.json`` and its
own table in ``RESULTS_LLM.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

THREADS = 2
CONFIGS = {  # name -> (config class, extra config fields)
    "llama": ("LlamaConfig", "LlamaForCausalLM", {"num_key_value_heads": 4}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"num_key_value_heads": 4}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"num_key_value_heads": 1, "head_dim": 32}),
}
SMALL = dict(vocab_size=4096, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
             num_attention_heads=8, initializer_range=0.1, max_position_embeddings=1024)
LARGE = {  # name -> (config class, model class, config fields, quantize)
    "tinyllama-1.1b": ("LlamaConfig", "LlamaForCausalLM", dict(
        vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
        num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048),
        "int8-weights"),
}
TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, initializer_range=0.2, max_position_embeddings=512)


def build(name: str, quick: bool):
    import common  # noqa: F401  (env vars before torch/TF start)
    import torch

    common.load_torchvision()
    import transformers

    if name in LARGE:
        config_cls, model_cls, fields, _ = LARGE[name]
        torch.manual_seed(0)
        return getattr(transformers, model_cls)(getattr(transformers, config_cls)(**fields)).eval()
    config_cls, model_cls, extra = CONFIGS[name]
    base = TINY if quick else SMALL
    if quick and extra["num_key_value_heads"] > 1:
        extra = {**extra, "num_key_value_heads": 2}  # GQA with TINY's 4 heads
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**base, **extra)
    return getattr(transformers, model_cls)(config).eval()


def best_seconds(fns, runs: int) -> list[float]:
    """Fastest of ``runs`` timings of each fn, the fns interleaved run by run: on a loaded
    shared machine both runtimes then see the same load, and the fastest run is the one
    least disturbed by it (a median follows the load)."""
    for fn in fns:
        fn()  # warm-up
    times = [[] for _ in fns]
    for _ in range(runs):
        for fn, spent in zip(fns, times):
            start = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - start)
    return [min(t) for t in times]


def measure_one(name: str, quick: bool, cache: int | None = None) -> dict:
    import common

    common.configure_runtime(THREADS)
    import numpy as np
    import torch
    from transformers import DynamicCache

    from crossport.generative import LiteRTGenerator, export

    prefill, default_cache, runs, steps = (8, 64, 3, 8) if quick else (32, 256, 10, 64)
    cache = cache or default_cache
    quantize, new_tokens = None, 8
    if name in LARGE:
        (prefill, cache, runs, steps), quantize, new_tokens = (32, 128, 3, 8), LARGE[name][3], 4
    lm = build(name, quick)
    out = Path(tempfile.mkdtemp()) / f"{name}.tflite"
    start = time.perf_counter()
    result = export(lm, out, prefill_lengths=(prefill,), max_cache_len=cache, quantize=quantize,
                    max_new_tokens=new_tokens)
    export_seconds = time.perf_counter() - start
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    runner = LiteRTGenerator(out, num_threads=THREADS)
    ids = np.random.default_rng(0).integers(0, lm.config.vocab_size, size=prefill)
    empty = runner.empty_caches()

    def litert_prefill():
        return runner.prefill(ids, empty)

    _, filled_caches = litert_prefill()
    decode = runner.signatures["decode"]

    def litert_decode():
        return decode(tokens=np.array([[1]], np.int32), input_pos=np.array([prefill], np.int32),
                      **filled_caches)

    torch_ids = torch.as_tensor(ids[None])

    def torch_prefill():
        with torch.no_grad():
            return lm(torch_ids, past_key_values=DynamicCache(config=lm.config), use_cache=True)

    filled = torch_prefill().past_key_values
    step_ids = torch.tensor([[1]])

    def torch_decode():
        with torch.no_grad():
            lm(step_ids, past_key_values=filled, use_cache=True)
            filled.crop(-1)  # drop the step just added: same cache length every run

    prefill_s = best_seconds([litert_prefill, torch_prefill], runs)
    decode_s = best_seconds([litert_decode, torch_decode], steps)
    return {
        "model": name, "params": sum(p.numel() for p in lm.parameters()),
        "prefill": prefill, "cache": cache, "file_mb": result.bytes / 1e6,
        "weights_mb": 4 * sum(p.numel() for p in lm.parameters()) / 1e6,
        "export_s": export_seconds, "stages": result.seconds, "peak_rss_mb": peak_rss / 1e6,
        "identical": result.report.identical, "logit_error": result.report.max_logit_error,
        "quantize": quantize, "agreement": result.report.agreement,
        "litert_prefill_tps": prefill / prefill_s[0], "torch_prefill_tps": prefill / prefill_s[1],
        "litert_decode_tps": 1 / decode_s[0], "torch_decode_tps": 1 / decode_s[1],
    }


def markdown(rows: list[dict], quick: bool, suffix: str = "") -> str:
    lines = [
        "# Generative export (benchmarks/bench_llm.py)", "",
        f"{'Tiny (smoke)' if quick else 'Small'} HF decoder configs, random weights, batch 1, "
        f"{THREADS} threads for torch eager and LiteRT (XNNPACK), fp32. Prefill: one "
        f"prefill signature call on a full chunk of {rows[0]['prefill'] if rows else '?'} "
        f"tokens; decode: one token with the prefilled cache of "
        f"{rows[0]['cache'] if rows else '?'} slots; "
        "fastest of interleaved LiteRT/torch runs. "
        "Peak RSS is the whole subprocess (torch model, conversion, TFLite converter, LiteRT).",
        f"Load average at the end of the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
        "cores (tokens/s on a loaded shared machine are noisy: compare within a row).",
        "",
        "| model | params | file MB (fp32 weights MB) | export s | peak RSS MB | greedy parity "
        "| prefill tok/s LiteRT / torch | decode tok/s LiteRT / torch |",
        "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['params'] / 1e6:.2f} M | "
            f"{r['file_mb']:.2f} ({r['weights_mb']:.2f}) "
            f"| {r['export_s']:.1f} | {r['peak_rss_mb']:.0f} | "
            f"{'identical' if r['identical'] else 'DIFFERENT'}, {r['logit_error']:.1e} | "
            f"{r['litert_prefill_tps']:.0f} / {r['torch_prefill_tps']:.0f} | "
            f"{r['litert_decode_tps']:.0f} / {r['torch_decode_tps']:.0f} |")
    stages = ", ".join(f"{k} {v:.1f}s" for k, v in rows[0]["stages"].items()) if rows else ""
    lines += ["", f"Export stages ({rows[0]['model']}): {stages}." if rows else ""]
    lines += blend_comparison(rows, suffix)
    lines += ["", "Not measured here: the 1.1B-parameter (TinyLlama-sized) config."]
    return "\n".join(lines) + "\n"


def blend_comparison(rows: list[dict], suffix: str) -> list[str]:
    """Decode before/after the cache write became a dynamic-update-slice, from
    ``results_llm_blend<suffix>.json``: this benchmark run on the tree before that change
    (the one-hot/where blend over every cache slot), same configs and cache length."""
    path = HERE / f"results_llm_blend{suffix}.json"
    if not path.exists():
        return []
    before = {r["model"]: r for r in json.loads(path.read_text())}
    lines = ["", f"KV-cache write, decode tok/s LiteRT / torch (LiteRT / torch ratio): one-hot "
             f"blend over every slot of a stacked cache (before, `{path.name}`) vs per-layer "
             "caches written with dynamic-update-slice (now). "
             "Each run is its own process on the shared machine; the ratio to torch in the "
             "same process is the comparable number; `bench_llm_ab.py` times both builds "
             "in one process (docs/generative.md, Cost of the functional cache).", "",
             "| model | cache | before | now |", "|---|---|---|---|"]
    for r in rows:
        b = before.get(r["model"])
        if b is None or b["cache"] != r["cache"]:
            continue
        cells = [f"{x['litert_decode_tps']:.0f} / {x['torch_decode_tps']:.0f} "
                 f"({x['litert_decode_tps'] / x['torch_decode_tps']:.2f}x)" for x in (b, r)]
        lines.append(f"| {r['model']} | {r['cache']} | {cells[0]} | {cells[1]} |")
    return lines


def large_markdown(rows: list[dict]) -> str:
    lines = [
        "", "## 1.1B parameters (TinyLlama-sized Llama, `--config tinyllama-1.1b`)", "",
        "hidden 2048, 22 layers, 32 heads / 4 KV heads, intermediate 5632, vocab 32000, random "
        "weights (`initializer_range` 0.02: near-tie logits, so int8 token agreement with HF "
        "is low by construction; the logits error is reported). Exported with `quantize="
        "\"int8-weights\"`, prefill 32, cache 128, the export's own generation check on 3 "
        "prompts x 4 new tokens included in the export time. Peak RSS is the whole process "
        "(the torch model stays alive throughout), run with `TF_ENABLE_ONEDNN_OPTS=0`: "
        "TensorFlow's oneDNN allocator (the default on x86) keeps the memory of the dropped "
        "Keras copy of the weights in its pool instead of returning it.", "",
        "| model | params | file MB (fp32 weights MB) | export s | peak RSS MB (x fp32 weights) "
        "| logits error, token agreement | prefill tok/s LiteRT / torch "
        "| decode tok/s LiteRT / torch |",
        "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['params'] / 1e9:.2f} B | {r['file_mb']:.0f} "
            f"({r['weights_mb']:.0f}) | {r['export_s']:.0f} | {r['peak_rss_mb']:.0f} "
            f"({r['peak_rss_mb'] / r['weights_mb']:.2f}x) | {r['logit_error']:.1e}, "
            f"{r['agreement']:.0%} | {r['litert_prefill_tps']:.1f} / {r['torch_prefill_tps']:.1f} "
            f"| {r['litert_decode_tps']:.2f} / {r['torch_decode_tps']:.2f} |")
        stages = ", ".join(f"{k} {v:.0f}s" for k, v in r["stages"].items())
        lines += ["", f"Export stages ({r['model']}): {stages}."]
    return "\n".join(lines) + "\n"


def write_markdown(rows: list[dict], quick: bool, large: bool, suffix: str = "") -> None:
    """The small configs' table (``rows``, the 1.1B section kept), or the 1.1B section
    replacing the old one (the small table and its load average are kept as measured)."""
    path = HERE / f"RESULTS_LLM{suffix}.md"
    if not large:
        old = path.read_text() if path.exists() else ""
        kept = ("\n## 1.1B parameters" + old.split("\n## 1.1B parameters", 1)[1]
                if "\n## 1.1B parameters" in old else "")
        path.write_text(markdown(rows, quick, suffix) + kept)
        return
    text = path.read_text().split("\n## 1.1B parameters")[0].rstrip("\n") + "\n"
    text = text.replace("\nNot measured here: the 1.1B-parameter (TinyLlama-sized) config.\n", "")
    path.write_text(text + large_markdown(rows))


def run_child(name: str, quick: bool, cache: int | None = None) -> dict:
    cmd = [sys.executable, __file__, "--one", name] + (["--quick"] if quick else [])
    cmd += ["--cache", str(cache)] if cache else []
    env = dict(os.environ)
    if name in LARGE:  # oneDNN's TF allocator keeps freed memory (the dropped Keras copy)
        env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    print(row, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cache", type=int, help="max_cache_len (default 256; 64 --quick); "
                        "a non-default length writes RESULTS_LLM_cache<N>.md")
    parser.add_argument("--models", default=",".join(CONFIGS), help="comma-separated subset")
    parser.add_argument("--config", choices=sorted(LARGE), help="the 1.1B config only")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # child process: one model
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.one, args.quick, args.cache)))
        return
    if args.config:
        rows = [run_child(args.config, False)]
        (HERE / "results_llm_1b.json").write_text(json.dumps(rows, indent=2))
        write_markdown(rows, False, large=True)
    else:
        rows = [run_child(name, args.quick, args.cache) for name in args.models.split(",")]
        suffix = f"_cache{args.cache}" if args.cache else ""
        (HERE / f"results_llm{suffix}.json").write_text(json.dumps(rows, indent=2))
        write_markdown(rows, args.quick, large=False, suffix=suffix)


if __name__ == "__main__":
    main()
