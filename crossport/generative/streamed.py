"""Write a generative ``.tflite`` without the TFLite converter ever holding the weights.

The converter, given a model with real weights, holds several float copies of them (the
loaded SavedModel variables, the frozen constants, each signature's folded copy): measured
~4.5x the fp32 weight bytes on top of the Keras model, and minutes per layer for a
billion-parameter decoder. Here it converts the same signatures with every large weight
replaced by a *splat* constant (one float: a tag unique to that weight). The converter keeps
splats as one value, so it runs on the graph alone, and its output has each weight's
buffer at full size (int8, fp16 or fp32) with its quantization parameters. Each buffer is
then found by its tag and overwritten in place, weight by weight, from the torch
parameters (a transient copy of one weight at a time): int8 with the symmetric
per-channel/per-tensor scales the converter chose for it, recomputed from the real values.

Placement follows TFLite's op semantics: a ``FULLY_CONNECTED`` weight is ``[out, in]`` (the
Dense kernel transposed), every other consumer sees the Keras array as it is. A weight the
converter transformed (folded into another constant) leaves no tag and is an
``ExportError``; the export's generation check then proves the file end to end.
"""

from __future__ import annotations

import gc
import mmap
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from crossport.compat import export_archive_endpoint
from crossport.errors import ExportError

MIN_ELEMENTS = 1024  # the converter's dynamic-range threshold; smaller weights stay in the graph
TAG_STEP = 1 / 256   # tags 1 + k/256: exact in fp16 and far apart after int8 scales
CHUNK = 1 << 24      # elements per quantize/copy step (bounds the transient copies)


@dataclass
class TaggedWeight:
    """One large Keras weight: its tag and where its values come from (a numpy view)."""

    name: str
    tag: float
    shape: tuple[int, ...]
    source: object  # callable() -> array in the Keras variable's layout


@dataclass
class TaggedGraph:
    """The signatures saved with tagged splat weights, ready for the converter."""

    saved_model: Path
    weights: list[TaggedWeight]
    names: list[str]

    def write(self, path: Path, quantize: str | None) -> None:
        """Convert the tagged graph and stream the real weights into ``path``."""
        import tensorflow as tf

        converter = tf.lite.TFLiteConverter.from_saved_model(str(self.saved_model),
                                                             signature_keys=self.names)
        if quantize is not None:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]  # int8 weights, float math
        if quantize == "fp16":
            converter.target_spec.supported_types = [tf.float16]
        data = converter.convert()
        path.write_bytes(data)
        del data, converter
        gc.collect()
        fill_weights(path, self.weights)

    def cleanup(self) -> None:
        shutil.rmtree(self.saved_model.parent, ignore_errors=True)


def prepare(model, archive, names, torch_model) -> TaggedGraph:
    """Save ``archive``'s endpoints ``names`` with ``model``'s large weights as tagged splats.

    ``archive`` is the ExportArchive of :func:`signatures.build_archive` (its endpoint
    functions are re-traced here); the weights' values are looked up among
    ``torch_model``'s parameters (the Keras copy can then be freed before converting).
    """
    import keras
    import tensorflow as tf

    large = [v for v in model.weights
             if len(v.shape) >= 2 and int(np.prod(v.shape)) >= MIN_ELEMENTS
             and v.dtype == "float32"]
    if len(large) > 1500:
        raise ExportError(f"{len(large)} large weights: more than the tagged TFLite writer "
                          "distinguishes (1500)")
    params = [p.detach().numpy() for p in torch_model.parameters()]
    weights = [TaggedWeight(v.path, 1 + (i + 1) * TAG_STEP, tuple(v.shape),
                            _source(v, params)) for i, v in enumerate(large)]
    tags = {id(v): w.tag for v, w in zip(large, weights)}
    state = [(v, np.asarray(v.numpy())) for v in model.weights if id(v) not in tags]

    def mapping():
        return ([(v, tf.constant(tags[id(v)], v.dtype, shape=v.shape)) for v in large]
                + [(v, tf.constant(value)) for v, value in state])

    module = tf.Module()
    functions = {}
    for name in names:
        endpoint = export_archive_endpoint(archive, name)
        functions[name] = _tagged(endpoint.python_function, mapping, keras, tf
                                  ).get_concrete_function(*endpoint.input_signature)
    staging = Path(tempfile.mkdtemp(prefix="crossport-llm-")) / "saved_model"
    tf.saved_model.save(module, str(staging), signatures=functions)
    return TaggedGraph(staging, weights, list(names))


