"""The supported-op table, generated from the registry (never edited by hand)."""

from __future__ import annotations

from crossport.to_keras.registry import complex_ops, registered_ops

HEADER = """# Supported ATen ops

Generated from the converter registry by `python -m crossport.to_keras.optable > docs/ops.md`
(a test fails when this file is stale). Policies: see [architecture.md](architecture.md).
Rows marked `(complex)` run when the node reads or produces a complex tensor (held as
real/imaginary parts: architecture.md, "Complex values").

| op | policy | family | converter |
|---|---|---|---|
"""


def rows() -> list[tuple[str, str, str, str]]:
    table = []
    for op, conv in registered_ops().items():
        family = conv.fn.__module__.rsplit(".", 1)[-1]
        table.append((str(op) if hasattr(op, "_schema") else f"python: {getattr(op, '__name__', op)}",
                      conv.policy.value, family, conv.fn.__name__))
    for op, conv in complex_ops().items():
        family = conv.fn.__module__.rsplit(".", 1)[-1]
        table.append((f"{op} (complex)", conv.policy.value, family, conv.fn.__name__))
    return sorted(table)


def markdown() -> str:
    from crossport.to_torch.optable import markdown as reverse_markdown

    return HEADER + "".join(f"| `{op}` | {policy} | {family} | `{fn}` |\n"
                            for op, policy, family, fn in rows()) + reverse_markdown()


if __name__ == "__main__":
    print(markdown(), end="")
