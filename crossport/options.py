"""The one options dataclass; the CLI maps onto it field by field."""

from __future__ import annotations

from dataclasses import dataclass, field


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
            share a name must be equal (for example a sequence length).
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

    def __post_init__(self):
        from crossport.errors import InputError
        from crossport.parity.accept import TOLERANCE_RULES

        if self.tolerance not in TOLERANCE_RULES:
            raise InputError(f"tolerance={self.tolerance!r}: expected one of "
                             f"{', '.join(map(repr, TOLERANCE_RULES))} (\"atol\" makes atol a "
                             "hard bound)")
