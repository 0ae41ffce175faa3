"""Op lists, XNNPACK partitions and latency of crossport's ``.tflite`` files from two
checkouts of crossport: the cost of a change to the emitted graph.

``make`` converts and exports each model with the crossport importable from ``--repo``
(run it once per checkout: each in its own process, since the package is imported from
there); ``compare`` prints, per model, the ops whose counts changed, both files' partition
counts and an A/B timing (``tflite_ab.time_files``: each file loaded twice, 1 thread,
XNNPACK, interleaved rounds).

    python benchmarks/tflite_before_after.py make --repo /work/main --out /tmp/ab/before
    python benchmarks/tflite_before_after.py make --repo . --out /tmp/ab/after
    python benchmarks/tflite_before_after.py compare /tmp/ab/before /tmp/ab/after --runs 30

Models: torchvision's resnet18, mobilenet_v2, vit_b_16 (``weights=None``, BN calibrated,
seed 0) and tiny HF BERT / GPT-2 (2 layers, hidden 256, 128 tokens; their attention masks
and GELU are what the big ones have).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common  # noqa: E402  (env vars before TF/torch load)

MODELS = ("resnet18", "mobilenet_v2", "vit_b_16", "bert_tiny", "gpt2_tiny")
TOKENS = 128


def _module_and_input(name: str):
    import torch

    torch.manual_seed(0)
    if name in ("bert_tiny", "gpt2_tiny"):
        from tflite_files import LastHiddenState
        from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

        if name == "bert_tiny":
            inner = BertModel(BertConfig(hidden_size=256, num_hidden_layers=2,
                                         num_attention_heads=4, intermediate_size=1024),
                              add_pooling_layer=False)
        else:
            inner = GPT2Model(GPT2Config(n_embd=256, n_layer=2, n_head=4))
        return LastHiddenState(inner).eval(), torch.randint(0, 1000, (1, TOKENS)), False
    tv = common.load_torchvision()
    shape = (1, 3, 224, 224)
    module = common.calibrate_batchnorm(getattr(tv.models, name)(weights=None), shape)
    return module.eval(), torch.randn(shape), True


def make(repo: Path, out: Path, names: list[str]) -> None:
    sys.path.insert(0, str(repo.resolve()))
    import crossport

    print(f"crossport from {Path(crossport.__file__).parent}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        module, x, channels_last = _module_and_input(name)
        conversion = crossport.convert_with_report(module, (x,), channels_last_io=channels_last)
        result = crossport.export(conversion, out / f"{name}.tflite", overwrite=True)
        print(f"{name}: exported ({result.seconds:.1f} s, error {result.max_error:.1e})",
              flush=True)


def _ops_and_partitions(path: Path) -> tuple[Counter, int]:
    from ai_edge_litert.interpreter import Interpreter

    from crossport.export.formats import tflite_op_names

    interpreter = Interpreter(model_path=str(path), num_threads=1)
    interpreter.allocate_tensors()
    delegated = [op["op_name"] for op in interpreter._get_ops_details()]
    return Counter(tflite_op_names(path)), delegated.count("DELEGATE")


def compare(before: Path, after: Path, names: list[str], runs: int) -> list[str]:
    from tflite_ab import time_files

    common.configure_runtime(1)
    lines = ["| model | ops changed (before -> after) | partitions before / after "
             "| ms before (copies) | ms after (copies) | after / before | max diff |",
             "|---|---|---|---|---|---|---|"]
    for name in names:
        a, b = before / f"{name}.tflite", after / f"{name}.tflite"
        (ops_a, parts_a), (ops_b, parts_b) = _ops_and_partitions(a), _ops_and_partitions(b)
        changed = ", ".join(f"{op} {ops_a[op]} -> {ops_b[op]}" for op in sorted(ops_a | ops_b)
                            if ops_a[op] != ops_b[op]) or "none"
        rows = time_files([("before", str(a)), ("after", str(b))], runs, 3)
        ra, rb = rows
        lines.append(
            f"| {name} | {changed} | {parts_a} / {parts_b} "
            f"| {ra['copies_ms'][0]:.2f} / {ra['copies_ms'][1]:.2f} "
            f"| {rb['copies_ms'][0]:.2f} / {rb['copies_ms'][1]:.2f} | {rb['ratio']:.3f} "
            f"| {rb['max_diff']:.1e} |")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("--repo", type=Path, required=True)
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--models", nargs="+", default=list(MODELS))
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--models", nargs="+", default=list(MODELS))
    c.add_argument("--runs", type=int, default=30)
    c.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.command == "make":
        common.configure_runtime(1)
        make(args.repo, args.out, args.models)
    else:
        lines = compare(args.before, args.after, args.models, args.runs)
        if args.json:
            args.json.write_text(json.dumps(lines, indent=1))


if __name__ == "__main__":
    main()
