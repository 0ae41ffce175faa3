"""Renderers of the parity doctor: JSON, rich table, the HTML page in a real headless
Chromium (table rows and the SVG plot in the rendered DOM, a non-blank screenshot), and the
``crossport check`` command line."""

import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap

import keras
import pytest
import torch
from rich.console import Console

import crossport
from crossport.parity import render

L = keras.layers
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium); the "
                             "HTML report is still checked as text by the other tests")

TORCH_FILE = textwrap.dedent("""
    import torch

    def build():
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                  torch.nn.LeakyReLU(0.01))
        with torch.no_grad():
            net[1].running_var.uniform_(0.05, 0.5)
            net[1].running_mean.uniform_(-0.2, 0.2)
        return net.eval()
""")


def _twin(eps):
    return keras.Sequential([keras.Input((16, 16, 3)), L.Conv2D(8, 3, padding="same"),
                             L.BatchNormalization(epsilon=eps, name="bn"),
                             L.LeakyReLU(negative_slope=0.01)])


def _load_build(directory):
    path = directory / "net_module.py"
    path.write_text(TORCH_FILE)
    spec = importlib.util.spec_from_file_location("net_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    net, twin = _load_build(tmp_path_factory.mktemp("net"))(), _twin(1e-3)
    crossport.transfer_weights(net, twin, verbose=False)
    return crossport.check(net, twin, torch.randn(2, 3, 16, 16))


def test_json_and_table(report, tmp_path):
    data = json.loads(render.to_json(report, tmp_path / "r.json"))
    assert data == json.loads((tmp_path / "r.json").read_text())
    assert not data["passed"] and data["first_divergent"] == 1
    assert data["diagnosis"][0]["name"] == "norm-eps"
    assert [r["keras_name"] for r in data["rows"]][1] == "bn"
    console = Console(record=True, width=200)
    render.print_report(report, console)
    text = console.export_text()
    assert "norm-eps" in text and "first divergent layer" in text and "bn-momentum" in text


def test_html_is_self_contained(report, tmp_path):
    page = render.to_html(report, tmp_path / "r.html")
    assert page.count('class="layer-row') == len(report.rows) == 3
    assert "<svg" in page and "polyline" in page and "norm-eps" in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page and "<script" not in page


def _chromium(*args, tmp_path):
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]
    return subprocess.run(base + list(args), check=False, capture_output=True, text=True, timeout=180)


@needs_chromium
def test_html_renders_in_headless_chromium(report, tmp_path):
    from PIL import Image

    html = tmp_path / "report.html"
    render.to_html(report, html)
    dom = _chromium("--dump-dom", html.as_uri(), tmp_path=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count('class="layer-row') == 3
    assert 'id="error-plot"' in dom.stdout and "<circle" in dom.stdout
    assert "norm-eps" in dom.stdout
    png = tmp_path / "report.png"
    shot = _chromium(f"--screenshot={png}", "--window-size=1200,1600", html.as_uri(),
                     tmp_path=tmp_path)
    assert shot.returncode == 0 and png.is_file(), shot.stderr[-2000:]
    image = Image.open(png).convert("RGB")
    assert image.size == (1200, 1600)
    colors = image.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 20  # text, table, plot: not a blank page
    assert any(r > 180 and g < 80 and b < 80 for _, (r, g, b) in colors)  # the red markers


def test_cli_check(tmp_path):
    (tmp_path / "net.py").write_text(TORCH_FILE)
    for name, eps in (("bad", 1e-3), ("good", 1e-5)):
        _twin(eps).save(tmp_path / f"{name}.keras")
    cmd = [sys.executable, "-m", "crossport.cli", "check", "net.py:build"]
    bad = subprocess.run(cmd + ["bad.keras", "--input", "2x3x16x16", "--transfer-weights",
                                "--html", "r.html", "--json", "r.json"],
                         cwd=tmp_path, check=False, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "norm-eps" in bad.stdout and "first divergent layer" in bad.stdout
    assert json.loads((tmp_path / "r.json").read_text())["diagnosis"][0]["name"] == "norm-eps"
    assert "<svg" in (tmp_path / "r.html").read_text()
    good = subprocess.run(cmd + ["good.keras", "-i", "2x3x16x16", "--transfer-weights"],
                          cwd=tmp_path, check=False, capture_output=True, text=True, timeout=600)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "PASS" in good.stdout
    missing = subprocess.run(cmd + ["nope.keras", "-i", "2x3x16x16"], cwd=tmp_path,
                             check=False, capture_output=True, text=True, timeout=600)
    assert missing.returncode == 1 and "no such Keras model file" in missing.stderr


def test_cli_check_keeps_existing_reports_unless_told(tmp_path):
    """--html/--json follow the other commands' rule: an existing file is refused before
    anything runs, and replaced only with --overwrite."""
    (tmp_path / "net.py").write_text(TORCH_FILE)
    _twin(1e-5).save(tmp_path / "good.keras")
    (tmp_path / "mine.json").write_text("the user's file")
    cmd = [sys.executable, "-m", "crossport.cli", "check", "net.py:build", "good.keras",
           "-i", "2x3x16x16", "--transfer-weights", "--json", "mine.json", "--html", "r.html"]
    refused = subprocess.run(cmd, cwd=tmp_path, check=False, capture_output=True, text=True,
                             timeout=600)
    assert refused.returncode != 0 and "--overwrite" in refused.stderr, refused.stderr
    assert (tmp_path / "mine.json").read_text() == "the user's file"
    assert not (tmp_path / "r.html").exists()
    replaced = subprocess.run(cmd + ["--overwrite"], cwd=tmp_path, check=False,
                              capture_output=True, text=True, timeout=600)
    assert replaced.returncode == 0, replaced.stdout + replaced.stderr
    assert json.loads((tmp_path / "mine.json").read_text())["passed"]
    assert "<svg" in (tmp_path / "r.html").read_text()
