"""Sweep torch's OpInfo database through crossport: every sample's verdict, never silent.

    PYTHONPATH=. python benchmarks/opinfo_sweep.py --out /tmp/opinfo.jsonl   # the sweep
    PYTHONPATH=. python benchmarks/opinfo_sweep.py --out /tmp/opinfo.jsonl --summary

Each OpInfo (``torch.testing._internal.common_methods_invocations.op_db``) runs in float32,
int64, int32 and bool where it supports them, its first ``--samples`` float32 samples and
``--other-samples`` of each other dtype (a sample costs ~1 s, mostly torch.export); each
sample becomes a module and a verdict (``tests/ops/opinfo_support.py``: PASS, REFUSED,
CHECK-FAILED, CRASH, SILENT, SKIP). One JSON line per sample is appended to ``--out``; a
re-run resumes after the last finished op (an op that killed the process is recorded as
ABORT). ``--summary`` prints the markdown table of docs/parity.md's "OpInfo sweep".
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.ops import opinfo_support as support  # noqa: E402


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


def sweep(out: Path, limit: int, others: int, only: list[str], timeout: int) -> None:
    import keras
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    done, started = set(), set()
    if out.exists():
        for line in out.read_text().splitlines():
            row = json.loads(line)
            (done if row["kind"] != "START" else started).add(row["op"])
    signal.signal(signal.SIGALRM, _alarm)
    runs = 0
    with out.open("a") as log:
        def write(row):
            log.write(json.dumps(row) + "\n")
            log.flush()

        for op in op_db:
            name = support.op_id(op)
            if only and name not in only:
                continue
            if name in done:
                continue
            if name in started:  # the previous run died inside this op
                write({"op": name, "dtype": "", "i": -1, "kind": "ABORT", "detail": ""})
                continue
            write({"op": name, "kind": "START"})
            reason = support.op_skip_reason(op)
            if reason:
                write({"op": name, "dtype": "", "i": -1, "kind": "SKIP", "detail": reason})
                continue
            for dtype in support.dtypes_of(op):
                count = limit if dtype == torch.float32 else others
                for i, sample in enumerate(support.samples(op, dtype, count)):
                    t0 = time.time()
                    signal.alarm(timeout)
                    try:
                        v = support.classify(op, sample)
                    except Timeout:
                        v = support.Verdict("TIMEOUT", f"over {timeout} s")
                    finally:
                        signal.alarm(0)
                    write({"op": name, "dtype": str(dtype).replace("torch.", ""), "i": i,
                           "kind": v.kind, "detail": v.detail, "error": v.error,
                           "seconds": round(time.time() - t0, 2)})
                    runs += 1
                    if runs % 50 == 0:  # a full gc.collect: 1 s each, as long as a sample
                        keras.backend.clear_session()
            write({"op": name, "dtype": "", "i": -1, "kind": "DONE", "detail": ""})


def op_verdict(kinds: collections.Counter) -> str:
    """One verdict per op: the worst of its samples' (SILENT > CRASH > CHECK-FAILED > ...)."""
    for kind in ("SILENT", "CRASH", "ABORT", "TIMEOUT", "CHECK-FAILED", "REFUSED-UNNAMED",
                 "REFUSED", "PASS"):
        if kinds[kind]:
            return kind
    return "SKIP"


def load(paths: list[Path]) -> list[dict]:
    """The rows of ``paths``: an op's rows come from the last file holding it (a re-run of
    some ops overrides them), one row per (op, dtype, sample), the last written."""
    by_file = [[json.loads(line) for line in p.read_text().splitlines()] for p in paths]
    owner = {r["op"]: i for i, rows in enumerate(by_file) for r in rows}
    latest = {}
    for i, rows in enumerate(by_file):
        for r in rows:
            if owner[r["op"]] == i and r["kind"] not in ("START", "DONE"):
                latest[(r["op"], r.get("dtype", ""), r.get("i", -1))] = r
    return list(latest.values())


def summary(paths: list[Path]) -> str:
    rows = load(paths)
    per_sample = collections.Counter(r["kind"] for r in rows if r["i"] >= 0)
    per_op = collections.defaultdict(collections.Counter)
    skip_reason = {}
    for r in rows:
        per_op[r["op"]][r["kind"]] += 1
        if r["kind"] == "SKIP":
            skip_reason.setdefault(r["op"], r["detail"])
    ops = collections.Counter(op_verdict(k) for k in per_op.values())
    kinds = ["PASS", "REFUSED", "REFUSED-UNNAMED", "CHECK-FAILED", "CRASH", "SILENT",
             "TIMEOUT", "ABORT", "SKIP"]
    lines = ["| verdict | samples | OpInfos (worst sample) |", "|---|---:|---:|"]
    lines += [f"| {k} | {per_sample[k]} | {ops[k]} |" for k in kinds
              if per_sample[k] or ops[k] or k in ("CRASH", "SILENT")]
    lines.append(f"| total | {sum(per_sample.values())} | {len(per_op)} |")
    refused = collections.defaultdict(list)
    for r in rows:
        if r["kind"] == "REFUSED":
            refused[_category(r["detail"])].append(r["op"])
    lines += ["", "Refused (at least one sample), by the reason's category:", ""]
    for cat, names in sorted(refused.items(), key=lambda kv: -len(set(kv[1]))):
        uniq = sorted(set(names))
        lines.append(f"- **{cat}** ({len(uniq)}): " + ", ".join(f"`{n}`" for n in uniq))
    skipped = collections.defaultdict(list)
    for name, k in per_op.items():
        if op_verdict(k) == "SKIP":
            skipped[_skip_category(skip_reason.get(name, ""))].append(name)
    lines += ["", "Skipped OpInfos (every sample skipped), by reason:", ""]
    for cat, names in sorted(skipped.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"- {cat} ({len(names)})")
    return "\n".join(lines)


def _category(detail: str) -> str:
    d = detail.lower()
    if "dynamicdimerror" in d or "dynamic" in d and "dim" in d:
        return "dynamic dims"
    if "output size depends on the data" in d:
        return "output size depends on the data (no static-shape graph)"
    if "no converter" in d:
        if "dtype" in d:
            return "dtype without a faithful conversion"
        return "op without a converter"
    if "captureerror" in d:
        return "torch.export capture"
    if "dtype" in d:
        return "dtype without a faithful conversion"
    if "unsupportedoperror" in d:
        return "argument combination refused by a converter"
    if d.startswith("conversionerror: converting node"):
        return "converter failed on these arguments (ConversionError naming op and line)"
    return detail.split(":")[0]


def _skip_category(detail: str) -> str:
    return detail.split(":")[0] if detail.startswith("torch fails") else detail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("opinfo_sweep.jsonl"))
    parser.add_argument("--samples", type=int, default=2, help="float32 samples per op")
    parser.add_argument("--other-samples", type=int, default=1,
                        help="samples per op for int64, int32 and bool")
    parser.add_argument("--ops", nargs="*", default=[], help="only these OpInfo ids")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per sample")
    parser.add_argument("--summary", action="store_true", help="print the summary only")
    parser.add_argument("--rerun", type=Path, nargs="*", default=[],
                        help="with --summary: files of ops re-run later (they override)")
    args = parser.parse_args()
    if args.summary:
        print(summary([args.out, *args.rerun]))
    else:
        sweep(args.out, args.samples, args.other_samples, args.ops, args.timeout)


if __name__ == "__main__":
    main()
