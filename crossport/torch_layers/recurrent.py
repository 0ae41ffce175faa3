"""Keras LSTM / GRU as torch modules with Keras' parameter layout (pitfall 13).

Parameters keep Keras' names and shapes so a checkpoint copies over as is: ``kernel
[F, G*U]``, ``recurrent_kernel [U, G*U]``, ``bias`` with gates in Keras' order: LSTM
``(i, f, c, o)`` and one bias ``[4U]``; GRU ``(z, r, h)`` and, with ``reset_after=True``
(Keras 3 default), two biases ``[2, 3U]`` (input, recurrent). Inputs are ``[N, T, F]``
(Keras' batch-major layout, torch's ``batch_first=True``).

For torch's ``nn.LSTM``: ``weight_ih = kernel.T`` (same gate order), ``bias_ih = bias``,
``bias_hh = 0``. For ``nn.GRU``: swap the ``z`` and ``r`` blocks and transpose.
"""

from __future__ import annotations

import torch
from torch import nn

from crossport.errors import InputError
from crossport.torch_layers.activation import activation_name, keras_activation
from crossport.torch_layers.keras_weights import keras_array

__all__ = ["KerasGRU", "KerasLSTM", "KerasSimpleRNN", "keras_dropout_masks", "keras_dropout_spec"]


def keras_dropout_masks(like: torch.Tensor, rate: float, count: int) -> list[torch.Tensor]:
    """Keras' ``DropoutRNNCell`` masks: ``count`` independent ``dropout(ones_like(like))``
    draws (TF: ``float32(1 / (1 - rate))`` where ``U[0, 1) >= rate``, else 0; zeros at
    ``rate=1``), drawn once per call and used at every time step."""
    if rate >= 1.0:
        return [torch.zeros_like(like) for _ in range(count)]
    scale = torch.tensor(1.0 / (1.0 - rate), dtype=like.dtype, device=like.device)
    zero = torch.zeros((), dtype=like.dtype, device=like.device)
    return [torch.where(torch.rand(like.shape, dtype=like.dtype, device=like.device) >= rate,
                        scale, zero) for _ in range(count)]


def keras_dropout_spec(cell) -> dict:
    """A Keras RNN cell's dropout as the torch modules take it (``per_gate``: Keras'
    ``implementation=1``, one mask per gate, which the cell marks by ``dropout_mask_count``)."""
    return {"dropout": float(cell.dropout), "recurrent_dropout": float(cell.recurrent_dropout),
            "per_gate": getattr(cell, "dropout_mask_count", None) is not None}


def _masked_blocks(h: torch.Tensor, masks: list[torch.Tensor], kernel: torch.Tensor):
    """``(h * mask_g) @ kernel_g`` for each gate's column block, concatenated (Keras'
    ``implementation=1``: one mask per gate; one mask = the whole kernel)."""
    blocks = kernel.chunk(len(masks), dim=1)
    return torch.cat([(h * m) @ k for m, k in zip(masks, blocks)], dim=-1)


def _recurrent_product(h: torch.Tensor, kernel: torch.Tensor,
                       masks: list[torch.Tensor] | None) -> torch.Tensor:
    """``h @ kernel``; with recurrent dropout ``masks``, each gate's block reads its own
    dropped ``h`` (``_masked_blocks``)."""
    return h @ kernel if masks is None else _masked_blocks(h, masks, kernel)


