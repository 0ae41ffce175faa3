"""``crossport generate-export`` end to end, through a subprocess."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from crossport.generative import LiteRTGenerator
from crossport.generative.verify import reference_generate

MODEL_FILE = textwrap.dedent("""
    import torch
    from crossport.compat import import_torchvision

    def tiny_llama():
        import_torchvision()
        import transformers
        torch.manual_seed(0)
        cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            initializer_range=0.2, max_position_embeddings=512)
        return transformers.LlamaForCausalLM(cfg).eval()

    def dynamic_rope():
        model = tiny_llama()
        model.config.rope_parameters = {**model.config.rope_parameters, "rope_type": "dynamic"}
        return model
""")


def run(workdir, *args):
    return subprocess.run([sys.executable, "-m", "crossport.cli", "generate-export", *args],
                          cwd=workdir, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # a subprocess that imports torch, TF and transformers, then exports
def test_generate_export_cli(tmp_path):
    (tmp_path / "llm_model.py").write_text(MODEL_FILE)
    result = run(tmp_path, "llm_model.py:tiny_llama", "-o", "llm.tflite", "--prefill", "4,8",
                 "--cache", "32", "--quantize", "none")
    assert result.returncode == 0, result.stderr
    assert "identical tokens" in result.stdout and "PASS" in result.stdout
    runner = LiteRTGenerator(tmp_path / "llm.tflite")
    assert sorted(runner.signatures) == ["decode", "prefill_4", "prefill_8"]
    sys.path.insert(0, str(tmp_path))
    try:
        import llm_model
    finally:
        sys.path.remove(str(tmp_path))
    lm = llm_model.tiny_llama()
    prompt = np.array([3, 1, 4, 1, 5, 9])
    new, _ = reference_generate(lm, prompt, 6)
    assert runner.generate(prompt, 6)[0, 6:].tolist() == new


def test_generate_export_cli_names_the_unsupported_variant(tmp_path):
    (tmp_path / "llm_model.py").write_text(MODEL_FILE)
    result = run(tmp_path, "llm_model.py:dynamic_rope", "-o", "llm.tflite", "--cache", "32")
    assert result.returncode == 1
    assert "UnsupportedOpError" in result.stderr and "'dynamic'" in result.stderr
    assert not (tmp_path / "llm.tflite").exists()
