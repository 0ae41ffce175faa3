"""Every crossport layer a conversion writes survives ``.keras`` save and load.

``keras.models.load_model`` rebuilds each layer from ``get_config()`` by its registered
name: a layer class that is not registered cannot be loaded at all, and an argument
``get_config`` leaves out is silently rebuilt with its default (a different model). The
table converts real torch modules that use the converter's own layers; the ``.keras``
files are re-loaded in a fresh process after ``import crossport`` alone, the SavedModels
with crossport unimportable.
"""

import importlib
import inspect
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import crossport
import crossport.layers
from tests.ops.test_conv import Modulated
from tests.ops.test_recurrent import Packed


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _positive(*shape):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(0)) + 0.5


def _permutations(rows, n):
    gen = torch.Generator().manual_seed(1)
    return torch.stack([torch.randperm(n, generator=gen) for _ in range(rows)])


def _dynamic_seq(x):
    return (F.pad(x, (0, 1)), x[:, 1:x.shape[1] - 1], x.reshape(x.shape[0], -1, 2),
            torch.arange(x.shape[1]), x.new_full((x.shape[1],), 2.0),
            torch.topk(x, x.shape[1] // 2).values)


class ModulatedPair(torch.nn.Module):
    """StyleGAN2's modulated conv and modulated upsampling conv on one input."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.up = Modulated(), Modulated(transposed=True)

    def forward(self, x, style):
        return self.conv(x, style), self.up(x, style)


# name -> (module, example args, convert options)
ROWS = {
    "scatter_dynamic": (Fn(lambda x, i: torch.zeros_like(x).scatter(1, i, x)),
                        (_positive(2, 5), _permutations(2, 5)), {"dynamic_batch": True}),
    "polynomial": (Fn(lambda x, n: torch.special.laguerre_polynomial_l(x, n)),
                   (_positive(2, 5), torch.full((2, 5), 3.0)), {}),
    "special": (Fn(lambda x: torch.special.i1(x) + torch.lgamma(x) + torch.digamma(x)
                   + torch.erf(x)), (_positive(2, 5),), {}),
    "matrix_exp": (Fn(lambda a: torch.linalg.matrix_exp(0.1 * a)), (_positive(2, 3, 3),), {}),
    "scatter_reduce": (Fn(lambda x, i, s: x.scatter_reduce(0, i, s, "amax",
                                                          include_self=False)),
                       (_positive(4), torch.tensor([0, 0, 2, 3, 3]), _positive(5)), {}),
    "embedding_bag": (torch.nn.EmbeddingBag(7, 3, mode="max", padding_idx=4),
                      (torch.tensor([1, 2, 4, 5, 4, 3]), torch.tensor([0, 2, 4])),
                      {"check_inputs": 0}),  # random offsets are not valid bags
    "dynamic_seq": (Fn(_dynamic_seq), (torch.randn(2, 6),), {"dynamic_dims": {0: {1: "L"}}}),
    "causal_attention": (Fn(lambda q: F.scaled_dot_product_attention(q, q, q, is_causal=True)),
                         (torch.randn(1, 2, 4, 8),), {"dynamic_dims": {0: {2: "L"}}}),
    "index_put": (Fn(lambda x, i: x.index_put((i,), torch.ones(i.shape[0], x.shape[1]),
                                              accumulate=True)),
                  (torch.randn(5, 3), torch.tensor([0, 2, 2])), {"dynamic_dims": {1: {0: "K"}}}),
    "packed_projected_lstm": (Packed(torch.nn.LSTM(4, 6, proj_size=3, batch_first=True,
                                                   bidirectional=True)),
                              (torch.randn(3, 5, 4), torch.tensor([5, 2, 4])), {}),
    "modulated_convs": (ModulatedPair(), (torch.randn(2, 4, 5, 6), torch.randn(2, 5)), {}),
    "vision": (torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"),
        torch.nn.AvgPool2d(3, 2, 1), torch.nn.GroupNorm(2, 4), torch.nn.GELU(approximate="tanh"),
        torch.nn.Upsample(scale_factor=1.5, mode="bilinear"), torch.nn.LayerNorm(6)),
        (torch.randn(1, 3, 8, 8),), {}),
}

LOADER = textwrap.dedent("""
    import os, sys
    import numpy as np
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    folder, names = sys.argv[1], sys.argv[2:]
    inputs = {n: np.load(os.path.join(folder, n + ".in.npz")) for n in names}
    inputs = {n: [a[k] for k in sorted(a, key=int)] for n, a in inputs.items()}
    sys.modules["crossport"] = None  # a SavedModel must load without crossport
    import tensorflow as tf
    import keras
    for name in names:
        loaded = tf.saved_model.load(os.path.join(folder, name + ".saved"))
        args = inputs[name] if len(inputs[name]) > 1 else inputs[name][0]
        np.savez(os.path.join(folder, name + ".saved.npz"),
                 *[np.asarray(o) for o in keras.tree.flatten(loaded.serve(args))])
    del sys.modules["crossport"]
    import crossport  # registers crossport's layers: all a .keras deployment needs
    for name in names:
        model = keras.models.load_model(os.path.join(folder, name + ".keras"))
        np.savez(os.path.join(folder, name + ".keras.npz"),
                 *[keras.ops.convert_to_numpy(o) for o in keras.tree.flatten(model(inputs[name]))])
""")


def _crossport_layer_classes() -> dict:
    """Every public Keras layer class defined in a ``crossport.layers`` module (``base``
    holds the abstract base of the spatial layers)."""
    classes = {}
    for info in pkgutil.iter_modules(crossport.layers.__path__):
        if info.name == "base":
            continue
        module = importlib.import_module(f"crossport.layers.{info.name}")
        for name, cls in vars(module).items():
            if (inspect.isclass(cls) and issubclass(cls, keras.layers.Layer)
                    and cls.__module__ == module.__name__ and not name.startswith("_")):
                classes[name] = cls
    return classes


def test_every_crossport_layer_class_is_registered():
    unregistered = [name for name, cls in _crossport_layer_classes().items()
                    if keras.saving.get_registered_object(f"crossport>{name}") is not cls]
    assert not unregistered, f"a .keras file using these cannot be loaded: {unregistered}"


def _plain_attributes(layer) -> dict:
    return {k: v for k, v in vars(layer).items() if not k.startswith("_") and k != "built"
            and isinstance(v, (bool, int, float, str, tuple, list, type(None)))}


@pytest.fixture(scope="module")
def conversions():
    return {name: crossport.convert_with_report(module.eval(), args, **options)
            for name, (module, args, options) in ROWS.items()}


def _crossport_layers(model) -> list:
    return [layer for layer in model.layers if type(layer).__module__.startswith("crossport")]


def test_from_config_keeps_every_argument(conversions):
    for name, conversion in conversions.items():
        for layer in _crossport_layers(conversion.model):
            rebuilt = type(layer).from_config(layer.get_config())
            assert _plain_attributes(rebuilt) == _plain_attributes(layer), (name, layer.name)


def test_table_uses_the_converters_layers(conversions):
    used = {type(layer).__name__ for c in conversions.values()
            for layer in _crossport_layers(c.model)}
    expected = {"DynamicScatter", "OrthogonalPolynomial", "TFSpecialFunction", "LogGamma",
                "Digamma", "Erf", "MatrixExponential", "ScatterReduce", "BagReduce", "SizeOf",
                "DynamicSlice", "DynamicReshape", "DynamicRange", "DynamicFull", "DynamicTopK",
                "CausalBias", "DynamicIndexPut", "Pad", "AvgPool2d", "GroupNorm", "GELU",
                "Interpolate", "StableLayerNormalization", "SequenceMask", "ProjectedLSTM",
                "FunctionalConv", "FunctionalConvTranspose"}
    assert expected <= used, f"rows no longer produce {expected - used}"


def test_keras_and_saved_model_reload_in_a_fresh_process(conversions, tmp_path):
    for name, conversion in conversions.items():
        for suffix in (".keras", ".saved"):
            crossport.export(conversion, tmp_path / f"{name}{suffix}",
                             None if suffix == ".keras" else "saved_model",
                             check_inputs=conversion.options.check_inputs)
        args = ROWS[name][1]
        np.savez(tmp_path / f"{name}.in.npz", **{str(i): a.numpy() for i, a in enumerate(args)})
    env = {**os.environ, "PYTHONPATH": str(Path(crossport.__file__).parents[1])}
    result = subprocess.run([sys.executable, "-c", LOADER, str(tmp_path), *ROWS],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    for name, conversion in conversions.items():
        args = [a.numpy() for a in ROWS[name][1]]
        expected = keras.tree.flatten(conversion.model(args))
        for fmt in ("keras", "saved"):
            got = np.load(tmp_path / f"{name}.{fmt}.npz")
            assert len(got) == len(expected), (name, fmt)
            for i, want in enumerate(expected):
                want = keras.ops.convert_to_numpy(want)
                if fmt == "keras":  # the same layers, eager: bit-equal
                    np.testing.assert_array_equal(got[f"arr_{i}"], want, err_msg=name)
                else:  # a traced graph, which TF fuses and rounds differently (up to 1e-6
                    # measured, rows "special" and "vision"): the conversion's tolerance
                    np.testing.assert_allclose(got[f"arr_{i}"], want, rtol=0,
                                               atol=conversion.options.atol,
                                               err_msg=f"{name} saved")
