"""A/B of generative .tflite files in one process: the ``decode`` signature and the smallest
``prefill_<N>`` signature of each file, the calls of the files interleaved, fastest (and
median) of ``N`` (env, default 200; prefill ``N / 5``) per file, with the cache-write ops
each file holds and the op counts that differ between the first file and each other. For
comparing two builds of the same model on a loaded machine (separate processes see
different load). ``THREADS`` (env, default 2) sets LiteRT's threads.

    .venv/bin/python benchmarks/bench_llm_ab.py before.tflite after.tflite

``make REPO OUT`` writes ``OUT``: bench_llm.py's small Llama (seeded, prefill 32, cache 256)
exported with the crossport importable from ``REPO`` (a worktree of another commit):

    .venv/bin/python benchmarks/bench_llm_ab.py make /work/wt-before before.tflite
"""
import collections
import contextlib
import io
import os
import sys
import time

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter


def op_counts(path):
    """Builtin op name -> count in the file (every signature's subgraph)."""
    s = io.StringIO()
    with contextlib.redirect_stdout(s):
        tf.lite.experimental.Analyzer.analyze(model_path=path)
    return collections.Counter(line.split("Op#")[1].split()[1].split("(")[0]
                               for line in s.getvalue().splitlines() if "Op#" in line)


def calls(path, threads):
    """(decode call, prefill call, prefill length) of one file, on seeded caches."""
    it = Interpreter(model_path=path, num_threads=threads)
    dec = it.get_signature_runner("decode")
    rng = np.random.default_rng(0)
    caches = {name: rng.standard_normal(d["shape"]).astype(np.float32) * 0.5
              for name, d in dec.get_input_details().items() if "cache" in name}
    length = min(int(k.split("_")[1]) for k in it.get_signature_list() if k.startswith("prefill_"))
    pre = it.get_signature_runner(f"prefill_{length}")
    tokens = rng.integers(0, 100, size=(1, length)).astype(np.int32)

    def decode():
        return dec(tokens=np.array([[1]], np.int32), input_pos=np.array([length], np.int32),
                   **caches)

    def prefill():
        return pre(tokens=tokens, input_pos=np.arange(length, dtype=np.int32),
                   last_index=np.array([length - 1], np.int32), **caches)
    return decode, prefill, length


def interleaved(fns, rounds):
    for fn in fns:
        fn()  # warm-up
    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, spent in zip(fns, times):
            start = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - start)
    return times


def make(repo, out):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_llm  # puts this checkout on sys.path

    sys.path.insert(0, os.path.abspath(repo))  # ahead of it
    import crossport
    from crossport.generative import export

    print("crossport from", os.path.dirname(crossport.__file__), flush=True)
    export(bench_llm.build("llama", quick=False), out, prefill_lengths=(32,),
           max_cache_len=256, max_new_tokens=8)


if sys.argv[1:2] == ["make"]:
    make(*sys.argv[2:4])
    sys.exit(0)
WATCH = {"BATCH_MATMUL", "SELECT_V2", "SELECT", "EQUAL", "DYNAMIC_UPDATE_SLICE", "CONCATENATION"}
paths = sys.argv[1:]
threads = int(os.environ.get("THREADS", "2"))
counts = [op_counts(p) for p in paths]
for path, o in zip(paths, counts):
    print(path, "DUS" if o["DYNAMIC_UPDATE_SLICE"] else "blend",
          "flex" if any("Flex" in x for x in o) else "builtin-only", sorted(set(o) & WATCH))
for path, o in zip(paths[1:], counts[1:]):
    changed = {op: f"{counts[0][op]} -> {o[op]}" for op in sorted(set(o) | set(counts[0]))
               if o[op] != counts[0][op]}
    print(f"ops changed from {paths[0]} to {path}: {changed or 'none'}")
runs = [calls(p, threads) for p in paths]
rounds = int(os.environ.get("N", "200"))
for kind, index, tokens, n in (("decode", 0, 1, rounds), ("prefill", 1, None, max(rounds // 5, 1))):
    times = interleaved([r[index] for r in runs], n)
    for path, run, t in zip(paths, runs, times):
        count = tokens or run[2]
        print(f"{kind} {path}: fastest {min(t) * 1e3:.2f} ms ({count / min(t):.0f} tok/s), "
              f"median {np.median(t) * 1e3:.2f} ms")
