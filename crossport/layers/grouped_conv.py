"""``GroupedConv1D`` / ``GroupedConv2D``: Keras' convolutions, grouped convs run natively on TF.

Keras 3 runs every grouped convolution through an XLA-compiled function on the TensorFlow
backend, because TF's CPU kernels lacked grouped convolutions. TF's forward kernels have them
now (oneDNN and Eigen alike; bit-identical to the XLA result) and run 2-3x faster than the
XLA call at RegNet's shapes; only the CPU gradient without oneDNN is still missing. So the
forward is TF's own grouped ``Conv2D`` and its gradient is the XLA one Keras would use.
"""

from __future__ import annotations

import functools
from typing import Any

import keras


@functools.lru_cache(maxsize=None)
def _xla_conv(strides: tuple, padding: str, dilations: tuple):
    """The XLA-compiled grouped convolution (what Keras runs), for the gradient; one per
    configuration, so eager training steps do not recompile it."""
    import tensorflow as tf

    @tf.function(jit_compile=True, autograph=False)
    def conv(x, kernel):
        return tf.nn.convolution(x, kernel, strides, padding, dilations=dilations)

    return conv


def grouped_convolution(x: Any, kernel: Any, strides, padding: str, dilations) -> Any:
    """``tf.nn.convolution`` (channels-last) of a grouped ``kernel`` without XLA on the
    forward pass; gradients through the XLA-compiled op (CPU has no grouped backprop kernel
    without oneDNN)."""
    import tensorflow as tf

    strides, dilations, padding = _ints(strides), _ints(dilations), padding.upper()

    @tf.custom_gradient
    def forward(x, kernel):
        def grad(upstream):
            with tf.GradientTape() as tape:
                tape.watch([x, kernel])
                y = _xla_conv(strides, padding, dilations)(x, kernel)
            return tape.gradient(y, [x, kernel], output_gradients=upstream)

        return tf.nn.convolution(x, kernel, strides, padding, dilations=dilations), grad

    return forward(x, tf.convert_to_tensor(kernel))  # a value: the gradient reaches the variable


def _ints(value) -> int | tuple[int, ...]:
    return int(value) if isinstance(value, int) else tuple(int(v) for v in value)


def conv(x: Any, kernel: Any, strides, padding: str, dilation_rate) -> Any:
    """``keras.ops.conv`` on channels-last ``x``; a float32 grouped convolution on the
    TensorFlow backend runs TF's own op (:func:`grouped_convolution`), not an XLA call."""
    if _native(x, kernel):
        return grouped_convolution(x, kernel, strides, padding, dilation_rate)
    return keras.ops.conv(x, kernel, strides, padding, dilation_rate=dilation_rate)


def _native(x: Any, kernel: Any) -> bool:
    """A float32 grouped 1-D/2-D convolution on the TensorFlow backend."""
    return (keras.backend.backend() == "tensorflow" and len(x.shape) in (3, 4)
            and x.shape[-1] != kernel.shape[-2]
            and keras.backend.standardize_dtype(x.dtype) == "float32"
            and keras.backend.standardize_dtype(kernel.dtype) == "float32")


class _Grouped:
    """The ``call`` shared by the grouped Conv1D/Conv2D subclasses (Keras' Conv1D.call does
    not go through ``convolution_op``, so ``call`` itself is replaced)."""

    def call(self, inputs: Any) -> Any:
        if self.data_format != "channels_last" or not _native(inputs, self.kernel):
            return super().call(inputs)
        padding = self.padding
        if padding == "causal":  # Conv1D only, as Keras does it
            inputs = keras.ops.pad(inputs, self._compute_causal_padding())
            padding = "valid"
        y = grouped_convolution(inputs, self.kernel, self.strides, padding, self.dilation_rate)
        if self.use_bias:
            y = keras.ops.add(y, self.bias)  # channels-last: broadcasts over the last axis
        return self.activation(y) if self.activation is not None else y


@keras.saving.register_keras_serializable(package="crossport")
class GroupedConv1D(_Grouped, keras.layers.Conv1D):
    """``keras.layers.Conv1D`` (same config and weights) whose float32 grouped convolution
    on the TensorFlow backend is TF's own op rather than an XLA call.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(2, 9, 8)).astype("float32")
        >>> conv = GroupedConv1D(4, 3, groups=2)
        >>> y = conv(x)
        >>> ref = keras.layers.Conv1D(4, 3, groups=2)
        >>> _ = ref(x)
        >>> ref.set_weights(conv.get_weights())
        >>> bool(np.allclose(y, ref(x), atol=1e-6))
        True
    """


@keras.saving.register_keras_serializable(package="crossport")
class GroupedConv2D(_Grouped, keras.layers.Conv2D):
    """``keras.layers.Conv2D`` (same config and weights) whose float32 grouped convolution
    on the TensorFlow backend is TF's own op rather than an XLA call (RegNet's 16 grouped
    convs: 2-3x faster each in a TF graph; the TFLite file is the same).

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(1, 6, 6, 8)).astype("float32")
        >>> conv = GroupedConv2D(8, 3, groups=4)
        >>> y = conv(x)
        >>> ref = keras.layers.Conv2D(8, 3, groups=4)
        >>> _ = ref(x)
        >>> ref.set_weights(conv.get_weights())
        >>> bool(np.allclose(y, ref(x), atol=1e-6))
        True
    """
