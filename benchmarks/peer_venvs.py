"""Virtualenvs for the peer converters (litert-torch, nobuco), created by the benchmark.

The peers are never crossport dependencies: each gets its own venv under
``benchmarks/.venvs/<peer>`` (git-ignored; ``--venv-dir`` elsewhere), made once and reused
while its ``installed.json`` stamp matches the recipe below. torch is installed first and
pinned with a constraints file, so a peer's requirements can never swap it for another
(CUDA) build; torchvision goes in with ``--no-deps`` (its wheel is built against CUDA
torch; ``peer_worker.load_torchvision`` imports it on the CPU build).

    .venv/bin/python benchmarks/peer_venvs.py                 # create both, print their pythons
    .venv/bin/python benchmarks/peer_venvs.py --venv-dir /tmp/peer-venvs litert-torch
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DIR = HERE / ".venvs"
TORCH = "torch==2.13.0"  # this machine's index resolves it to the local CPU build
TORCHVISION = "torchvision==0.28.0"

HF_AND_TIMM = ["timm==1.0.31", "transformers==5.23.0", "tokenizers==0.23.3",
               "huggingface_hub==2.4.0", "safetensors==0.8.0", "regex==2026.11.15",
               "hf-xet==1.8.0", "PyYAML==6.0.3", "httpx2==2.16.2", "httpcore2==2.16.2",
               "anyio==4.14.2", "h11==0.16.0", "truststore==0.10.5", "click==8.5.1",
               "typer==0.29.2", "shellingham==1.5.4"]

# peer -> pip install steps after torch (each a list of pip arguments), and the module to import
RECIPES: dict[str, dict] = {
    "litert-torch": {
        # timm for tflite_files.py's timm models (transformers comes with litert-torch)
        "steps": [["litert-torch==0.10.0"], ["--no-deps", "timm==1.0.31"]],
        "import": "litert_torch",
    },
    "nobuco": {
        # nobuco 0.17 (its latest) imports keras.src.engine, i.e. Keras 2: TF 2.21 ships
        # Keras 3 and fails at `import nobuco`, so this venv has TF 2.15, the last with
        # Keras 2 built in (tensorflow-cpu keeps CUDA wheels out)
        "steps": [["tensorflow-cpu==2.15.1"], ["nobuco==0.17.0"],
                  # tf_graph_gap.py's timm and HF models: their packages and the pure-Python
                  # deps they import (no-deps keeps torch and TF as they are)
                  ["--no-deps", *HF_AND_TIMM]],
        "import": "nobuco",
    },
}


def python_of(venv_dir: Path) -> Path:
    return venv_dir / "bin" / "python"


def _pip(python: Path, args: list[str], log) -> None:
    cmd = [str(python), "-m", "pip", "install", "--quiet", *args]
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)


def _stamp(peer: str) -> dict:
    return {"torch": TORCH, "torchvision": TORCHVISION, **RECIPES[peer]}


def ensure_venv(peer: str, root: Path = DEFAULT_DIR) -> Path:
    """The python of ``peer``'s venv, creating and installing it on first use.

    Raises ``subprocess.CalledProcessError`` if an install step fails (the log is in
    ``<venv>/install.log``) and ``RuntimeError`` if torch ended up a CUDA build. A lock file
    keeps concurrent benchmark runs from building the same venv twice.
    """
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{peer}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_venv_locked(peer, root)


def _ensure_venv_locked(peer: str, root: Path) -> Path:
    target = root / peer
    stamp_path = target / "installed.json"
    if stamp_path.exists() and json.loads(stamp_path.read_text()).get("recipe") == _stamp(peer):
        return python_of(target)
    print(f"creating the {peer} venv in {target} (one-time, a few minutes)", flush=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(target)
    python = python_of(target)
    constraints = target / "constraints.txt"
    constraints.write_text(TORCH + "\n")
    with open(target / "install.log", "w") as log:
        _pip(python, [TORCH], log)
        _pip(python, ["--no-deps", TORCHVISION, "pillow"], log)
        for step in RECIPES[peer]["steps"]:
            _pip(python, ["-c", str(constraints), *step], log)
    # nobuco imports torchvision: the CPU-torch workaround of common.load_torchvision first
    check = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import common; "
             "common.load_torchvision(); import json, torch, importlib.metadata as md; "
             f"import {RECIPES[peer]['import']}; "
             "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
             f"'{peer}': md.version('{peer}')}}))")
    info = json.loads(subprocess.run([str(python), "-c", check], check=True, text=True,
                                     capture_output=True).stdout.strip().splitlines()[-1])
    if info["cuda"] is not None:
        raise RuntimeError(f"{peer} venv got a CUDA torch ({info['torch']}); see {target}")
    stamp_path.write_text(json.dumps({"recipe": _stamp(peer), "versions": info}, indent=1))
    return python


def versions(peer: str, root: Path = DEFAULT_DIR) -> dict:
    """Installed versions recorded when the venv was made (empty if it was not)."""
    stamp = root / peer / "installed.json"
    return json.loads(stamp.read_text()).get("versions", {}) if stamp.exists() else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peers", nargs="*", help=f"any of {list(RECIPES)} (default: all)")
    parser.add_argument("--venv-dir", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args()
    if unknown := set(args.peers) - set(RECIPES):
        parser.error(f"unknown peer(s) {sorted(unknown)}; choose from {list(RECIPES)}")
    for peer in args.peers or list(RECIPES):
        print(peer, ensure_venv(peer, args.venv_dir), versions(peer, args.venv_dir))


if __name__ == "__main__":
    sys.exit(main())
