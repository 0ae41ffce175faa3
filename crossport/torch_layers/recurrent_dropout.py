"""torch's ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (one layer, ``batch_first``) that train with
Keras' RNN dropout.

In ``eval()`` (or with both rates 0) each is exactly its torch base class: same parameters,
same kernel. In ``train()`` it runs Keras' cell with Keras' dropout masks (see
:func:`~crossport.torch_layers.recurrent.keras_dropout_masks`): the parameters, read in
Keras' layout (a differentiable view, so training updates them), go through
:class:`~crossport.torch_layers.recurrent.KerasLSTM` / ``KerasGRU`` / ``KerasSimpleRNN``; each
direction of a bidirectional layer draws its own masks, as Keras' two layers do.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call

from crossport.torch_layers.recurrent import KerasGRU, KerasLSTM, KerasSimpleRNN

__all__ = ["KerasDropoutGRU", "KerasDropoutLSTM", "KerasDropoutRNN"]


class _KerasDropout:
    """The mixin: ``forward`` is the base class's unless training with a rate > 0."""

    _twin: type
    _states = 1

    def _init_dropout(self, dropout: float, recurrent_dropout: float, per_gate: bool) -> None:
        self.keras_dropout, self.keras_recurrent_dropout = float(dropout), float(recurrent_dropout)
        self.per_gate = bool(per_gate)
        self._twins: dict = {}  # a plain dict: the twin is no submodule (no second weights)

    def forward(self, input, hx=None):  # noqa: A002 (torch's name)
        if not self.training or not (self.keras_dropout or self.keras_recurrent_dropout):
            return super().forward(input, hx)
        return self._keras_train(input, hx)

    def _keras_weights(self, suffix: str) -> dict[str, torch.Tensor]:
        """``kernel``, ``recurrent_kernel``, ``bias`` of one direction in Keras' layout."""
        w_ih, w_hh = getattr(self, f"weight_ih_l0{suffix}"), getattr(self, f"weight_hh_l0{suffix}")
        b_ih, b_hh = getattr(self, f"bias_ih_l0{suffix}"), getattr(self, f"bias_hh_l0{suffix}")
        return {"kernel": w_ih.T, "recurrent_kernel": w_hh.T, "bias": b_ih + b_hh}

    def _twin_module(self) -> nn.Module:
        if "twin" not in self._twins:
            # its initializers' draws would shift the user's random stream once, at the
            # first training call; its weights are never used (functional_call)
            with torch.random.fork_rng(devices=[]):
                self._twins["twin"] = self._make_twin(
                    return_sequences=True, return_state=True, dropout=self.keras_dropout,
                    recurrent_dropout=self.keras_recurrent_dropout, per_gate=self.per_gate)
        return self._twins["twin"].train()

    def _direction_states(self, hx, index: int):
        if hx is None:
            return None
        parts = hx if isinstance(hx, (tuple, list)) else (hx,)
        return [p[index] for p in parts]

    def _keras_train(self, x: torch.Tensor, hx):
        twin = self._twin_module()
        seqs, finals = [], []
        for index, suffix in enumerate(("", "_reverse")[: 1 + self.bidirectional]):
            run = x if index == 0 else x.flip(1)
            out = functional_call(twin, self._keras_weights(suffix),
                                  (run, self._direction_states(hx, index)))
            seqs.append(out[0] if index == 0 else out[0].flip(1))
            finals.append(out[1:])
        seq = torch.cat(seqs, dim=-1)
        states = [torch.stack([f[i] for f in finals]) for i in range(self._states)]
        return seq, (tuple(states) if self._states == 2 else states[0])

    def extra_repr(self) -> str:
        return (super().extra_repr() + f", keras_dropout={self.keras_dropout}, "
                f"keras_recurrent_dropout={self.keras_recurrent_dropout}, "
                f"per_gate={self.per_gate}")


