"""Weight layout rules between PyTorch and Keras, one small invertible function pair each.

Every rule is a pure numpy function; ``*_to_keras`` and ``*_from_keras`` are exact inverses
(bit-exact round trips, tested). Converters and ``from_torch`` constructors call these
instead of inlining transposes, so a layout fact lives in exactly one place.
"""

from crossport.weights.rules import (
    conv_transpose_weight_from_keras,
    conv_transpose_weight_to_keras,
    conv_weight_from_keras,
    conv_weight_to_keras,
    dense_weight_from_keras,
    dense_weight_to_keras,
    depthwise_weight_from_keras,
    depthwise_weight_to_keras,
    flat_feature_order,
    gru_weights_from_keras,
    gru_weights_to_keras,
    lstm_weights_from_keras,
    lstm_weights_to_keras,
    rnn_weights_from_keras,
    rnn_weights_to_keras,
)

__all__ = [
    "conv_transpose_weight_from_keras",
    "conv_transpose_weight_to_keras",
    "conv_weight_from_keras",
    "conv_weight_to_keras",
    "dense_weight_from_keras",
    "dense_weight_to_keras",
    "depthwise_weight_from_keras",
    "depthwise_weight_to_keras",
    "flat_feature_order",
    "gru_weights_from_keras",
    "gru_weights_to_keras",
    "lstm_weights_from_keras",
    "lstm_weights_to_keras",
    "rnn_weights_from_keras",
    "rnn_weights_to_keras",
]
