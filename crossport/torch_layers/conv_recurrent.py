"""Keras ConvLSTM1D / 2D / 3D as a torch module (Keras' layout in and out).

Keras' ConvLSTMCell: per step ``z = conv(x_t, kernel) + bias + conv_same(h, recurrent_kernel)``
with gates ``(i, f, c, o)`` split along the filters, ``c = f * c + i * act(z_c)``,
``h = o * act(c)``; the input conv takes the layer's strides, dilation and padding (TF's
``SAME``: the odd pixel of padding after), the recurrent one stride 1 and ``SAME``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from crossport.errors import InputError
from crossport.torch_layers.activation import activation_name, keras_activation
from crossport.torch_layers.keras_weights import keras_array
from crossport.torch_layers.padding import same_paddings
from crossport.torch_layers.recurrent import keras_dropout_masks

__all__ = ["KerasConvLSTM"]

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


class KerasConvLSTM(nn.Module):
    """``keras.layers.ConvLSTM{1,2,3}D`` on ``[N, T, *spatial, C]`` (``channels_last``) or
    ``[N, T, C, *spatial]``; returns what Keras returns (``[output, h, c]`` with
    ``return_state``; the sequence reversed in time with ``go_backwards``, as Keras).

    Weights keep Keras' shapes: ``kernel [*k, C, 4F]``, ``recurrent_kernel [*k, F, 4F]``,
    ``bias [4F]``.
    """

    def __init__(self, rank: int, in_channels: int, filters: int, kernel_size, strides,
                 padding: str, dilation_rate, activation: str = "tanh",
                 recurrent_activation: str = "sigmoid", use_bias: bool = True,
                 return_sequences: bool = False, return_state: bool = False,
                 go_backwards: bool = False, channels_last: bool = True, *,
                 dropout: float = 0.0, recurrent_dropout: float = 0.0) -> None:
        super().__init__()
        # Keras' ConvLSTMCell in training: 4 masks each (one per gate), drawn once per call
        self.dropout, self.recurrent_dropout = float(dropout), float(recurrent_dropout)
        self.rank, self.filters = rank, filters
        self.kernel_size, self.strides = tuple(kernel_size), tuple(strides)
        self.padding, self.dilation_rate = padding, tuple(dilation_rate)
        self.activation = activation_name(activation)
        self.recurrent_activation = activation_name(recurrent_activation)
        self._act = keras_activation(self.activation)
        self._rec_act = keras_activation(self.recurrent_activation)
        self.return_sequences, self.return_state = return_sequences, return_state
        self.go_backwards, self.channels_last = go_backwards, channels_last
        self.kernel = nn.Parameter(torch.zeros(*self.kernel_size, in_channels, 4 * filters))
        self.recurrent_kernel = nn.Parameter(torch.zeros(*self.kernel_size, filters,
                                                         4 * filters))
        self.bias = nn.Parameter(torch.zeros(4 * filters)) if use_bias else None

    def _weight(self, kernel: torch.Tensor) -> torch.Tensor:
        """Keras ``[*k, in, out]`` -> torch ``[out, in, *k]``."""
        return kernel.permute(self.rank + 1, self.rank, *range(self.rank))

    def _conv(self, x, weight, strides, padding, dilation):
        if padding == "same":
            x = F.pad(x, same_paddings(x.shape[2:], self.kernel_size, strides, dilation))
        return _CONV[self.rank](x, weight, None, strides, 0, dilation)

    def _gate_convs(self, inputs, weight, strides, padding, dilation):
        """Each gate's conv of its own (dropped) input, concatenated along the filters."""
        return torch.cat([self._conv(x, w, strides, padding, dilation)
                          for x, w in zip(inputs, weight.chunk(4, dim=0))], dim=1)

    def forward(self, x: torch.Tensor, initial_state: list[torch.Tensor] | None = None):
        if x.ndim != self.rank + 3:
            raise InputError(f"expected a rank-{self.rank + 3} sequence, got {tuple(x.shape)}")
        if self.channels_last:  # [N, T, *S, C] -> [N, T, C, *S]
            x = x.movedim(-1, 2)
        if self.go_backwards:
            x = x.flip(1)
        w_in, w_rec = self._weight(self.kernel), self._weight(self.recurrent_kernel)
        ones = (1,) * self.rank
        states = None if initial_state is None else [
            s.movedim(-1, 1) if self.channels_last else s for s in initial_state]
        drops = self.training and (0.0 < self.dropout < 1.0 or 0.0 < self.recurrent_dropout < 1.0)
        in_masks = rec_masks = None
        if drops and 0.0 < self.dropout < 1.0:  # (Keras' cell skips rate 1)
            in_masks = keras_dropout_masks(x[:, 0], self.dropout, 4)
        outputs = []
        for t in range(x.shape[1]):
            if in_masks is None:
                z = self._conv(x[:, t], w_in, self.strides, self.padding, self.dilation_rate)
            else:
                z = self._gate_convs([x[:, t] * m for m in in_masks], w_in, self.strides,
                                     self.padding, self.dilation_rate)
            if self.bias is not None:
                z = z + self.bias.reshape(1, -1, *ones)
            if states is None:
                states = [z.new_zeros(z.shape[0], self.filters, *z.shape[2:])] * 2
            h, c = states
            if drops and rec_masks is None and 0.0 < self.recurrent_dropout < 1.0:
                rec_masks = keras_dropout_masks(h, self.recurrent_dropout, 4)
            if rec_masks is None:
                z = z + self._conv(h, w_rec, ones, "same", ones)
            else:
                z = z + self._gate_convs([h * m for m in rec_masks], w_rec, ones, "same", ones)
            z_i, z_f, z_c, z_o = torch.split(z, self.filters, dim=1)
            c = self._rec_act(z_f) * c + self._rec_act(z_i) * self._act(z_c)
            h = self._rec_act(z_o) * self._act(c)
            states = [h, c]
            outputs.append(h)
        if not outputs:
            raise InputError("empty sequence")
        out = torch.stack(outputs, 1) if self.return_sequences else outputs[-1]
        if self.channels_last:
            out = out.movedim(2 if self.return_sequences else 1, -1)
            states = [s.movedim(1, -1) for s in states]
        return [out, *states] if self.return_state else out

    @classmethod
    def from_keras(cls, layer) -> KerasConvLSTM:
        """Copy a built ``keras.layers.ConvLSTM{1,2,3}D``."""
        cfg, cell = layer.get_config(), layer.cell
        rank = len(cfg["kernel_size"])
        module = cls(rank, int(cell.kernel.shape[-2]), int(cfg["filters"]), cfg["kernel_size"],
                     cfg["strides"], cfg["padding"], cfg["dilation_rate"], cfg["activation"],
                     cfg["recurrent_activation"], cfg["use_bias"], cfg["return_sequences"],
                     cfg["return_state"], cfg["go_backwards"],
                     cfg["data_format"] == "channels_last", dropout=float(cell.dropout),
                     recurrent_dropout=float(cell.recurrent_dropout))
        with torch.no_grad():
            module.kernel.copy_(torch.from_numpy(keras_array(cell.kernel)))
            module.recurrent_kernel.copy_(torch.from_numpy(keras_array(cell.recurrent_kernel)))
            if module.bias is not None:
                module.bias.copy_(torch.from_numpy(keras_array(cell.bias)))
        return module
