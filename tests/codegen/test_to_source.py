"""Generated Keras source: it reads like hand-written Keras and rebuilds the same model.

Every round trip writes the module with ``crossport.to_source``, then rebuilds the model from
the written file (imported in-process, or run as a script in a fresh interpreter) and
compares it with torch on fresh inputs, not the export example.
"""

from __future__ import annotations

import os
import py_compile
import re
import shutil
import subprocess
import sys
import types

import keras
import numpy as np
import pytest
import torch
from torch import nn

import crossport
from crossport.codegen import load_module
from crossport.parity import normalized_error
from crossport.parity.verify import fresh_inputs, leaves, run_keras, torch_outputs
from tests.ops.opcases import op_cases

SMALL_ATOL = 1e-5


class SmallCNN(nn.Module):
    """Conv/BN/ReLU, a residual add, torch-only pooling semantics, a flatten into Linear."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8),
                                  nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=2), nn.BatchNorm2d(8))
        self.pool = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)  # no Keras equivalent
        self.head = nn.Linear(8 * 5 * 5, 5)

    def forward(self, x):
        y = self.stem(x)
        y = torch.relu(self.block(y) + y)
        return self.head(torch.flatten(self.pool(y), 1))


class TwoHeads(nn.Module):
    """Two inputs, a dict of outputs, a buffer used as a value, an elementwise constant."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.proj = nn.Linear(6, 4)
        self.register_buffer("offset", torch.randn(4, 5, 5))

    def forward(self, image, features):
        a = self.conv(image) * 0.5 + self.offset
        b = torch.tanh(self.proj(features)).clamp(-0.9, 0.9)
        return {"map": a, "vector": b, "mix": a.mean(dim=(2, 3)) - b}


def _rebuilt_error(conversion, rebuilt: keras.Model, seeds=(7, 8)) -> float:
    errors = []
    for seed in seeds:
        args = fresh_inputs(conversion.example_args, seed)
        structure = torch_outputs(conversion.module, args)
        got = run_keras(rebuilt, args, conversion.options.channels_last_io, like=structure)
        errors += [normalized_error(r, g) for r, g in zip(leaves(structure), got)]
    return max(errors)


def _round_trip(module, args, path, **options):
    conversion = crossport.convert_with_report(module.eval(), args, check=False, **options)
    written = crossport.to_source(conversion, path)
    assert written == path and path.is_file()
    assert path.with_name(f"{path.stem}.weights.h5").is_file()
    return conversion, load_module(path).build_model()


