"""What a deployment needs: converted in this process, loaded in a fresh one.

A ``.keras`` file with crossport's layers loads after ``import crossport`` alone (no
``custom_objects``, no conversion in that process). SavedModel and TFLite need TensorFlow /
a TFLite runtime only: the fresh process loads them with crossport made unimportable.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import torch

import crossport
from tests.harness import random_inputs

LOADER = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    out = sys.argv[1]
    x = np.load(os.path.join(out, "x.npy"))
    outputs = {}
    sys.modules["crossport"] = None  # SavedModel and TFLite must load without crossport
    import tensorflow as tf
    loaded = tf.saved_model.load(os.path.join(out, "saved"))
    outputs["saved_model"] = np.asarray(loaded.serve(x))
    from ai_edge_litert.interpreter import Interpreter
    runner = Interpreter(model_path=os.path.join(out, "m.tflite")).get_signature_runner()
    outputs["tflite"] = np.asarray(next(iter(runner(x=x).values())))
    del sys.modules["crossport"]
    import keras
    import crossport  # registers the layers: the one thing a .keras deployment needs
    model = keras.models.load_model(os.path.join(out, "m.keras"))
    outputs["keras"] = np.asarray(model(x))
    print(json.dumps({k: v.tolist() for k, v in outputs.items()}))
""")


class UsesCustomLayers(torch.nn.Module):
    """count_include_pad avg pool and torch-nearest resize: crossport layers."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.pool = torch.nn.AvgPool2d(3, 2, padding=1)
        self.norm = torch.nn.GroupNorm(2, 4)
        self.shift = torch.nn.Parameter(torch.randn(4, 1, 1))

    def forward(self, x):
        y = self.norm(self.pool(self.conv(x))) + self.shift
        return torch.nn.functional.interpolate(y, size=(7, 5), mode="nearest")


def test_every_format_loads_in_a_fresh_process(tmp_path):
    x = random_inputs((1, 3, 13, 11))
    conversion = crossport.convert_with_report(UsesCustomLayers().eval(), x)
    custom = {type(layer).__name__ for layer in conversion.model.layers
              if type(layer).__module__.startswith("crossport.layers")}
    assert len(custom) >= 2, f"the model should use several crossport layers, has {custom}"
    for name in ("m.keras", "saved", "m.tflite"):
        crossport.export(conversion, tmp_path / name)
    np.save(tmp_path / "x.npy", x[0].numpy())
    env = {**os.environ, "PYTHONPATH": str(Path(crossport.__file__).parents[1])}
    result = subprocess.run([sys.executable, "-c", LOADER, str(tmp_path)], capture_output=True,
                            text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = json.loads(result.stdout.strip().splitlines()[-1])
    with torch.no_grad():
        expected = conversion.module(*x).numpy()
    for fmt, got in outputs.items():
        np.testing.assert_allclose(np.asarray(got), expected, atol=1e-4, err_msg=fmt)
