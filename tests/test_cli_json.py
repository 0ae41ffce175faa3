"""The CLI's --json output is valid JSON even when outputs hold NaN (no NaN/Infinity tokens)."""

import json
import textwrap

from tests.test_cli import crossport_cli

MODEL = textwrap.dedent("""
    import torch

    class LogAndScale(torch.nn.Module):
        def forward(self, x):
            return x * 2, torch.log(x)  # NaN wherever x < 0, in torch and Keras alike

    def build():
        return LogAndScale()
""")


def _strict(text: str):
    def refuse(token):
        raise ValueError(f"invalid JSON token {token}")
    return json.loads(text, parse_constant=refuse)


def test_json_with_nan_outputs_and_export_is_strict_json(tmp_path):
    (tmp_path / "nan_model.py").write_text(MODEL)
    result = crossport_cli("convert", "nan_model.py:build", "--input", "2x8", "--json",
                           "-o", "m.keras", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = _strict(result.stdout)
    assert summary["parity"]["passed"] and summary["parity"]["mismatches"] == []
    assert summary["parity"]["rule"] == "rounding"
    assert summary["export"]["error"] < 1e-6 and summary["export"]["mismatches"] == []


POOL = textwrap.dedent("""
    import torch

    def build():
        return torch.nn.MaxPool1d(2)
""")


def test_tflite_export_reports_nan_positions_that_differ_from_torch(tmp_path):
    """LiteRT's max pooling skips NaN: the JSON (and the table) say so after the export."""
    (tmp_path / "pool.py").write_text(POOL)
    result = crossport_cli("convert", "pool.py:build", "--input", "2x3x8", "--json",
                           "-o", "m.tflite", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    special = _strict(result.stdout)["export"]["special_values"]
    assert not special["agrees"] and special["keras"]
    assert special["file"][0].startswith("with NaN in the inputs, output 0: NaN at ")
    table = crossport_cli("convert", "pool.py:build", "--input", "2x3x8", "-o", "m.tflite",
                          "--overwrite", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "NaN/inf vs torch" in table.stdout and "differs" in table.stdout
