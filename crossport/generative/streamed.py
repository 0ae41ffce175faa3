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
from crossport.export.tagged import MIN_ELEMENTS, TAG_STEP, TaggedWeight, tag_of


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
                 if (w := tag_of(model.buffers[tensor.buffer].data, tensor, self.weights,
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
