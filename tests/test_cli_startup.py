"""``crossport --help`` and usage errors answer without importing torch, TensorFlow, Keras or
crossport's converters (they took seconds to import before argument parsing); a command
that runs loads them first (crossport/cli.py ``_Command``).

Both ways of starting the command run in a subprocess: ``python -m crossport.cli`` and a copy
of the console script pip writes for ``crossport = "crossport.cli:main"``. A sitecustomize
module on the subprocess' path writes ``sys.modules`` to a file when it exits (``-X
importtime`` misses modules imported by importlib.import_module or with stderr silenced).
"""

import json
import os
import subprocess
import sys

import pytest
import typer

# pip's console-script template (pip/_internal/operations/install/wheel.py) for the entry point
CONSOLE_SCRIPT = """\
import re
import sys
from crossport.cli import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""
MODULES_AT_EXIT = """\
import atexit, json, os, sys

def _write_modules():
    with open(os.environ["CROSSPORT_TEST_MODULES"], "w") as file:
        json.dump(sorted(sys.modules), file)

atexit.register(_write_modules)
"""
# what parsing and help may import of crossport: no converter, no framework
PARSING_MODULES = {"crossport", "crossport.cli", "crossport.cli_check", "crossport.cli_generate",
                   "crossport.cli_interrupt", "crossport.cli_to_torch", "crossport.compat",
                   "crossport.errors"}
FRAMEWORKS = ("torch", "tensorflow", "keras")

HELP = [[], ["--help"], ["convert", "--help"], ["check", "--help"], ["to-torch", "--help"],
        ["generate-export", "--help"], ["demo", "--help"], ["ops", "--help"],
        ["--debug", "convert", "--help"]]
USAGE_ERRORS = {  # arguments -> what the one stderr line says
    "no-such-command": (["bogus"], "No such command 'bogus'"),
    "missing-argument": (["convert"], "Missing argument 'target'"),
    "unknown-option": (["convert", "m.py:build", "--bogus"], "No such option: --bogus"),
    "bad-option-value": (["check", "m.py:build", "m.keras", "--atol", "x"],
                         "Invalid value for '--atol'"),
}


@pytest.fixture(scope="module", params=["-m", "console-script"])
def start(request, tmp_path_factory):
    """How to start ``crossport``: the command line and the environment."""
    folder = tmp_path_factory.mktemp("start")
    (folder / "sitecustomize.py").write_text(MODULES_AT_EXIT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ["PYTHONPATH"]])}
    if request.param == "-m":
        return [sys.executable, "-m", "crossport.cli"], env
    (folder / "crossport").write_text(CONSOLE_SCRIPT)
    return [sys.executable, str(folder / "crossport")], env


def _run(start, args, tmp_path):
    """(exit code, stderr lines, modules imported)."""
    command, env = start
    modules = tmp_path / "modules.json"
    result = subprocess.run([*command, *args], cwd=tmp_path, capture_output=True, text=True,
                            env={**env, "CROSSPORT_TEST_MODULES": str(modules)}, timeout=300)
    imported = set(json.loads(modules.read_text()))
    assert "crossport.errors" in imported
    return result.returncode, result.stderr.splitlines(), imported


def _heavy(imported: set[str]) -> list[str]:
    return sorted(name for name in imported
                  if name.split(".")[0] in FRAMEWORKS
                  or name.startswith("crossport") and name not in PARSING_MODULES)


@pytest.mark.parametrize("args", HELP, ids=lambda a: " ".join(a) or "no-arguments")
def test_help_imports_no_framework(start, args, tmp_path):
    code, stderr, imported = _run(start, args, tmp_path)
    assert code == 0 and stderr == []
    assert _heavy(imported) == []


@pytest.mark.parametrize("case", sorted(USAGE_ERRORS))
def test_a_usage_error_is_one_line_without_importing_a_framework(start, case, tmp_path):
    args, expected = USAGE_ERRORS[case]
    code, stderr, imported = _run(start, args, tmp_path)
    assert code == 2
    assert len(stderr) == 1 and stderr[0].startswith("error: ") and expected in stderr[0], stderr
    assert _heavy(imported) == []


def test_a_command_that_runs_loads_crossport_first(start, tmp_path):
    """``ops`` imports only crossport.to_keras.optable itself: the API (and the registered
    Keras layers) come from _Command, as they came from ``import crossport`` before."""
    code, stderr, imported = _run(start, ["ops"], tmp_path)
    assert code == 0 and stderr == []
    assert {"torch", "tensorflow", "keras", "crossport.layers", "crossport.api"} <= imported


def test_every_command_is_a_command_that_prepares_its_run():
    from crossport import cli

    commands = typer.main.get_command(cli.app).commands
    assert set(commands) == {"check", "convert", "demo", "generate-export", "ops", "to-torch"}
    assert all(isinstance(command, cli._Command) for command in commands.values())


def test_import_crossport_elsewhere_still_imports_the_api(tmp_path):
    """Outside the command ``import crossport`` registers the Keras layers as before (a
    .keras file then loads: tests/export/test_fresh_load.py)."""
    probe = ("import sys, crossport, keras; "
             "print('crossport.layers' in sys.modules, crossport.convert.__module__, "
             "keras.saving.get_registered_object('crossport>Conv2d') is not None)")
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.stdout.split() == ["True", "crossport.api", "True"], result.stderr
