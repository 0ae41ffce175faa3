"""``crossport to-torch`` end to end through a subprocess: .pt2 / .pt outputs, JSON, errors."""

import json
import subprocess
import sys

import keras
import numpy as np
import pytest
import torch

L = keras.layers


def _run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "crossport.cli", *args], cwd=cwd,
                          check=False, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("keras") / "small.keras"
    # named layers: Keras' automatic names depend on what the process built before
    model = keras.Sequential([keras.Input((8, 8, 3)),
                              L.Conv2D(4, 3, 2, padding="same", name="conv2d"),
                              L.BatchNormalization(name="bn"), L.ReLU(name="relu"),
                              L.GlobalAveragePooling2D(name="pool"), L.Dense(2, name="dense")])
    model.save(path)
    return path, model


def test_to_torch_writes_an_export_program(model_file, tmp_path):
    path, model = model_file
    out = tmp_path / "model.pt2"
    result = _run("to-torch", str(path), "--input", "2x8x8x3", "-o", str(out), "--json",
                  cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["parity"]["passed"] and report["format"] == "torch.export program"
    assert report["permutes"] == 0
    program = torch.export.load(out).module()
    x = np.random.default_rng(0).standard_normal((2, 8, 8, 3)).astype("float32")
    got = program(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, model(x).numpy(), atol=1e-5)


def test_to_torch_writes_a_state_dict(model_file, tmp_path):
    path, _model = model_file
    out = tmp_path / "model.pt"
    result = _run("to-torch", str(path), "--input", "1x8x8x3", "-o", str(out),
                  "--emit-source", "model_torch.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "model_torch.py").exists() and (tmp_path / "model_torch.pt").exists()
    state = torch.load(out)
    assert tuple(state["conv2d.weight"].shape) == (4, 3, 3, 3)  # OIHW
    assert "PASS" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--input", "1x8x8x3", "-o", "model.onnx"], "expected a .pt2"),
])
def test_to_torch_bad_arguments_are_one_line(model_file, tmp_path, args, message):
    path, _model = model_file
    result = _run("to-torch", str(path), *args, cwd=tmp_path)
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not list(tmp_path.glob("model.*"))


def test_to_torch_missing_file_is_one_line(tmp_path):
    result = _run("to-torch", str(tmp_path / "missing.keras"), "--input", "1x4", cwd=tmp_path)
    assert result.returncode != 0 and "no such file" in " ".join(result.stderr.split())


def test_to_torch_without_input_takes_the_model_input_specs(model_file, tmp_path):
    path, model = model_file
    out = tmp_path / "model.pt2"
    result = _run("to-torch", str(path), "-o", str(out), "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["parity"]["passed"]
    program = torch.export.load(out).module()
    x = np.random.default_rng(1).standard_normal((2, 8, 8, 3)).astype("float32")
    np.testing.assert_allclose(program(torch.from_numpy(x)).detach().numpy(),
                               model(x).numpy(), atol=1e-5)


def test_to_torch_without_input_names_what_to_give(tmp_path):
    path = tmp_path / "any_size.keras"
    keras.Sequential([keras.Input((None, None, 3)), L.Conv2D(2, 3)]).save(path)
    result = _run("to-torch", str(path), "-o", "model.pt2", cwd=tmp_path)
    assert result.returncode != 0
    assert "InputError" in result.stderr and "--input 1xNxNx3" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and not (tmp_path / "model.pt2").exists()
