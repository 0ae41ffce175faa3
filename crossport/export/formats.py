"""One writer and one loader per format. A loader returns ``run(arrays) -> flat outputs``
in Keras' flat output order, from the artifact as re-loaded from disk."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import keras
import numpy as np

from crossport.parity.compare import keras_feed

Runner = Callable[[list[np.ndarray]], list[np.ndarray]]


def write_keras(model: keras.Model, path: Path) -> None:
    model.save(path)


def load_keras(path: Path) -> Runner:
    import crossport.layers  # noqa: F401  (registers crossport's layers for deserialisation)

    model = keras.models.load_model(path)

    def run(arrays):
        out = model(keras_feed(arrays), training=False)
        return [np.asarray(o) for o in keras.tree.flatten(out)]

    return run


def static_input_signature(model: keras.Model) -> list:
    """The Keras model's own input shapes as TensorSpecs, in ``model.export``'s structure,
    named by :func:`signature_names`."""
    import tensorflow as tf

    specs = [tf.TensorSpec(tuple(t.shape), t.dtype, name=name)
             for t, name in zip(model.inputs, signature_names(model))]
    return [specs[0] if len(specs) == 1 else specs]


def signature_names(model: keras.Model) -> list[str]:
    """The SavedModel / TFLite signature's input names: forward's argument names, made
    what TF accepts where they are not (ASCII letters, digits and ``_``, a letter first,
    unique ignoring case): ``_mask`` -> ``arg_mask``, ``bild_ä`` -> ``bild__``, ``Img``
    beside ``img`` -> ``Img_2``. TF refused the SavedModel otherwise.

    Example:
        >>> import keras
        >>> inputs = [keras.Input((2,), name=n) for n in ("x", "_x", "X")]
        >>> signature_names(keras.Model(inputs, inputs))
        ['x', 'arg_x', 'X_2']
    """
    names, taken = [], set()
    for tensor in model.inputs:
        name = re.sub(r"[^A-Za-z0-9_]", "_", tensor.name.split(":")[0]) or "arg"
        if not name[0].isalpha():
            name = "arg" + ("" if name[0] == "_" else "_") + name
        unique, count = name, 1
        while unique.lower() in taken:
            count += 1
            unique = f"{name}_{count}"
        taken.add(unique.lower())
        names.append(unique)
    return names


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
        out = loaded.serve(keras_feed(arrays))
        return [np.asarray(o) for o in keras.tree.flatten(out)]

    return run


def write_tflite(model: keras.Model, path: Path, quantization: str = "float32",
                 conversion=None, stages: dict | None = None) -> None:
    """TFLite flatbuffer via a temporary SavedModel and the TF converter, builtin ops only.

    ``float16`` stores weights as fp16; ``int8`` is dynamic-range quantisation (int8
    weights, float activations). An op without a TFLite builtin is an ``ExportError``.
    ``stages`` (when given) receives the seconds of ``saved_model``, ``tflite convert`` and
    ``weights``. Float files convert with the Dense kernels and Embedding tables as tagged
    splats and get their values after (:mod:`crossport.export.tagged`: ViT-B's converter
    time 8.2 -> 4.5 s); weights the converter transformed (folded into another constant)
    or that an op without a fixed weight layout reads are kept real in a second attempt,
    and a third converts with every weight real.
    """
    from crossport.export import tagged

    stages = {} if stages is None else stages
    weights = tagged.select(model) if quantization in ("float32", "float16") else []
    for _attempt in range(2):  # the second without the weights the first could not place
        if not weights:
            break
        data = _convert(model, quantization, conversion, stages, weights)
        with timed(stages, "weights"):
            unplaced = tagged.place(data, path, weights)
        del data
        if not unplaced:
            return
        weights = [w for w in weights if w.name not in unplaced]
    path.write_bytes(_convert(model, quantization, conversion, stages))


def _convert(model, quantization: str, conversion, stages: dict, splats=()) -> bytes:
    """The TF converter's flatbuffer of ``model`` (``splats``: weights replaced by tags)."""
    import tempfile

    import tensorflow as tf

    from crossport.export import tagged
    from crossport.export.tflite import (
        converter_from_saved_model,
        keep_infinite_constants,
        run_converter,
    )

    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "saved_model"
        with timed(stages, "saved_model"):
            write_saved_model(model, saved, {id(w.variable): w.tag for w in splats})
        with timed(stages, "tflite convert"):
            converter = converter_from_saved_model(saved)
            if quantization in ("float32", "float16", "int8"):  # float activations
                keep_infinite_constants(converter)
            if splats:
                tagged.unfold_splats(converter)
            if quantization in ("float16", "int8"):
                converter.optimizations = [tf.lite.Optimize.DEFAULT]
            if quantization == "float16":
                converter.target_spec.supported_types = [tf.float16]
            return run_converter(converter.convert, conversion)


