"""Calibration examples from files: what ``crossport convert --calibration`` reads."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from crossport.errors import InputError
from crossport.export.images import ImageFolder, calibration_images, has_images


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
        return [_one_example(f, inputs) for f in files]
    if path.suffix == ".npz" and path.is_file():
        return _stacked_examples(path, inputs)
    raise InputError(f"--calibration {path}: expected a folder of .npy/.npz files or images, "
                     "or one .npz")


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