def _lint(path):
    py_compile.compile(str(path), doraise=True)
    ruff = shutil.which("ruff") or shutil.which("ruff", path=os.path.dirname(sys.executable))
    if ruff:
        result = subprocess.run([ruff, "check", "--isolated", str(path)], check=False,
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def test_small_cnn_round_trip(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "small_keras.py"
    conversion, rebuilt = _round_trip(SmallCNN(), (torch.randn(2, 3, 16, 16),), path)
    assert _rebuilt_error(conversion, rebuilt) <= SMALL_ATOL
    assert [w.shape for w in rebuilt.weights] == [w.shape for w in conversion.model.weights]
    _lint(path)
    assert not list(tmp_path.glob(".*partial*")), "the staging folder was left behind"


def test_generated_file_runs_as_a_script(tmp_path):
    torch.manual_seed(0)
    out = tmp_path / "gen"
    out.mkdir()
    _round_trip(SmallCNN(), (torch.randn(1, 3, 16, 16),), out / "small_keras.py")
    # From another working directory: the weights are found beside the file, not in cwd.
    result = subprocess.run([sys.executable, str(out / "small_keras.py")], check=False, cwd=tmp_path,
                            capture_output=True, text=True, timeout=600,
                            env={**_env(), "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "stem.0" in result.stdout and "Total params" in result.stdout


def test_source_is_readable_one_line_per_layer(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "small_keras.py"
    conversion, _ = _round_trip(SmallCNN(), (torch.randn(1, 3, 16, 16),), path)
    text = path.read_text()
    lines = text.splitlines()
    for layer in conversion.model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        hits = [line for line in lines if f'name="{layer.name}"' in line]
        assert len(hits) == 1, f"layer {layer.name!r} on {len(hits)} lines"
        cls = type(layer).__name__
        where = "crossport.layers" if type(layer).__module__.startswith("crossport.") else (
            "keras.layers")
        variable = re.sub(r"\W", "_", layer.name)
        assert re.fullmatch(rf"    (layer_)?{variable}(_\d+)? = {where}\.{cls}\(.*\)\(.*\)",
                            hits[0]), hits[0]
    # torch names survive, Keras layers where Keras has the exact op, crossport's otherwise
    assert "crossport.layers.MaxPool2d(" in text  # ceil_mode: no Keras equivalent
    assert "keras.layers.Dense(5, " in text
    assert "keras.src" not in text and "def build_model(" in text
    assert re.search(r"^    stem_0 = keras\.layers\.Conv2D\(", text, re.MULTILINE)


def test_multi_input_dict_outputs_dynamic_batch_and_constants(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "two_heads_keras.py"
    args = (torch.randn(2, 3, 5, 5), torch.randn(2, 6))
    conversion, rebuilt = _round_trip(TwoHeads(), args, path, dynamic_batch=True)
    assert rebuilt.inputs[0].shape[0] is None
    assert _rebuilt_error(conversion, rebuilt) <= SMALL_ATOL
    got = rebuilt([a.numpy() for a in fresh_inputs(args, 3)])
    assert set(got) == {"map", "vector", "mix"}
    _lint(path)


def test_channels_last_io(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "nhwc_keras.py"
    conversion, rebuilt = _round_trip(SmallCNN(), (torch.randn(1, 3, 16, 16),), path,
                                      channels_last_io=True)
    assert tuple(rebuilt.inputs[0].shape) == (1, 16, 16, 3)
    assert _rebuilt_error(conversion, rebuilt) <= SMALL_ATOL


def test_large_constants_go_to_an_npz_file(tmp_path):
    class Scale(nn.Module):
        def forward(self, x):
            return x * torch.arange(1.0, 65.0).reshape(1, 64, 1, 1)

    path = tmp_path / "scale_keras.py"
    conversion, rebuilt = _round_trip(nn.Sequential(nn.Conv2d(3, 64, 1), Scale()),
                                      (torch.randn(1, 3, 4, 4),), path)
    assert _rebuilt_error(conversion, rebuilt) <= SMALL_ATOL
    text = path.read_text()
    if path.with_name("scale_keras.constants.npz").exists():
        assert 'constants["c0"]' in text
    _lint(path)


def test_indexing_is_written_as_python_slices(tmp_path):
    class Slices(nn.Module):
        def forward(self, x):
            return x[:, 1:5:2] * 2, x[0], x[..., -1]

    path = tmp_path / "slices_keras.py"
    conversion, rebuilt = _round_trip(Slices(), (torch.randn(2, 6, 4),), path)
    assert _rebuilt_error(conversion, rebuilt) <= SMALL_ATOL
    text = path.read_text()
    # a step-2 slice is written as unit-stride slices of a reshape (what XNNPACK runs)
    assert "x[:, 1:5, :]" in text and "x[0:1, :, :]" in text and "get_item(" not in text
    _lint(path)


def test_plain_keras_model_with_a_shared_layer(tmp_path):
    inputs = keras.Input((6,), name="features")
    shared = keras.layers.Dense(6, activation="tanh", name="shared")
    x = shared(shared(inputs))
    outputs = keras.ops.concatenate([x, keras.ops.square(inputs)], axis=-1)
    model = keras.Model(inputs, outputs)
    path = crossport.to_source(model, tmp_path / "shared_keras.py")
    text = path.read_text()
    assert text.count('name="shared"') == 1 and text.count("shared_layer(") == 2
    rebuilt = load_module(path).build_model()
    feed = np.random.default_rng(0).standard_normal((3, 6)).astype("float32")
    np.testing.assert_allclose(rebuilt(feed), model(feed), rtol=1e-6, atol=1e-6)
    _lint(path)


def test_sequential_model(tmp_path):
    model = keras.Sequential([keras.Input((4, 4, 2)), keras.layers.Conv2D(3, 2, name="conv"),
                              keras.layers.Flatten(name="flat")], name="seq")
    path = crossport.to_source(model, tmp_path / "seq_keras.py")
    rebuilt = load_module(path).build_model()
    feed = np.random.default_rng(1).standard_normal((2, 4, 4, 2)).astype("float32")
    np.testing.assert_allclose(rebuilt(feed), model(feed), rtol=1e-6, atol=1e-6)
    assert 'keras.layers.Conv2D(3, (2, 2), name="conv")' in path.read_text()


def test_failed_check_leaves_nothing(tmp_path):
    torch.manual_seed(0)
    conversion = crossport.convert_with_report(SmallCNN().eval(), (torch.randn(1, 3, 16, 16),),
                                               check=False)
    conversion.module = SmallCNN().eval()  # other weights: the rebuilt model cannot match
    with pytest.raises(crossport.ExportError, match="differs from torch"):
        crossport.to_source(conversion, tmp_path / "bad_keras.py")
    assert list(tmp_path.iterdir()) == []


def test_rejects_a_path_that_is_not_python(tmp_path):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    with pytest.raises(crossport.InputError, match=r"\.py"):
        crossport.to_source(model, tmp_path / "model.keras")


def test_cli_emit_source(tmp_path):
    (tmp_path / "my_model.py").write_text(
        "import torch\n\n\ndef build():\n    torch.manual_seed(0)\n"
        "    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())\n")
    result = subprocess.run(
        [sys.executable, "-m", "crossport.cli", "convert", "my_model.py:build", "-i", "1x3x8x8",
         "--emit-source", "out/model_keras.py", "--json"],
        check=False, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=_env())
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"source": "out/model_keras.py"' in result.stdout
    assert (tmp_path / "out" / "model_keras.weights.h5").is_file()
    assert "keras.layers.Conv2D(4, (3, 3)" in (tmp_path / "out" / "model_keras.py").read_text()


def _env():
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}


# -- model zoo: real model definitions nobody here wrote ------------------------------------

ZOO = [
    ("resnet18", (1, 3, 96, 96)),
    ("mobilenet_v3_small", (1, 3, 96, 96)),
    ("efficientnet_b0", (1, 3, 96, 112)),
    ("densenet121", (1, 3, 96, 96)),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "shape"), ZOO, ids=[name for name, _ in ZOO])
def test_zoo_round_trip(torchvision, tmp_path, name, shape):
    torch.manual_seed(0)
    module = getattr(torchvision.models, name)(weights=None).eval()
    example = (torch.randn(shape, generator=torch.Generator().manual_seed(0)),)
    path = tmp_path / f"{name}_keras.py"
    conversion, rebuilt = _round_trip(module, example, path)
    # The rebuilt model is the converted one: same graph, same weights ...
    feed = fresh_inputs(example, 5)[0].numpy()
    same = normalized_error(np.asarray(conversion.model(feed)), np.asarray(rebuilt(feed)))
    assert same <= 1e-6, f"rebuilt vs converted Keras model: {same:.2e}"
    # ... and so within the conversion's tolerance of torch on fresh inputs.
    assert _rebuilt_error(conversion, rebuilt) <= conversion.options.atol
    layers = [layer for layer in conversion.model.layers
              if not isinstance(layer, keras.layers.InputLayer)]
    text = path.read_text()
    assert all(text.count(f'name="{layer.name}"') == 1 for layer in layers)
    _lint(path)


# -- every op-table case through generated source ---------------------------------------------

_HARNESS_ONLY = {"atol", "expect_layers", "max_transposes", "kernel_transposes", "expect_converters"}


@pytest.mark.slow
@pytest.mark.parametrize(("module", "shapes", "kwargs"), op_cases())
def test_op_case_round_trips(tmp_path, module, shapes, kwargs):
    from tests.ops.opcases import inputs

    torch.manual_seed(0)
    args = shapes() if callable(shapes) else inputs(shapes)
    options = {k: v for k, v in kwargs.items() if k not in _HARNESS_ONLY}
    conversion = crossport.convert_with_report(module.eval(), args, check=False,
                                               atol=kwargs.get("atol", SMALL_ATOL), **options)
    path = crossport.to_source(conversion, tmp_path / "case_keras.py")  # checks vs torch
    _lint(path)


@pytest.mark.parametrize("case_id", ["reshape-two-dynamic-dims", "arange-seq-expand-batch-by-name",
                                     "causal-mask-from-arange", "lstm-dynamic-batch",
                                     "lstm-dynamic-seq", "size-in-float-arithmetic"])
def test_dynamic_model_round_trips_through_source(tmp_path, case_id):
    """Run-time sizes survive the written source: the rebuilt model runs at other shapes."""
    from tests.harness import assert_matches_at_sizes
    from tests.ops.test_dynamic import CASES

    module, shape, dims, batch, others = next(p.values for p in CASES if p.id == case_id)
    example = (torch.randn(shape, generator=torch.Generator().manual_seed(1)),)
    conversion = crossport.convert_with_report(module.eval(), example, dynamic_dims=dims,
                                               dynamic_batch=batch, check=False)
    path = crossport.to_source(conversion, tmp_path / "dynamic_keras.py")
    rebuilt = load_module(path).build_model()
    assert_matches_at_sizes(module, types.SimpleNamespace(model=rebuilt), others)
