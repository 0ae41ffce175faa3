"""The command line end to end, through a subprocess, including every bad input."""

import json
import re
import subprocess
import sys
import textwrap

import pytest
import torch

MODEL_FILE = textwrap.dedent("""
    import torch

    def build():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                                   torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                   torch.nn.Linear(4, 2))

    def with_args():
        return build(), (torch.randn(2, 3, 8, 8),)

    def double_net():
        return build().double()

    def not_a_module():
        return 42

    def three_things():
        return build(), (torch.randn(2, 3, 8, 8),), "extra"

    class Text(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(20, 4)

        def forward(self, ids, mask):
            keep = mask.unsqueeze(-1).float()
            return (self.embed(ids) * keep).sum(1) / keep.sum(1).clamp(min=1)

    def text():
        torch.manual_seed(0)
        return Text()

    def unsupported():
        class Cumulative(torch.nn.Module):
            def forward(self, x):
                return torch.geqrf(x)[0]
        return Cumulative()

    def wrong_features():
        return torch.nn.Sequential(torch.nn.Linear(4, 3))

    def converter_crashes():
        import crossport

        @torch.library.custom_op("cli_test::boom", mutates_args=())
        def boom(x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @boom.register_fake
        def _(x):
            return torch.empty_like(x)

        @crossport.register(torch.ops.cli_test.boom.default, policy=crossport.Policy.AGNOSTIC)
        def cli_test_boom_default(ctx, x):
            raise KeyError("no such layout")

        class Boom(torch.nn.Module):
            def forward(self, x):
                return boom(x) + 1
        return Boom()
""")


def crossport_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "crossport.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli")
    (path / "my_model.py").write_text(MODEL_FILE)
    return path


def test_convert_to_tflite_with_json_summary(workdir):
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8", "--json",
                           "-o", "out/model.tflite", cwd=workdir)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["parity"]["passed"] and summary["export"]["format"] == "tflite"
    assert (workdir / "out" / "model.tflite").is_file()


def test_convert_callable_returning_module_and_args_with_weights(workdir):
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                                 torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                 torch.nn.Linear(4, 2))
    torch.save(module.state_dict(), workdir / "weights.pt")
    result = crossport_cli("convert", "my_model.py:with_args", "--weights", "weights.pt",
                           "--dynamic-batch", "-o", "wa.keras", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert (workdir / "wa.keras").is_file()


def test_convert_with_a_dynamic_sequence_dim(workdir):
    import keras

    result = crossport_cli("convert", "my_model.py:text", "--input", "int64:2x7:20", "--input",
                           "int64:2x7:2", "--dynamic-dim", "ids:1:seq", "--dynamic-dim",
                           "mask:1:seq", "-o", "text.keras", cwd=workdir)
    assert result.returncode == 0, result.stderr
    sys.path.insert(0, str(workdir))
    try:
        import my_model
    finally:
        sys.path.remove(str(workdir))
    model = keras.models.load_model(workdir / "text.keras")
    assert [tuple(i.shape) for i in model.inputs] == [(2, None), (2, None)]
    ids = torch.randint(0, 20, (2, 11))
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, 6:] = 0
    expected = my_model.text()(ids, mask).detach().numpy()
    got = keras.ops.convert_to_numpy(model([ids.numpy(), mask.numpy()]))
    assert abs(got - expected).max() < 1e-5


