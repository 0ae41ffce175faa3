"""Torch-exact recurrent layers: ``LSTM``, ``GRU`` and ``RNN`` (pitfall 13).

Each layer takes torch's arguments (``input_size, hidden_size, num_layers, bias, batch_first,
dropout, bidirectional``), torch's tensor layouts and torch's return structure, and runs one
stock Keras layer per (layer, direction): ``keras.layers.LSTM``, ``keras.layers.GRU(
reset_after=True)`` or ``keras.layers.SimpleRNN`` (not unrolled). The weights live in those
inner layers in Keras' layout; ``from_torch`` converts torch's with the rules of
:mod:`crossport.weights` (``lstm_weights_to_keras``, ``gru_weights_to_keras``,
``rnn_weights_to_keras``).

Call and return structure (``D = 2`` if bidirectional else 1, ``L = num_layers``,
``H = hidden_size``; torch's shapes exactly):

* input: ``[T, N, F]`` (``batch_first=False``, torch's default), ``[N, T, F]``
  (``batch_first=True``) or unbatched ``[T, F]``;
* ``hx`` (optional, zeros if omitted): ``h_0 [D*L, N, H]`` for GRU/RNN, the tuple
  ``(h_0, c_0)`` for LSTM (``[D*L, H]`` each when unbatched);
* ``LSTM`` returns ``(output, (h_n, c_n))``, ``GRU`` and ``RNN`` return ``(output, h_n)``;
  ``output`` is ``[T, N, D*H]`` (``[N, T, D*H]`` with ``batch_first``; forward features then
  reverse features), ``h_n``/``c_n`` are ``[D*L, N, H]`` with index ``layer * D + direction``.

``dropout`` is torch's inter-layer dropout: applied (with Keras' RNG) only when called with
``training=True``; at inference it is the identity, as in torch's ``eval()`` mode, which is
the behaviour that parity is proven for.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from crossport.errors import InputError
from crossport.weights import gru_weights_to_keras, lstm_weights_to_keras, rnn_weights_to_keras


def _np(tensor: Any):
    return None if tensor is None else tensor.detach().cpu().numpy()


class _TorchRNNBase(keras.layers.Layer):
    """Stacked, optionally bidirectional torch RNN built on one Keras RNN layer per direction."""

    _states = 1
    _torch_class = ""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        name = type(self).__name__
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.num_layers = int(num_layers)
        self.use_bias = bool(bias)
        self.batch_first = bool(batch_first)
        self.dropout = float(dropout)
        self.bidirectional = bool(bidirectional)
        if self.input_size < 1 or self.hidden_size < 1 or self.num_layers < 1:
            raise InputError(f"{name}: input_size, hidden_size and num_layers must be positive.")
        if not 0.0 <= self.dropout <= 1.0:
            raise InputError(f"{name}: dropout must be in [0, 1], got {dropout}.")
        self.num_directions = 2 if self.bidirectional else 1
        # torch's default init: U(-1/sqrt(H), 1/sqrt(H)) for every weight and bias
        bound = 1.0 / math.sqrt(self.hidden_size)
        self._init = keras.initializers.RandomUniform(-bound, bound)
        self.cells = []
        for layer in range(self.num_layers):
            for direction in range(self.num_directions):
                suffix = "_reverse" if direction else ""
                self.cells.append(self._make_rnn(f"l{layer}{suffix}", bool(direction)))
        self._drop = keras.layers.Dropout(self.dropout) if self.dropout > 0 else None

    def _rnn_kwargs(self, name: str, go_backwards: bool) -> dict:
        return {
            "units": self.hidden_size,
            "use_bias": self.use_bias,
            "return_sequences": True,
            "return_state": True,
            "go_backwards": go_backwards,
            "kernel_initializer": self._init,
            "recurrent_initializer": self._init,
            "bias_initializer": self._init,
            "name": name,
        }

    def _make_rnn(self, name: str, go_backwards: bool) -> keras.layers.Layer:
        raise NotImplementedError

    def _layer_input_size(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.hidden_size * self.num_directions

    def build(self, input_shape: Any = None) -> None:
        if input_shape is not None and input_shape[-1] is not None and \
                input_shape[-1] != self.input_size:
            raise InputError(f"{type(self).__name__}: expected input_size {self.input_size} "
                             f"features, got input shape {tuple(input_shape)}.")
        for i, cell in enumerate(self.cells):
            if not cell.built:
                cell.build((None, None, self._layer_input_size(i // self.num_directions)))
        self.built = True

    def _split_states(self, hx: Any, unbatched: bool) -> list[list[Any]] | None:
        """``hx`` -> one list of Keras initial states ``[N, H]`` per inner layer."""
        if hx is None:
            return None
        states = list(hx) if self._states > 1 else [hx]
        if len(states) != self._states:
            raise InputError(f"{type(self).__name__}: hx must be "
                             f"{'(h_0, c_0)' if self._states > 1 else 'h_0'}.")
        expected = 2 if unbatched else 3
        for s in states:
            if len(s.shape) != expected:
                raise InputError(f"{type(self).__name__}: initial states must have rank "
                                 f"{expected} ([D*num_layers, N, H]), got shape {tuple(s.shape)}.")
        if unbatched:
            states = [ops.expand_dims(s, 1) for s in states]
        return [[s[i] for s in states] for i in range(len(self.cells))]

    def call(self, inputs: Any, hx: Any = None, training: bool | None = None) -> Any:
        rank = len(inputs.shape)
        if rank not in (2, 3):
            raise InputError(f"{type(self).__name__}: expected a [T, N, F], [N, T, F] or [T, F] "
                             f"input, got shape {tuple(inputs.shape)}.")
        unbatched = rank == 2
        if unbatched:
            x = ops.expand_dims(inputs, 0)
        else:
            x = inputs if self.batch_first else ops.transpose(inputs, (1, 0, 2))
        initial = self._split_states(hx, unbatched)
        finals: list[list[Any]] = []  # per inner layer: [h, (c)]
        d = self.num_directions
        for layer in range(self.num_layers):
            if layer and self._drop is not None:
                x = self._drop(x, training=training)
            outputs = []
            for direction in range(d):
                i = layer * d + direction
                kwargs = {} if initial is None else {"initial_state": initial[i]}
                y, *states = self.cells[i](x, **kwargs)
                if direction:  # go_backwards returns the outputs in reverse time order
                    y = ops.flip(y, axis=1)
                outputs.append(y)
                finals.append(states)
            x = outputs[0] if d == 1 else ops.concatenate(outputs, axis=-1)
        stacked = [ops.stack([f[k] for f in finals], axis=0) for k in range(self._states)]
        if unbatched:
            output = ops.squeeze(x, 0)
            stacked = [ops.squeeze(s, 1) for s in stacked]
        else:
            output = x if self.batch_first else ops.transpose(x, (1, 0, 2))
        if self._states == 2:
            return output, (stacked[0], stacked[1])
        return output, stacked[0]

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            input_size=self.input_size,
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            bias=self.use_bias,
            batch_first=self.batch_first,
            dropout=self.dropout,
            bidirectional=self.bidirectional,
        )
        return config

    @staticmethod
    def _to_keras(weight_ih, weight_hh, bias_ih, bias_hh):
        raise NotImplementedError

    @classmethod
    def _torch_args(cls, module: Any) -> dict:
        return {"input_size": module.input_size, "hidden_size": module.hidden_size,
                "num_layers": module.num_layers, "bias": module.bias,
                "batch_first": module.batch_first, "dropout": module.dropout,
                "bidirectional": module.bidirectional}

    @classmethod
    def from_torch(cls, module: Any) -> _TorchRNNBase:
        """The layer computing what ``module`` (the torch module of the same name) computes.

        Every ``weight_ih_l{k}[_reverse]``, ``weight_hh_...``, ``bias_ih_...``, ``bias_hh_...``
        is converted by the :mod:`crossport.weights` rule and set on the inner Keras layer.
        """
        if type(module).__name__ != cls._torch_class:
            raise InputError(f"{cls.__name__}.from_torch expects a torch.nn.{cls._torch_class}, "
                             f"got {type(module).__name__}.")
        layer = cls(**cls._torch_args(module))
        layer.build((None, None, module.input_size))
        d = layer.num_directions
        for i, cell in enumerate(layer.cells):
            suffix = f"l{i // d}{'_reverse' if i % d else ''}"
            kernel, recurrent, bias = cls._to_keras(
                _np(getattr(module, f"weight_ih_{suffix}")),
                _np(getattr(module, f"weight_hh_{suffix}")),
                _np(getattr(module, f"bias_ih_{suffix}", None)),
                _np(getattr(module, f"bias_hh_{suffix}", None)),
            )
            cell.set_weights([kernel, recurrent] + ([bias] if bias is not None else []))
        return layer


@keras.saving.register_keras_serializable(package="crossport")
class LSTM(_TorchRNNBase):
    """``torch.nn.LSTM`` (no ``proj_size``): returns ``(output, (h_n, c_n))`` like torch.

    Runs one ``keras.layers.LSTM`` per layer and direction (``self.cells``, index
    ``layer * D + direction``); gates ``(i, f, g, o)`` in both frameworks, Keras' single bias
    is ``bias_ih + bias_hh``. Call as ``layer(x, hx=(h_0, c_0))``; shapes in
    :mod:`crossport.layers.recurrent`.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(7, 2, 3)).astype("float32")  # T, N, F
        >>> output, (h_n, c_n) = LSTM(3, 5, num_layers=2, bidirectional=True)(x)
        >>> output.shape, h_n.shape, c_n.shape
        (TensorShape([7, 2, 10]), TensorShape([4, 2, 5]), TensorShape([4, 2, 5]))
    """

    _states, _torch_class = 2, "LSTM"

    def _make_rnn(self, name: str, go_backwards: bool) -> keras.layers.Layer:
        return keras.layers.LSTM(**self._rnn_kwargs(name, go_backwards), unit_forget_bias=False)

    @classmethod
    def from_torch(cls, module: Any) -> LSTM:
        if getattr(module, "proj_size", 0):
            raise InputError("LSTM.from_torch: proj_size > 0 is not supported.")
        return super().from_torch(module)  # type: ignore[return-value]

    @staticmethod
    def _to_keras(weight_ih, weight_hh, bias_ih, bias_hh):
        return lstm_weights_to_keras(weight_ih, weight_hh, bias_ih, bias_hh)


@keras.saving.register_keras_serializable(package="crossport")
class GRU(_TorchRNNBase):
    """``torch.nn.GRU``: returns ``(output, h_n)`` like torch.

    Runs one ``keras.layers.GRU(reset_after=True)`` per layer and direction (torch applies the
    reset gate after the recurrent matmul, which is Keras' ``reset_after=True``); torch's gates
    ``(r, z, n)`` become Keras' ``(z, r, h)`` via ``gru_weights_to_keras``. Call as
    ``layer(x, hx=h_0)``; shapes in :mod:`crossport.layers.recurrent`.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(2, 7, 3)).astype("float32")  # N, T, F
        >>> output, h_n = GRU(3, 4, batch_first=True)(x)
        >>> output.shape, h_n.shape
        (TensorShape([2, 7, 4]), TensorShape([1, 2, 4]))
    """

    _states, _torch_class = 1, "GRU"

    def _make_rnn(self, name: str, go_backwards: bool) -> keras.layers.Layer:
        return keras.layers.GRU(**self._rnn_kwargs(name, go_backwards), reset_after=True)

    @staticmethod
    def _to_keras(weight_ih, weight_hh, bias_ih, bias_hh):
        return gru_weights_to_keras(weight_ih, weight_hh, bias_ih, bias_hh)


@keras.saving.register_keras_serializable(package="crossport")
class RNN(_TorchRNNBase):
    """``torch.nn.RNN`` (Elman, ``nonlinearity`` ``'tanh'`` or ``'relu'``): ``(output, h_n)``.

    Runs one ``keras.layers.SimpleRNN`` per layer and direction; Keras' single bias is
    ``bias_ih + bias_hh``. Call as ``layer(x, hx=h_0)``.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(5, 3)).astype("float32")  # unbatched T, F
        >>> output, h_n = RNN(3, 4, nonlinearity="relu")(x)
        >>> output.shape, h_n.shape
        (TensorShape([5, 4]), TensorShape([1, 4]))
    """

    _states, _torch_class = 1, "RNN"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, **kwargs: Any):
        if nonlinearity not in ("tanh", "relu"):
            raise InputError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}.")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, **kwargs)

    def _make_rnn(self, name: str, go_backwards: bool) -> keras.layers.Layer:
        return keras.layers.SimpleRNN(**self._rnn_kwargs(name, go_backwards),
                                      activation=self.nonlinearity)

    def get_config(self) -> dict:
        config = super().get_config()
        config["nonlinearity"] = self.nonlinearity
        return config

    @classmethod
    def _torch_args(cls, module: Any) -> dict:
        return {**super()._torch_args(module), "nonlinearity": module.nonlinearity}

    @staticmethod
    def _to_keras(weight_ih, weight_hh, bias_ih, bias_hh):
        return rnn_weights_to_keras(weight_ih, weight_hh, bias_ih, bias_hh)
