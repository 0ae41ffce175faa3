"""One writer and one loader per format. A loader returns ``run(arrays) -> flat outputs``
in Keras' flat output order, from the artifact as re-loaded from disk."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import keras
import numpy as np

Runner = Callable[[list[np.ndarray]], list[np.ndarray]]


def write_keras(model: keras.Model, path: Path) -> None:
    model.save(path)


def load_keras(path: Path) -> Runner:
    import crossport.layers  # noqa: F401  (registers crossport's layers for deserialisation)

    model = keras.models.load_model(path)

    def run(arrays):
        out = model(arrays if len(arrays) > 1 else arrays[0], training=False)
        return [np.asarray(o) for o in keras.tree.flatten(out)]

    return run


def write_saved_model(model: keras.Model, path: Path) -> None:
    """SavedModel with a ``serving_default`` signature named after forward's arguments.

    A TF signature returns one tensor, a list or a dict of tensors: nested outputs (YOLO's
    ``(boxes, {"scores": ..., "feats": [...]})``) are served flat, in Keras' flat order,
    which is the order the loaders return in any case.
    """
    if _is_nested(model.output):
        model = keras.Model(model.input, keras.tree.flatten(model.output), name=model.name)
    model.export(str(path), format="tf_saved_model", verbose=False)


def _is_nested(output) -> bool:
    """Whether a container of outputs holds another container."""
    if isinstance(output, dict):
        return any(keras.tree.is_nested(v) for v in output.values())
    if isinstance(output, (list, tuple)):
        return any(keras.tree.is_nested(v) for v in output)
    return False


def load_saved_model(path: Path) -> Runner:
    import tensorflow as tf

    loaded = tf.saved_model.load(str(path))

    def run(arrays):
        out = loaded.serve(arrays if len(arrays) > 1 else arrays[0])
        return [np.asarray(o) for o in keras.tree.flatten(out)]

    return run


def write_tflite(model: keras.Model, path: Path, quantization: str = "float32") -> None:
    """TFLite flatbuffer via a temporary SavedModel and the TF converter.

    ``float16`` stores weights as fp16; ``int8`` is dynamic-range quantisation (int8
    weights, float activations).
    """
    import tempfile

    import tensorflow as tf

    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "saved_model"
        write_saved_model(model, saved)
        converter = tf.lite.TFLiteConverter.from_saved_model(str(saved))
        if quantization in ("float16", "int8"):
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantization == "float16":
            converter.target_spec.supported_types = [tf.float16]
        path.write_bytes(converter.convert())


def load_tflite(path: Path, input_names: list[str], num_threads: int = 2) -> Runner:
    """Runs the flatbuffer with the LiteRT interpreter (its own kernels, not TF's).

    The signature's inputs are keyed by name (in no particular order), so arrays are
    passed by the Keras model's input names.
    """
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=num_threads)
    runner = interpreter.get_signature_runner("serving_default")

    def run(arrays):
        outputs = runner(**dict(zip(input_names, arrays)))
        return [np.asarray(outputs[k]) for k in sorted(outputs, key=_output_index)]

    return run


def _output_index(name: str):
    match = re.search(r"(\d+)$", name)
    return (int(match.group(1)) if match else 0, name)
