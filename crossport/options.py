"""The one options dataclass; the CLI maps onto it field by field."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from numbers import Integral, Real

from crossport.errors import InputError


@dataclass
class ConvertOptions:
    """How :func:`crossport.convert` builds and checks the Keras model.

    Attributes:
        check: run the parity check after building (raises ``ParityError`` on divergence).
        atol: tolerance on the normalized max error ``max|d| / max(1, max|ref|)``: at or
            below it the check passes at once.
        tolerance: the acceptance rule above ``atol``. ``"rounding"`` (default): torch runs
            the failing input set in float64 and the check passes when the Keras model is
            no further from that truth than ``ROUNDING_FACTOR`` (100) x torch float32's own
            distance and below 1e-3 (verdict "rounding", docs/parity.md). ``"atol"``:
            ``atol`` is a hard bound. Shape, dtype, NaN/inf-position and integer mismatches
            fail under both.
        channels_last_io: inputs and outputs of rank >= 3 are channels-last (NHWC) in the
            Keras model, for deployment; default is PyTorch layout (NCHW).
        dynamic_batch: the batch dim (dim 0 of every input) is ``None`` in the Keras model.
        dynamic_dims: more dynamic dims, ``{input_name_or_index: {dim: name}}``; dims that
            share a name must be equal (for example a sequence length). ``None`` is ``{}``.
        check_inputs: how many fresh random inputs the check runs besides the examples.
        seed: seed for the fresh random inputs.
        strict_export: passed to ``torch.export.export(strict=...)``.
    """

    check: bool = True
    atol: float = 1e-4
    tolerance: str = "rounding"
    channels_last_io: bool = False
    dynamic_batch: bool = False
    dynamic_dims: dict = field(default_factory=dict)
    check_inputs: int = 2
    seed: int = 0
    strict_export: bool = False

    def __post_init__(self) -> None:
        if self.dynamic_dims is None:  # the usual "no value" spelling means no dynamic dims
            self.dynamic_dims = {}

    def validate(self) -> ConvertOptions:
        """Raise ``InputError`` naming the first option of the wrong type or range.

        Example:
            >>> ConvertOptions(atol="1e-4").validate()
            Traceback (most recent call last):
            ...
            crossport.errors.InputError: option atol='1e-4' (str): expected a non-negative number, e.g. atol=1e-4
        """
        for spec in fields(self):
            check_option(spec.name, getattr(self, spec.name))
        return self


def check_option(name: str, value) -> None:
    """Raise ``InputError`` unless ``value`` is valid for option ``name`` (the rules both
    directions share: ``atol``, ``check_inputs``, ``seed``, flags)."""
    check = _CHECKS.get(name)
    problem = check(value) if check else None
    if problem:
        raise InputError(f"option {name}={value!r} ({type(value).__name__}): expected {problem}")


def _flag(value) -> str | None:
    return None if isinstance(value, bool) else "True or False"


def _count(value) -> str | None:
    ok = isinstance(value, Integral) and not isinstance(value, bool) and value >= 0
    return None if ok else "an int >= 0"


def _tolerance(value) -> str | None:
    ok = (isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)
          and value >= 0)
    return None if ok else "a non-negative number, e.g. atol=1e-4"


def _dynamic_dims(value) -> str | None:
    expected = ("a dict {input name or index: {dim index: dim name}}, e.g. "
                "{'input_ids': {1: 'seq'}}")
    if not isinstance(value, dict):
        return expected
    for key, dims in value.items():
        if not isinstance(key, (str, Integral)) or isinstance(key, bool):
            return expected
        if not isinstance(dims, dict) or not all(
                isinstance(d, Integral) and not isinstance(d, bool) and isinstance(n, str)
                for d, n in dims.items()):
            return expected
    return None


def _rule(value) -> str | None:
    from crossport.parity.accept import TOLERANCE_RULES

    return None if value in TOLERANCE_RULES else (
        f"one of {', '.join(map(repr, TOLERANCE_RULES))} (\"atol\" makes atol a hard bound)")


_CHECKS = {
    "check": _flag, "atol": _tolerance, "tolerance": _rule, "channels_last_io": _flag,
    "channels_first_io": _flag,
    "dynamic_batch": _flag, "dynamic_dims": _dynamic_dims, "check_inputs": _count, "strict_export": _flag,
    "seed": lambda v: None if isinstance(v, Integral) and not isinstance(v, bool) else "an int",
}
