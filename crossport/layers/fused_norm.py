"""``FusedBatchNormalization``: Keras' BatchNormalization, run by TF's fused kernel."""

from __future__ import annotations

from typing import Any

import keras


@keras.saving.register_keras_serializable(package="crossport")
class FusedBatchNormalization(keras.layers.BatchNormalization):
    """``keras.layers.BatchNormalization`` (same config and weights) whose inference on the
    TensorFlow backend is one ``FusedBatchNormV3`` op.

    Keras lowers inference BN to a few small ops plus a full-size multiply-add that Grappler
    cannot fold into the preceding conv; TF's remapper does fold ``Conv2D +
    FusedBatchNormV3`` (into ``_FusedConv2D``), and the TFLite converter folds it too. The
    raw op keeps the exact epsilon (``tf.nn.fused_batch_norm`` raises it to 1.001e-5).
    Training, other backends, other ranks or axes and non-float32 inputs run Keras' own
    code.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(2, 5, 5, 3)).astype("float32")
        >>> bn = FusedBatchNormalization(epsilon=1e-5)
        >>> ref = keras.layers.BatchNormalization(epsilon=1e-5)
        >>> bool(np.allclose(bn(x), ref(x), atol=1e-6))
        True
    """

    def call(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Any:
        if training or not self._fusable(inputs):
            return super().call(inputs, training=training, mask=mask)
        import tensorflow as tf

        channels = inputs.shape[-1]
        scale = self.gamma if self.scale else tf.ones([channels], inputs.dtype)
        offset = self.beta if self.center else tf.zeros([channels], inputs.dtype)
        y, *_ = tf.raw_ops.FusedBatchNormV3(
            x=inputs, scale=scale, offset=offset, mean=self.moving_mean,
            variance=self.moving_variance, epsilon=self.epsilon, is_training=False,
            data_format="NHWC")
        return y

    def _fusable(self, inputs: Any) -> bool:
        rank = len(inputs.shape)
        return (keras.backend.backend() == "tensorflow" and rank == 4
                and self.axis in (rank - 1, -1) and not self.synchronized
                and keras.backend.standardize_dtype(inputs.dtype) == "float32"
                and inputs.shape[-1] is not None)


@keras.saving.register_keras_serializable(package="crossport")
class StableLayerNormalization(keras.layers.LayerNormalization):
    """``keras.layers.LayerNormalization`` (same config and weights) computed as torch does:
    ``(x - mean) * rsqrt(var + eps) * gamma + beta``, with centered two-pass moments.

    Keras computes ``x * inv + (beta - mean * inv)`` with ``inv = rsqrt(var + eps) * gamma``:
    two more full-size multiplies than this form (LiteRT ran a Swin-sized LayerNorm ~40%
    faster this way). Means come from :func:`crossport.layers.reduction.stable_mean` (torch-like accuracy on long
    outer axes); half-precision inputs are normalised in float32 as Keras does.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(3.0, 2.0, size=(2, 5, 8)).astype("float32")
        >>> ln = StableLayerNormalization(epsilon=1e-5)
        >>> ref = keras.layers.LayerNormalization(epsilon=1e-5)
        >>> bool(np.allclose(ln(x), ref(x), atol=1e-5))
        True
    """

    def call(self, inputs: Any) -> Any:
        if self.rms_scaling:
            return super().call(inputs)
        from keras import ops

        from crossport.layers.reduction import stable_mean

        dtype = keras.backend.result_type(inputs.dtype, "float32")
        x = ops.cast(inputs, dtype)
        axes = sorted(a % len(x.shape) for a in
                      ([self.axis] if isinstance(self.axis, int) else self.axis))
        centered = x - stable_mean(x, axis=axes, keepdims=True)
        variance = stable_mean(ops.square(centered), axis=axes, keepdims=True)
        y = centered * ops.rsqrt(variance + self.epsilon)
        if self.scale:
            y = y * _broadcastable(ops.cast(self.gamma, dtype), axes, len(x.shape))
        if self.center:
            y = y + _broadcastable(ops.cast(self.beta, dtype), axes, len(x.shape))
        return ops.cast(y, self.compute_dtype)


def _broadcastable(param: Any, axes: list[int], rank: int) -> Any:
    """A LayerNorm parameter (shaped like the normalized axes) laid out to broadcast against
    the input; as it is over trailing axes (the usual case: no reshape op in the graph)."""
    if axes == list(range(rank - len(axes), rank)):
        return param
    return keras.ops.reshape(param, [param.shape[axes.index(a)] if a in axes else 1
                                     for a in range(rank)])
