"""The .tflite re-check on special values: the written file against torch on inputs holding
NaN, +-inf and -0.0.

The export's re-check draws finite inputs, so a runtime that handles NaN or inf differently
(LiteRT's max pooling skips NaN, XNNPACK's average pooling turns it into -inf:
docs/parity.md) passes it. This check runs the file and torch on two more input sets (NaN
in one, +-inf and -0.0 in the other, at seeded positions of every float input) and
compares where the outputs are NaN and where they are +-inf. A difference is reported on
the export's result, with whether the converted Keras model (run only then) differs from
torch there too (a conversion difference docs/parity.md lists) or only the file does (the
TFLite runtime's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from crossport.parity.compare import nonfinite_mismatches, to_numpy

FRACTION = 0.02  # of a float input's elements made special in each input set


@dataclass
class SpecialValues:
    """Where the file's NaN/inf positions differ from torch's on inputs holding them.

    ``file``: one line per (input set, output) that differs; ``keras``: the same for the
    converted Keras model, on the input sets where the file differs. Empty ``file``: the
    file agrees with torch on both sets.
    """

    file: list[str] = field(default_factory=list)
    keras: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # input sets torch itself rejected

    @property
    def agrees(self) -> bool:
        return not self.file

    def describe(self) -> str:
        if self.agrees and self.skipped:
            return f"not checked on special values: {'; '.join(self.skipped)}"
        if self.agrees:
            return "on inputs holding NaN and ±inf the file's NaN/inf positions are torch's"
        return (f"on inputs holding NaN or ±inf the file differs from torch (docs/parity.md, "
                f"'What the check cannot see'): {'; '.join(self.file)}")


def special_inputs(example: tuple, seed: int) -> list[tuple]:
    """Two input sets like ``example``: seeded normal floats with NaN at ``FRACTION`` of
    each float input's elements (at least one), then with +inf, -inf and -0.0 there;
    integer and bool inputs as the re-check draws them."""
    from crossport.parity.verify import fresh_inputs

    sets = []
    for k, specials in enumerate(((float("nan"),), (float("inf"), float("-inf"), -0.0))):
        base = fresh_inputs(example, seed + k)
        gen = torch.Generator().manual_seed(seed + 10 + k)
        sets.append(tuple(_sprinkled(t, specials, gen) if t.is_floating_point() else t
                          for t in base))
    return sets


def _sprinkled(t: torch.Tensor, specials: tuple, gen: torch.Generator) -> torch.Tensor:
    flat = t.clone().reshape(-1)
    count = min(flat.numel(), max(len(specials), int(flat.numel() * FRACTION)))
    where = torch.randperm(flat.numel(), generator=gen)[:count]
    values = torch.tensor(specials, dtype=t.dtype).repeat(count // len(specials) + 1)
    flat[where] = values[:count]  # an input with fewer elements than specials takes the first
    return flat.reshape(t.shape)


def differences(want: list[np.ndarray], got: list[np.ndarray],
                names: tuple[str, str]) -> dict[int, str]:
    """``{output index: how its NaN or +-inf positions differ}`` (the one compare routine's
    rule, ``parity.compare.nonfinite_mismatches``); shapes and dtypes are the finite
    re-check's business."""
    found = {}
    for i, (w, g) in enumerate(zip(want, got)):
        w, g = np.asarray(w), np.asarray(g)
        if w.dtype.kind != "f" or w.shape != g.shape:
            continue
        lines = nonfinite_mismatches(w, g, i, names)
        if lines:
            found[i] = "; ".join(lines)
    return found


def check(module: torch.nn.Module, example: tuple, seed: int,
          run_file: Callable[[tuple], list], run_keras: Callable[[tuple], list]
          ) -> SpecialValues | None:
    """The file (``run_file(args)``: output leaves in torch's order) and the Keras model
    against torch on :func:`special_inputs`; None when no input is a float tensor."""
    if not any(t.is_floating_point() for t in example):
        return None
    result = SpecialValues()
    labels = ("NaN in the inputs", "±inf and -0.0 in the inputs")
    for args, label in zip(special_inputs(example, seed), labels):
        try:
            with torch.no_grad():
                out = module(*(a.clone() for a in args))
        except Exception as exc:  # noqa: BLE001  (a model validating its inputs, any type)
            detail = " ".join(str(exc).split())[:160]
            result.skipped.append(f"the torch module rejects inputs with {label.split(' in')[0]}"
                                  f" ({type(exc).__name__}: {detail})")
            continue
        want = [to_numpy(t) for t in torch.utils._pytree.tree_leaves(out)
                if isinstance(t, torch.Tensor)]
        in_file = differences(want, run_file(args, out), ("torch", "the file"))
        if not in_file:
            continue  # the Keras model only runs to tell whose a difference is
        in_keras = differences(want, run_keras(args, out), ("torch", "Keras"))
        for i, text in in_file.items():
            whose = ("the converted Keras model differs there too" if i in in_keras else
                     "the converted Keras model agrees with torch: the TFLite runtime's")
            result.file.append(f"with {label}, {text} ({whose})")
        result.keras += [f"with {label}, {text}" for text in in_keras.values()]
    return result
