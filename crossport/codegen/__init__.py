"""Keras source generation: ``to_source`` writes a converted model as a readable Python module.

The module is written to a temporary folder beside the target with its weights file, imported
from there, rebuilt with ``build_model()`` and compared with torch (or with the Keras model
it came from) on fresh inputs; only then are the files moved into place, together. On any
failure nothing is left at the target; existing files are replaced only with ``overwrite=True``.
"""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path

import keras
import numpy as np

from crossport.capture.borrow import borrowed
from crossport.codegen.configs import SourceError
from crossport.codegen.emit_source import Source, generate
from crossport.codegen.keras_graph import is_functional
from crossport.errors import CrossportError, ExportError, InputError
from crossport.export.staging import Staging
from crossport.parity.accept import Recheck, recheck
from crossport.parity.compare import compare_outputs, keras_feed

__all__ = ["Source", "SourceError", "generate", "load_module", "source_files", "stage_source",
           "to_source"]

# Rebuilt vs original Keras model (same graph, same weights): only kernel scheduling differs.
SAME_MODEL_TOLERANCE = 1e-6


def to_source(conversion_or_model, path: str | Path, *, check: bool = True,
              check_inputs: int | None = None, overwrite: bool = False) -> Path:
    """Write the model as a Python module ``path`` with ``build_model()``, weights beside it.

    Writes ``path`` (``model_keras.py``), ``model_keras.weights.h5`` and, when the model has
    constant arrays too large to inline, ``model_keras.constants.npz``.

    Args:
        conversion_or_model: a :class:`crossport.Conversion` or a Keras functional model.
        path: the ``.py`` file to write.
        check: import the written module, rebuild the model and compare it with torch on
            the example inputs and fresh ones (a ``Conversion``, by its tolerance rule) or
            with the given Keras model on fresh inputs.
        check_inputs: how many fresh input sets the check runs (besides a conversion's
            example inputs); ``None``: a conversion's own ``check_inputs``, else 2.
        overwrite: replace existing files of those three names (a stale constants file
            included). Without it any of them existing is an ``ExportError``.

    Returns:
        The path of the written module.

    Raises:
        ExportError: the model has an operation the generator cannot write, the rebuilt
            model does not match, or a target exists without ``overwrite``; nothing is
            written then.

    Example:
        >>> import torch, crossport, tempfile, pathlib
        >>> conv = crossport.convert_with_report(torch.nn.Conv2d(3, 4, 3).eval(),
        ...                                      (torch.randn(1, 3, 8, 8),))
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "conv_keras.py"
        >>> crossport.to_source(conv, out).name
        'conv_keras.py'
    """
    with Staging(overwrite) as staging:
        stage_source(conversion_or_model, path, staging, check=check, check_inputs=check_inputs)
        staging.commit()
    return Path(path)


def source_files(path: str | Path) -> list[Path]:
    """The files :func:`to_source` writes for ``path``: source, weights, constants."""
    path = Path(path)
    return [path.with_name(name) for name in _file_names(path).values()]


def stage_source(conversion_or_model, path: str | Path, staging: Staging, *,
                 check: bool = True, check_inputs: int | None = None) -> Path:
    """Write and check the source and its weights at temporary paths claimed in ``staging``.

    Nothing reaches ``path`` until ``staging.commit()``.
    """
    conversion, model = _unpack(conversion_or_model)
    if check_inputs is None:
        check_inputs = conversion.options.check_inputs if conversion is not None else 2
    path = Path(path)
    if path.suffix != ".py":
        raise InputError(f"{path}: the generated source must be a .py file")
    names = _file_names(path)
    description = None
    if conversion is not None and conversion.module is not None:
        description = f"torch `{type(conversion.module).__name__}` converted to Keras"
    try:
        source = generate(model, names["weights"], names["constants"], description or "")
    except (SourceError, TypeError) as exc:
        raise ExportError(f"cannot write {path}: {exc}") from exc
    temps = [staging.claim(path.with_name(names[key]), optional=key == "constants")
             for key in ("source", "weights", "constants")]
    folder = temps[0].parent
    try:
        _write(model, source, folder, names)
        if check:
            _check(conversion, model, folder / names["source"], check_inputs)
    except CrossportError:  # already says what and where (torch rejecting an input set)
        raise
    except Exception as exc:  # any writer/loader failure: report it, leave nothing behind
        raise ExportError(f"writing source to {path} failed: {type(exc).__name__}: {exc}") from exc
    return path


