"""Recurrent layers as opaque ops during capture, so their sequence length can stay dynamic.

``torch.export`` traces ``aten.lstm`` (and gru/rnn) through its meta function, which loops
over the time steps and so fixes the sequence length. While capturing, ``nn.LSTM``/``GRU``/
``RNN`` call ``crossport::lstm`` and friends instead: custom ops with the aten schemas whose
fake (shape) functions keep every size symbolic, and whose real kernels are the aten ops,
so the exported program still computes exactly what torch does. The converter treats the
custom ops like their aten twins.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.modules.rnn as torch_rnn

from crossport.capture.packed import PaddedBatchSizes, rnn_output, run_packed

Tensor = torch.Tensor


@torch.library.custom_op("crossport::lstm", mutates_args=())
def lstm(input: Tensor, hx: list[Tensor], params: list[Tensor], has_biases: bool,
         num_layers: int, dropout: float, train: bool, bidirectional: bool,
         batch_first: bool) -> tuple[Tensor, Tensor, Tensor]:
    """``aten.lstm.input`` as one opaque op."""
    return torch.ops.aten.lstm.input(input, hx, params, has_biases, num_layers, dropout, train,
                                     bidirectional, batch_first)


@lstm.register_fake
def _lstm_fake(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
               batch_first):
    return (rnn_output(input, hx[0], bidirectional), hx[0].new_empty(hx[0].shape),
            hx[1].new_empty(hx[1].shape))


def _single_state_op(name: str, aten_op):
    """gru / rnn_tanh / rnn_relu: one hidden state ``hx``, outputs ``(output, h_n)``."""

    @torch.library.custom_op(f"crossport::{name}", mutates_args=())
    def op(input: Tensor, hx: Tensor, params: list[Tensor], has_biases: bool, num_layers: int,
           dropout: float, train: bool, bidirectional: bool,
           batch_first: bool) -> tuple[Tensor, Tensor]:
        return aten_op(input, hx, params, has_biases, num_layers, dropout, train,
                       bidirectional, batch_first)

    @op.register_fake
    def _fake(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
              batch_first):
        return rnn_output(input, hx, bidirectional), hx.new_empty(hx.shape)

    return op


gru = _single_state_op("gru", torch.ops.aten.gru.input)
rnn_tanh = _single_state_op("rnn_tanh", torch.ops.aten.rnn_tanh.input)
rnn_relu = _single_state_op("rnn_relu", torch.ops.aten.rnn_relu.input)

_OPAQUE = {"lstm": torch.ops.crossport.lstm, "gru": torch.ops.crossport.gru,
           "rnn_tanh": torch.ops.crossport.rnn_tanh, "rnn_relu": torch.ops.crossport.rnn_relu}


class _OpaqueVF:
    """Stands in for ``torch._VF`` inside ``torch.nn.modules.rnn`` during capture."""

    def __init__(self, vf):
        self._vf = vf

    def __getattr__(self, name):
        original = getattr(self._vf, name)
        if name not in _OPAQUE:
            return original

        def call(*args):
            if len(args) == 9 and isinstance(args[1], PaddedBatchSizes):  # a pack kept padded
                return run_packed(name, *args)
            # Only the padded-input overload: a list where ``.input`` has one (lstm's hx,
            # the others' params). PackedSequence's ``.data`` overload stays aten.
            if len(args) == 9 and isinstance(args[1 if name == "lstm" else 2], (list, tuple)):
                return _OPAQUE[name](*args)
            return original(*args)
        return call


@contextlib.contextmanager
def opaque_recurrent_ops() -> Iterator[None]:
    """Within the block, torch's RNN modules call the crossport custom ops."""
    original = torch_rnn._VF
    torch_rnn._VF = _OpaqueVF(original)
    try:
        yield
    finally:
        torch_rnn._VF = original
