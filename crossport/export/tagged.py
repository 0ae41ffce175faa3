"""Weights as tagged splats: convert a graph without its weights, then place them.

TF's TFLite converter keeps a *splat* constant (one value repeated) as one value, so a graph
whose large weights are splats converts without the converter copying, folding and
serialising the weight bytes (ViT-B: 4.5 s instead of 8.2). Each weight gets its own splat
value, a *tag*; in the converter's flatbuffer every tagged tensor is found by its tag and
pointed at a new buffer holding the real values in the layout its consumer reads, by
TFLite's op semantics: a ``FULLY_CONNECTED`` weight is ``[out, in]`` (the Dense kernel
transposed), every other consumer reads the Keras array as it is. A weight the converter
transformed (folded into another constant) leaves no tag: that is an ``ExportError``.

Used by the generative export (``crossport.generative.streamed``, int8/fp16/fp32) and by
``crossport.export`` for float TFLite files (:func:`write_tflite`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from crossport.errors import ExportError
from crossport.weights.rules import permuted

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
    variable: object = None  # the Keras variable (float exports: replaced in the graph)



def fill_weights(data: bytes, path: Path, weights: list[TaggedWeight],
                 consumers: frozenset | None = None) -> None:
    """Writes the converter's flatbuffer ``data`` to ``path`` with each tagged weight in a
    buffer of its own, or raises an ``ExportError`` naming the weights it cannot place.

    The converter shares one buffer among tensors of equal contents (every int8 splat is
    all 127s), so tagged tensors are found by their own tag (value, or int8 scale x 127)
    and pointed at a new buffer holding the real weight; the splat buffers are emptied.
    ``consumers``: the only (op, input index) pairs allowed to read a tagged weight.
    """
    problems = place_weights(data, path, weights, consumers)
    if problems:
        name, why = next(iter(problems.items()))
        raise ExportError(
            f"the tagged TFLite writer cannot place weight {name} ({why}; {len(problems)} "
            "such weights); export with format='saved_model', or report this with the "
            "model's config")


def place_weights(data: bytes, path: Path, weights: list[TaggedWeight],
                  consumers: frozenset | None = None) -> dict[str, str]:
    """:func:`fill_weights`, returning ``{weight name: why it cannot be placed}`` instead
    of raising; ``path`` is written only when that is empty."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(data, 0)
    graph_bytes = len(data)
    del data
    placed: dict[str, tuple] = {}  # weight -> (its new buffer, tensor shape, int8 scales)
    problems: dict[str, str] = {}
    replaced: set[int] = set()
    for graph in model.subgraphs:
        filled = _constant_fills(model, graph, weights, schema)
        users = _users(model, graph, schema)
        for t, tensor in enumerate(graph.tensors):
            weight = filled.get(t) or tag_of(model.buffers[tensor.buffer].data, tensor,
                                             weights, schema)
            if weight is None or weight.name in problems:
                continue
            replaced.add(tensor.buffer)
            if weight.name not in placed:
                found = _consumers(users, t)
                if consumers is not None and not found <= consumers:
                    problems[weight.name] = f"read by {sorted(found)}"
                    continue
                try:
                    make, scales = _weight_data(tensor, weight, found, schema)
                except ExportError as exc:
                    problems[weight.name] = str(exc)
                    continue
                itemsize = 1 if scales is not None else (
                    4 if tensor.type == schema.TensorType.FLOAT32 else 2)
                model.buffers.append(_AlignedBuffer(make, itemsize * int(np.prod(tensor.shape))))
                placed[weight.name] = (len(model.buffers) - 1, tuple(tensor.shape), scales)
            index, shape, scales = placed[weight.name]
            if tuple(tensor.shape) != shape:
                problems[weight.name] = f"read as {shape} and as {tuple(tensor.shape)}"
                continue
            if scales is not None:
                tensor.quantization.scale = scales
            tensor.buffer = index
    for w in weights:
        if w.name not in placed and w.name not in problems:
            problems[w.name] = "the converter folded it into another constant"
    if problems:
        return problems
    freed = 0
    for index in replaced - {entry[0] for entry in placed.values()}:
        freed += len(model.buffers[index].data if model.buffers[index].data is not None else ())
        model.buffers[index].data = None
    size = graph_bytes - freed + sum(b.size + 16 for b in model.buffers
                                     if isinstance(b, _AlignedBuffer))
    builder = flatbuffers.Builder(size + (1 << 20))  # sized once: growing copies it
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    del model
    with open(path, "wb") as file:
        file.write(memoryview(builder.Bytes)[builder.Head():])
    return {}


class _AlignedBuffer:
    """A ``BufferT`` whose data (from ``make()`` at pack time) starts 16-byte aligned, as
    the converter writes it."""

    data = None  # not read as a tag: its bytes exist only while packing

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


