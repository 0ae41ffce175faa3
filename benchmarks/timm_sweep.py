"""Sweep timm's architectures: one small model per family, converted with the check on.

For every module ``timm.models.<family>`` the smallest registered model (parameter count on
the meta device; families whose smallest model has more than ``--max-params`` are skipped)
is built with ``pretrained=False`` and random weights made live (docs/parity.md), at a small
input (128 px where the model accepts it, else its default cfg size), batch 2. It is converted
by ``crossport.convert_with_report`` with the default check, then compared again on a second
seeded input, with float64 evidence past the tolerance. Each model is classified:

- PASS: the check passed (or found only rounding) and so did the independent compare;
- REFUSED: a ``CrossportError`` (first line of its message recorded);
- CHECK-FAILED: ``ParityError``, with the rounding/semantic verdict;
- CRASH: any other exception; TIMEOUT: over ``--budget`` seconds;
- SILENT: the check passed but the independent compare finds a semantic error;
- NOT-LIVE: a CHECK-FAILED or SILENT model whose live torch output is not O(1) or not
  input-dependent (``check_live``): random weights that blow activations up to 1e6 make
  torch fp32 itself far from float64, so no parity verdict is possible there;
- ILL-CONDITIONED: a SILENT result where torch fp32 itself is past ``SEMANTIC_FLOOR`` / 10
  from float64 on that input (attention logits so sharp that float32 rounding moves the
  softmax) and Keras is within ``ROUNDING_FACTOR`` times torch's own distance: the fixed
  floor of ``rounding_verdict`` cannot tell rounding there (seen on levit_128s at 128 px).

Results are written after every model to ``--out`` (JSON) and a markdown summary beside it;
a re-run skips models already recorded (``--fresh`` starts over). Nothing is downloaded.

    PYTHONPATH=. .venv/bin/python benchmarks/timm_sweep.py --out benchmarks/results_timm.json
"""

from __future__ import annotations

import argparse
import collections
import copy
import gc
import json
import signal
import time
import traceback
from pathlib import Path

import torch

SIZES = (128,)  # tried first, then the model's default cfg size
BATCH = 2
ATOL = 1e-4


class Timeout(BaseException):  # not an Exception: no converter wraps it
    pass


def _alarm(signum, frame):
    raise Timeout()


def families() -> dict[str, list[str]]:
    import timm
    from timm.models import _registry

    out = collections.defaultdict(list)
    for name in timm.list_models():
        out[_registry._model_to_module[name]].append(name)
    return dict(out)


def count_params(name: str) -> int | None:
    import timm

    try:
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False)
        return sum(p.numel() for p in model.parameters())
    except Exception:
        return None


def select(max_params: float) -> dict[str, dict]:
    """family -> {model, params}; the smallest model of each family (or a skip reason)."""
    chosen = {}
    for family, names in sorted(families().items()):
        counts = {n: count_params(n) for n in names}
        sized = sorted((c, n) for n, c in counts.items() if c is not None)
        if not sized:
            chosen[family] = {"model": names[0], "params": None, "skip": "cannot build"}
            continue
        params, name = sized[0]
        entry = {"model": name, "params": params}
        if params > max_params:
            entry["skip"] = f"smallest model has {params / 1e6:.0f}M params"
        chosen[family] = entry
        print(f"{family}: {name} {params / 1e6:.1f}M", flush=True)
    return chosen


def _default_size(name: str) -> tuple:
    import timm

    cfg = timm.models.get_pretrained_cfg(name)
    size = getattr(cfg, "input_size", None) if cfg is not None else None
    return tuple(size or (3, 224, 224))


def build(name: str):
    """(module, example) at the smallest accepted size: 128 px first (``img_size=`` for the
    models that take it), else the default cfg size."""
    import timm

    channels, height, width = _default_size(name)
    for size in SIZES:
        if size >= min(height, width):
            continue
        for kwargs in ({"img_size": size}, {}):
            try:
                torch.manual_seed(0)
                module = timm.create_model(name, pretrained=False, **kwargs).eval()
                example = (torch.randn(BATCH, channels, size, size,
                                       generator=torch.Generator().manual_seed(0)),)
                with torch.no_grad():
                    module(*example)
                return module, example
            except Exception:
                continue
    torch.manual_seed(0)
    module = timm.create_model(name, pretrained=False).eval()
    example = (torch.randn(BATCH, channels, height, width,
                           generator=torch.Generator().manual_seed(0)),)
    return module, example


def independent_compare(module, model, example) -> dict:
    from crossport.parity import normalized_error, rounding_verdict
    from crossport.parity.verify import fresh_inputs, run_keras, run_torch

    inputs = fresh_inputs(example, 1234)
    ref = run_torch(module, inputs)
    got = run_keras(model, inputs, False)
    error = max(normalized_error(r, g) for r, g in zip(ref, got))
    out = {"compare_error": error}
    if error > ATOL:
        module64 = copy.deepcopy(module).double()
        ref64 = run_torch(module64, tuple(a.double() for a in inputs))
        keras64 = max(normalized_error(r, g) for r, g in zip(ref64, got))
        torch64 = max(normalized_error(r, t) for r, t in zip(ref64, ref))
        out.update(keras_vs_fp64=keras64, torch_vs_fp64=torch64,
                   verdict=rounding_verdict(keras64, torch64))
    return out