BAD_INPUTS = {
    # found by the s17 audit: "internal error: RuntimeError: Storage size calculation overflowed"
    "input-too-large": (["my_model.py:build", "--input", "100000000000x100000000000x3x8"],
                        "cannot make an example tensor of that size"),
    "malformed-dynamic-dim": (["my_model.py:build", "--input", "1x3x8x8", "--dynamic-dim",
                               "x:height"], "expected INPUT:DIM[:NAME]"),
    "unknown-dynamic-input": (["my_model.py:text", "--input", "int64:2x7:20", "--input",
                               "int64:2x7:2", "--dynamic-dim", "tokens:1:seq"], "tokens"),
    "ids-beyond-the-vocabulary": (["my_model.py:text", "--input", "int64:2x7", "--input",
                                   "int64:2x7:2"], "failed on the example inputs: IndexError"),
    "missing-file": (["nope.py:build", "--input", "1x3x8x8"], "no such file"),
    "no-such-callable": (["my_model.py:nothing", "--input", "1x3x8x8"], "no attribute 'nothing'"),
    "not-a-module": (["my_model.py:not_a_module", "--input", "1x3x8x8"], "not a torch.nn.Module"),
    # found by the s17 audit: "internal error: ValueError: too many values to unpack"
    "returns-three-things": (["my_model.py:three_things", "--input", "1x3x8x8"],
                             "returned a tuple of 3"),
    "malformed-input": (["my_model.py:build", "--input", "1by3"], "expected SHAPE"),
    "ids-beyond-their-dtype": (["my_model.py:text", "--input", "int8:2x7:300", "--input",
                                "int64:2x7:2"], "HIGH must be in [1, 128] for int8"),
    "weights-not-state-dict": (["my_model.py:build", "--input", "1x3x8x8", "--weights",
                                "my_model.py"], "not a loadable state_dict"),
    "weights-do-not-fit": (["my_model.py:build", "--input", "1x3x8x8", "--weights",
                            "small.pt"], "does not fit"),
    "unsupported-op": (["my_model.py:unsupported", "--input", "1x3x8x8", "-o", "u.keras"],
                       "aten.geqrf.default"),
    "unwritable-output": (["my_model.py:build", "--input", "1x3x8x8", "-o",
                           "blocker/m.keras"], "ExportError"),
    "model-fails-on-inputs": (["my_model.py:wrong_features", "--input", "2x5"],
                              "CaptureError: Sequential raised RuntimeError"),
    "converter-crashes": (["my_model.py:converter_crashes", "--input", "2x5"],
                          "ConversionError: converting node 'boom'"),
    "unknown-option": (["my_model.py:build", "--input", "1x3x8x8", "--bogus"],
                       "No such option: --bogus"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_clear_line_and_nonzero_exit(workdir, case):
    torch.save(torch.nn.Linear(1, 1).state_dict(), workdir / "small.pt")
    (workdir / "blocker").write_text("a file, not a directory")
    args, expected = BAD_INPUTS[case]
    before = set(workdir.rglob("*"))
    result = crossport_cli("convert", *args, cwd=workdir)
    assert result.returncode != 0
    assert expected in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1, f"one line on stderr:\n{result.stderr}"
    assert set(workdir.rglob("*")) - before <= {workdir / "__pycache__"} | set(
        (workdir / "__pycache__").rglob("*")), "nothing written"


def test_inputs_of_every_listed_dtype():
    from crossport.cli import _example_args

    args = _example_args(["float16:2x3", "double:2", "uint8:50:256", "int8:40:128", "bool:3"])
    assert [a.dtype for a in args] == [torch.float16, torch.float64, torch.uint8, torch.int8,
                                       torch.bool]
    assert args[2].max() >= 128 and args[3].min() >= 0  # drawn from [0, HIGH)


def test_a_float64_module_converts_from_the_command_line(workdir):
    result = crossport_cli("convert", "my_model.py:double_net", "--input", "float64:2x3x8x8",
                           cwd=workdir)
    assert result.returncode == 0, result.stderr


def test_debug_shows_the_traceback_of_an_internal_error(workdir):
    result = crossport_cli("convert", "my_model.py:converter_crashes", "--input", "2x5",
                           "--debug", cwd=workdir)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "KeyError: 'no such layout'" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("error: ConversionError")


def test_ops_lists_the_table(workdir):
    result = crossport_cli("ops", cwd=workdir)
    assert result.returncode == 0 and "aten.conv2d.default" in result.stdout


def _hashes(folder) -> dict:
    """Every path under ``folder`` with the sha256 of its bytes (None for a folder)."""
    import hashlib

    return {p.relative_to(folder): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file()
            else None for p in folder.rglob("*") if "__pycache__" not in p.parts}


@pytest.fixture
def userdir(tmp_path):
    """A folder the user owns: their model file, a models/ folder, a README."""
    (tmp_path / "my_model.py").write_text(MODEL_FILE)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "keep.bin").write_bytes(bytes(range(256)))
    (tmp_path / "README").write_text("my notes\n")
    (tmp_path / "blocker").write_text("a file, not a directory")
    (tmp_path / "old.keras").write_bytes(b"an earlier model the user keeps")
    return tmp_path


def _error_lines(stderr: str) -> list[str]:
    """crossport's stderr lines: without TensorFlow's native start-up logging (absl, at its
    import) and Python warnings from torch (each a file:line header and an indented line)."""
    noise = r"WARNING: All log messages before absl|[IWE]\d{4} |\S+\.py:\d+: \w*Warning: |  "
    return [line for line in stderr.strip().splitlines() if not re.match(noise, line)]


def _assert_refused(result, expected: str):
    assert result.returncode != 0
    assert expected in result.stderr, result.stderr
    assert len(_error_lines(result.stderr)) == 1, result.stderr


@pytest.mark.parametrize("output,expected", [
    ("models", "is an existing directory"),
    ("README", "already exists"),
    ("old.keras", "already exists"),
])
def test_an_existing_output_is_refused_and_left_byte_identical(userdir, output, expected):
    before = _hashes(userdir)
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8", "-o", output,
                           cwd=userdir)
    _assert_refused(result, expected)
    assert _hashes(userdir) == before


