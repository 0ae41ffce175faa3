"""Ctrl-C (a real SIGINT to a real ``crossport`` process): one stderr line, exit 130, no
traceback, and nothing left behind: no output, no staging folder."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

# forward sleeps (so the signal lands there) in the stage named by CROSSPORT_TEST_STAGE:
# "capture" (torch.export's trace) or "export" (the re-check of the staged file), after
# touching CROSSPORT_TEST_MARKER so the test knows the stage has started.
MODEL_FILE = textwrap.dedent("""
    import os, pathlib, time
    import torch

    class Slow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            wanted = os.environ.get("CROSSPORT_TEST_STAGE")
            staged = any(pathlib.Path(".").glob(".crossport-*.partial"))
            if wanted == "capture" or (wanted == "export" and staged):
                pathlib.Path(os.environ["CROSSPORT_TEST_MARKER"]).touch()
                time.sleep(120)
            return self.conv(x).relu()

    def build():
        torch.manual_seed(0)
        return Slow().eval()
""")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli_interrupt")
    (path / "slow_model.py").write_text(MODEL_FILE)
    return path


def _default_sigint() -> None:
    """In the child: SIGINT's default disposition, as in a terminal. A test run started in
    the background (``cmd &``) ignores SIGINT, the child inherits that, and Python then
    installs no KeyboardInterrupt handler: the Ctrl-C would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupted(workdir, stage: str, *flags):
    marker = workdir / f"{stage}.started"
    env = {**os.environ, "CROSSPORT_TEST_STAGE": stage, "CROSSPORT_TEST_MARKER": str(marker)}
    process = subprocess.Popen(
        [sys.executable, "-m", "crossport.cli", "convert", "slow_model.py:build", "--input",
         "1x3x8x8", *flags], cwd=workdir, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    try:
        deadline = time.monotonic() + 500
        while not marker.exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the stage never started"
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        # generous: at a load average of 10 on 2 cores both cases took over 120 s to exit; a
        # SIGINT that was ignored still fails below (the conversion finishes: exit 0)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        process.kill()
    return process.returncode, stderr


def _left_behind(workdir) -> list[str]:
    return sorted(p.name for p in workdir.iterdir()
                  if p.name not in ("slow_model.py", "__pycache__") and
                  not p.name.endswith(".started"))


@pytest.mark.parametrize("stage,flags", [
    ("capture", ["-o", "model.tflite", "--emit-source", "gen/model_keras.py"]),
    ("export", ["-o", "model.tflite", "--emit-source", "gen/model_keras.py", "--html",
                "report.html"]),
])
def test_ctrl_c_is_one_line_exit_130_and_leaves_nothing(workdir, stage, flags):
    code, stderr = _interrupted(workdir, stage, *flags)
    assert code == 130, stderr
    assert stderr.strip().splitlines() == ["crossport: interrupted"], stderr
    assert _left_behind(workdir) == [], "an interrupted command leaves no file or folder"