def _constant_fills(model, graph, weights, schema) -> dict[int, TaggedWeight]:
    """Removes the ``FILL`` ops of constant shape and value from ``graph`` (the converter
    emits them for large splat constants when asked to, see :func:`unfold_splats`):
    a tag's output tensor is returned for placing, any other becomes a constant buffer
    holding the filled value (what the converter would otherwise have written).
    ``{output tensor index: weight}``."""
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in model.operatorCodes]
    found: dict[int, TaggedWeight] = {}
    kept = []
    for op in graph.operators or []:
        if codes[op.opcodeIndex] != schema.BuiltinOperator.FILL:
            kept.append(op)
            continue
        shape, value = (_constant(model, graph, int(t), schema) for t in op.inputs[:2])
        if shape is None or value is None or value.size != 1:
            kept.append(op)
            continue
        out = int(op.outputs[0])
        tensor = graph.tensors[out]
        filled = np.full(tuple(int(d) for d in shape), value.reshape(()), value.dtype)
        weight = tag_of(filled.reshape(-1)[:MIN_ELEMENTS].view(np.uint8) if filled.size >=
                        MIN_ELEMENTS else None, tensor, weights, schema)
        if weight is not None and tuple(filled.shape) == tuple(tensor.shape):
            found[out] = weight
        else:
            model.buffers.append(_AlignedBuffer(lambda filled=filled: filled, filled.nbytes))
            tensor.buffer = len(model.buffers) - 1
    graph.operators = kept
    return found


def _constant(model, graph, t: int, schema) -> np.ndarray | None:
    """The value of constant tensor ``t`` (None if it has no data)."""
    tensor = graph.tensors[t]
    data = model.buffers[tensor.buffer].data
    types = {schema.TensorType.FLOAT32: np.float32, schema.TensorType.FLOAT16: np.float16,
             schema.TensorType.INT32: np.int32, schema.TensorType.INT64: np.int64}
    if data is None or len(data) == 0 or tensor.type not in types:
        return None
    return np.asarray(data, np.uint8).view(types[tensor.type])


def unfold_splats(converter) -> None:
    """Asks TF's converter to emit large splat constants as ``FILL`` ops instead of writing
    them out at full size (2-3 s of GPT-2 small's conversion); :func:`place_weights` turns
    them back into constants. A TF without the option writes them out as before."""
    if hasattr(converter, "_experimental_unfold_large_splat_constant"):
        converter._experimental_unfold_large_splat_constant = True


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


def tag_of(data, tensor, weights, schema) -> TaggedWeight | None:
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
    # a list without some weights (those kept real after a first attempt): by value
    return next((w for w in weights if abs(w.tag - value) < TAG_STEP / 8), None)


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
        return permuted(weight.source(), (1, 0)) if transpose else weight.source()

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
    if values.dtype == dtype and values.flags.c_contiguous:
        return values
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


# -- float TFLite files of converted models ------------------------------------------------
# Ops whose weight operand has a layout fixed by TFLite's spec: FULLY_CONNECTED's weights
# are [out, in] (the Dense kernel transposed), GATHER's params are the table as it is.
KNOWN_CONSUMERS = frozenset({("FULLY_CONNECTED", 1), ("GATHER", 0)})


def select(model) -> list[TaggedWeight]:
    """The weights a float TFLite export converts as tagged splats: the kernels of Dense
    layers and the tables of Embedding layers (large float32 matrices). Conv kernels stay
    real: TF folds BatchNorm into them, which a tag would not survive."""
    import keras

    chosen = []
    for layer in _layers(model):
        if isinstance(layer, keras.layers.Dense):
            if _scaled_after(layer):
                continue  # TF folds the scale into the kernel: no tag would survive
            variable = layer.kernel
        elif isinstance(layer, keras.layers.Embedding):
            variable = layer.embeddings
        else:
            continue
        if (variable.dtype == "float32" and len(variable.shape) == 2
                and int(np.prod(variable.shape)) >= MIN_ELEMENTS):
            chosen.append(variable)
    return [TaggedWeight(v.path, 1 + (i + 1) * TAG_STEP, tuple(v.shape),
                         lambda v=v: np.asarray(v.numpy()), variable=v)
            for i, v in enumerate(chosen[:1500])]


_SHAPE_ONLY = {"Reshape", "Transpose", "Permute", "ExpandDims", "Squeeze"}
_SCALES = {"Multiply", "Divide", "TrueDivide", "BatchNormalization",
           "FusedBatchNormalization"}


def _scaled_after(layer, depth: int = 0) -> bool:
    """Whether ``layer``'s output goes only, through shape-only ops, to a product with a
    constant or a norm: the TFLite converter folds those into the preceding kernel (BERT's
    query projection times 1/sqrt(d)); an output read elsewhere too is not folded (GPT-2's
    ``0.5 * x * (1 + tanh(...))``)."""
    import keras

    nodes = getattr(layer, "_outbound_nodes", [])
    if len(nodes) != 1:
        return False
    for node in nodes:
        op = node.operation
        name = type(op).__name__
        if name in _SCALES:
            args = getattr(getattr(node, "arguments", None), "args", ())
            if "Normalization" in name or any(not isinstance(a, keras.KerasTensor)
                                              for a in args):
                return True
        elif name in _SHAPE_ONLY and depth < 4 and _scaled_after(op, depth + 1):
            return True
    return False


def _layers(model):
    for layer in model.layers:
        yield layer
        if hasattr(layer, "layers"):
            yield from _layers(layer)


def place(data: bytes, path: Path, weights: list[TaggedWeight]) -> set[str]:
    """Write the converter's ``data`` to ``path`` with the real weights in place of their
    tags. Returns the weights it could not place by TFLite's op semantics (the converter
    folded them into another constant, or an op not in ``KNOWN_CONSUMERS`` reads them);
    then nothing is written and the caller converts again with those weights real."""
    return set(place_weights(data, path, weights, KNOWN_CONSUMERS))