def test_a_failing_second_output_leaves_nothing_and_keeps_the_first(userdir):
    """The .keras is staged and checked, then --emit-source fails: neither lands."""
    before = _hashes(userdir)
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8", "-o",
                           "old.keras", "--overwrite", "--emit-source", "blocker/m.py",
                           cwd=userdir)
    _assert_refused(result, "ExportError")
    assert _hashes(userdir) == before, "the user's files are untouched, nothing new is left"


def test_overwrite_replaces_every_output_together(userdir):
    import keras

    (userdir / "m.py").write_text("# an older generated module\n")
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8", "-o",
                           "old.keras", "--emit-source", "m.py", "--overwrite", cwd=userdir)
    assert result.returncode == 0, result.stderr
    model = keras.models.load_model(userdir / "old.keras")
    assert model.inputs[0].shape == (1, 3, 8, 8)
    assert "def build_model" in (userdir / "m.py").read_text()
    assert (userdir / "m.weights.h5").is_file()
    assert not list(userdir.glob(".crossport-*")), "no staging folders left"
    assert (userdir / "README").read_text() == "my notes\n"
def test_html_naming_the_model_output_is_refused_before_converting(userdir):
    """``-o m.tflite --html m.tflite`` wrote the report over the model file, exit 0."""
    before = _hashes(userdir)
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8", "-o",
                           "m.tflite", "--html", "m.tflite", cwd=userdir)
    _assert_refused(result, "m.tflite would be written twice")
    assert _hashes(userdir) == before


def test_an_existing_html_report_is_kept_unless_overwrite(userdir):
    """--html replaced any existing file without --overwrite."""
    (userdir / "report.html").write_text("the user's page")
    before = _hashes(userdir)
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8", "-o",
                           "m.tflite", "--html", "report.html", cwd=userdir)
    _assert_refused(result, "report.html already exists")
    assert _hashes(userdir) == before
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8", "-o",
                           "m.tflite", "--html", "report.html", "--overwrite", cwd=userdir)
    assert result.returncode == 0, result.stderr
    assert "crossport export report" in (userdir / "report.html").read_text()


def test_an_unwritable_html_path_fails_with_the_model_and_leaves_nothing(userdir):
    """--html was written after -o landed: an unwritable path was an 'internal error' (exit
    2) with the model left behind."""
    before = _hashes(userdir)
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8", "-o",
                           "m.tflite", "--html", "blocker/report.html", cwd=userdir)
    _assert_refused(result, "ExportError: cannot write in blocker")
    assert result.returncode == 1
    assert _hashes(userdir) == before
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8", "-o",
                           "m.tflite", "--html", "reports/new/report.html", cwd=userdir)
    assert result.returncode == 0, result.stderr  # missing folders are made, as for -o
    assert (userdir / "reports" / "new" / "report.html").is_file()
    assert (userdir / "m.tflite").is_file()


def test_convert_full_integer_with_calibration_folder_and_float_layer(workdir):
    import numpy as np

    folder = workdir / "calibration"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        np.save(folder / f"{i:02d}.npy", rng.standard_normal((1, 3, 8, 8)).astype("float32"))
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8", "--json",
                           "-o", "q.tflite", "--format", "tflite-int8-full",
                           "--calibration", str(folder), "--float-layer", "4", cwd=workdir)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["export"]["quantization"]
    assert report["sqnr_db"] >= report["min_sqnr_db"]
    assert report["float_layers"] == ["4"]
    names = [row["name"] for row in report["layers"]]
    assert "0" in names and "4" not in names
    assert (workdir / "q.tflite").exists()


