"""A converted module runs where TensorFlow and Keras cannot be imported.

The conversion happens here; a fresh process with an import hook refusing keras/tensorflow
then loads the pickled module, the generated source (+ state_dict) and ``crossport.
torch_layers``, runs them, and its outputs must equal this process's torch outputs (which
the conversion already proved equal to Keras').
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import torch

import crossport
from crossport.parity.accept import float64_evidence
from tests.to_torch.harness import make_live, random_inputs

L = keras.layers

RUNNER = textwrap.dedent("""
    import json, sys

    class RefuseKerasAndTF:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("keras", "tensorflow", "tf_keras"):
                raise ImportError(f"{name} is blocked in this process")
            return None

    sys.meta_path.insert(0, RefuseKerasAndTF())
    import importlib.util
    import torch
    import crossport.torch_layers  # noqa: F401  (must import without keras)
    out = sys.argv[1]
    x = torch.load(f"{out}/x.pt")
    pickled = torch.load(f"{out}/module.pt", weights_only=False)
    spec = importlib.util.spec_from_file_location("model_torch", f"{out}/model_torch.py")
    written = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(written)
    with torch.no_grad():
        results = {"pickled": pickled(x).tolist(), "source": written.build_model()(x).tolist()}
    blocked = [m for m in sys.modules if m.split(".")[0] in ("keras", "tensorflow")]
    print(json.dumps({"results": results, "imported": blocked}))
""")


def _model() -> keras.Model:
    """Layers that convert to crossport modules (augmentations, TF-SAME conv, Normalization, a
    Keras GRU) and Keras activations torch has no function for (the pickled module must hold
    no lambda)."""
    inp = keras.Input((9, 9, 3))
    x = L.RandomRotation(0.1)(L.RandomFlip()(inp))  # to_torch.augment's modules
    x = L.Normalization(mean=[0.1, 0.2, 0.3], variance=[1.0, 2.0, 3.0])(x)
    x = L.Conv2D(4, 3, 2, padding="same", activation="relu")(x)
    x = L.DepthwiseConv2D(3, 2, padding="same")(x)  # activation "linear"
    x = L.AveragePooling2D(3, 1, padding="same")(x)
    x = L.Reshape((9, 4))(x)
    x = L.GRU(3, reset_after=False)(x)
    x = L.Dense(4, activation="mish")(x)
    x = L.Dense(4, activation="hard_swish")(x)
    x = L.Activation("softmax")(x)
    return keras.Model(inp, L.Dense(2, activation="leaky_relu")(x))


def _audio_model() -> keras.Model:
    """The audio front ends (to_torch.spectral's modules: buffers and Keras' kernels)."""
    inp = keras.Input((1000,))
    mel = L.GlobalAveragePooling1D()(L.MelSpectrogram(256, 64, num_mel_bins=16)(inp))
    stft = L.STFTSpectrogram(frame_length=64, window=np.hanning(64), padding="same")
    spec = L.GlobalAveragePooling1D()(stft(L.Reshape((1000, 1))(inp)))
    pair = keras.ops.stft(inp, 100, 25, 128, window="hamming")
    restored = keras.ops.istft(pair, 100, 25, 128, window="hamming")
    frames = keras.ops.mean(keras.ops.extract_sequences(restored, 50, 25), axis=1)
    return keras.Model(inp, L.Dense(2)(mel) + L.Dense(2)(spec) + L.Dense(2)(frames))


def _assert_runs_without_keras(model: keras.Model, tmp_path: Path, exact: bool = True) -> None:
    """``exact=False``: outputs that differ are judged by crossport's rounding rule (distance
    from torch float64 against this process's float32 distance), not by a fixed tolerance."""
    args = random_inputs(model, 2, 0)
    conv = crossport.to_torch_with_report(model, args)
    module_types = {type(m).__module__ for m in conv.module.modules()}
    assert any(t.startswith("crossport.") for t in module_types)  # crossport code is needed
    crossport.to_torch_source(conv, tmp_path / "model_torch.py")
    torch.save(conv.module, tmp_path / "module.pt")
    torch.save(args[0], tmp_path / "x.pt")
    env = {**os.environ, "PYTHONPATH": str(Path(crossport.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-c", RUNNER, str(tmp_path)], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["imported"] == []
    with torch.no_grad():
        want = conv.module(*args).numpy()
    for name, got in report["results"].items():
        got = np.asarray(got, dtype=np.float32)
        if exact or np.array_equal(got, want):
            np.testing.assert_array_equal(got, want, err_msg=name)
            continue
        evidence = float64_evidence(conv.module, args, [want], [got])
        assert evidence is not None and evidence.verdict == "rounding", (name, evidence)


def test_converted_module_runs_without_keras(tmp_path: Path):
    _assert_runs_without_keras(make_live(_model()), tmp_path)


def test_converted_audio_front_ends_run_without_keras(tmp_path: Path):
    # the mel filterbank's 129-long sgemm rounds differently in another process (MKL's results
    # depend on buffer alignment; CI saw 14 ulps after the power spectrum's cancellation), so
    # a difference is judged against torch float64, as the check judges Keras
    _assert_runs_without_keras(make_live(_audio_model()), tmp_path, exact=False)
