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

    def convert(self, quantize: str | None) -> bytes:
        """The converter's flatbuffer of the tagged graph (weights still splats)."""
        import tensorflow as tf

        converter = tf.lite.TFLiteConverter.from_saved_model(str(self.saved_model),
                                                             signature_keys=self.names)
        if quantize is not None:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]  # int8 weights, float math
        if quantize == "fp16":
            converter.target_spec.supported_types = [tf.float16]
        return converter.convert()

    def missing(self, data: bytes) -> set[str]:
        """Weights whose tag is not in ``data``: the converter folded them into other
        constants (e.g. a scale after the LM head fused into its weights)."""
        from tensorflow.lite.python import schema_py_generated as schema

        model = schema.ModelT.InitFromPackedBuf(data, 0)
        found = {w.name for graph in model.subgraphs for tensor in graph.tensors
                 if (w := _tag_of(model.buffers[tensor.buffer].data, tensor, self.weights,
                                  schema)) is not None}
        return {w.name for w in self.weights} - found

    def cleanup(self) -> None:
        shutil.rmtree(self.saved_model.parent, ignore_errors=True)


def prepare(model, archive, names, torch_model, keep=frozenset()) -> TaggedGraph:
    """Save ``archive``'s endpoints ``names`` with ``model``'s large weights as tagged splats.

    ``archive`` is the ExportArchive of :func:`signatures.build_archive` (its endpoint
    functions are re-traced here); the weights' values are looked up among
    ``torch_model``'s parameters (the Keras copy can then be freed before filling them
    in). Weights named in ``keep`` stay real constants of the graph.
    """
    import keras
    import tensorflow as tf

    large = [v for v in model.weights
             if len(v.shape) >= 2 and int(np.prod(v.shape)) >= MIN_ELEMENTS
             and v.dtype == "float32" and v.path not in keep]
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
            if _same_corner(view, value) and np.array_equal(view, value):
                return lambda view=view: view
    value = np.asarray(variable.numpy()) if value is None else value
    return lambda: value


def _same_corner(a: np.ndarray, b: np.ndarray) -> bool:
    """A cheap first test before comparing whole arrays (dozens of weights share a shape)."""
    first = (0,) * (a.ndim - 1)
    return np.array_equal(a[first][:64], b[first][:64])


def fill_weights(data: bytes, path: Path, weights: list[TaggedWeight]) -> None:
    """Writes the converter's flatbuffer ``data`` to ``path`` with each tagged weight in a
    buffer of its own.

    The converter shares one buffer among tensors of equal contents (every int8 splat is
    all 127s), so tagged tensors are found by their own tag (value, or int8 scale x 127)
    and pointed at a new buffer holding the real weight; the splat buffers are emptied.
    """
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(data, 0)
    graph_bytes = len(data)
    placed: dict[str, tuple] = {}  # weight -> (its new buffer, tensor shape, int8 scales)
    replaced: set[int] = set()
    for graph in model.subgraphs:
        users = _users(model, graph, schema)
        for t, tensor in enumerate(graph.tensors):
            weight = _tag_of(model.buffers[tensor.buffer].data, tensor, weights, schema)
            if weight is None:
                continue
            replaced.add(tensor.buffer)
            if weight.name not in placed:
                make, scales = _weight_data(tensor, weight, _consumers(users, t), schema)
                itemsize = 1 if scales is not None else (
                    4 if tensor.type == schema.TensorType.FLOAT32 else 2)
                model.buffers.append(_AlignedBuffer(make, itemsize * int(np.prod(tensor.shape))))
                placed[weight.name] = (len(model.buffers) - 1, tuple(tensor.shape), scales)
            index, shape, scales = placed[weight.name]
            if tuple(tensor.shape) != shape:
                raise ExportError(f"weight {weight.name} is read as {shape} and as "
                                  f"{tuple(tensor.shape)}; the tagged writer cannot place it")
            if scales is not None:
                tensor.quantization.scale = scales
            tensor.buffer = index
    missing = [w.name for w in weights if w.name not in placed]
    if missing:
        raise ExportError(
            f"the TFLite converter transformed weights {missing[:5]} (folded them into other "
            "constants), so the tagged writer cannot place them; export with "
            "format='saved_model', or report this with the model's config")
    for index in replaced - {entry[0] for entry in placed.values()}:
        model.buffers[index].data = None
    size = graph_bytes + sum(b.size + 16 for b in model.buffers if isinstance(b, _AlignedBuffer))
    builder = flatbuffers.Builder(size + (1 << 20))  # sized once: growing copies it
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    del model
    with open(path, "wb") as file:
        file.write(memoryview(builder.Bytes)[builder.Head():])


class _AlignedBuffer:
    """A ``BufferT`` whose data (from ``make()`` at pack time) starts 16-byte aligned, as
    the converter writes it."""

    def __init__(self, make, size: int):
        self.make, self.size = make, size

    def Pack(self, builder):  # the flatbuffers object API calls it so
        from tensorflow.lite.python import schema_py_generated as schema

        raw = np.ascontiguousarray(self.make()).reshape(-1).view(np.uint8)
        builder.StartVector(1, raw.size, 16)
        builder.head = builder.Head() - raw.size
        builder.Bytes[builder.Head():builder.Head() + raw.size] = memoryview(raw)
        builder.vectorNumElems = raw.size
        del raw
        data = builder.EndVector()
        schema.BufferStart(builder)
        schema.BufferAddData(builder, data)
        return schema.BufferEnd(builder)