def test_convert_full_integer_calibrated_on_images_with_html_report(workdir):
    import numpy as np
    from PIL import Image

    folder = workdir / "photos"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i, size in enumerate([(12, 12), (20, 9), (9, 30), (8, 8), (16, 16), (40, 20)]):
        coarse = rng.integers(0, 256, (3, 3, 3), dtype=np.uint8)
        Image.fromarray(coarse).resize(size, Image.Resampling.BILINEAR).save(
            folder / f"{i}.{'png' if i % 2 else 'jpg'}")
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8", "--json",
                           "-o", "img.tflite", "--format", "tflite-int8-full",
                           "--calibration", str(folder), "--calibration-mean", "0.5,0.5,0.5",
                           "--calibration-std", "0.25,0.25,0.25", "--html", "img.html",
                           cwd=workdir)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["export"]["quantization"]
    assert report["sqnr_db"] >= report["min_sqnr_db"]
    page = (workdir / "img.html").read_text(encoding="utf-8")
    assert 'id="quantized-layers"' in page and f"<code>{report['layers'][0]['name']}</code>" in page


@pytest.mark.parametrize("flags,match", [
    (["--calibration-mean", "0.5,x"], "--calibration-mean '0.5,x': expected comma-separated"),
    (["--calibration-crop", "224"], "expected HxW"),
    (["--calibration-std", "0.5"], "pass --calibration DIR too"),
])
def test_bad_image_calibration_flags_are_one_line(workdir, flags, match):
    if "pass --calibration" not in match:
        flags = ["--calibration", "photos", *flags]
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8", "-o",
                           "bad_img.tflite", "--format", "tflite-int8-full", *flags, cwd=workdir)
    assert result.returncode != 0 and match in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (workdir / "bad_img.tflite").exists()


def test_an_error_after_quantizing_is_the_only_stderr_line(workdir):
    """The calibrator's 'fully_quantize: 0, ...' and LiteRT's 'INFO: Created TensorFlow Lite
    XNNPACK delegate' (native code, past TF_CPP_MIN_LOG_LEVEL) came before the error line."""
    import numpy as np

    np.savez(workdir / "cal_err.npz",
             x=np.random.default_rng(2).standard_normal((4, 3, 8, 8)).astype("float32"))
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8", "-o",
                           "err.tflite", "--format", "tflite-int8-full", "--calibration",
                           "cal_err.npz", "--float-layer", "nope", cwd=workdir)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        line for line in result.stderr.strip().splitlines() if line.startswith("error: ")]
    assert "no quantized op computes 'nope'" in result.stderr
    assert not (workdir / "err.tflite").exists()


def test_convert_full_integer_with_one_stacked_npz(workdir):
    import numpy as np

    examples = np.random.default_rng(1).standard_normal((5, 3, 8, 8)).astype("float32")
    np.savez(workdir / "cal.npz", input=examples)  # rows are batch-1 examples
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8",
                           "-o", "q16.tflite", "--format", "tflite-int16x8",
                           "--calibration", "cal.npz", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert "output SQNR" in result.stdout


@pytest.mark.parametrize("flags,match", [
    (["--format", "tflite-int8full"], "unknown format 'tflite-int8full'"),
    (["--format", "tflite", "--calibration", "."], "--calibration only apply to the full"),
    (["--format", "tflite-int8-full", "--calibration", "missing/"],
     "--calibration missing: no such file or folder"),
    (["--format", "keras"], "format 'keras' does not fit the .tflite suffix"),
])
def test_export_option_mistakes_are_refused_before_converting(workdir, flags, match):
    """They were found only after the conversion (minutes for a large model): here the
    module does not even convert, and the option error is what the user sees."""
    result = crossport_cli("convert", "my_model.py:unsupported", "--input", "1x3x8x8",
                           "-o", "early.tflite", *flags, cwd=workdir)
    _assert_refused(result, match)
    assert "UnsupportedOpError" not in result.stderr
    assert not (workdir / "early.tflite").exists()


def test_full_integer_without_calibration_is_one_clear_line(workdir):
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8",
                           "-o", "bad.tflite", "--format", "tflite-int8-full", cwd=workdir)
    assert result.returncode != 0 and "needs calibration" in result.stderr
    assert "Traceback" not in result.stderr and not (workdir / "bad.tflite").exists()