class _KerasRNN(nn.Module):
    _gates = 1
    _states = 1

    def __init__(
        self,
        input_size: int,
        units: int,
        activation: str = "tanh",
        recurrent_activation: str = "sigmoid",
        use_bias: bool = True,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        bias_shape: tuple[int, ...] | None = None,
        *,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
        per_gate: bool = False,
    ) -> None:
        super().__init__()
        g = self._gates
        # Keras' cell dropout in train(): rates and whether each gate draws its own masks
        # (``implementation=1``, forced by ``recurrent_dropout``)
        self.dropout, self.recurrent_dropout = float(dropout), float(recurrent_dropout)
        self.per_gate = bool(per_gate) or (g > 1 and self.recurrent_dropout != 0.0)
        self.input_size, self.units = input_size, units
        self.return_sequences, self.return_state, self.go_backwards = (
            return_sequences,
            return_state,
            go_backwards,
        )
        self.activation = activation_name(activation)
        self.recurrent_activation = activation_name(recurrent_activation)
        self._act = keras_activation(self.activation)
        self._rec_act = keras_activation(self.recurrent_activation)
        self.kernel = nn.Parameter(torch.empty(input_size, g * units))
        self.recurrent_kernel = nn.Parameter(torch.empty(units, g * units))
        self.bias = nn.Parameter(torch.zeros(bias_shape or (g * units,))) if use_bias else None
        nn.init.xavier_uniform_(self.kernel)  # Keras: glorot_uniform / orthogonal / zeros
        nn.init.orthogonal_(self.recurrent_kernel)

    def _step(self, zx: torch.Tensor, states: list[torch.Tensor],
              masks: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """One time step from the projected input ``zx``; ``masks`` (recurrent dropout in
        training, one per gate or one in all) drop the previous output where it is read."""
        raise NotImplementedError

    @staticmethod
    def _applies(rate: float) -> bool:
        """Whether the Keras cell drops at ``rate`` in training (LSTM/GRU cells: only
        ``0 < rate < 1``; SimpleRNNCell overrides)."""
        return 0.0 < rate < 1.0

    def _input_bias(self) -> torch.Tensor | None:
        return self.bias

    def _mask_count(self) -> int:
        return self._gates if self.per_gate else 1

    def _dropout_run(self, x: torch.Tensor, states: list[torch.Tensor]):
        """(projected inputs, step function) of a training call: Keras draws the masks once
        per call from the first step's input and the initial state, the same at every step."""
        step = self._step
        if self._applies(self.dropout):
            masks = keras_dropout_masks(x[:, 0], self.dropout, self._mask_count())
            projected = _masked_blocks(x, [m.unsqueeze(1) for m in masks], self.kernel)
            bias = self._input_bias()
            projected = projected if bias is None else projected + bias
        else:
            projected = self._input_projection(x)
        if self._applies(self.recurrent_dropout):
            rec = keras_dropout_masks(states[0], self.recurrent_dropout, self._mask_count())

            def step(zx, s):
                return self._step(zx, s, rec)
        return projected, step

    def _input_projection(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ kernel + bias`` for every time step at once (GRU splits its bias)."""
        z = x @ self.kernel
        return z + self.bias if self.bias is not None else z

    def forward(self, x: torch.Tensor, initial_state: list[torch.Tensor] | None = None,
                mask: torch.Tensor | None = None, zero_output_for_mask: bool = False):
        """Run over ``x [N, T, F]``; returns what the Keras layer returns.

        Output: ``[N, T, U]`` if ``return_sequences`` else ``[N, U]``; with ``return_state``
        a list ``[output, *states]`` (LSTM: ``h, c``; GRU/SimpleRNN: ``h``). With
        ``go_backwards`` the sequence is processed and returned in reverse time order.
        ``mask [N, T]`` (Keras' masks, TF's rule): a masked step keeps the previous states and
        repeats the previous output (zeros with ``zero_output_for_mask``, as Bidirectional
        sets for sequences); the last output is the last step's.
        """
        if x.ndim != 3:
            raise InputError(f"expected [N, T, F], got shape {tuple(x.shape)}")
        n = x.shape[0]
        if initial_state is None:
            states = [x.new_zeros(n, self.units) for _ in range(self._states)]
        else:
            states = [initial_state] if torch.is_tensor(initial_state) else list(initial_state)
            if len(states) != self._states:
                raise InputError(
                    f"expected {self._states} initial state tensors, got {len(states)}"
                )
        if self.go_backwards:
            x = x.flip(1)
            mask = None if mask is None else mask.flip(1)
        step = self._step
        if self.training and (self.dropout or self.recurrent_dropout):
            projected, step = self._dropout_run(x, states)
        else:  # x @ kernel (+ input bias) for all steps at once
            projected = self._input_projection(x)
        outputs = []
        for t in range(x.shape[1]):
            new = step(projected[:, t], states)
            if mask is None:
                states = new
                outputs.append(states[0])
                continue
            keep = mask[:, t].bool().unsqueeze(-1)
            held = torch.zeros_like(new[0]) if zero_output_for_mask or not outputs \
                else outputs[-1]
            outputs.append(torch.where(keep, new[0], held))
            states = [torch.where(keep, s_new, s_old) for s_new, s_old in zip(new, states)]
        if not outputs:
            raise InputError("empty sequence")
        out = torch.stack(outputs, 1) if self.return_sequences else outputs[-1]
        return [out, *states] if self.return_state else out

    @classmethod
    def _config(cls, layer) -> dict:
        cfg = layer.get_config()
        if cfg.get("stateful"):
            raise InputError(f"{layer.name}: stateful RNNs are not supported (pass initial_state)")
        kernel, cell = keras_array(layer.cell.kernel), layer.cell
        return dict(
            **keras_dropout_spec(cell),
            input_size=kernel.shape[0],
            units=int(cfg["units"]),
            activation=cfg["activation"],
            recurrent_activation=cfg.get("recurrent_activation", "sigmoid"),
            use_bias=bool(cfg["use_bias"]),
            return_sequences=bool(cfg["return_sequences"]),
            return_state=bool(cfg["return_state"]),
            go_backwards=bool(cfg["go_backwards"]),
        )

    def _load(self, layer) -> None:
        cell = layer.cell
        with torch.no_grad():
            self.kernel.copy_(torch.from_numpy(keras_array(cell.kernel)))
            self.recurrent_kernel.copy_(torch.from_numpy(keras_array(cell.recurrent_kernel)))
            if self.bias is not None:
                self.bias.copy_(torch.from_numpy(keras_array(cell.bias)).view_as(self.bias))

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.units}, activation={self.activation!r}, "
            f"return_sequences={self.return_sequences}, return_state={self.return_state}, "
            f"go_backwards={self.go_backwards}"
            + (f", dropout={self.dropout}, recurrent_dropout={self.recurrent_dropout}, "
               f"per_gate={self.per_gate}" if self.dropout or self.recurrent_dropout else "")
        )


class KerasLSTM(_KerasRNN):
    """``keras.layers.LSTM``: gates ``(i, f, c, o)``, one bias, inputs ``[N, T, F]``.

    Args:
        input_size: features per step.
        units: hidden size.
        activation: cell/output activation (Keras name, default ``tanh``).
        recurrent_activation: gate activation (default ``sigmoid``).
        use_bias: learn ``bias [4U]``.
        return_sequences: return every step's output.
        return_state: also return ``h`` and ``c``.
        go_backwards: process (and return) the sequence reversed.

    Example:
        >>> import torch
        >>> lstm = KerasLSTM(3, 5, return_sequences=True)
        >>> lstm(torch.randn(2, 7, 3)).shape
        torch.Size([2, 7, 5])
    """

    _gates, _states = 4, 2

    def __init__(
        self,
        input_size: int,
        units: int,
        activation: str = "tanh",
        recurrent_activation: str = "sigmoid",
        use_bias: bool = True,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        **dropout,
    ) -> None:
        super().__init__(
            input_size,
            units,
            activation,
            recurrent_activation,
            use_bias,
            return_sequences,
            return_state,
            go_backwards,
            **dropout,
        )

    def _step(self, zx: torch.Tensor, states: list[torch.Tensor],
              masks: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        h, c = states
        z = zx + _recurrent_product(h, self.recurrent_kernel, masks)
        i, f, g, o = z.chunk(4, dim=-1)
        c = self._rec_act(f) * c + self._rec_act(i) * self._act(g)
        h = self._rec_act(o) * self._act(c)
        return [h, c]

    @classmethod
    def from_keras(cls, layer) -> KerasLSTM:
        """Copy a built ``keras.layers.LSTM`` (kernel, recurrent_kernel, bias, config)."""
        module = cls(**cls._config(layer))
        module._load(layer)
        return module


class KerasGRU(_KerasRNN):
    """``keras.layers.GRU``: gates ``(z, r, h)``; ``reset_after=True`` (default) = torch's GRU.

    With ``reset_after=True`` the bias is ``[2, 3U]`` (input row, recurrent row) and the reset
    gate multiplies ``h @ recurrent_kernel_h + b_rec_h``; with ``False`` (TF1 / Keras 2
    default) the bias is ``[3U]`` and the reset multiplies ``h`` before the matmul, which torch's
    ``nn.GRU`` cannot express.

    Args:
        input_size: features per step.
        units: hidden size.
        activation: candidate activation (default ``tanh``).
        recurrent_activation: gate activation (default ``sigmoid``).
        use_bias: learn biases.
        return_sequences: return every step's output.
        return_state: also return ``h``.
        go_backwards: process (and return) the sequence reversed.
        reset_after: see above.

    Example:
        >>> import torch
        >>> KerasGRU(3, 4)(torch.randn(2, 6, 3)).shape
        torch.Size([2, 4])
    """

    _gates, _states = 3, 1

    def __init__(
        self,
        input_size: int,
        units: int,
        activation: str = "tanh",
        recurrent_activation: str = "sigmoid",
        use_bias: bool = True,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        reset_after: bool = True,
        **dropout,
    ) -> None:
        self.reset_after = reset_after
        super().__init__(
            input_size,
            units,
            activation,
            recurrent_activation,
            use_bias,
            return_sequences,
            return_state,
            go_backwards,
            bias_shape=(2, 3 * units) if reset_after else (3 * units,),
            **dropout,
        )

    def _input_projection(self, x: torch.Tensor) -> torch.Tensor:
        z = x @ self.kernel
        if self.bias is None:
            return z
        return z + (self.bias[0] if self.reset_after else self.bias)

    def _step(self, zx: torch.Tensor, states: list[torch.Tensor],
              masks: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """With ``masks`` (Keras' ``implementation=1``), gate ``g`` reads ``h * masks[g]``."""
        (h,) = states
        u = self.units
        x_z, x_r, x_h = zx.split(u, dim=-1)
        if self.reset_after:
            inner = _recurrent_product(h, self.recurrent_kernel, masks)
            if self.bias is not None:
                inner = inner + self.bias[1]
            r_z, r_r, r_h = inner.split(u, dim=-1)
            z, r = self._rec_act(x_z + r_z), self._rec_act(x_r + r_r)
            hh = self._act(x_h + r * r_h)
        else:
            gates = _recurrent_product(h, self.recurrent_kernel[:, : 2 * u],
                                       None if masks is None else masks[:2])
            r_z, r_r = gates.split(u, dim=-1)
            z, r = self._rec_act(x_z + r_z), self._rec_act(x_r + r_r)
            h_h = h if masks is None else h * masks[2]
            hh = self._act(x_h + (r * h_h) @ self.recurrent_kernel[:, 2 * u :])
        return [z * h + (1 - z) * hh]

    def _input_bias(self):
        if self.bias is None:
            return None
        return self.bias[0] if self.reset_after else self.bias

    @classmethod
    def from_keras(cls, layer) -> KerasGRU:
        """Copy a built ``keras.layers.GRU`` (either ``reset_after``)."""
        cfg = cls._config(layer)
        module = cls(**cfg, reset_after=bool(layer.get_config()["reset_after"]))
        module._load(layer)
        return module

    def extra_repr(self) -> str:
        return super().extra_repr() + f", reset_after={self.reset_after}"


class KerasSimpleRNN(_KerasRNN):
    """``keras.layers.SimpleRNN``: ``h = activation(x @ kernel + h @ recurrent_kernel + bias)``.

    Example:
        >>> import torch
        >>> KerasSimpleRNN(3, 4, return_sequences=True)(torch.randn(2, 5, 3)).shape
        torch.Size([2, 5, 4])
    """

    _gates, _states = 1, 1

    def __init__(
        self,
        input_size: int,
        units: int,
        activation: str = "tanh",
        use_bias: bool = True,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        **dropout,
    ) -> None:
        super().__init__(
            input_size,
            units,
            activation,
            "linear",
            use_bias,
            return_sequences,
            return_state,
            go_backwards,
            **dropout,
        )

    def _step(self, zx: torch.Tensor, states: list[torch.Tensor],
              masks: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        return [self._act(zx + _recurrent_product(states[0], self.recurrent_kernel, masks))]

    @staticmethod
    def _applies(rate: float) -> bool:
        return rate > 0.0  # SimpleRNNCell drops whenever it drew a mask (rate 1: zeros)

    @classmethod
    def from_keras(cls, layer) -> KerasSimpleRNN:
        cfg = cls._config(layer)
        cfg.pop("recurrent_activation")
        module = cls(**cfg)
        module._load(layer)
        return module
