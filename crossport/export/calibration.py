"""Calibration examples from files: what ``crossport convert --calibration`` reads."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from crossport.errors import InputError
from crossport.export.images import ImageFolder, calibration_images, has_images


@dataclass(frozen=True)
class InputSpec:
    """One Keras input as the conversion will make it, known before converting: forward's
    argument name, its shape in the model's input layout (``None``: a dynamic dim) and dtype.
    Calibration data is checked against these, so a bad file fails in seconds, not after
    minutes of conversion (``Conversion.model.inputs`` has the same three attributes)."""

    name: str
    shape: tuple
    dtype: str


def calibration_inputs(module, example_args, options=None, **overrides) -> list[InputSpec]:
    """The Keras inputs ``convert_with_report(module, example_args, options, **overrides)``
    will make, without converting (names, dynamic dims and ``channels_last_io`` included).

    Example:
        >>> import torch
        >>> [(s.name, s.shape) for s in calibration_inputs(torch.nn.Conv2d(3, 4, 3),
        ...      (torch.randn(1, 3, 8, 8),), channels_last_io=True, dynamic_batch=True)]
        [('input', (None, 8, 8, 3))]
    """
    from crossport.capture import input_names, normalize_example_args
    from crossport.capture.bind import bind_example_args
    from crossport.capture.export import requested_dynamic_dims
    from crossport.layout import io_layout
    from crossport.options import ConvertOptions
    from crossport.to_keras.values import keras_dtype

    if isinstance(example_args, (tuple, list)):  # containers and numbers, as convert's
        module, example_args = bind_example_args(module, tuple(example_args))
    args = normalize_example_args(example_args)
    options = replace(options or ConvertOptions(), **overrides).validate()  # as convert's
    names = input_names(module, len(args))
    dynamic = requested_dynamic_dims(args, options, names)
    specs = []
    for i, (name, arg) in enumerate(zip(names, args)):
        layout = io_layout(arg.ndim, options.channels_last_io)  # as the emitter's inputs
        shape = tuple(None if p in dynamic.get(i, ()) else int(arg.shape[p])
                      for p in layout.perm)
        specs.append(InputSpec(name, shape, keras_dtype(arg.dtype)))
    return specs


def check_calibration(calibration, module, example_args, options=None, *,
                      preprocessing: dict | None = None,
                      **overrides) -> list[list[np.ndarray]]:
    """Read (a path: as :func:`load_calibration`) and validate calibration examples for
    ``module`` before converting it: every problem :func:`crossport.export` would report
    (unreadable file, wrong keys, shapes or dtypes, NaN/inf, fractional ids) is raised now.
    Returns the examples as Keras input arrays; pass them to ``crossport.export``.

    Example:
        >>> import numpy as np, torch
        >>> examples = [np.zeros((1, 3, 8, 8), "float32")] * 2
        >>> len(check_calibration(examples, torch.nn.Conv2d(3, 4, 3), (torch.randn(1, 3, 8, 8),)))
        2
    """
    from crossport.export.quantize import calibration_examples
    from crossport.options import ConvertOptions

    options = replace(options or ConvertOptions(), **overrides).validate()
    inputs = calibration_inputs(module, example_args, options)
    if isinstance(calibration, (str, Path)):
        calibration = load_calibration(calibration, inputs, preprocessing)
    elif preprocessing:
        raise InputError("preprocessing= applies to a path to a folder of images; these "
                         "examples are arrays, used as they are")
    return calibration_examples(calibration, inputs, options.channels_last_io)


def load_calibration(path: str | Path, inputs: list,
                     preprocessing: dict | None = None) -> list[list[np.ndarray]] | ImageFolder:
    """Examples for a model with Keras ``inputs``, from a ``.npz`` file or a folder.

    - a folder: every ``.npy`` (single-input models) or ``.npz`` file, in name order, is one
      example; an ``.npz`` holds one array per input, keyed by input name (or ``arr_0``...).
    - a folder of images (.jpg, .png, ...): an :class:`ImageFolder` that the export reads
      with ``preprocessing`` (the keyword arguments of :func:`calibration_images`).
    - one ``.npz`` file: one array per input, keyed the same way, each with a leading
      example axis (``[K, *input_shape]``), or ``[K, ...]`` for a batch-1 input (the rows
      are the examples).

    ``inputs``: ``Conversion.model.inputs``, or :func:`calibration_inputs` before converting.
    ``preprocessing`` with numpy files is an ``InputError``: arrays are used as they are.

    Example:
        >>> import numpy as np, tempfile, pathlib, keras
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> for i in range(3):
        ...     np.save(folder / f"{i}.npy", np.zeros((1, 4), "float32"))
        >>> len(load_calibration(folder, [keras.Input((4,), batch_size=1, name="x")]))
        3
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".npy", ".npz"))
        if files and has_images(path):
            raise InputError(f"--calibration {path}: the folder holds both numpy files and "
                             "images; keep one kind of example per folder")
        if not files and has_images(path):
            return calibration_images(path, **(preprocessing or {}))
        if not files:
            raise InputError(f"--calibration {path}: the folder has no .npy/.npz files and "
                             "no images")
        _refuse_preprocessing(path, preprocessing, "a folder of .npy/.npz examples")
        return [_one_example(f, inputs) for f in files]
    if path.suffix == ".npz" and path.is_file():
        _refuse_preprocessing(path, preprocessing, "one .npz of stacked examples")
        return _stacked_examples(path, inputs)
    raise InputError(f"--calibration {path}: expected a folder of .npy/.npz files or images, "
                     "or one .npz")


