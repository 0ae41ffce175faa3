"""``crossport to-torch`` end to end, through a subprocess: the same rules as ``convert``
(one stderr line, bad options refused before converting, outputs staged and committed
together, nothing replaced without --overwrite)."""

import subprocess
import sys
import textwrap

import pytest
import torch

from tests.test_cli import _assert_refused, _hashes, crossport_cli

# Runs the CLI with one crossport function replaced by a raw crash (a crossport bug).
CRASHING_CLI = textwrap.dedent("""
    import sys

    import torch

    import crossport
    import crossport.cli

    def crash(*args, **kwargs):
        raise KeyError("no such layout")

    if sys.argv.pop(1) == "convert":
        crossport.to_torch_with_report = crash
    else:
        torch.export.export = crash
    crossport.cli.main()
""")


@pytest.fixture(scope="module")
def keras_file(tmp_path_factory):
    import keras

    path = tmp_path_factory.mktemp("kmodel") / "small.keras"
    inputs = keras.Input((8, 8, 3))
    keras.Model(inputs, keras.layers.Conv2D(4, 3)(inputs)).save(path)
    return path


@pytest.fixture
def userdir(tmp_path, keras_file):
    """A folder the user owns: the model, an earlier state_dict and source, a folder."""
    (tmp_path / "small.keras").write_bytes(keras_file.read_bytes())
    (tmp_path / "exists.pt").write_bytes(b"an earlier state_dict the user keeps")
    (tmp_path / "keep.py").write_text("# the user's own module\n")
    (tmp_path / "models.pt").mkdir()
    (tmp_path / "blocker").write_text("a file, not a directory")
    (tmp_path / "README").write_text("not a Keras model\n")
    return tmp_path


def to_torch(*args, cwd):
    return crossport_cli("to-torch", *args, cwd=cwd)


@pytest.mark.parametrize("flags", [["-o", "exists.pt"], ["--emit-source", "keep.py"],
                                   ["--emit-source", "exists.py"]])  # its weights: exists.pt
def test_an_existing_output_is_refused_and_left_byte_identical(userdir, flags):
    before = _hashes(userdir)
    result = to_torch("small.keras", "-i", "1x8x8x3", *flags, cwd=userdir)
    _assert_refused(result, "already exists")
    assert "--overwrite" in result.stderr
    assert _hashes(userdir) == before


def test_overwrite_replaces_every_output_together(userdir):
    result = to_torch("small.keras", "-i", "1x8x8x3", "-o", "exists.pt", "--emit-source",
                      "keep.py", "--overwrite", cwd=userdir)
    assert result.returncode == 0, result.stderr
    state = torch.load(userdir / "exists.pt", weights_only=True)
    assert {tuple(v.shape) for v in state.values()} == {(4, 3, 3, 3), (4,)}
    assert "def build_model" in (userdir / "keep.py").read_text()
    assert torch.load(userdir / "keep.pt", weights_only=True).keys() == state.keys()
    assert not list(userdir.glob(".crossport-*")), "no staging folders left"


def test_a_failing_second_output_leaves_nothing(userdir):
    """-o is written and re-checked in staging, then --emit-source fails: neither lands."""
    before = _hashes(userdir)
    result = to_torch("small.keras", "-i", "1x8x8x3", "-o", "left.pt2", "--emit-source",
                      "blocker/m.py", cwd=userdir)
    _assert_refused(result, "ExportError: cannot write in blocker")
    assert _hashes(userdir) == before, "nothing new is left"


def test_both_outputs_land_in_new_folders_as_convert_makes_them(userdir):
    result = to_torch("small.keras", "-i", "1x8x8x3", "-o", "out/m.pt2", "--emit-source",
                      "src/sub/m.py", "--json", cwd=userdir)
    assert result.returncode == 0, result.stderr
    assert (userdir / "out" / "m.pt2").is_file()
    assert {p.name for p in (userdir / "src" / "sub").iterdir()} == {"m.py", "m.pt"}


# A README as the model: each refusal must come before Keras tries to load it.
BAD_OPTIONS = {
    "output-suffix": (["-o", "out.onnx"], "-o out.onnx: expected a .pt2"),
    "output-is-a-folder": (["-o", "models.pt"], "models.pt is an existing directory"),
    "source-suffix": (["--emit-source", "m.txt"], "must be a .py file"),
    "same-weights-file": (["-o", "m.pt", "--emit-source", "m.py"], "m.pt would be written twice"),
    "negative-atol": (["--atol", "-1"], "InputError: option atol=-1.0"),
    "nan-atol": (["--atol", "nan"], "InputError: option atol=nan"),
    "zero-dim": (["-i", "0x8x8x3"], "InputError: example_args[0] has shape (0, 8, 8, 3)"),
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_options_are_refused_in_one_line_before_converting(userdir, case):
    flags, expected = BAD_OPTIONS[case]
    inputs = [] if "-i" in flags else ["-i", "1x8x8x3"]
    before = _hashes(userdir)
    result = to_torch("README", *inputs, *flags, cwd=userdir)
    _assert_refused(result, expected)
    assert "Keras could not load" not in result.stderr
    assert _hashes(userdir) == before


@pytest.mark.parametrize("where,expected", [
    ("convert", "converting small.keras failed: KeyError: 'no such layout' (rerun with --debug"),
    ("write", "ExportError: writing m.pt2 failed: KeyError: 'no such layout'"),
])
def test_an_unexpected_exception_is_one_line_naming_the_step(userdir, where, expected):
    (userdir / "crashing_cli.py").write_text(CRASHING_CLI)
    before = _hashes(userdir)
    result = subprocess.run([sys.executable, "crashing_cli.py", where, "to-torch",
                             "small.keras", "-i", "1x8x8x3", "-o", "m.pt2"], cwd=userdir,
                            capture_output=True, text=True, timeout=600)
    _assert_refused(result, expected)
    assert _hashes(userdir) == before


def test_debug_shows_the_traceback_of_a_crash(userdir):
    (userdir / "crashing_cli.py").write_text(CRASHING_CLI)
    result = subprocess.run([sys.executable, "crashing_cli.py", "convert", "--debug",
                             "to-torch", "small.keras", "-i", "1x8x8x3"], cwd=userdir,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "KeyError: 'no such layout'" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("error: converting small.keras failed")
