"""``crossport convert --calibration``: bad data and misplaced options fail before the
(minutes-long) conversion, in one stderr line, with nothing written."""

import numpy as np
import pytest

from tests.test_cli import MODEL_FILE, crossport_cli


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli_calibration")
    (path / "my_model.py").write_text(MODEL_FILE)
    folder = path / "npy"
    folder.mkdir()
    for i in range(3):
        np.save(folder / f"{i}.npy", np.zeros((1, 3, 8, 8), np.float32))
    return path


def _refused_before_converting(result, workdir, match: str) -> None:
    """``my_model.py:unsupported`` cannot convert: seeing the calibration error instead of
    the UnsupportedOpError proves it fired before the conversion."""
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and match in lines[0], result.stderr
    assert "UnsupportedOpError" not in result.stderr and "Traceback" not in result.stderr
    assert not (workdir / "q.tflite").exists()


def _convert(workdir, *flags):
    return crossport_cli("convert", "my_model.py:unsupported", "--input", "1x3x8x8", "-o",
                         "q.tflite", "--format", "tflite-int8-full", *flags, cwd=workdir)


@pytest.mark.parametrize("flags", [["--calibration-mean", "0.5,0.5,0.5"],
                                   ["--calibration-std", "0.2", "--calibration-scale", "1"]])
@pytest.mark.parametrize("source", ["npy", "stacked.npz"])
def test_image_preprocessing_with_numpy_examples_is_refused(workdir, flags, source):
    """They applied to images only and were silently ignored for .npy/.npz: a calibration
    on other data than the user asked for."""
    np.savez(workdir / "stacked.npz", x=np.zeros((4, 3, 8, 8), np.float32))
    result = _convert(workdir, "--calibration", source, *flags)
    _refused_before_converting(result, workdir, f"{flags[0]}")
    assert "image preprocessing" in result.stderr and source in result.stderr


def _nan(path):
    bad = np.zeros((4, 3, 8, 8), np.float32)
    bad[2, 0, 1, 1] = np.nan
    np.savez(path, x=bad)


BAD_DATA = {
    "corrupt": (lambda p: p.write_bytes(b"PK\x03\x04 not a zip"),
                "cannot read it as a numpy file"),
    "nan": (_nan, "calibration example 2: input 'x' holds NaN or inf"),
    "shape": (lambda p: np.savez(p, x=np.zeros((4, 3, 9, 9), np.float32)),
              "input 'x' has shape (1, 3, 9, 9), the model expects (1, 3, 8, 8)"),
    "strings": (lambda p: np.savez(p, x=np.full((2, 1, 3, 8, 8), "a")),
                "calibration example 0: input 'x' has dtype <U1; expected numbers"),
    "keys": (lambda p: np.savez(p, a=np.zeros((2, 1, 3, 8, 8)), b=np.zeros(2)),
             "arrays ['a', 'b']; expected one per input, named ['x']"),
}


@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_bad_calibration_data_is_reported_before_converting(workdir, case):
    make, match = BAD_DATA[case]
    make(workdir / f"{case}.npz")
    _refused_before_converting(_convert(workdir, "--calibration", f"{case}.npz"), workdir,
                               match)


def test_calibration_checked_in_the_channels_last_layout(workdir):
    """With --channels-last-io the examples are NHWC: NCHW ones are refused early."""
    result = _convert(workdir, "--calibration", "npy", "--channels-last-io")
    _refused_before_converting(result, workdir,
                               "has shape (1, 3, 8, 8), the model expects (1, 8, 8, 3)")


def test_quantization_options_without_an_output_are_refused(workdir):
    result = crossport_cli("convert", "my_model.py:unsupported", "--input", "1x3x8x8",
                           "--calibration", "npy", cwd=workdir)
    _refused_before_converting(result, workdir, "--calibration apply to the exported file")


def test_checked_calibration_is_the_one_exported_with(workdir):
    """The examples read before converting calibrate the file (read once)."""
    examples = np.random.default_rng(0).standard_normal((6, 3, 8, 8)).astype(np.float32)
    np.savez(workdir / "good.npz", x=examples)
    result = crossport_cli("convert", "my_model.py:build", "--input", "1x3x8x8", "-o",
                           "ok.tflite", "--format", "tflite-int16x8", "--calibration",
                           "good.npz", "--dynamic-batch", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert (workdir / "ok.tflite").is_file()