def _ill_conditioned(rec: dict) -> bool:
    from crossport.parity.metrics import ROUNDING_FACTOR, SEMANTIC_FLOOR

    torch64, keras64 = rec.get("torch_vs_fp64"), rec.get("keras_vs_fp64")
    return (torch64 is not None and torch64 >= SEMANTIC_FLOOR / 10
            and keras64 <= ROUNDING_FACTOR * torch64)


def run_one(name: str, budget: float) -> dict:
    import crossport
    from crossport.errors import CrossportError, ParityError
    from crossport.parity.live import DeadModelError, check_live, make_live

    start = time.perf_counter()
    rec: dict = {"model": name}
    signal.alarm(int(budget))
    try:
        module, example = build(name)
        rec["input"] = list(example[0].shape)
        make_live(module, example)
        try:
            check_live(module, example)
        except DeadModelError as exc:
            rec["not_live"] = str(exc).splitlines()[0][:200]
        try:
            conversion = crossport.convert_with_report(module, example)
        except ParityError as exc:
            report = exc.report
            rec["class"] = "CHECK-FAILED"
            rec["error"] = getattr(report, "max_error", None)
            rec["verdict"] = (report.verdict or ("mismatch" if report.mismatches else None)
                              if report is not None else None)
            rec["message"] = str(exc).splitlines()[0][:300]
            rec["summary"] = report.summary()[:2000] if report is not None else ""
            return rec
        report = conversion.report
        rec["error"] = report.max_error
        rec["transposes"] = conversion.transposes
        rec.update(independent_compare(module, conversion.model, example))
        ok = rec["compare_error"] <= ATOL or rec.get("verdict") == "rounding"
        rec["class"] = "PASS" if ok else "SILENT"
        if not ok and _ill_conditioned(rec):
            rec["class"] = "ILL-CONDITIONED"
    except Timeout:
        rec["class"] = "TIMEOUT"
    except CrossportError as exc:
        rec["class"] = "REFUSED"
        rec["error_type"] = type(exc).__name__
        lines = str(exc).strip().splitlines()
        rec["message"] = " | ".join(lines[:3])[:400]
    except Exception as exc:
        rec["class"] = "CRASH"
        rec["error_type"] = type(exc).__name__
        rec["message"] = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        rec["traceback"] = traceback.format_exc()[-3000:]
    finally:
        signal.alarm(0)
        if rec.get("not_live") and rec.get("class") in ("CHECK-FAILED", "SILENT"):
            rec["class"], rec["message"] = "NOT-LIVE", rec["not_live"]
        rec["seconds"] = round(time.perf_counter() - start, 1)
    return rec


def markdown(results: dict, selection: dict) -> str:
    counts = collections.Counter(r["class"] for r in results.values())
    lines = ["# timm sweep", "", "| class | models |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(counts.items())]
    skipped = {f: s for f, s in selection.items() if "skip" in s}
    lines += ["", f"Skipped families: {len(skipped)} "
              + ", ".join(f"{f} ({s['skip']})" for f, s in sorted(skipped.items())), ""]
    lines += ["| family | model | input | class | error | seconds | note |",
              "|---|---|---|---|---|---|---|"]
    for family, r in sorted(results.items()):
        err = r.get("compare_error", r.get("error"))
        err = f"{err:.1e}" if isinstance(err, float) else ""
        note = r.get("message") or r.get("verdict") or ""
        if "torch_vs_fp64" in r:
            note = (f"{note}: Keras {r['keras_vs_fp64']:.1e} from fp64, "
                    f"torch fp32 {r['torch_vs_fp64']:.1e}")
        if r["class"] == "CHECK-FAILED":
            note = f"{r.get('verdict')}: {note}"
        note = note.replace("|", "/")[:160]
        shape = "x".join(map(str, r.get("input", [])[2:]))
        lines.append(f"| {family} | {r['model']} | {shape} | {r['class']} | {err} | "
                     f"{r['seconds']} | {note} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results_timm.json")
    parser.add_argument("--max-params", type=float, default=60e6)
    parser.add_argument("--budget", type=float, default=240.0, help="seconds per model")
    parser.add_argument("--families", nargs="*", help="only these families")
    parser.add_argument("--models", nargs="*", help="these models (family = model name)")
    parser.add_argument("--fresh", action="store_true")
    args = parser.parse_args()

    from crossport.compat import import_torchvision

    import_torchvision()  # timm imports torchvision; make it importable on CPU torch
    import keras

    out = Path(args.out)
    state = json.loads(out.read_text()) if out.exists() and not args.fresh else {}
    if args.models:
        selection = {m: {"model": m} for m in args.models}
    else:
        selection = state.get("selection") or select(args.max_params)
    state["selection"] = {**state.get("selection", {}), **selection}
    results = state.setdefault("results", {})
    signal.signal(signal.SIGALRM, _alarm)
    for family, entry in sorted(selection.items()):
        if args.families and family not in args.families:
            continue
        if "skip" in entry or (family in results and not (args.families or args.models)):
            continue
        print(f"--- {family}: {entry['model']}", flush=True)
        rec = run_one(entry["model"], args.budget)
        results[family] = rec
        print({k: v for k, v in rec.items() if k not in ("traceback", "summary")}, flush=True)
        out.write_text(json.dumps(state, indent=1, default=str))
        out.with_suffix(".md").write_text(markdown(results, state["selection"]))
        keras.backend.clear_session()
        gc.collect()


if __name__ == "__main__":
    main()
