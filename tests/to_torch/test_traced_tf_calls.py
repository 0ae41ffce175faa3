"""Traced custom layers written for the TF backend the way keras_hub's are: raw TF calls on
their tensors (Qwen3's ``tf.linalg.band_part`` window, DeBERTa's ``tf.gather(batch_dims=3)``)
recorded as the keras.ops computing the same (``to_torch/rawtf.py``), any other refused
naming the function and the line; keras.ops on run-time sizes (``ops.minimum(n, w)``,
``ops.repeat`` by ``n``, XLNet's ``arange(klen, -qlen, -1.0)``); ``x == y`` between traced
tensors; a layer whose ``compute_output_shape`` declares another rank than its ``call``
returns, or an output it returns as None. Each converts at one size and is compared with
Keras at others."""

import keras
import pytest
import tensorflow as tf
import torch
from keras import ops

import crossport
from tests.to_torch.test_runtime_sizes import assert_at_sizes

L = keras.layers


class SlidingWindow(L.Layer):
    """Qwen3's sliding-window mask: ``tf.linalg.band_part`` of ``ops.ones((n, n))`` with
    the band ``ops.minimum(n, window - 1)`` (an int32 tensor of a run-time size)."""

    def __init__(self, window, **kwargs):
        super().__init__(**kwargs)
        self.window = window

    def call(self, x):
        n = ops.shape(x)[1]
        band = ops.cast(ops.minimum(n, self.window - 1), "int32")
        mask = tf.linalg.band_part(ops.ones((n, n), "bool"), band, band)
        lower = tf.linalg.band_part(x, -1, 0)      # static bounds, one negative
        upper = tf.linalg.band_part(x, 0, 1)
        scores = ops.where(mask[None], ops.einsum("bic,bjc->bij", x, x), -1e9)
        return ops.softmax(scores, axis=-1) + lower + upper[:, :, :1]


def test_band_part_with_a_band_of_a_runtime_size():
    x = keras.Input((None, None))
    model = keras.Model(x, SlidingWindow(3, name="window")(x))
    assert_at_sizes(model, (torch.randn(2, 6, 6),), [[(3, 2, 2)], [(1, 9, 9)]])


class RelativeScores(L.Layer):
    """DeBERTa's relative positions: ``ops.repeat`` by the run-time length,
    ``tf.gather(..., batch_dims=3)`` of the scores at clipped positions; plus ``tf.gather``
    without batch dims, ``tf.shape``, ``tf.cast`` and ``tf.reshape``."""

    def call(self, x):
        batch, n = ops.shape(x)[0], ops.shape(x)[1]
        ids = ops.arange(n)
        rows = ops.repeat(ops.expand_dims(ids, 0), repeats=n, axis=0)
        rel = ops.clip(ops.expand_dims(ids, -1) - rows + 2, 0, 3)
        scores = ops.einsum("bic,bjc->bij", x, x)[:, None]          # (b, 1, n, n)
        span = ops.broadcast_to(rel[None, None], (batch, 1, n, n))
        gathered = tf.gather(scores[..., :4], indices=span, batch_dims=3)
        taken = tf.gather(x, ops.convert_to_tensor([1, 0]), axis=2)
        length = tf.cast(tf.shape(x)[1], "float32")
        flat = tf.reshape(taken, (batch, n * 2))
        return ops.sum(gathered, axis=1) / length + ops.mean(flat, axis=-1)[:, None, None]


def test_gather_with_batch_dims_repeat_by_a_runtime_count_and_tf_shape():
    x = keras.Input((None, 4))
    model = keras.Model(x, RelativeScores(name="relative")(x))
    assert_at_sizes(model, (torch.randn(2, 6, 4),), [[(3, 5, 4)], [(1, 9, 4)]])


class EagerTimesTraced(L.Layer):
    """``tf.constant(...) * x``: TF's operator fails on the KerasTensor and hands over to
    ``KerasTensor.__rmul__`` (a keras.ops multiply)."""

    def call(self, x):
        return tf.constant([1.0, 2.0, 3.0]) * x - tf.math.exp(tf.constant(0.5))


def test_an_eager_tf_tensor_times_a_traced_tensor_is_a_keras_multiply():
    x = keras.Input((None, 3))
    model = keras.Model(x, EagerTimesTraced(name="eager")(x))
    assert_at_sizes(model, (torch.randn(2, 4, 3),), [[(3, 7, 3)]])


class Cumsum(L.Layer):
    def call(self, x):
        return tf.math.cumsum(x, axis=1)


class TensorArrayLoop(L.Layer):
    def call(self, x):
        out = tf.TensorArray(tf.float32, size=2)
        out = out.write(0, x)
        return out.stack()


@pytest.mark.parametrize("layer, message", [
    (Cumsum, r"applies tf.math.cumsum to a traced tensor \(at test_traced_tf_calls.py:\d+: "
             r"`return tf.math.cumsum\(x, axis=1\)`\), which crossport does not record"),
    (TensorArrayLoop, r"passes a traced tensor to TensorFlow code \(at "
                      r"test_traced_tf_calls.py:\d+: `out = out.write\(0, x\)`\), which cannot "
                      r"take a symbolic tensor")], ids=["unrecorded", "not-dispatched"])
def test_other_raw_tf_is_refused_naming_the_function_and_line(layer, message):
    x = keras.Input((None, 3))
    model = keras.Model(x, layer(name="raw")(x))
    with pytest.raises(crossport.UnsupportedLayerError, match=message):
        crossport.to_torch(model, (torch.randn(2, 4, 3),))


