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
