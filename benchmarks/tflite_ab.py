"""A/B timing of ``.tflite`` files of one model in one process, each loaded twice.

``peers.py`` times each converter in its own process against torch eager there. On this
shared 2-core machine two interpreters of the *same* file in one process measured up to
±10% apart depending on load order, which is as large as some gaps between converters. This
script loads every file twice, in the order A B A' B' (so each converter has an early and a
late copy), runs all copies round-robin with the order rotated every round (1 thread, batch
1, XNNPACK), and reports each converter's time as the mean of its two copies' medians and the
spread between its copies (the noise floor of the comparison).

    .venv/bin/python benchmarks/tflite_ab.py --runs 40 crossport=/tmp/a.tflite \
        litert-torch=/tmp/b.tflite

Writes nothing; prints a Markdown table row per file (used for RESULTS.md, section
``tflite-ab``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # sets env vars before TF loads
import numpy as np
from peer_worker import tflite_runner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="NAME=PATH, files of one model (one input "
                        "each, same shape; seeded values, so every file gets the same)")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    named = [f.split("=", 1) for f in args.files]
    fns, outputs = {}, {}
    for copy in ("", "'"):
        for name, path in named:
            fns[name + copy] = tflite_runner(Path(path))  # 1 thread, seeded input
            outputs[name] = fns[name + copy]()
    samples = common.interleaved_latency(fns, args.runs, args.warmup)
    first = named[0][0]
    ref = outputs[first]
    base = statistics.mean(common.summarize(samples[first + c])["median_ms"] for c in ("", "'"))
    print("| file | median ms (copy 1 / copy 2) | mean of copies | ratio to "
          f"{first} | max diff to {first} |")
    print("|---|---|---|---|---|")
    for name, _path in named:
        a, b = (common.summarize(samples[name + c])["median_ms"] for c in ("", "'"))
        diff = float(np.abs(outputs[name] - ref).max())
        print(f"| {name} | {a:.1f} / {b:.1f} | {(a + b) / 2:.1f} | {(a + b) / 2 / base:.3f} "
              f"| {diff:.1e} |")


if __name__ == "__main__":
    main()
