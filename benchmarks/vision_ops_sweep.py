"""Sweep image-processing code through crossport: torchvision.transforms.v2.functional on
tensors and kornia, each transform wrapped in a tiny module with fixed parameters.

Every case is ``(name, module, example)``: a deterministic transform (fixed angles, kernels,
displacements; no random augmentation) on a float32 image batch in [0, 1] or a uint8 one.
It is converted by ``crossport.convert_with_report`` with the default check, then compared by
the sweep itself (``tests/ops/opinfo_support.compare``: shapes, dtypes, NaN/±inf positions,
integers exactly, floats to 1e-5 normalized unless torch in float64 calls it rounding) on
a second seeded image in the example's range and, for float images, on one with NaN, +inf
and -inf written at fixed pixels. Each case is classified:

    PASS            converted; the check and every compare pass
    REFUSED         a CrossportError (first line kept); acceptable when it names the op/line
    CHECK-FAILED    crossport's own check raised ParityError
    CRASH           any other exception (a bug: must be a conversion or a clear refusal)
    SILENT          the check passed but a compare here disagrees (the worst class)
    SKIP            torch itself cannot run the case (not crossport's)

Two refinements say whose a failure is. The default check runs normal-distributed inputs,
negative and past 1, where image code casts out-of-range floats to uint8 (undefined in
torch, docs/parity.md) or raises ("expects values in [0, 1]"): a CHECK-FAILED or such a
REFUSED case is converted again with ``check_inputs=0`` (the in-range example only) and,
if that and the compares pass, is PASS-IN-RANGE. A SILENT case whose Keras output equals
the *captured* program's (``torch.export``) on that input is CAPTURE-DIFFERS: the package
takes another path in eager than under tracing there (kornia's laplacian switches to a
convolution for extreme values only in eager), so crossport converted what torch captured.
A SILENT case for which crossport's own NaN notes (``crossport.parity.nan``) name an op whose
NaN/inf handling docs/parity.md records as kept different for speed (TF's max pool skips
NaN, tf.image.resize's bilinear makes NaN of inf) is DOCUMENTED.

Results go to ``--out`` (JSON) and a markdown summary beside it, after every case.

    PYTHONPATH=. .venv/bin/python benchmarks/vision_ops_sweep.py --out benchmarks/results_vision_ops.json
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from tests.zoo.vision_cases import all_cases, image_like, with_specials  # noqa: E402


class Timeout(BaseException):  # not an Exception: no converter wraps it
    pass


def _alarm(signum, frame):
    raise Timeout()


def run_one(module: nn.Module, example: tuple, budget: float) -> dict:
    import crossport
    from crossport.errors import CrossportError, ParityError
    from crossport.parity.verify import run_keras
    from tests.ops.opinfo_support import _float64, _tensors, compare
    from tests.ops.opinfo_support import run_torch as torch_eager

    start = time.perf_counter()
    rec: dict = {"input": [f"{t.dtype}".replace("torch.", "") + "x".join(map(str, t.shape))
                           for t in example]}
    signal.alarm(int(budget))
    try:
        try:
            torch_eager(module, example)
        except Exception as exc:  # noqa: BLE001  (torch itself rejects the case)
            rec["class"], rec["message"] = "SKIP", f"torch: {type(exc).__name__}: {exc}"[:300]
            return rec
        in_range = False
        try:
            conversion = crossport.convert_with_report(module, example)
        except (ParityError, CrossportError) as exc:
            if not _out_of_range(exc) or not any(t.is_floating_point() for t in example):
                raise
            first = exc
            try:
                conversion = crossport.convert_with_report(module, example, check_inputs=0)
            except ParityError:
                raise first from None
            in_range, rec["out_of_range"] = True, _first(first)
        rec["class"] = "PASS-IN-RANGE" if in_range else "PASS"
        checks = [("seeded image", image_like(example, 4321))]
        if any(t.is_floating_point() for t in example):
            checks.append(("NaN/inf image", with_specials(image_like(example, 99))))
        for what, inputs in checks:
            try:
                ref = torch_eager(module, inputs)
            except Exception as exc:  # noqa: BLE001  (torch rejects NaN: "expects [0, 1]")
                rec.setdefault("notes", []).append(f"torch rejects the {what}: {_first(exc)}"
                                                   [:160])
                continue
            got = run_keras(conversion.model, inputs, False, like=ref)
            problems, err = compare(_tensors(ref), got, _float64(module, inputs))
            rec.setdefault("errors", {})[what] = err
            if problems:
                captured = _captured_agrees(module, example, inputs, got)
                notes = _documented(module, example, inputs)
                rec["class"] = ("CAPTURE-DIFFERS" if captured else
                                "DOCUMENTED" if notes else "SILENT")
                rec["notes"] = notes
                rec["message"] = f"{what}: " + "; ".join(problems[:3])
                break
    except ParityError as exc:
        rec["class"], rec["message"] = "CHECK-FAILED", _first(exc)
    except Timeout:
        rec["class"] = "TIMEOUT"
    except CrossportError as exc:
        rec["class"], rec["error_type"] = "REFUSED", type(exc).__name__
        rec["message"] = " | ".join(str(exc).strip().splitlines()[:3])[:400]
    except Exception as exc:  # noqa: BLE001  (the point: any other exception is a bug)
        rec["class"], rec["error_type"] = "CRASH", type(exc).__name__
        rec["message"] = _first(exc)
        rec["traceback"] = traceback.format_exc()[-3000:]
    finally:
        signal.alarm(0)
        rec["seconds"] = round(time.perf_counter() - start, 1)
    return rec


def _out_of_range(exc) -> bool:
    """A check failure the normal-distributed check inputs may cause on image code: a
    semantic difference (out-of-range float -> int casts) or torch refusing them."""
    from crossport.errors import ParityError

    return isinstance(exc, ParityError) or "failed on the fresh input" in str(exc)


def _captured_agrees(module, example, inputs, got) -> bool:
    """The Keras outputs equal what the ``torch.export``-captured program computes."""
    from tests.ops.opinfo_support import _tensors, compare

    try:
        captured = torch.export.export(module, example).module()
        with torch.no_grad():
            ref = captured(*(t.clone() for t in inputs))
    except Exception:  # noqa: BLE001  (no captured program to compare with)
        return False
    return not compare(_tensors(ref), got, None)[0]


def _documented(module, example, inputs) -> list[str]:
    """crossport's notes on NaN handling it keeps different from torch for speed (TF's max
    pool, softmax, tf.image.resize; docs/parity.md), for this graph and input."""
    from crossport.parity.nan import nan_notes

    try:
        return nan_notes(torch.export.export(module, example), [inputs])
    except Exception:  # noqa: BLE001
        return []


def _first(exc) -> str:
    return " ".join(str(exc).split())[:400]


def markdown(results: dict) -> str:
    counts = collections.Counter(r["class"] for r in results.values())
    lines = ["# Vision ops sweep (torchvision.transforms.v2.functional, kornia)", "",
             "| class | cases |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(counts.items())]
    lines += ["", "| case | input | class | seconds | note |", "|---|---|---|---|---|"]
    for name, r in results.items():
        note = (r.get("message") or r.get("out_of_range") or "; ".join(r.get("notes", [])))
        note = note.replace("|", "/")[:200]
        lines.append(f"| {name} | {' '.join(r.get('input', []))} | {r['class']} | "
                     f"{r['seconds']} | {note} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results_vision_ops.json")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds per case")
    parser.add_argument("--only", nargs="*", help="case names containing any of these")
    parser.add_argument("--fresh", action="store_true")
    args = parser.parse_args()
    import keras

    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() and not args.fresh else {}
    signal.signal(signal.SIGALRM, _alarm)
    for name, build in all_cases().items():
        if args.only and not any(word in name for word in args.only):
            continue
        if name in results and not args.only:
            continue
        print(f"--- {name}", flush=True)
        try:
            module, example = build()
        except Exception as exc:  # noqa: BLE001  (the package cannot build the case)
            results[name] = {"class": "SKIP", "message": f"build: {_first(exc)}",
                             "seconds": 0.0}
        else:
            results[name] = run_one(module.eval(), example, args.budget)
        print({k: v for k, v in results[name].items() if k != "traceback"}, flush=True)
        out.write_text(json.dumps(results, indent=1, default=str))
        out.with_suffix(".md").write_text(markdown(results))
        keras.backend.clear_session()
        gc.collect()


if __name__ == "__main__":
    main()
