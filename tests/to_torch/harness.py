"""The one harness of the Keras -> PyTorch op tables.

``assert_to_torch`` builds nothing itself: give it a real Keras model (``chain`` builds a
functional model from layers). It makes every weight live (zero/one-initialised biases, BN
statistics and gammas randomised so no layer is an identity), converts with
``crossport.to_torch_with_report`` (its own check included), then independently runs Keras
(TF backend) and the torch module on seeded random inputs and compares structure, shape,
dtype and values, and checks that the converted module needs no keras at run time.
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import torch

import crossport


def load_written(path):
    """The Python module ``crossport.to_torch_source`` wrote at ``path``, imported."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    written = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(written)
    return written


def reloaded(conv, source_path):
    """``conv.module`` back from a pickle, and the module ``to_torch_source`` writes at
    ``source_path``, imported: the two ways a converted module leaves the process."""
    import io

    buffer = io.BytesIO()
    torch.save(conv.module, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    return loaded, load_written(crossport.to_torch_source(conv, source_path))


def chain(input_shape, *layers, dtype="float32") -> keras.Model:
    """A functional model applying ``layers`` in order to one input of ``input_shape``."""
    inp = keras.Input(input_shape, dtype=dtype)
    x = inp
    for layer in layers:
        x = layer(x)
    return keras.Model(inp, x)


def make_live(model: keras.Model, seed: int = 0) -> keras.Model:
    """Randomise constant-initialised weights (biases, BN stats, gammas), pitfalls of parity.md."""
    rng = np.random.default_rng(seed)
    for var in model.weights:
        value = np.asarray(var.numpy())
        if not np.issubdtype(value.dtype, np.floating) or value.size == 0:
            continue
        if value.size > 1 and np.ptp(value) > 0:
            continue  # already random (kernels)
        name = var.path.lower()
        if any(k in name for k in ("variance", "gamma", "scale")):
            new = rng.uniform(0.5, 1.5, value.shape)
        else:
            new = rng.normal(0.0, 0.5, value.shape)
        var.assign(new.astype(value.dtype))
    return model


def random_inputs(model: keras.Model, batch: int, seed: int, int_high: int = 10,
                  channels_first: bool = False) -> tuple:
    rng = np.random.default_rng(seed)
    out = []
    for tensor in model.inputs:
        shape = (batch, *tensor.shape[1:])
        if "int" in str(tensor.dtype):
            a = rng.integers(0, int_high, shape).astype("int64")
        else:
            a = rng.standard_normal(shape).astype("float32")
        if channels_first and a.ndim >= 3:
            a = np.moveaxis(a, -1, 1).copy()
        out.append(torch.from_numpy(a))
    return tuple(out)


def _keras_out(model, args, channels_first):
    arrays = [a.numpy() for a in args]
    if channels_first:
        arrays = [np.moveaxis(a, 1, -1) if a.ndim >= 3 else a for a in arrays]
    if isinstance(model._inputs_struct, dict):  # a dict of inputs, in Keras' flatten order
        out = model(keras.tree.pack_sequence_as(model._inputs_struct, arrays), training=False)
    else:
        out = model(arrays if len(arrays) > 1 else arrays[0], training=False)
    return [np.asarray(o) for o in keras.tree.flatten(out)]


def _framework_names(code: str) -> set[str]:
    """Names in the module's generated code that reach Keras or TensorFlow (a run-time
    check's message may mention ``keras.ops.pad``: text, not a dependency)."""
    import ast

    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
    return {n for n in names if n.split(".")[0] in ("keras", "tensorflow", "tf")}


def assert_to_torch(model: keras.Model, *, batch: int = 2, atol: float = 1e-4,
                    max_permutes: int | None = None, channels_first_io: bool = False,
                    int_high: int = 10, live: bool = True, export: bool = False):
    """Convert ``model`` and prove the torch module computes what Keras computes."""
    if live:
        make_live(model)
    example = random_inputs(model, batch, 0, int_high, channels_first_io)
    conv = crossport.to_torch_with_report(model, example, channels_first_io=channels_first_io,
                                          atol=atol)
    module = conv.module
    assert isinstance(module, torch.nn.Module)
    assert not _framework_names(module.code), _framework_names(module.code)
    for seed in (11, 12):
        args = random_inputs(model, batch, seed, int_high, channels_first_io)
        ref = _keras_out(model, args, channels_first_io)
        with torch.no_grad():
            got = [t.numpy() for t in keras.tree.flatten(module(*args))]
        if channels_first_io:
            got = [np.moveaxis(g, 1, -1) if g.ndim >= 3 else g for g in got]
        assert len(ref) == len(got)
        for r, g in zip(ref, got):
            assert r.shape == g.shape, (r.shape, g.shape)
            assert r.dtype == g.dtype, (r.dtype, g.dtype)
            err = crossport.parity.metrics.normalized_error(r, g)
            assert err <= atol, f"normalized error {err:.2e} > {atol:.0e}"
    if max_permutes is not None:
        assert conv.permutes <= max_permutes, module.code
    if export:
        program = torch.export.export(module, example)
        with torch.no_grad():
            want = torch.utils._pytree.tree_leaves(module(*example))
            got = torch.utils._pytree.tree_leaves(program.module()(*example))
        for w, g in zip(want, got):
            torch.testing.assert_close(g, w)
    return conv


def module_types(module: torch.nn.Module) -> set[str]:
    """Class names of the leaf submodules (which torch layers the conversion chose)."""
    return {type(m).__name__ for m in module.modules() if not list(m.children())}
