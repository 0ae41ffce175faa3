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