def write_saved_model(model: keras.Model, path: Path, splats: dict | None = None) -> None:
    """SavedModel with a ``serving_default`` signature named after forward's arguments, the
    same function as ``serve`` and the model's variables (``variables``,
    ``trainable_variables``, ``non_trainable_variables``, as Keras' export archive has them).

    The signature keeps the conversion's static shapes (``None`` only where the user made a
    dim dynamic): Keras' default export makes the batch unknown, and with an unknown batch
    the TFLite converter keeps dilated convs as SPACE_TO_BATCH_ND/BATCH_TO_SPACE_ND pairs
    that XNNPACK cannot fuse (deeplabv3: 10x slower).

    A TF signature returns one tensor, a list or a dict of tensors: nested outputs (YOLO's
    ``(boxes, {"scores": ..., "feats": [...]})``) are served flat, in Keras' flat order,
    which is the order the loaders return in any case.

    Saved from a plain trackable rather than Keras' ``model.export`` archive, which re-traces
    every layer and the gradient functions and compares tensors in a quadratic lookup:
    efficientnet_v2_s took 15 s there, 5 s here. Like the archive's, the file is for
    inference: custom gradients (GroupedConv2D's XLA function) are not traced.
    ``splats`` (``id(variable) -> tag``, the TFLite export's weight tagging) replaces those
    variables by constants filled with their tag.
    """
    import tensorflow as tf

    if _is_nested(model.output):
        model = keras.Model(model.input, keras.tree.flatten(model.output), name=model.name)
    splats = splats or {}
    tagged = [v for v in model.variables if id(v) in splats]
    saved = tf.__internal__.tracking.AutoTrackable()
    # the tf.Variables behind the Keras variables (but the splatted): saved with the graph
    for kind in ("variables", "trainable_variables", "non_trainable_variables"):
        setattr(saved, kind, [v.value for v in getattr(model, kind) if id(v) not in splats])

    def serve(*args):
        if not tagged:
            return model(*args, training=False)
        mapping = [(v, tf.constant(splats[id(v)], v.dtype, shape=v.shape)) for v in tagged]
        with keras.StatelessScope(state_mapping=mapping):
            return model(*args, training=False)

    saved.serve = tf.function(serve, input_signature=static_input_signature(model),
                              autograph=False)
    # no gradient tracing: it saves GroupedConv2D's XLA gradient functions (0.7 s of
    # regnet_y_400mf's export), which neither serving nor the TFLite converter reads
    tf.saved_model.save(saved, str(path),
                        signatures={"serving_default": saved.serve.get_concrete_function()},
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))


@contextmanager
def timed(stages: dict, name: str):
    """Adds the seconds the block takes to ``stages[name]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - start


def load_tflite(path: Path, input_names: list[str], num_threads: int = 2,
                output_names: list[str] | None = None) -> Runner:
    """Runs the flatbuffer with the LiteRT interpreter (its own kernels, not TF's).

    The signature's inputs and outputs are keyed by name (in no particular order), so
    arrays are passed by the Keras model's input names, and outputs returned in
    ``output_names``' order (a dict output's keys, :func:`output_names`) or, without
    them, by the index of ``output_<i>``.
    """
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=num_threads)
    runner = interpreter.get_signature_runner("serving_default")

    inputs, outputs = runner.get_input_details(), runner.get_output_details()

    def run(arrays):
        feed = {n: _quantize(a, inputs[n]) for n, a in zip(input_names, arrays)}
        got = runner(**feed)
        order = output_names if output_names is not None else sorted(got, key=_output_index)
        return [_dequantize(got[k], outputs[k]) for k in order]

    return run


def output_names(model: keras.Model) -> list[str] | None:
    """The signature's output names in Keras' flat output order when they are a flat dict
    output's keys (``{"b1": ..., "a2": ...}``: ``a2``, ``b1``); ``None`` for the
    ``output_<i>`` names of other outputs."""
    output = model.output
    if not isinstance(output, dict) or _is_nested(output):
        return None
    return keras.tree.flatten({key: key for key in output})


def _quantize(array: np.ndarray, detail: dict) -> np.ndarray:
    """Float data for an integer (int8/int16 I/O) input: ``round(x / scale) + zero_point``."""
    scale, zero_point = detail["quantization"]
    if np.dtype(detail["dtype"]).kind != "i" or not scale or array.dtype.kind != "f":
        return array
    info = np.iinfo(detail["dtype"])
    q = np.round(array / scale) + zero_point
    return np.clip(q, info.min, info.max).astype(detail["dtype"])


def _dequantize(array: np.ndarray, detail: dict) -> np.ndarray:
    scale, zero_point = detail["quantization"]
    if np.asarray(array).dtype.kind != "i" or not scale:
        return np.asarray(array)
    return ((np.asarray(array, np.float32) - zero_point) * scale).astype(np.float32)


def _output_index(name: str):
    match = re.search(r"(\d+)$", name)
    return (int(match.group(1)) if match else 0, name)


def tflite_op_names(path: Path) -> list[str]:
    """The builtin op of every node of a ``.tflite`` file, in execution order.

    Example:
        >>> tflite_op_names(Path("m.tflite"))  # doctest: +SKIP
        ['TRANSPOSE', 'CONV_2D', 'MEAN', 'FULLY_CONNECTED']
    """
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(
        model_path=str(path),
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    return [op["op_name"] for op in interpreter._get_ops_details()]
