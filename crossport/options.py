"""The one options dataclass; the CLI maps onto it field by field."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ConvertOptions:
    """How :func:`crossport.convert` builds and checks the Keras model.

    Attributes:
        check: run the parity check after building (raises ``ParityError`` on divergence).
        atol: tolerance on the normalized max error ``max|d| / max(1, max|ref|)``.
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
    channels_last_io: bool = False
    dynamic_batch: bool = False
    dynamic_dims: dict = field(default_factory=dict)
    check_inputs: int = 2
    seed: int = 0
    strict_export: bool = False
