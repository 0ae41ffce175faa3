"""Generated documentation stays true to the code."""

from pathlib import Path

from crossport.to_keras.optable import markdown

ROOT = Path(__file__).resolve().parents[1]


def test_ops_table_is_current():
    assert (ROOT / "docs" / "ops.md").read_text() == markdown(), (
        "docs/ops.md is stale: run `python -m crossport.to_keras.optable > docs/ops.md`")


def test_readme_starts_with_the_two_commands_and_ci_uses_the_test_one():
    first_lines = (ROOT / "README.md").read_text().splitlines()[:6]
    assert any(line.startswith("./run demo") for line in first_lines)
    assert any(line.startswith("./run test") for line in first_lines)
    assert "./run test" in (ROOT / ".ci" / "run").read_text()
