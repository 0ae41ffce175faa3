"""Sweep transformers' causal-LM families through the generative (KV-cache) export.

Each family is built from a tiny config (hidden 64, 2 layers, 4 heads, vocab 256, a large
``initializer_range`` so next-token logits are far from ties) and exported with
``crossport.generative.export(..., prefill_lengths=(4, 16), max_cache_len=64)`` in its own
process; the export's own check (greedy tokens identical to HF ``generate``, logits within
1e-4) decides PASS. Anything else records the error's first line: a ``CrossportError`` is the
export refusing by name (REFUSED), any other exception a crash of crossport (CRASH).
BUILD-FAILED means transformers could not build the tiny config. Nothing is downloaded.

    .venv/bin/python benchmarks/generative_sweep.py            # all families, ~4 min
    .venv/bin/python benchmarks/generative_sweep.py olmo3 bloom

Writes ``benchmarks/results_generative_sweep.md``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, initializer_range=0.2, max_position_embeddings=512)
GQA = dict(num_key_value_heads=2)
GQA16 = dict(num_key_value_heads=2, head_dim=16)
GPTJ_LIKE = dict(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=512)


def _lm(prefix: str, overrides: dict) -> tuple[str, str, dict]:
    """transformers' usual class names: ``<prefix>Config`` and ``<prefix>ForCausalLM``."""
    return f"{prefix}Config", f"{prefix}ForCausalLM", overrides


# family -> (config class, causal-LM class, config overrides beyond COMMON)
FAMILIES = {
    "llama": _lm("Llama", GQA),
    "mistral (window > cache)": _lm("Mistral", GQA),
    "ministral": _lm("Ministral", GQA16),
    "qwen2": _lm("Qwen2", GQA),
    "qwen3": _lm("Qwen3", GQA16),
    "gemma": _lm("Gemma", dict(num_key_value_heads=1, head_dim=16)),
    "gemma2 (window > cache)": _lm("Gemma2", GQA16),
    "gemma3 (window > cache)": ("Gemma3TextConfig", "Gemma3ForCausalLM",
                                dict(GQA16, sliding_window=512)),
    "gemma3 (window 6)": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(GQA16, sliding_window=6)),
    "phi": _lm("Phi", GQA),
    "phi3": _lm("Phi3", dict(GQA, pad_token_id=0)),
    "olmo": _lm("Olmo", GQA),
    "olmo2": _lm("Olmo2", GQA),
    "olmo3": _lm("Olmo3", GQA),
    "granite": _lm("Granite", GQA),
    "cohere": _lm("Cohere", GQA),
    "cohere2": _lm("Cohere2", GQA),
    "starcoder2": _lm("Starcoder2", GQA),
    "stablelm": _lm("StableLm", dict(GQA, partial_rotary_factor=0.5)),
    "smollm3": _lm("SmolLM3", dict(GQA, pad_token_id=0)),
    "glm": _lm("Glm", dict(GQA16, pad_token_id=0)),
    "glm4": _lm("Glm4", dict(GQA16, pad_token_id=0)),
    "helium": _lm("Helium", GQA16),
    "exaone4": _lm("Exaone4", GQA16),
    "seed_oss": _lm("SeedOss", GQA16),
    "arcee": _lm("Arcee", GQA),
    "apertus": _lm("Apertus", GQA),
    "hunyuan_v1_dense": _lm("HunYuanDenseV1", GQA16),
    "lfm2": _lm("Lfm2", GQA),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_embd=64, n_layer=2, n_head=4,
                                                   n_positions=512)),
    "gpt_neox": _lm("GPTNeoX", {}),
    "gptj": _lm("GPTJ", GPTJ_LIKE),
    "codegen": _lm("CodeGen", GPTJ_LIKE),
    "opt": _lm("OPT", dict(ffn_dim=128, word_embed_proj_dim=64)),
    "gpt_neo (global layers)": _lm("GPTNeo", dict(
        num_layers=2, num_heads=4, attention_types=[[["global"], 2]], window_size=8)),
    "gpt_neo (local layers)": _lm("GPTNeo", dict(
        num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]], window_size=8)),
    "gpt_neo (local layers, window = cache)": _lm("GPTNeo", dict(
        num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]], window_size=64)),
    "falcon (alibi)": _lm("Falcon", dict(alibi=True)),
    "bloom": _lm("Bloom", dict(n_layer=2, n_head=4)),
    "mixtral": _lm("Mixtral", dict(GQA, num_local_experts=4)),
    "qwen3_moe": _lm("Qwen3Moe", dict(
        GQA16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)),
    "granitemoe": _lm("GraniteMoe", dict(
        GQA, num_local_experts=4, num_experts_per_tok=2)),
    "mamba": _lm("Mamba", dict(state_size=8)),
}


def run_one(family: str) -> None:
    """Export one family in this process and print its RESULT line."""
    import tempfile

    import torch

    from crossport.compat import import_torchvision

    import_torchvision()  # transformers imports torchvision
    import transformers

    from crossport.errors import CrossportError
    from crossport.generative import export

    config_name, model_name, overrides = FAMILIES[family]
    torch.manual_seed(0)
    try:
        config = getattr(transformers, config_name)(**{**COMMON, **overrides})
        model = getattr(transformers, model_name)(config).eval()
    except Exception as exc:  # transformers' own limits on a tiny config
        print(f"RESULT\tBUILD-FAILED\t{type(exc).__name__}: {_line(exc)}")
        return
    try:
        with tempfile.TemporaryDirectory() as tmp:
            export(model, Path(tmp) / "m.tflite", prefill_lengths=(4, 16), max_cache_len=64)
        print("RESULT\tPASS\t")
    except CrossportError as exc:
        print(f"RESULT\tREFUSED\t{type(exc).__name__}: {_line(exc)}")
    except Exception as exc:
        print(f"RESULT\tCRASH\t{type(exc).__name__}: {_line(exc)}")


def _line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else "")[:300].replace("|", "/")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", help="default: all")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the per-family child process
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).with_name("results_generative_sweep.md"))
    args = parser.parse_args()
    if args.one:
        run_one(args.one)
        return
    rows = []
    for family in args.families or FAMILIES:
        start = time.perf_counter()
        child = subprocess.run([sys.executable, __file__, "--one", family], text=True,
                               capture_output=True, timeout=900)
        found = [line.split("\t") for line in child.stdout.splitlines()
                 if line.startswith("RESULT\t")]
        status, detail = (found[0][1], found[0][2]) if found else (
            "DIED", f"exit code {child.returncode}")
        rows.append((family, status, f"{time.perf_counter() - start:.0f}", detail))
        print(" | ".join(rows[-1]), flush=True)
    lines = ["# Generative export sweep", "",
             "Generated by `benchmarks/generative_sweep.py` (tiny configs, "
             "prefill (4, 16), 64 cache slots, the export's greedy-parity check).", "",
             "| family | status | s | detail |", "|---|---|---|---|"]
    lines += [f"| {family} | {status} | {seconds} | {detail} |"
              for family, status, seconds, detail in rows]
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