def _refuse_preprocessing(path: Path, preprocessing: dict | None, what: str) -> None:
    """Image preprocessing given for numpy examples: an error, never silently dropped.

    Arrays are documented as already in the model's input layout and scale; applying
    ``(x * scale - mean) / std`` to them would guess at what they hold (raw 0..255 pixels?
    [0, 1]? already normalized?), and dropping the options calibrates on other data than
    the user asked for: both give a silently wrong int8 model."""
    if preprocessing:
        flags = ", ".join(f"--calibration-{k}" for k in preprocessing)
        raise InputError(f"{flags}: image preprocessing, but --calibration {path} is {what}, "
                         "used as they are (in the model's input layout and scale): "
                         "normalize the arrays yourself and drop these options, or pass a "
                         "folder of images")


def _arrays_by_input(path: Path, inputs: list) -> list[np.ndarray]:
    try:
        return _read(path, inputs)
    except InputError:  # a ValueError too: already says what is wrong with the file
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        # not a numpy file (a truncated or corrupt .npz is a BadZipFile), or a pickled one
        raise InputError(f"{path}: cannot read it as a numpy file: {exc}") from exc


def _read(path: Path, inputs: list) -> list[np.ndarray]:
    if path.suffix == ".npy":
        if len(inputs) != 1:
            raise InputError(f"{path}: a .npy file holds one array; the model takes "
                             f"{len(inputs)} inputs: use .npz keyed by input name")
        return [np.load(path, allow_pickle=False)]
    with np.load(path, allow_pickle=False) as data:
        keys = list(data.keys())
        names = [t.name for t in inputs]
        if set(names) <= set(keys):
            return [data[n] for n in names]
        if len(keys) == len(names):
            return [data[k] for k in sorted(keys, key=_positional)]
        raise InputError(f"{path}: arrays {keys}; expected one per input, named {names}")


def _positional(key: str):
    digits = "".join(c for c in key if c.isdigit())
    return (int(digits) if digits else 0, key)


def _one_example(path: Path, inputs: list) -> list[np.ndarray]:
    return _arrays_by_input(path, inputs)


def _stacked_examples(path: Path, inputs: list) -> list[list[np.ndarray]]:
    arrays = _arrays_by_input(path, inputs)
    per_input = []
    for a, t in zip(arrays, inputs):
        if a.ndim == len(t.shape) + 1:  # [K, *input_shape]
            per_input.append(list(a))
        elif a.ndim == len(t.shape):  # rows are batch-1 examples
            per_input.append([a[i:i + 1] for i in range(a.shape[0])])
        else:
            raise InputError(f"{path}: array for {t.name!r} has shape {a.shape}; expected "
                             f"[examples, *{tuple(t.shape)}]")
    counts = {len(examples) for examples in per_input}
    if len(counts) != 1:
        raise InputError(f"{path}: the inputs have different example counts {sorted(counts)}")
    return [list(example) for example in zip(*per_input)]