def _tagged(function, mapping, keras, tf):
    @tf.function
    def traced(*args):
        with keras.StatelessScope(state_mapping=mapping()):
            return function(*args)

    return traced


def _source(variable, params):
    """A callable giving ``variable``'s values: a view of the torch parameter it was made
    from (as is or transposed), else a copy of the Keras variable."""
    shape = tuple(variable.shape)
    value = None
    for param in params:
        if param.size != np.prod(shape) or param.dtype != np.float32:
            continue
        for view in (param, param.T if param.ndim == 2 else None):
            if view is None or view.shape != shape:
                continue
            value = np.asarray(variable.numpy()) if value is None else value
            if np.array_equal(view, value):
                return lambda view=view: view
    value = np.asarray(variable.numpy()) if value is None else value
    return lambda: value


def fill_weights(path: Path, weights: list[TaggedWeight]) -> None:
    """Overwrite the tagged splat buffers of the flatbuffer at ``path`` in place."""
    from tensorflow.lite.python import schema_py_generated as schema

    with open(path, "r+b") as file, mmap.mmap(file.fileno(), 0) as mm:
        base = np.frombuffer(mm, np.uint8)
        model = schema.Model.GetRootAs(mm, 0)
        found = {}
        for buffer, (tensor, consumers) in _weight_buffers(model, schema).items():
            data = _buffer_view(model.Buffers(buffer), base)
            weight = _tag_of(data, tensor, weights, schema)
            if weight is not None:
                found.setdefault(weight.name, []).append(buffer)
                _fill(data, base, tensor, consumers, weight, schema)
        del base, model
        missing = [w.name for w in weights if w.name not in found]
        if missing:
            raise ExportError(
                f"the TFLite converter transformed weights {missing[:5]} (folded them into "
                "other constants), so the tagged writer cannot place them; export with "
                "format='saved_model', or report this with the model's config")


def _weight_buffers(model, schema) -> dict:
    """buffer index -> (a tensor using it, its consumers ``{(op name, input index)}``) for
    every buffer holding constant data, over all subgraphs (signatures share buffers)."""
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    opnames = [names.get(max(c.BuiltinCode(), c.DeprecatedBuiltinCode()), "?") for c in codes]
    out = {}
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        users: dict[int, list] = {}
        for i in range(graph.OperatorsLength()):
            op = graph.Operators(i)
            for j in range(op.InputsLength()):
                users.setdefault(op.Inputs(j), []).append((opnames[op.OpcodeIndex()], j, op))
        for t in range(graph.TensorsLength()):
            tensor = graph.Tensors(t)
            if tensor.Buffer() == 0 or t not in users:
                continue
            entry = out.setdefault(tensor.Buffer(), (tensor, set()))
            entry[1].update(_consumers(graph, users, t))
    return out


def _consumers(graph, users, t, depth=0) -> set:
    """``{(op, input index)}`` reading tensor ``t``, looking through DEQUANTIZE (fp16)."""
    found = set()
    for name, j, op in users.get(t, []):
        if name == "DEQUANTIZE" and depth < 2:
            found |= _consumers(graph, users, op.Outputs(0), depth + 1)
        else:
            found.add((name, j))
    return found


def _buffer_view(buffer, base: np.ndarray) -> np.ndarray | None:
    if buffer.Offset() > 1:  # data after the flatbuffer (large models)
        return base[buffer.Offset():buffer.Offset() + buffer.Size()]
    if buffer.DataLength() == 0:
        return None
    data = buffer.DataAsNumpy()
    start = data.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return base[start:start + data.size]