class XLNetLike(L.Layer):
    """XLNet's relative encoding: ``arange(klen, -qlen, -1.0)`` (a float step down from a
    run-time size), and its mask's diagonal ``ops.where(n == m, 1, 0)`` (``==`` of two
    traced tensors, identity on KerasTensors)."""

    def call(self, x):
        n = ops.shape(x)[1]
        positions = ops.arange(n, -n, -1.0, dtype="float32")       # 2n values
        i = ops.expand_dims(ops.arange(n), -1)
        diagonal = ops.cast(ops.where(i == ops.arange(n), 1, 0), "float32")
        encoding = ops.sin(positions[:, None] * ops.arange(1, 4, dtype="float32"))
        return ops.einsum("ij,bjc->bic", diagonal, x) + encoding[:n] + encoding[n:] * 2.0


def test_descending_float_arange_and_elementwise_equality():
    x = keras.Input((None, 3))
    model = keras.Model(x, XLNetLike(name="xlnet")(x))
    assert_at_sizes(model, (torch.randn(2, 5, 3),), [[(3, 2, 3)], [(1, 9, 3)]])


class MaskMaker(L.Layer):
    """Returns a 3-d mask and a None stream (or the mask twice), but declares 2-d outputs
    (XLNet's mask layer and encoder)."""

    def __init__(self, none=True, **kwargs):
        super().__init__(**kwargs)
        self.none = none

    def call(self, x):
        mask = ops.expand_dims(x, 1) * ops.expand_dims(x, 2)      # (b, n, n)
        return mask, None if self.none else mask

    def compute_output_shape(self, input_shape):
        return [input_shape, input_shape]


class MaskUser(L.Layer):
    """Expands the mask by the rank difference, as MultiHeadAttention's masked softmax."""

    def call(self, x, mask):
        scores = ops.einsum("bic,bjc->bij", x, x)[:, None]
        for _ in range(len(scores.shape) - len(mask.shape)):
            mask = ops.expand_dims(mask, 1)
        return ops.softmax(ops.where(mask > 0, scores, -1e9), axis=-1)


def _mask_model(read_none: bool, none: bool = True):
    x, keep = keras.Input((None, 3)), keras.Input((None,))
    mask, stream = MaskMaker(none, name="maker")(keep)
    out = MaskUser(name="user")(x, stream if read_none else mask)
    return keras.Model([x, keep], out)


@pytest.mark.parametrize("none", [True, False], ids=["and-none", "twice"])
def test_a_traced_output_is_taken_as_call_returns_it(none):
    """The consumer's stand-in is the 3-d mask the call returns, not the 2-d tensor
    Keras' graph declares (it expanded it once too often and crashed in torch)."""
    keep = torch.ones(2, 6)
    keep[1, -2:] = 0
    model = _mask_model(False, none)
    conv = crossport.to_torch_with_report(model, (torch.randn(2, 6, 3), keep))
    assert conv.report.passed


def test_reading_an_output_the_call_returns_as_none_is_refused():
    with pytest.raises(crossport.UnsupportedLayerError,
                       match="reads an output of maker that its call\\(\\) returns as None"):
        crossport.to_torch(_mask_model(True), (torch.randn(2, 6, 3), torch.ones(2, 6)))


def test_float64_diagnosis_with_the_models_own_float32_cast(monkeypatch):
    """The float64 re-run of a failing check kept the model's own ``.to(torch.float32)``
    casts and crashed (float32 into float64 weights) instead of naming the layer."""
    from crossport.to_torch.ops import norm
    from tests.to_torch.harness import make_live

    x = keras.Input((6, 6, 3), dtype="int32")
    y = L.BatchNormalization(name="bn")(L.Conv2D(4, 3)(ops.cast(x, "float32")))
    model = make_live(keras.Model(x, y))
    real = norm.nn.BatchNorm2d
    monkeypatch.setitem(norm._BN, 4, lambda c, eps, momentum: real(c, eps=0.5,
                                                                     momentum=momentum))
    with pytest.raises(crossport.ParityError) as err:
        crossport.to_torch(model, (torch.randint(0, 5, (2, 6, 6, 3), dtype=torch.int32),))
    assert err.value.report.first_divergent.node == "bn"


class Chunks(L.Layer):
    """A Python loop over a run-time count of chunks (Qwen3.5's delta rule), or over a
    static one."""

    def __init__(self, runtime, **kwargs):
        super().__init__(**kwargs)
        self.runtime = runtime

    def call(self, x):
        count = ops.shape(x)[1] // 2 if self.runtime else 2
        total = x[:, :1] * 0.0
        for i in range(count):
            total = total + x[:, i:i + 1]
        return total

    def compute_output_shape(self, shape):
        return (shape[0], 1, shape[2])


def test_a_loop_over_a_runtime_size_is_refused_naming_the_line():
    """It unrolled at the example's count: right only at lengths of that many chunks."""
    import sys

    x = keras.Input((None, 3))
    model = keras.Model(x, Chunks(True, name="chunks")(x))
    with pytest.raises(crossport.UnsupportedLayerError,
                       match=r"loops over a run-time size \(range\(\(shape\(.*\)\[1\] // 2\)\) "
                             r"\(at test_traced_tf_calls.py:\d+: `for i in range\(count\):`\)"):
        crossport.to_torch(model, (torch.randn(2, 6, 3),))
    assert "range" not in vars(sys.modules[__name__])  # the guard is undone


def test_a_loop_over_a_static_count_converts():
    x = keras.Input((None, 3))
    model = keras.Model(x, Chunks(False, name="chunks")(x))
    assert_at_sizes(model, (torch.randn(2, 6, 3),), [[(3, 4, 3)]])
