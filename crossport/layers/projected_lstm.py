"""An LSTM with a projected hidden state: torch's ``nn.LSTM(proj_size=P)`` as a Keras layer.

torch's projection (arXiv:1402.1128) multiplies each step's hidden state by
``weight_hr [P, H]``: ``h_t = W_hr (o_t * tanh(c_t))``, so ``h_t`` (the output and the
recurrent input) has ``P`` features while the cell state ``c_t`` keeps ``H``. Keras' LSTM has
no projection; :class:`ProjectedLSTM` is ``keras.layers.RNN`` over
:class:`ProjectedLSTMCell`, Keras' own LSTM cell with that one matmul added, so it masks,
runs backwards and returns states like ``keras.layers.LSTM``.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="crossport")
class ProjectedLSTMCell(keras.layers.LSTMCell):
    """Keras' LSTM cell whose hidden state is projected to ``proj_size`` features.

    States ``[h [N, proj_size], c [N, units]]``; weights ``kernel [F, 4*units]``,
    ``recurrent_kernel [proj_size, 4*units]``, ``bias [4*units]``, ``projection
    [units, proj_size]`` (torch's ``weight_hr`` transposed). Gates are Keras' (and torch's)
    ``i, f, c, o`` order.

    Example:
        >>> import keras
        >>> cell = ProjectedLSTMCell(6, proj_size=3)
        >>> h, (h_again, c) = cell(keras.ops.zeros((2, 4)), [keras.ops.zeros((2, 3)),
        ...                                                 keras.ops.zeros((2, 6))])
        >>> tuple(h.shape), tuple(c.shape)
        ((2, 3), (2, 6))
    """

    def __init__(self, units: int, proj_size: int, **kwargs: Any):
        super().__init__(units, **kwargs)
        self.proj_size = int(proj_size)
        self.state_size = [self.proj_size, self.units]
        self.output_size = self.proj_size

    def build(self, input_shape):
        gates = 4 * self.units
        self.kernel = self.add_weight(shape=(input_shape[-1], gates), name="kernel",
                                      initializer=self.kernel_initializer)
        self.recurrent_kernel = self.add_weight(shape=(self.proj_size, gates),
                                                name="recurrent_kernel",
                                                initializer=self.recurrent_initializer)
        self.bias = self.add_weight(shape=(gates,), name="bias",
                                    initializer=self.bias_initializer) if self.use_bias else None
        self.projection = self.add_weight(shape=(self.units, self.proj_size),
                                          name="projection",
                                          initializer=self.kernel_initializer)
        self.built = True

    def call(self, inputs, states, training=False):
        h, (_, c) = super().call(inputs, states, training=training)
        h = ops.matmul(h, self.projection)
        return h, [h, c]

    def get_config(self) -> dict:
        return {**super().get_config(), "proj_size": self.proj_size}


@keras.saving.register_keras_serializable(package="crossport")
class ProjectedLSTM(keras.layers.RNN):
    """``keras.layers.LSTM`` with torch's ``proj_size``: an RNN over :class:`ProjectedLSTMCell`.

    Example:
        >>> import keras
        >>> layer = ProjectedLSTM(6, proj_size=3, return_sequences=True, return_state=True)
        >>> out, h, c = layer(keras.ops.zeros((2, 5, 4)))
        >>> tuple(out.shape), tuple(h.shape), tuple(c.shape)
        ((2, 5, 3), (2, 3), (2, 6))
    """

    def __init__(self, units: int, proj_size: int, use_bias: bool = True,
                 return_sequences: bool = False, return_state: bool = False,
                 go_backwards: bool = False, **kwargs: Any):
        cell = ProjectedLSTMCell(units, proj_size, use_bias=use_bias, implementation=2,
                                 dtype=kwargs.get("dtype"), name="projected_lstm_cell")
        super().__init__(cell, return_sequences=return_sequences, return_state=return_state,
                         go_backwards=go_backwards, **kwargs)
        self.units, self.proj_size, self.use_bias = int(units), int(proj_size), bool(use_bias)

    def get_config(self) -> dict:
        config = {k: v for k, v in super().get_config().items() if k != "cell"}
        return {**config, "units": self.units, "proj_size": self.proj_size,
                "use_bias": self.use_bias}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**config)  # the cell is made from units and proj_size, not deserialized