class KerasDropoutLSTM(_KerasDropout, nn.LSTM):
    """``nn.LSTM(input_size, hidden_size, batch_first=True)`` that trains with Keras'
    ``LSTM(dropout, recurrent_dropout)`` masks.

    Example:
        >>> import torch
        >>> lstm = KerasDropoutLSTM(3, 4, dropout=0.5)
        >>> out, (h, c) = lstm.train()(torch.randn(2, 5, 3))
        >>> out.shape, h.shape
        (torch.Size([2, 5, 4]), torch.Size([1, 2, 4]))
    """

    _states = 2

    def __init__(self, input_size: int, hidden_size: int, bidirectional: bool = False, *,
                 dropout: float = 0.0, recurrent_dropout: float = 0.0,
                 per_gate: bool = False) -> None:
        super().__init__(input_size, hidden_size, batch_first=True, bidirectional=bidirectional)
        self._init_dropout(dropout, recurrent_dropout, per_gate)

    def _make_twin(self, **kwargs) -> nn.Module:
        return KerasLSTM(self.input_size, self.hidden_size, **kwargs)


_GRU_ORDER = (1, 0, 2)  # torch's (r, z, n) blocks in Keras' (z, r, h) order


def _keras_gates(a: torch.Tensor) -> torch.Tensor:
    blocks = a.chunk(3, dim=0)
    return torch.cat([blocks[i] for i in _GRU_ORDER], dim=0)


class KerasDropoutGRU(_KerasDropout, nn.GRU):
    """``nn.GRU(input_size, hidden_size, batch_first=True)`` that trains with Keras'
    ``GRU(reset_after=True, dropout, recurrent_dropout)`` masks.

    Example:
        >>> import torch
        >>> KerasDropoutGRU(3, 4, recurrent_dropout=0.5).train()(torch.randn(2, 5, 3))[0].shape
        torch.Size([2, 5, 4])
    """

    def __init__(self, input_size: int, hidden_size: int, bidirectional: bool = False, *,
                 dropout: float = 0.0, recurrent_dropout: float = 0.0,
                 per_gate: bool = False) -> None:
        super().__init__(input_size, hidden_size, batch_first=True, bidirectional=bidirectional)
        self._init_dropout(dropout, recurrent_dropout, per_gate)

    def _keras_weights(self, suffix: str) -> dict[str, torch.Tensor]:
        w_ih, w_hh = getattr(self, f"weight_ih_l0{suffix}"), getattr(self, f"weight_hh_l0{suffix}")
        b_ih, b_hh = getattr(self, f"bias_ih_l0{suffix}"), getattr(self, f"bias_hh_l0{suffix}")
        return {"kernel": _keras_gates(w_ih).T, "recurrent_kernel": _keras_gates(w_hh).T,
                "bias": torch.stack([_keras_gates(b_ih), _keras_gates(b_hh)])}

    def _make_twin(self, **kwargs) -> nn.Module:
        return KerasGRU(self.input_size, self.hidden_size, reset_after=True, **kwargs)


class KerasDropoutRNN(_KerasDropout, nn.RNN):
    """``nn.RNN(input_size, hidden_size, nonlinearity, batch_first=True)`` that trains with
    Keras' ``SimpleRNN(dropout, recurrent_dropout)`` masks.

    Example:
        >>> import torch
        >>> KerasDropoutRNN(3, 4, "relu", dropout=0.5).train()(torch.randn(2, 5, 3))[0].shape
        torch.Size([2, 5, 4])
    """

    def __init__(self, input_size: int, hidden_size: int, nonlinearity: str = "tanh",
                 bidirectional: bool = False, *, dropout: float = 0.0,
                 recurrent_dropout: float = 0.0, per_gate: bool = False) -> None:
        super().__init__(input_size, hidden_size, nonlinearity=nonlinearity, batch_first=True,
                         bidirectional=bidirectional)
        self._init_dropout(dropout, recurrent_dropout, per_gate)

    def _make_twin(self, **kwargs) -> nn.Module:
        kwargs.pop("per_gate")  # SimpleRNNCell draws one mask each
        return KerasSimpleRNN(self.input_size, self.hidden_size, self.nonlinearity, **kwargs)