def _tag_of(data, tensor, weights, schema) -> TaggedWeight | None:
    """The weight whose tag this splat buffer holds, or None (a constant of the graph)."""
    if data is None or data.size < MIN_ELEMENTS:
        return None
    kind = tensor.Type()
    if kind == schema.TensorType.INT8:
        values = data.view(np.int8)
        scales = _scales(tensor)
        if scales is None or not (values == 127).all() or not (scales == scales[0]).all():
            return None
        value = float(scales[0]) * 127
    elif kind in (schema.TensorType.FLOAT32, schema.TensorType.FLOAT16):
        values = data.view(np.float32 if kind == schema.TensorType.FLOAT32 else np.float16)
        if not (values == values[0]).all():
            return None
        value = float(values[0])
    else:
        return None
    index = round((value - 1) / TAG_STEP) - 1
    if 0 <= index < len(weights) and abs(weights[index].tag - value) < TAG_STEP / 8:
        return weights[index]
    return None


def _scales(tensor) -> np.ndarray | None:
    quant = tensor.Quantization()
    if quant is None or quant.ScaleLength() == 0:
        return None
    return quant.ScaleAsNumpy()


def _fill(data, base, tensor, consumers, weight: TaggedWeight, schema) -> None:
    shape = tuple(int(s) for s in tensor.ShapeAsNumpy())
    values = weight.source()
    if ("FULLY_CONNECTED", 1) in consumers:
        values = values.T  # FC weights are [out, in]; the Dense kernel is [in, out]
    if len(consumers) != 1 or values.shape != shape:
        raise ExportError(f"weight {weight.name} {weight.shape} is read as {shape} by "
                          f"{sorted(consumers)}; the tagged TFLite writer cannot place it")
    kind = tensor.Type()
    if kind == schema.TensorType.INT8:
        _fill_int8(data.view(np.int8).reshape(shape), values, tensor, base)
    else:
        dtype = np.float32 if kind == schema.TensorType.FLOAT32 else np.float16
        out = data.view(dtype).reshape(shape)
        for rows in _row_chunks(shape):
            out[rows] = values[rows]


def _fill_int8(out: np.ndarray, values: np.ndarray, tensor, base: np.ndarray) -> None:
    """Symmetric int8 (zero point 0) along the converter's quantized dimension, in place."""
    quant = tensor.Quantization()
    scales = _scale_view(quant, base)
    axis = quant.QuantizedDimension()
    if (quant.ZeroPointLength() and np.any(quant.ZeroPointAsNumpy() != 0)) or (
            scales.size not in (1, out.shape[axis])):
        raise ExportError(f"unexpected int8 quantization of a weight {out.shape} "
                          f"({scales.size} scales on axis {axis}, non-zero zero points?)")
    per_channel = scales.size > 1
    if per_channel and axis != 0:
        raise ExportError(f"int8 scales on axis {axis} of a weight {out.shape}: the tagged "
                          "writer handles axis 0 only")
    amax = np.zeros(out.shape[0] if per_channel else 1, np.float32)
    for rows in _row_chunks(out.shape):
        block = np.abs(values[rows]).reshape(rows.stop - rows.start, -1).max(axis=1)
        if per_channel:
            amax[rows] = block
        else:
            amax[0] = max(amax[0], block.max())
    scale = np.where(amax > 0, amax / 127, 1.0).astype(np.float32)
    scales[:] = scale
    for rows in _row_chunks(out.shape):
        s = scale[rows].reshape((-1,) + (1,) * (out.ndim - 1)) if per_channel else scale[0]
        x = values[rows] / s
        out[rows] = np.clip(np.sign(x) * np.floor(np.abs(x) + 0.5), -127, 127)


def _scale_view(quant, base: np.ndarray) -> np.ndarray:
    scales = quant.ScaleAsNumpy()
    start = scales.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return base[start:start + scales.nbytes].view(np.float32)


def _row_chunks(shape):
    rows = max(1, CHUNK // max(1, int(np.prod(shape[1:]))))
    for start in range(0, shape[0], rows):
        yield slice(start, min(start + rows, shape[0]))
