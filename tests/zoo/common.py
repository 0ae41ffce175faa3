"""What the model zoos share: parametrisation with known gaps, the checked conversion and
an independent second comparison (torch eager against Keras on another input)."""

from __future__ import annotations

import copy
import time

import pytest
import torch

import crossport
from crossport.parity import normalized_error, rounding_verdict
from crossport.parity.verify import run_keras, run_torch


def zoo_params(models, known_gaps: dict[str, str]) -> list:
    """One ``pytest.param`` per model name; a known gap is a strict xfail with its reason."""
    return [pytest.param(name, id=name, marks=[pytest.mark.xfail(strict=True,
                                                                 reason=known_gaps[name])]
                         if name in known_gaps else [])
            for name in models]


def convert_checked(name: str, module: torch.nn.Module, example, **options):
    """``convert_with_report`` with the default check, which must pass or find only float32
    rounding (docs/parity.md)."""
    start = time.perf_counter()
    conversion = crossport.convert_with_report(module, example, **options)
    report = conversion.report
    print(f"{name}: {report.summary()}\n{conversion.transposes} transposes, "
          f"{time.perf_counter() - start:.1f}s")
    assert report.passed or report.within_rounding, report.summary()
    return conversion


def assert_matches_on(module: torch.nn.Module, conversion, inputs: tuple, atol: float) -> None:
    """Independently of crossport's check: torch eager and the Keras model on ``inputs``
    agree within ``atol``, or torch in float64 calls the difference rounding."""
    ref = run_torch(module, inputs)
    got = run_keras(conversion.model, inputs, False)
    assert [r.shape for r in ref] == [g.shape for g in got]
    error = max(normalized_error(r, g) for r, g in zip(ref, got))
    print(f"second input: normalized error {error:.2e}")
    if error <= atol:
        return
    module64 = copy.deepcopy(module).double()  # past tolerance: ask float64 (docs/parity.md)
    ref64 = run_torch(module64, tuple(a.double() if a.is_floating_point() else a
                                      for a in inputs))
    keras_vs64 = max(normalized_error(r, g) for r, g in zip(ref64, got))
    torch_vs64 = max(normalized_error(r, t) for r, t in zip(ref64, ref))
    verdict = rounding_verdict(keras_vs64, torch_vs64)
    assert verdict == "rounding", (f"error {error:.2e}: Keras {keras_vs64:.2e} from float64, "
                                   f"torch fp32 {torch_vs64:.2e}: {verdict}")
