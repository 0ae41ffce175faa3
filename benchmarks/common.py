"""Shared helpers for the crossport benchmarks: runtime set-up, model preparation, timing.

Import this module before torch/TensorFlow are used anywhere else: ``configure_runtime``
must set thread counts before either runtime starts its thread pools.
"""

from __future__ import annotations

import os

# Quiet TF and pin the Keras backend before keras is first imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# torch's libgomp threads busy-wait by default; on a loaded shared machine that collapses
# (MobileNetV2 eager measured 450-1300 ms instead of ~75 ms at load 7 on 2 cores). PASSIVE
# measures torch's compute, not spin contention. TF's kernels do not use OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import datetime as dt
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def configure_runtime(threads: int) -> None:
    """Give torch and TensorFlow the same intra/inter-op thread counts (before first use)."""
    import tensorflow as tf

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:
        pass  # already fixed once parallel work ran; the intra-op count is what matters
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)


def load_torchvision():
    """Import torchvision on CPU torch (a copy of tests/conftest.py's workaround).

    The wheel's ``_C.so`` is built against CUDA torch and its import fails while
    registering fake kernels for ``torchvision::nms``/``qnms`` unless their schemas exist.
    """
    for op in ("nms", "qnms"):
        try:
            torch.library.define(f"torchvision::{op}",
                                 "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        except RuntimeError:
            pass  # defined already
    import torchvision

    return torchvision


@torch.no_grad()
def _reinit_dead_tensors(module: torch.nn.Module, gen: torch.Generator) -> None:
    """Zero-initialised gains and tiny layer scales leave branches dead (parity.md)."""
    for name, param in module.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if "layer_scale" in name:  # ConvNeXt inits these to 1e-6: branch ~invisible
            param.fill_(1.0)
        elif leaf == "weight" and not param.any():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.02)


@torch.no_grad()
def calibrate_batchnorm(module: torch.nn.Module, shape: tuple[int, ...], batches: int = 3,
                        seed: int = 0) -> torch.nn.Module:
    """Set BN running stats from random batches (train mode), then return to eval.

    Random init leaves running stats at (0, 1), so activations explode or vanish and the
    parity error becomes meaningless (MobileNetV2 output ~1e-15 without this).
    """
    gen = torch.Generator().manual_seed(seed)
    _reinit_dead_tensors(module, gen)
    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the calibration batches
    module.train()
    for _ in range(batches if norms else 0):
        module(torch.randn((4, *shape[1:]), generator=gen))
    return module.eval()


def time_once(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved_latency(fns: dict[str, Callable[[], Any]], runs: int,
                        warmup: int) -> dict[str, list[float]]:
    """Per-call seconds for each function, runs interleaved round-robin.

    Interleaving (rotating the order every round) spreads load from other processes on
    the shared machine evenly over the variants instead of penalising whichever ran last.
    """
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(runs):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(time_once(fns[name]))
    return samples


def summarize(samples: list[float]) -> dict[str, float]:
    """Median, min and inter-quartile range in milliseconds."""
    ms = sorted(s * 1e3 for s in samples)
    q = statistics.quantiles(ms, n=4) if len(ms) >= 4 else [ms[0], ms[len(ms) // 2], ms[-1]]
    return {"median_ms": statistics.median(ms), "min_ms": ms[0], "q1_ms": q[0],
            "q3_ms": q[2], "runs": len(ms)}


def graph_op_counts(fn, *specs) -> dict[str, int]:
    """Op types of a tf.function's traced graph (before Grappler) for ``specs``."""
    graph = fn.get_concrete_function(*specs).graph
    return dict(Counter(op.type for op in graph.get_operations()))


def run_metadata(runs: int, warmup: int, threads: int) -> dict[str, Any]:
    """Date, command line, run counts and machine facts for a results header."""
    return {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(["python", *sys.argv]), "runs": runs, "warmup": warmup,
            "machine": machine_info(threads)}


def machine_info(threads: int) -> dict[str, Any]:
    """Cores, CPU model and library versions for the results header."""
    import keras
    import tensorflow as tf

    import crossport

    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if "model name" in line)
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu, "cores": os.cpu_count(), "threads": threads,
        "python": platform.python_version(), "platform": platform.platform(),
        "torch": torch.__version__, "tensorflow": tf.__version__,
        "keras": keras.__version__, "torchvision": load_torchvision().__version__,
        "crossport": crossport.__version__,
        "onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)"),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
    }


ANALYSIS_MARKER = "<!-- analysis: hand-written, kept when the benchmark rewrites this file -->"


def write_section(path: Path, name: str, lines: list[str]) -> None:
    """Replace section ``name`` of a results file, keeping the other sections.

    Each benchmark script owns one section between ``<!-- begin name -->`` and
    ``<!-- end name -->``; a new section goes before the hand-written analysis (which
    starts at ``ANALYSIS_MARKER`` and is never rewritten).
    """
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    block = "\n".join([begin, *lines, end])
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    elif ANALYSIS_MARKER in text:
        head, tail = text.split(ANALYSIS_MARKER, 1)
        text = head.rstrip("\n") + "\n\n" + block + "\n\n" + ANALYSIS_MARKER + tail
    else:
        text = (text.rstrip("\n") + "\n\n" if text else "") + block + "\n"
    path.write_text(text)