def _users(model, graph, schema) -> dict[int, list]:
    """tensor index -> [(op name, input index, op)] in one subgraph."""
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    opnames = [names.get(max(c.builtinCode, c.deprecatedBuiltinCode), "?")
               for c in model.operatorCodes]
    users: dict[int, list] = {}
    for op in graph.operators:
        for j, t in enumerate(op.inputs if op.inputs is not None else []):
            users.setdefault(int(t), []).append((opnames[op.opcodeIndex], j, op))
    return users


def _consumers(users, t, depth=0) -> set:
    """``{(op, input index)}`` reading tensor ``t``, looking through DEQUANTIZE (fp16)."""
    found = set()
    for name, j, op in users.get(t, []):
        if name == "DEQUANTIZE" and depth < 2:
            found |= _consumers(users, int(op.outputs[0]), depth + 1)
        else:
            found.add((name, j))
    return found


def _tag_of(data, tensor, weights, schema) -> TaggedWeight | None:
    """The weight whose tag this splat tensor holds, or None (a constant of the graph)."""
    if data is None or len(data) < MIN_ELEMENTS:
        return None
    data = np.asarray(data, np.uint8)
    if tensor.type == schema.TensorType.INT8:
        scales = _scales(tensor)
        if scales is None or not (data.view(np.int8) == 127).all() or not (
                scales == scales[0]).all():
            return None
        value = float(scales[0]) * 127
    elif tensor.type in (schema.TensorType.FLOAT32, schema.TensorType.FLOAT16):
        values = data.view(np.float32 if tensor.type == schema.TensorType.FLOAT32 else np.float16)
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
    quant = tensor.quantization
    if quant is None or quant.scale is None or len(quant.scale) == 0:
        return None
    return np.asarray(quant.scale, np.float32)


def _weight_data(tensor, weight: TaggedWeight, consumers, schema):
    """A callable giving the real values in the tensor's layout and type (computed when
    the buffer is packed, so one weight's copy exists at a time), and the int8 scales."""
    shape = tuple(int(s) for s in tensor.shape)
    transpose = ("FULLY_CONNECTED", 1) in consumers  # FC weights are [out, in] = Dense.T

    def values():
        return weight.source().T if transpose else weight.source()

    if len(consumers) != 1 or tuple(reversed(weight.shape) if transpose else weight.shape
                                    ) != shape:
        raise ExportError(f"weight {weight.name} {weight.shape} is read as {shape} by "
                          f"{sorted(consumers)}; the tagged TFLite writer cannot place it")
    if tensor.type == schema.TensorType.INT8:
        scale = _int8_scales(values(), tensor)
        return (lambda: _quantize_int8(values(), scale)), scale.tolist()
    dtype = np.float32 if tensor.type == schema.TensorType.FLOAT32 else np.float16
    return (lambda: _converted(values(), dtype)), None


def _converted(values: np.ndarray, dtype) -> np.ndarray:
    out = np.empty(values.shape, dtype)
    for rows in _row_chunks(values.shape):
        out[rows] = values[rows]
    return out


def _int8_scales(values: np.ndarray, tensor) -> np.ndarray:
    """Symmetric int8 scales (zero point 0) along the converter's quantized dimension."""
    quant = tensor.quantization
    count, axis = len(quant.scale), quant.quantizedDimension
    zero_points = quant.zeroPoint if quant.zeroPoint is not None else []
    if np.any(np.asarray(zero_points) != 0) or count not in (1, values.shape[axis]) or (
            count > 1 and axis != 0):
        raise ExportError(f"unexpected int8 quantization of a weight {values.shape} ({count} "
                          f"scales on axis {axis}, zero points {set(np.asarray(zero_points))})")
    amax = np.zeros(values.shape[0] if count > 1 else 1, np.float32)
    for rows in _row_chunks(values.shape):
        block = np.abs(values[rows]).reshape(rows.stop - rows.start, -1).max(axis=1)
        if count > 1:
            amax[rows] = block
        else:
            amax[0] = max(amax[0], block.max())
    return np.where(amax > 0, amax / 127, 1.0).astype(np.float32)


def _quantize_int8(values: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """round-half-away-from-zero(values / scale) in [-127, 127], per row or per tensor."""
    out = np.empty(values.shape, np.int8)
    for rows in _row_chunks(values.shape):
        s = scale[rows].reshape((-1,) + (1,) * (values.ndim - 1)) if scale.size > 1 else scale[0]
        x = values[rows] / s
        out[rows] = np.clip(np.sign(x) * np.floor(np.abs(x) + 0.5), -127, 127)
    return out


def _row_chunks(shape):
    rows = max(1, CHUNK // max(1, int(np.prod(shape[1:]))))
    for start in range(0, shape[0], rows):
        yield slice(start, min(start + rows, shape[0]))
