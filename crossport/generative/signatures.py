"""The Keras/TF side: one converted step model behind several named signatures.

Every signature (``prefill_<N>``, ``decode``) calls the same Keras model at a fixed chunk
length, so its variables are tracked once and the TFLite converter writes each weight
buffer once (measured: three signatures add a few KB of graph, not a second copy).

Signature inputs and outputs (batch 1; ``L`` = max_cache_len; one key and one value cache
per layer ``i``, each of shape ``[1, kv_heads, L, head_dim]``):

=============  =========================  =====================================================
name           dtype / shape              meaning
=============  =========================  =====================================================
tokens         int32 ``[1, N]``           token ids; a shorter prompt is padded (any id)
input_pos      int32 ``[N]``              cache position of each token: ``start + 0..N-1``
                                          (consecutive, ``start + N <= L``)
last_index     int32 ``[1]``              (prefill only) index in the chunk of the last real token
k_cache_<i>    float32 layer cache shape  layer i's keys written so far (zeros at the start)
v_cache_<i>    float32 layer cache shape  layer i's values written so far
logits (out)   float32 ``[1, vocab]``     next-token logits after ``tokens[last_index]``
k_cache_<i>    float32 layer cache shape  (out) the cache with this chunk written in; feed
                                          it back
v_cache_<i>    float32 layer cache shape  (out) idem
=============  =========================  =====================================================
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import keras

from crossport.export.tflite import run_converter

QUANTIZE = (None, "int8-weights", "fp16")
INPUTS = ("tokens", "input_pos", "last_index")  # then the cache tensors, k_cache_0 ...


def signature_names(prefill_lengths) -> dict[str, int]:
    """``{"prefill_8": 8, ..., "decode": 1}``: signature name -> chunk length."""
    names = {f"prefill_{n}": int(n) for n in sorted(set(prefill_lengths))}
    names["decode"] = 1
    return names


def build_archive(model: keras.Model, prefill_lengths, cache_names,
                  layer_cache_shape) -> keras.export.ExportArchive:
    """An ExportArchive tracking ``model`` once, with one endpoint per signature; the cache
    inputs/outputs are ``cache_names`` (``KVCacheStep.cache_names``), each of
    ``layer_cache_shape``."""
    import tensorflow as tf

    archive = keras.export.ExportArchive()
    archive.track(model)
    for name, length in signature_names(prefill_lengths).items():
        prefill = name != "decode"
        spec = [tf.TensorSpec([1, length], tf.int32, name="tokens"),
                tf.TensorSpec([length], tf.int32, name="input_pos")]
        if prefill:
            spec.append(tf.TensorSpec([1], tf.int32, name="last_index"))
        spec += [tf.TensorSpec(layer_cache_shape, tf.float32, name=n) for n in cache_names]
        archive.add_endpoint(name, _endpoint(model, prefill, list(cache_names)),
                             input_signature=spec)
    return archive


def _endpoint(model: keras.Model, prefill: bool, cache_names: list[str]):
    import tensorflow as tf

    def step(tokens, input_pos, last_index, *caches):
        logits, *written = model([tokens, input_pos, last_index, *caches], training=False)
        return {"logits": logits, **dict(zip(cache_names, written))}

    if prefill:
        return step

    def decode(tokens, input_pos, *caches):
        return step(tokens, input_pos, tf.zeros([1], tf.int32), *caches)

    return decode


def write_saved_model(archive, path: Path) -> None:
    archive.write_out(str(path), verbose=False)


def write_tflite(archive, path: Path, names, quantize: str | None) -> None:
    """One flatbuffer holding every signature; ``quantize`` as in :func:`export`."""
    import tensorflow as tf

    staging = Path(tempfile.mkdtemp(prefix="crossport-llm-"))
    try:
        write_saved_model(archive, staging / "saved_model")
        converter = tf.lite.TFLiteConverter.from_saved_model(str(staging / "saved_model"),
                                                             signature_keys=list(names))
        if quantize is not None:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]  # int8 weights, float math
        if quantize == "fp16":
            converter.target_spec.supported_types = [tf.float16]
        path.write_bytes(run_converter(converter.convert))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
