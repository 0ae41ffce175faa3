"""The acceptance rule: when is a float32 difference from torch good enough?

``tolerance="rounding"`` (the default): an error at or below ``atol`` passes at once; above
it, torch runs the same inputs in float64 and the conversion passes when the Keras model is
no further from that float64 truth than ``ROUNDING_FACTOR`` x torch float32's own distance
(or ``ROUNDING_ABS``), and below ``SEMANTIC_FLOOR`` (``rounding_verdict``, docs/parity.md).
``tolerance="atol"``: ``atol`` is a hard bound. Mismatches (shape, dtype, NaN/inf positions,
integer values) fail under both rules.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils import _pytree as pytree

from crossport.parity.compare import compare_outputs, to_numpy
from crossport.parity.metrics import FLOAT32_EPS, precision_of, rounding_verdict
from crossport.parity.replay import widened

TOLERANCE_RULES = ("rounding", "atol")


@dataclass
class Float64Evidence:
    """How far Keras and torch float32 are from torch float64 on one input set."""

    keras_vs_fp64: float
    torch_vs_fp64: float
    eps: float = FLOAT32_EPS  # the outputs' precision (float16 models: its eps)

    @property
    def verdict(self) -> str:
        return rounding_verdict(self.keras_vs_fp64, self.torch_vs_fp64, self.eps)


def accepted(error: float, mismatches: Sequence[str], atol: float, rule: str,
             evidence: Float64Evidence | None) -> bool:
    """Whether a check with this worst ``error`` passes under ``rule``."""
    if mismatches:
        return False
    if error <= atol:
        return True
    return rule == "rounding" and evidence is not None and evidence.verdict == "rounding"


@contextmanager
def _default_dtype(dtype: torch.dtype):
    """Tensors the module creates in forward (``torch.zeros(n)``) follow the replay dtype."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def float64_outputs(module: torch.nn.Module, args: tuple) -> list[np.ndarray] | None:
    """The torch module's output leaves in float64, or ``None`` when it cannot run so.

    A module that pins a float32 dtype in forward (``torch.randn(..., dtype=torch.float32)``
    mixed with an input) cannot run in float64 eagerly: no evidence then, never a crash.
    """
    module64 = widened(copy.deepcopy(module), torch.float64)  # complex buffers: complex128
    args64 = tuple(a.to(torch.float64) if a.is_floating_point() else a.clone()  # copies
                   for a in args)
    try:
        with torch.no_grad(), _default_dtype(torch.float64):
            out = module64(*args64)
    except Exception:  # the module fixes a float32 dtype somewhere: no fp64 evidence
        return None
    return [t.detach().cpu().numpy() for t in pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor)]


def float64_evidence(module: torch.nn.Module, args: tuple, torch32: Sequence,
                     keras32: Sequence) -> Float64Evidence | None:
    """Distances of Keras' and torch float32's outputs from torch float64 on ``args``."""
    ref64 = float64_outputs(module, args)
    if ref64 is None or len(ref64) != len(torch32):
        return None
    return Float64Evidence(
        keras_vs_fp64=compare_outputs(ref64, keras32, check_dtype=False).error,
        torch_vs_fp64=compare_outputs(ref64, torch32, check_dtype=False).error,
        eps=precision_of(*torch32))


@dataclass
class Recheck:
    """A re-check of an artifact (exported file, generated source) against torch."""

    error: float
    mismatches: list[str]
    tolerance: float
    rule: str
    evidence: Float64Evidence | None = None

    @property
    def passed(self) -> bool:
        return accepted(self.error, self.mismatches, self.tolerance, self.rule, self.evidence)

    def describe(self) -> str:
        """Why it failed, in one sentence (for ExportError messages)."""
        if self.mismatches:
            return "; ".join(self.mismatches)
        text = f"normalized error {self.error:.2e} > {self.tolerance:.0e}"
        if self.evidence is not None:
            text += (f" and not rounding (Keras vs fp64 {self.evidence.keras_vs_fp64:.2e}, "
                     f"torch fp32 vs fp64 {self.evidence.torch_vs_fp64:.2e})")
        return text


def recheck(module: torch.nn.Module, input_sets: Sequence[tuple],
            keras_leaves: Callable[[tuple, object], list], tolerance: float,
            rule: str, examples_first: bool = False, excuse=None) -> Recheck:
    """Compare torch with ``keras_leaves(args, torch_structure)`` on every input set.

    ``keras_leaves`` returns the artifact's outputs in torch's leaf order. Under
    ``rule="rounding"`` an error above ``tolerance`` gets the float64 evidence of the worst
    input set. ``examples_first``: the first set is the example inputs (for the message
    when torch rejects a set); torch rejecting a set is an ``InputError`` naming it.
    ``excuse`` (``ties.artifact_excuse``) may replace a set's comparison whose only
    mismatches are integer values that rounding decided.
    """
    from crossport.parity.reference import torch_on_input_set, torch_on_input_sets

    worst = None
    for index, args in enumerate(input_sets, start=0 if examples_first else 1):
        if examples_first:  # a rejected fresh set may take the example's integers
            structure, _ = torch_on_input_sets(module, input_sets, index)
            args = input_sets[index]
        else:
            structure = torch_on_input_set(module, args, index)
        ref = [to_numpy(t) for t in pytree.tree_leaves(structure) if isinstance(t, torch.Tensor)]
        got = keras_leaves(args, structure)
        comparison = compare_outputs(ref, got)
        failed = comparison.mismatches or comparison.error > tolerance
        if excuse is not None and rule == "rounding" and failed:
            comparison = excuse(args, structure, got, comparison) or comparison
        key = (bool(comparison.mismatches), comparison.error)
        if worst is None or key > worst[0]:
            worst = (key, comparison, args, ref, got)
    if worst is None:
        return Recheck(0.0, [], tolerance, rule)
    _, comparison, args, ref, got = worst
    result = Recheck(comparison.error, comparison.mismatches, tolerance, rule)
    if rule == "rounding" and not result.mismatches and result.error > tolerance:
        result.evidence = float64_evidence(module, args, ref, got)
    return result
