"""The per-layer quantization report: rows, the per-op metric, text and JSON."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass
class QuantizedLayer:
    """One quantized TFLite op and the error it introduces by itself.

    ``error``: per output channel, the RMS difference between the quantized op and the float
    op run on the same inputs, divided by that channel's float output range (max - min),
    averaged over channels: 0.001 is a fraction of an int8 step, 0.05+ is lost signal.
    Per channel, so a channel dwarfed by an outlier channel's range shows up.
    """

    # torch module path (layer3.0.conv1), or for an op outside any layer the module that
    # ran it and the op (``layer1.0 (add)``, ``<root> (flatten)``); the TFLite tensor name
    # if unknown
    name: str
    op: str  # TFLite op (CONV_2D, ADD, ...)
    error: float
    rmse: float
    max_abs_error: float
    scale: float  # output scale and zero point of the quantized tensor
    zero_point: int
    fused: list[str] = field(default_factory=list)  # torch modules fused into the op
    tensor: str = ""
    node: str = ""  # the torch fx node (``Conversion.exported``) the row is named after


@dataclass
class QuantizationReport:
    """Output SQNR of the whole file and the per-op errors, worst first."""

    format: str
    sqnr_db: float | None = None
    min_sqnr_db: float | None = None
    max_error: float | None = None
    layers: list[QuantizedLayer] = field(default_factory=list)
    float_layers: list[str] = field(default_factory=list)
    per_layer_note: str = ""
    checked_on: str = ""  # which examples the output SQNR was measured on

    def summary(self, top: int = 10) -> str:
        head = f"{self.format}: "
        if self.sqnr_db is not None:
            head += (f"output SQNR {self.sqnr_db:.1f} dB vs torch fp32 (at least "
                     f"{self.min_sqnr_db:.0f} dB for this format), normalized max error "
                     f"{self.max_error:.2e}")
            if self.checked_on:
                head += f", on {self.checked_on}"
        lines = [head]
        if self.float_layers:
            lines.append(f"kept in float: {', '.join(self.float_layers)}")
        if self.per_layer_note:
            lines.append(self.per_layer_note)
        if self.layers:
            lines.append(f"worst quantized ops (error: RMS / output range per channel), "
                         f"{min(top, len(self.layers))} of {len(self.layers)}:")
            width = max(len(r.name) for r in self.layers[:top])
            for row in self.layers[:top]:
                lines.append(f"  {row.name:<{width}}  {row.op:<16} error {row.error:.2e}  "
                             f"scale {row.scale:.3g} zp {row.zero_point}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_html(self) -> str:
        """An HTML section (SQNR, max error, per-op table worst first); the full page is
        :func:`crossport.parity.render.export_html`."""
        from crossport.parity.render import quantization_html

        return quantization_html(self)


def layer_error(float_out: np.ndarray, quant_out: np.ndarray, scale: float,
                zero_point: int) -> float:
    """Mean over output channels (last axis) of RMS(dequantized - float) / float range."""
    ref = np.asarray(float_out, np.float64)
    got = (np.asarray(quant_out, np.int64) - zero_point) * float(scale)
    if ref.ndim >= 2 and ref.size // ref.shape[-1] >= 2:
        ref, got = ref.reshape(-1, ref.shape[-1]), got.reshape(-1, ref.shape[-1])
    else:  # one value per channel: the tensor's own range
        ref, got = ref.reshape(-1, 1), got.reshape(-1, 1)
    spread = ref.max(axis=0) - ref.min(axis=0)
    rms = np.sqrt(np.mean((got - ref) ** 2, axis=0))
    live = spread > 0
    if not live.any():  # a constant output: any error at all is all of it
        return 0.0 if not rms.size or rms.max() == 0 else float("inf")
    return float(np.mean(rms[live] / spread[live]))


def torch_path(layer: str, module_paths: set | None = None) -> str:
    """The torch module path of a Keras layer crossport named (``relu_1`` -> ``relu``)."""
    if not module_paths or layer in module_paths:
        return layer
    name = layer
    while re.search(r"_\d+$", name):
        name = re.sub(r"_\d+$", "", name)
        if name in module_paths:
            return name
    return layer
