"""Test-wide set-up: quiet TensorFlow, deterministic seeds, torchvision on CPU torch."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# Subprocesses (the CLI tests run `python -m crossport.cli` in a temporary folder) import the
# crossport these tests belong to, not whichever checkout the environment installed
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_REPO, os.environ.get("PYTHONPATH")) if p)

import resource
import sys

import pytest
import torch


def load_torchvision():
    """Import torchvision although its compiled ops cannot load on the CPU build of torch.

    The wheel's ``_C.so`` is built against CUDA torch; the import fails while registering
    fake kernels for ``torchvision::nms``/``qnms`` unless their schemas exist. The model
    definitions are pure Python and work; detection ops stay unavailable.
    """
    for op in ("nms", "qnms"):
        try:
            torch.library.define(f"torchvision::{op}",
                                 "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        except RuntimeError:
            pass  # defined already
    import torchvision

    return torchvision


@pytest.fixture(scope="session")
def torchvision():
    return load_torchvision()


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same random state, whatever ran before it on its worker:
    Keras' unseeded initializers draw from Python's ``random``, which otherwise carries over
    from the tests before (an order-dependent weight draw is an unreproducible failure)."""
    torch.manual_seed(0)
    if "keras" in sys.modules:
        sys.modules["keras"].utils.set_random_seed(0)


def _peak_rss_mb() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Note how far each test raised its worker's memory high-water mark: a worker that
    grows to many GB and keeps them is what gets CI OOM-killed, and the summary names it."""
    before = _peak_rss_mb()
    item.user_properties.append(("peak_rss_before_mb", before))
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown":
        before = dict(item.user_properties).get("peak_rss_before_mb", 0.0)
        outcome.get_result().user_properties.append(
            ("peak_rss_growth_mb", _peak_rss_mb() - before))


def _properties(terminalreporter, name: str, when: str) -> list:
    return [(report, value) for reports in terminalreporter.stats.values() for report in reports
            if getattr(report, "when", None) == when
            for key, value in getattr(report, "user_properties", ()) if key == name]


def pytest_terminal_summary(terminalreporter):
    """Count the dynamic-dims sweep's outcomes (tests/ops/test_dynamic_sweep.py) and name
    the tests that raised a worker's peak memory by more than 1 GB."""
    from collections import Counter

    outcomes = Counter(v for _, v in _properties(terminalreporter, "dynamic_sweep", "call"))
    if outcomes:
        terminalreporter.write_line("dynamic-dims sweep: " + ", ".join(
            f"{count} {outcome}" for outcome, count in outcomes.most_common()))
    growth = sorted(((v, r.nodeid) for r, v in
                     _properties(terminalreporter, "peak_rss_growth_mb", "teardown")
                     if v > 1024), reverse=True)
    for mb, nodeid in growth[:10]:
        terminalreporter.write_line(f"peak memory +{mb / 1024:.1f} GB: {nodeid}")