def _unpack(conversion_or_model):
    if isinstance(conversion_or_model, keras.Sequential):  # its graph, as a functional model
        model = conversion_or_model
        if not model.built or not model.inputs:
            raise InputError("to_source needs a built Sequential model (start it with "
                             "keras.Input(...))")
        return None, keras.Model(model.inputs, model.outputs, name=model.name)
    if isinstance(conversion_or_model, keras.Model):
        if not is_functional(conversion_or_model):
            raise InputError(f"{type(conversion_or_model).__name__} is a subclassed Keras "
                             "model; to_source writes functional and Sequential models only")
        return None, conversion_or_model
    model = getattr(conversion_or_model, "model", None)
    if not isinstance(model, keras.Model):
        raise InputError(f"to_source expects a crossport.Conversion or a keras.Model, got "
                         f"{type(conversion_or_model).__name__}")
    return conversion_or_model, model


def _file_names(path: Path) -> dict[str, str]:
    stem = path.stem
    return {"source": path.name, "weights": f"{stem}.weights.h5",
            "constants": f"{stem}.constants.npz"}


def _write(model: keras.Model, source: Source, folder: Path, names: dict) -> None:
    text = source.text
    compile(text, names["source"], "exec")  # a syntax error is a generator bug: fail here
    (folder / names["source"]).write_text(text, encoding="utf-8")
    model.save_weights(folder / names["weights"])
    if source.constants:
        np.savez(folder / names["constants"], **source.constants)


def load_module(path: str | Path):
    """Import a generated module from its file (under a unique name, not in ``sys.modules``)."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"_crossport_source_{uuid.uuid4().hex}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check(conversion, model: keras.Model, source_path: Path, count: int) -> None:
    rebuilt = load_module(source_path).build_model()
    if conversion is not None and conversion.module is not None:
        with borrowed(conversion.module):  # eval mode; the user's module is left as it was
            result = _recheck_vs_torch(conversion, rebuilt, count)
        against = "torch"
    else:
        result = _recheck_vs_keras(model, rebuilt, count)
        against = "the original Keras model"
    if not result.passed:
        raise ExportError(
            f"the model rebuilt from the generated source differs from {against}: "
            f"{result.describe()}; nothing was written")


def _recheck_vs_torch(conversion, rebuilt: keras.Model, count: int) -> Recheck:
    from crossport.parity.ties import artifact_excuse
    from crossport.parity.verify import recheck_inputs, run_keras

    options = conversion.options
    shape_sets = conversion.report.shape_sets if conversion.report is not None else None
    # the example inputs first, as the export re-check: the only valid ones for inputs that
    # constrain each other (embedding_bag's offsets), where check_inputs=0 adds no fresh set
    input_sets = [tuple(conversion.example_args),
                  *recheck_inputs(conversion.example_args, shape_sets, options.seed + 200, count)]
    return recheck(conversion.module, input_sets,
                   lambda args, structure: run_keras(rebuilt, args, options.channels_last_io,
                                                     like=structure),
                   options.atol, options.tolerance, examples_first=True,
                   excuse=artifact_excuse(conversion))


def _recheck_vs_keras(model: keras.Model, rebuilt: keras.Model, count: int) -> Recheck:
    """Same graph, same weights: only kernel scheduling differs, a hard bound."""
    worst = Recheck(0.0, [], SAME_MODEL_TOLERANCE, "atol")
    rng = np.random.default_rng(0)
    for _ in range(count):
        arrays = [_random_like(t, rng) for t in model.inputs]
        feed = keras_feed(arrays)
        want = keras.tree.flatten(model(feed, training=False))
        got = keras.tree.flatten(rebuilt(feed, training=False))
        comparison = compare_outputs([np.asarray(w) for w in want], [np.asarray(g) for g in got])
        worst.mismatches += comparison.mismatches
        worst.error = max(worst.error, comparison.error)
    return worst


def _random_like(tensor, rng) -> np.ndarray:
    shape = tuple(1 if d is None else d for d in tensor.shape)
    dtype = np.dtype(tensor.dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) > 0.5
    return rng.integers(0, 10, shape).astype(dtype)
