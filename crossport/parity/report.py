"""What a parity check found, as data and as text."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class NodeDivergence:
    """The first graph node whose Keras value is past tolerance."""

    node: str
    op: str
    module_path: str
    source: str
    error: float           # normalized, Keras vs torch fp32
    keras_vs_fp64: float
    torch_vs_fp64: float
    verdict: str           # "rounding" or "semantic"

    def describe(self) -> str:
        where = self.module_path or "<root module>"
        src = f" ({self.source})" if self.source else ""
        return (f"first divergence at node {self.node} [{self.op}] in {where}{src}: "
                f"error {self.error:.2e} (Keras vs fp64 {self.keras_vs_fp64:.2e}, torch fp32 vs "
                f"fp64 {self.torch_vs_fp64:.2e}) -> {self.verdict}")


@dataclass
class ParityReport:
    """Result of comparing the converted model with torch.

    ``max_error`` is the worst normalized error ``max|d| / max(1, max|ref|)`` over the
    example and fresh inputs; ``verdict`` is set when it exceeds ``atol``.
    """

    max_error: float
    errors: list[float] = field(default_factory=list)
    atol: float = 1e-4
    verdict: str | None = None
    keras_vs_fp64: float | None = None
    torch_vs_fp64: float | None = None
    first_divergent: NodeDivergence | None = None
    shapes: list[str] = field(default_factory=list)     # input shapes checked, in words
    shape_sets: list = field(default_factory=list)      # the same, as shape tuples
    fixed_dims: list[str] = field(default_factory=list)  # asked dynamic, fixed by the model
    shape_note: str | None = None                       # why no second shape was checked
    worst_at: str | None = None                         # the input shapes of the worst set

    @property
    def passed(self) -> bool:
        return self.max_error <= self.atol

    @property
    def within_rounding(self) -> bool:
        """Passed, or past tolerance only by float32 rounding (the fp64 evidence)."""
        return self.passed or self.verdict == "rounding"

    def summary(self) -> str:
        inputs = len(self.errors)
        head = (f"parity: max normalized error {self.max_error:.2e} over {inputs} input set(s) "
                f"(tolerance {self.atol:.0e}): {'PASS' if self.passed else 'FAIL'}")
        lines = [head] + self._shape_lines()
        if self.passed:
            return "\n".join(lines)
        if self.worst_at:
            lines.append(f"worst at input shapes {self.worst_at}")
        if self.verdict:
            lines.append(f"verdict: {self.verdict} (Keras vs fp64 {self.keras_vs_fp64:.2e}, "
                         f"torch fp32 vs fp64 {self.torch_vs_fp64:.2e})")
        if self.first_divergent:
            lines.append(self.first_divergent.describe())
        return "\n".join(lines)

    def _shape_lines(self) -> list[str]:
        lines = []
        if len(self.shapes) > 1:
            lines.append("checked at shapes: " + "; ".join(self.shapes))
        if self.fixed_dims:
            lines.append("kept static (the model fixes them): " + ", ".join(self.fixed_dims))
        if self.shape_note:
            lines.append(self.shape_note)
        return lines

    def to_dict(self) -> dict:
        data = asdict(self)
        data["passed"] = self.passed
        return data
