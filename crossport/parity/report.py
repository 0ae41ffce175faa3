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
    error: float           # normalized, Keras vs torch fp32 (finite)
    keras_vs_fp64: float | None  # None: no float64 value for this node
    torch_vs_fp64: float | None
    verdict: str           # "rounding", "semantic" or "unknown" (no float64 value)
    mismatches: list[str] = field(default_factory=list)  # NaN/inf positions, integers

    def describe(self) -> str:
        where = self.module_path or "<root module>"
        src = f" ({self.source})" if self.source else ""
        if self.mismatches:
            what = "; ".join(self.mismatches)
        elif self.keras_vs_fp64 is None:
            what = f"error {self.error:.2e} (no float64 value for this node)"
        else:
            what = (f"error {self.error:.2e} (Keras vs fp64 {self.keras_vs_fp64:.2e}, torch fp32 "
                    f"vs fp64 {self.torch_vs_fp64:.2e})")
        return f"first divergence at node {self.node} [{self.op}] in {where}{src}: {what} -> {self.verdict}"


@dataclass
class ParityReport:
    """Result of comparing the converted model with torch.

    ``max_error`` is the worst normalized error ``max|d| / max(1, max|ref|)`` over the
    example and fresh inputs (always finite; the positions where either side is NaN/inf are
    compared by position instead). ``mismatches`` lists what no tolerance excuses: different
    shapes, dtypes, NaN/inf positions or integer values. ``rule`` is the acceptance rule:
    ``"rounding"`` (default) passes an error above ``atol`` when the float64 evidence says
    rounding (``keras_vs_fp64`` within ``ROUNDING_FACTOR`` x ``torch_vs_fp64``, see
    docs/parity.md); ``"atol"`` makes ``atol`` a hard bound. ``notes`` are caveats the user
    should know (NaN in the inputs reaching an op whose NaN handling differs).
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
    rule: str = "rounding"
    mismatches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        if self.mismatches:
            return False
        if self.max_error <= self.atol:
            return True
        return self.rule == "rounding" and self.verdict == "rounding"

    @property
    def within_rounding(self) -> bool:
        """Passed, or past tolerance only by float32 rounding (the fp64 evidence)."""
        return self.passed or (not self.mismatches and self.verdict == "rounding")

    def summary(self) -> str:
        inputs = len(self.errors)
        head = (f"parity: max normalized error {self.max_error:.2e} over {inputs} input set(s) "
                f"(tolerance {self.atol:.0e}, rule {self.rule}): "
                f"{'PASS' if self.passed else 'FAIL'}")
        lines = [head] + self._shape_lines()
        if not self.passed and self.worst_at:
            lines.append(f"worst at input shapes {self.worst_at}")
        if self.max_error > self.atol and self.verdict:
            lines.append(f"verdict: {self.verdict} (Keras vs fp64 {self.keras_vs_fp64:.2e}, "
                         f"torch fp32 vs fp64 {self.torch_vs_fp64:.2e})")
        lines += [f"mismatch: {m}" for m in self.mismatches]
        if not self.passed and self.first_divergent:
            lines.append(self.first_divergent.describe())
        lines += [f"note: {n}" for n in self.notes]
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
        """Plain data, every number finite (valid JSON)."""
        data = asdict(self)
        data["passed"] = self.passed
        return data
