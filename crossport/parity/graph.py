"""Facts read off the TensorFlow graph of a Keras model (what actually runs)."""

from __future__ import annotations

from collections import Counter

import keras

from crossport.parity.compare import keras_feed


def graph_op_counts(model: keras.Model) -> Counter:
    """Op-type counts of the traced TF graph of ``model(inputs, training=False)``."""
    import tensorflow as tf

    specs = [tf.TensorSpec(t.shape, t.dtype) for t in model.inputs]
    fn = tf.function(lambda *xs: model(keras_feed(xs), training=False))
    graph = fn.get_concrete_function(*specs).graph
    return Counter(op.type for op in graph.get_operations())


def graph_transposes(model: keras.Model) -> int:
    """How many Transpose ops the model's TF graph contains (boundary ones included)."""
    return graph_op_counts(model)["Transpose"]
