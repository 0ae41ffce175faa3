"""A/B of the ``decode`` signature of generative .tflite files in one process: the calls of
the files interleaved, fastest (and median) of ``N`` (env, default 200) per file, with the
cache-write ops each file holds. For comparing two builds of the same model on a loaded
machine (separate processes see different load).

    .venv/bin/python benchmarks/bench_llm_ab.py before.tflite after.tflite
"""
import contextlib
import io
import os
import sys
import time

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter


def ops(path):
    """The builtin op names in the file."""
    s = io.StringIO()
    with contextlib.redirect_stdout(s):
        tf.lite.experimental.Analyzer.analyze(model_path=path)
    return {l.split("Op#")[1].split()[1].split("(")[0] for l in s.getvalue().splitlines() if "Op#" in l}

runs = []
WATCH = {"BATCH_MATMUL", "SELECT_V2", "SELECT", "EQUAL", "DYNAMIC_UPDATE_SLICE", "CONCATENATION"}
for path in sys.argv[1:]:
    it = Interpreter(model_path=path, num_threads=2)
    dec = it.get_signature_runner("decode")
    rng = np.random.default_rng(0)
    caches = {name: rng.standard_normal(d["shape"]).astype(np.float32)
              for name, d in dec.get_input_details().items() if "cache" in name}
    o = ops(path)
    print(path, {n: [int(x) for x in c.shape] for n, c in list(caches.items())[:1]},
          f"{len(caches)} cache tensors", "DUS" if "DYNAMIC_UPDATE_SLICE" in o else "blend",
          "flex" if any("Flex" in x for x in o) else "builtin-only", sorted(o & WATCH))
    runs.append(lambda dec=dec, caches=caches: dec(tokens=np.array([[1]], np.int32),
                                                   input_pos=np.array([40], np.int32), **caches))
for r in runs:
    r()  # warm-up
times = [[] for _ in runs]
for _ in range(int(os.environ.get("N", "200"))):
    for r, t in zip(runs, times):
        start = time.perf_counter()
        r()
        t.append(time.perf_counter() - start)
for path, t in zip(sys.argv[1:], times):
    print(f"{path}: fastest {min(t) * 1e3:.2f} ms ({1 / min(t):.0f} tok/s), "
          f"median {np.median(t) * 1e3:.2f} ms")
