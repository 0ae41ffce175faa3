"""Recurrent layers: LSTM, GRU, SimpleRNN, RNN(cell), Bidirectional -> nn.LSTM / nn.GRU /
nn.RNN; ConvLSTM{1,2,3}D -> torch_layers.KerasConvLSTM.

Keras gates LSTM ``(i, f, c, o)`` with one bias = torch's ``(i, f, g, o)`` (the bias goes to
``bias_ih``, ``bias_hh`` is zero); GRU ``reset_after=True`` is torch's GRU with gates
``(z, r, h)`` -> ``(r, z, n)`` (pitfall 13); ``reset_after=False`` and non-default activations
use torch_layers' Keras twins. ``go_backwards`` flips the input and returns the reversed
sequence as Keras does. Inputs are ``[N, T, F]`` (``batch_first``). With ``dropout`` /
``recurrent_dropout`` the modules draw Keras' masks in ``train()`` (the fused ones become
torch_layers.recurrent_dropout's subclasses); what cannot be reproduced raises there.
"""

from __future__ import annotations

import operator

import keras
import numpy as np
import torch
from torch import nn

from crossport.layout.policy import Policy
from crossport.to_torch.context import Context
from crossport.to_torch.noise import KerasTrainingRefusal
from crossport.to_torch.ops.activation import layer_activation
from crossport.to_torch.registry import register_layer
from crossport.torch_layers import (
    KerasConvLSTM,
    KerasGRU,
    KerasLSTM,
    KerasSimpleRNN,
    activation_name,
)
from crossport.torch_layers.recurrent import keras_dropout_spec
from crossport.torch_layers.recurrent_dropout import (
    KerasDropoutGRU,
    KerasDropoutLSTM,
    KerasDropoutRNN,
)
from crossport.weights import (
    gru_weights_from_keras,
    lstm_weights_from_keras,
    rnn_weights_from_keras,
)

_PLAIN = {"LSTM": nn.LSTM, "GRU": nn.GRU, "SimpleRNN": nn.RNN}
# the same modules training with Keras' dropout masks (a layer with a rate > 0)
_PLAIN_DROPOUT = {"LSTM": KerasDropoutLSTM, "GRU": KerasDropoutGRU,
                  "SimpleRNN": KerasDropoutRNN}
_TWIN = {"LSTM": KerasLSTM, "GRU": KerasGRU, "SimpleRNN": KerasSimpleRNN}
_RULE = {"LSTM": lstm_weights_from_keras, "GRU": gru_weights_from_keras,
         "SimpleRNN": rnn_weights_from_keras}


def _arr(variable) -> np.ndarray:
    return np.asarray(variable.numpy())


def _plain(layer) -> bool:
    """Whether torch's cuDNN-style layer computes exactly this Keras layer."""
    cfg = layer.get_config()
    kind = type(layer).__name__
    act = activation_name(layer_activation(layer))
    if kind == "SimpleRNN":
        return act in ("tanh", "relu") and cfg["use_bias"]
    if act != "tanh" or activation_name(layer_activation(layer, "recurrent_activation")) != "sigmoid":
        return False
    return cfg["use_bias"] and (kind == "LSTM" or cfg["reset_after"])


def _rnn_supported(layer) -> str | None:
    if layer.get_config().get("stateful"):
        return "stateful RNNs are not converted (pass initial_state instead)"
    return None


def _load_plain(module: nn.RNNBase, layer, suffix: str = "") -> None:
    cell = layer.cell
    bias = _arr(cell.bias) if cell.bias is not None else None
    w_ih, w_hh, b_ih, b_hh = _RULE[type(layer).__name__](
        _arr(cell.kernel), _arr(cell.recurrent_kernel), bias)
    with torch.no_grad():
        for name, value in (("weight_ih", w_ih), ("weight_hh", w_hh), ("bias_ih", b_ih),
                            ("bias_hh", b_hh)):
            target = getattr(module, f"{name}_l0{suffix}")
            target.copy_(torch.from_numpy(np.ascontiguousarray(value)))


def _make_plain(layer, bidirectional: bool = False) -> nn.RNNBase:
    """torch's RNN module for ``layer``; with dropout, its subclass that trains with Keras'
    masks (the same module in eval)."""
    kind = type(layer).__name__
    cfg = layer.get_config()
    size, units = int(layer.cell.kernel.shape[0]), int(cfg["units"])
    nonlinearity = {"nonlinearity": activation_name(layer_activation(layer))} \
        if kind == "SimpleRNN" else {}
    spec = keras_dropout_spec(layer.cell)
    if spec["dropout"] or spec["recurrent_dropout"]:
        return _PLAIN_DROPOUT[kind](size, units, bidirectional=bidirectional, **nonlinearity,
                                    **spec)
    return _PLAIN[kind](size, units, batch_first=True, bidirectional=bidirectional,
                        **nonlinearity)


def _initial(ctx: Context, kind: str, initial_state, bidirectional: bool = False):
    if initial_state is None or (isinstance(initial_state, (list, tuple)) and not initial_state):
        return None
    # Keras takes one tensor as well as a list of them (GRU(x, initial_state=h))
    states = list(initial_state) if isinstance(initial_state, (list, tuple)) else [initial_state]
    if bidirectional:  # Keras: forward states then backward states -> [2, N, H] each
        half = len(states) // 2
        pairs = list(zip(states[:half], states[half:]))
        states = [ctx.call_function(torch.stack, list(p)) for p in pairs]
    else:
        states = [ctx.call_method("unsqueeze", s, 0) for s in states]
    return tuple(states) if kind == "LSTM" else states[0]


def _states(ctx: Context, kind: str, hidden):
    """Keras' returned states [h(, c)] from torch's h_n / (h_n, c_n), single direction."""
    if kind == "LSTM":
        parts = [ctx.call_function(operator.getitem, hidden, i) for i in (0, 1)]
        return [ctx.call_function(operator.getitem, part, 0) for part in parts]
    return [ctx.call_function(operator.getitem, hidden, 0)]


def _masked_twin(ctx: Context, layer, inputs, initial_state, mask, suffix: str = ""):
    """The Keras twin run with a mask (torch's RNNs have no per-step masking)."""
    module = _TWIN[type(layer).__name__].from_keras(layer)
    state = None if initial_state is None else list(initial_state)
    return ctx.call_module(module, inputs, state, mask, bool(layer.zero_output_for_mask),
                           suffix=suffix)


def _unpack(ctx: Context, kind: str, result, return_state: bool):
    if not return_state:
        return result
    return [ctx.call_function(operator.getitem, result, i)
            for i in range(3 if kind == "LSTM" else 2)]


@register_layer("LSTM", "GRU", "SimpleRNN", policy=Policy.CANONICAL, supports=_rnn_supported,
                masks=True)
def Recurrent(ctx: Context, layer, inputs, initial_state=None, mask=None, **_call_kwargs):
    """keras.layers.LSTM / GRU / SimpleRNN -> nn.LSTM / nn.GRU / nn.RNN (batch_first).

    With a Keras mask (mask_zero / Masking upstream): torch_layers' twin, which keeps the
    states over masked steps and repeats (or zeroes) the output as TF's RNN loop does; a
    layer shared by a masked and an unmasked tensor runs the twin in every call.
    """
    masked = mask is not None or ctx.masked_call(layer)  # (a shared layer's calls: one module)
    inputs = _guard_dropout(ctx, layer, inputs)
    return _recurrent(ctx, layer, inputs, initial_state, mask, masked)


def _recurrent(ctx: Context, layer, inputs, initial_state, mask, masked: bool,
               suffix: str = ""):
    """An LSTM / GRU / SimpleRNN layer's module (named with ``suffix``) and outputs
    (``masked``: the twin)."""
    kind = type(layer).__name__
    cfg = layer.get_config()
    if masked:
        result = _masked_twin(ctx, layer, inputs, initial_state, mask, suffix)
        return _unpack(ctx, kind, result, cfg["return_state"])
    if not _plain(layer):
        module = _TWIN[kind].from_keras(layer)
        args = (inputs,) if initial_state is None else (inputs, list(initial_state))
        result = ctx.call_module(module, *args, suffix=suffix)
        if not cfg["return_state"]:
            return result
        return [ctx.call_function(operator.getitem, result, i)
                for i in range(3 if kind == "LSTM" else 2)]
    module = _make_plain(layer)
    _load_plain(module, layer)
    x = ctx.call_function(torch.flip, inputs, [1]) if cfg["go_backwards"] else inputs
    state0 = _initial(ctx, kind, initial_state)
    args = (x,) if state0 is None else (x, state0)
    result = ctx.call_module(module, *args, suffix=suffix)
    seq = ctx.call_function(operator.getitem, result, 0)
    out = seq if cfg["return_sequences"] else ctx.call_function(
        operator.getitem, seq, (slice(None), -1))
    if not cfg["return_state"]:
        return out
    return [out, *_states(ctx, kind, ctx.call_function(operator.getitem, result, 1))]


def _untrainable_dropout(layer) -> str | None:
    """Why the converted module cannot train with this layer's Keras dropout (None: it
    draws Keras' masks). Keras' LSTM / GRU layers (not their cells in ``RNN``) try the fused
    cuDNN kernel first: at ``dropout=1`` it zeroes the inputs on a GPU while the cell (CPU)
    skips a rate of 1, and with ``implementation=1`` and no recurrent dropout it fails."""
    if type(layer).__name__ == "Bidirectional":
        fwd, bwd = layer.forward_layer, layer.backward_layer
        if keras_dropout_spec(fwd.cell) != keras_dropout_spec(bwd.cell):
            return ("Bidirectional with different forward and backward dropout rates "
                    "(the converted bidirectional module holds one pair)")
        return _untrainable_dropout(fwd)
    if type(layer).__name__ not in ("LSTM", "GRU"):
        return None
    cell, kind = layer.cell, type(layer).__name__
    if cell.dropout >= 1.0:
        return (f"{kind}(dropout=1): Keras' fused (cuDNN, GPU) path zeroes every input while "
                "its cell path (CPU) skips a rate of 1, so the training result depends on "
                "Keras' device")
    if cell.dropout and not cell.recurrent_dropout and getattr(cell, "dropout_mask_count", None):
        return (f"{kind}(implementation=1, dropout={cell.dropout}) without recurrent_dropout: "
                "Keras' own training call fails (it broadcasts the per-gate masks to the "
                "sequence)")
    return None


def _guard_dropout(ctx: Context, layer, inputs):
    """``inputs`` through a KerasTrainingRefusal if the layer's Keras dropout cannot be
    reproduced in training (see ``_untrainable_dropout``); eval, Keras' inference, is
    unaffected. Reproducible dropout is drawn by the modules themselves."""
    why = _untrainable_dropout(layer)
    if why is None:
        return inputs
    why += ". For training, change these rates in Keras before converting, or replace " \
           "this submodule"
    return ctx.call_module(KerasTrainingRefusal(layer.name, why), inputs,
                           suffix="_train_guard")


_CELL_LAYERS = {"LSTMCell": "LSTM", "GRUCell": "GRU", "SimpleRNNCell": "SimpleRNN"}


def _cells(layer) -> list:
    """The cells an RNN steps: a StackedRNNCells' cells in order, or its one cell."""
    cell = layer.cell
    return list(cell.cells) if type(cell).__name__ == "StackedRNNCells" else [cell]


def _generic_rnn_supported(layer) -> str | None:
    for cell in map(type, _cells(layer)):
        if cell.__name__ not in _CELL_LAYERS or cell is not getattr(keras.layers, cell.__name__):
            return (f"RNN over a {cell.__name__}: only Keras' LSTMCell, GRUCell and "
                    "SimpleRNNCell convert (as the LSTM / GRU / SimpleRNN layers they make), "
                    "alone or stacked")
    return _rnn_supported(layer)


def _layer_of_cell(ctx: Context, layer, index: int, options: dict):
    """The LSTM / GRU / SimpleRNN layer computing what cell ``index`` of ``RNN(cells)``
    computes in the stack: its config and weights, ``options`` for the sequence (one per
    Keras layer and cell, kept in memo)."""
    key = ("layer_of_cell", id(layer), index)
    if key not in ctx.memo:
        cell = _cells(layer)[index]
        cell_cfg = {k: v for k, v in cell.get_config().items() if k != "name"}
        cls = getattr(keras.layers, _CELL_LAYERS[type(cell).__name__])
        twin = cls.from_config({**cell_cfg, **options, "name": f"{layer.name}_cell{index}"})
        twin.build((None, None, int(cell.kernel.shape[0])))
        twin.set_weights(cell.get_weights())
        if getattr(cell, "dropout_mask_count", None):  # implementation=1 is not in the config
            twin.cell.implementation = 1
            twin.cell.dropout_mask_count = cell.dropout_mask_count
        ctx.memo[key] = twin
    return ctx.memo[key]


def _cell_options(cfg: dict, index: int, count: int) -> dict:
    """A stack is its cells' layers chained: the first reads the input (backwards if the
    RNN goes backwards), the others the previous one's sequence in the order it made it."""
    last = index == count - 1
    return {"return_sequences": cfg["return_sequences"] or not last,
            "return_state": cfg["return_state"],
            "go_backwards": cfg["go_backwards"] and index == 0,
            "zero_output_for_mask": cfg["zero_output_for_mask"], "unroll": cfg["unroll"]}


@register_layer(policy=Policy.CANONICAL, supports=_generic_rnn_supported, masks=True)
def RNN(ctx: Context, layer, inputs, initial_state=None, mask=None, **_call_kwargs):
    """keras.layers.RNN(LSTMCell | GRUCell | SimpleRNNCell, or a list / StackedRNNCells of
    them): each cell converted as the LSTM / GRU / SimpleRNN layer of that cell (Keras' layer
    is that RNN over that cell), a stack as those layers chained. A masked step discards the
    whole stack's update in Keras and each layer's in the chain alike; after a backwards
    first layer the sequence and its mask run reversed. Returns Keras' flat outputs:
    ``output, *states`` of every cell in order."""
    cfg, cells = layer.get_config(), _cells(layer)
    masked = mask is not None or ctx.masked_call(layer)
    inputs = _guard_dropout(ctx, layer, inputs)
    given = keras.tree.flatten(initial_state) if initial_state is not None else []
    x, states, used = inputs, [], 0
    for index, cell in enumerate(cells):
        twin = _layer_of_cell(ctx, layer, index, _cell_options(cfg, index, len(cells)))
        count = 2 if isinstance(cell, keras.layers.LSTMCell) else 1
        start = given[used:used + count] or None
        used += count
        step_mask = mask
        if mask is not None and index > 0 and cfg["go_backwards"]:
            step_mask = ctx.call_function(torch.flip, mask, [1])
        suffix = f"_cell{index}" if len(cells) > 1 else ""
        result = _recurrent(ctx, twin, x, start, step_mask, masked, suffix)
        x = result[0] if cfg["return_state"] else result
        states += result[1:] if cfg["return_state"] else []
    return [x, *states] if cfg["return_state"] else x


def _bidirectional_supported(layer) -> str | None:
    inner, backward = layer.forward_layer, layer.backward_layer
    if type(inner).__name__ not in _PLAIN:
        return f"Bidirectional({type(inner).__name__}): only LSTM, GRU and SimpleRNN"
    if layer.get_config()["merge_mode"] not in _MERGES:
        return (f"Bidirectional merge_mode={layer.get_config()['merge_mode']!r}: only "
                "'concat', 'sum', 'mul', 'ave' and None")
    if type(inner).__name__ not in _PLAIN or not (_plain(inner) and _plain(backward)):
        return "Bidirectional over a layer torch's bidirectional RNNs do not compute exactly"
    if type(inner) is not type(backward):
        return (f"Bidirectional with a {type(backward).__name__} backward layer over a "
                f"{type(inner).__name__} is not converted")
    fwd, bwd = inner.get_config(), backward.get_config()
    if fwd["go_backwards"] or not bwd["go_backwards"]:
        return "Bidirectional with a custom go_backwards setup is not converted"
    if fwd["units"] != bwd["units"] or fwd["activation"] != bwd["activation"]:
        return "Bidirectional with different forward/backward layers is not converted"
    return None


# Keras' merge of the two directions (Bidirectional.call); None keeps them apart
_MERGES = {
    "concat": lambda ctx, y, y_rev: y if y_rev is None else ctx.call_function(
        torch.cat, [y, y_rev], dim=-1),
    "sum": lambda ctx, y, y_rev: ctx.call_function(operator.add, y, y_rev),
    "mul": lambda ctx, y, y_rev: ctx.call_function(operator.mul, y, y_rev),
    "ave": lambda ctx, y, y_rev: ctx.call_function(
        operator.truediv, ctx.call_function(operator.add, y, y_rev), 2),
    None: lambda ctx, y, y_rev: [y, y_rev],
}


def _merged(ctx: Context, layer, y, y_rev, states: list):
    """Keras' outputs from the forward and backward outputs (``y_rev`` already in input
    time order): merged as ``merge_mode`` says, then the states if returned (merge_mode
    None: the two outputs first, flat)."""
    merged = _MERGES[layer.get_config()["merge_mode"]](ctx, y, y_rev)
    if not layer.forward_layer.get_config()["return_state"]:
        return merged
    return [*merged, *states] if isinstance(merged, list) else [merged, *states]


def _masked_bidirectional(ctx: Context, layer, inputs, initial_state, mask):
    """Both directions as masked twins (``<layer>_forward`` / ``<layer>_backward``)."""
    fwd, bwd = layer.forward_layer, layer.backward_layer
    kind, cfg = type(fwd).__name__, fwd.get_config()
    half = None if not initial_state else len(initial_state) // 2
    states = (None, None) if half is None else (initial_state[:half], initial_state[half:])
    results = [_masked_twin(ctx, sub, inputs, state, mask, suffix)
               for sub, state, suffix in ((fwd, states[0], "_forward"),
                                          (bwd, states[1], "_backward"))]
    parts = [_unpack(ctx, kind, r, cfg["return_state"]) for r in results]
    outs = [p[0] if cfg["return_state"] else p for p in parts]
    if cfg["return_sequences"]:  # the backward sequence is returned reversed in time
        outs[1] = ctx.call_function(torch.flip, outs[1], [1])
    states = [*parts[0][1:], *parts[1][1:]] if cfg["return_state"] else []
    return _merged(ctx, layer, outs[0], outs[1], states)


def _directions(ctx: Context, layer, result, h_n):
    """The forward and backward outputs of torch's bidirectional RNN as Keras has them
    before merging (with ``return_sequences`` and 'concat': torch's output as it is)."""
    cfg = layer.forward_layer.get_config()
    if not cfg["return_sequences"]:  # each direction's last step
        return tuple(ctx.call_function(operator.getitem, h_n, i) for i in (0, 1))
    seq = ctx.call_function(operator.getitem, result, 0)  # [N, T, 2H], in input time order
    if layer.get_config()["merge_mode"] == "concat":
        return seq, None
    units = int(cfg["units"])
    return tuple(ctx.call_function(operator.getitem, seq, (Ellipsis, part))
                 for part in (slice(None, units), slice(units, None)))


@register_layer(policy=Policy.CANONICAL, supports=_bidirectional_supported, masks=True)
def Bidirectional(ctx: Context, layer, inputs, initial_state=None, mask=None, **_call_kwargs):
    """keras.layers.Bidirectional(LSTM|GRU|SimpleRNN) -> bidirectional RNN.

    Keras flips the backward sequence back before merging = torch's output's second half;
    without ``return_sequences`` Keras takes each direction's last step = torch's ``h_n``.
    The halves are merged as ``merge_mode`` says ('concat' = torch's output; None: the two,
    a list). With a Keras mask: two torch_layers twins (torch's bidirectional RNN cannot
    skip steps).
    """
    inputs = _guard_dropout(ctx, layer, inputs)
    if mask is not None or ctx.masked_call(layer):  # (a shared layer's calls: one module)
        return _masked_bidirectional(ctx, layer, inputs, initial_state, mask)
    fwd, bwd = layer.forward_layer, layer.backward_layer
    kind = type(fwd).__name__
    cfg = fwd.get_config()
    module = _make_plain(fwd, bidirectional=True)
    _load_plain(module, fwd)
    _load_plain(module, bwd, "_reverse")
    state0 = _initial(ctx, kind, initial_state, bidirectional=True)
    result = ctx.call_module(module, inputs) if state0 is None else \
        ctx.call_module(module, inputs, state0)
    hidden = ctx.call_function(operator.getitem, result, 1)
    h_n = ctx.call_function(operator.getitem, hidden, 0) if kind == "LSTM" else hidden
    y, y_rev = _directions(ctx, layer, result, h_n)
    states = []
    if cfg["return_state"] and kind == "LSTM":
        c_n = ctx.call_function(operator.getitem, hidden, 1)
        states = [ctx.call_function(operator.getitem, t, i) for i in (0, 1) for t in (h_n, c_n)]
    elif cfg["return_state"]:
        states = [ctx.call_function(operator.getitem, h_n, i) for i in (0, 1)]
    return _merged(ctx, layer, y, y_rev, states)


def _conv_lstm_supported(layer) -> str | None:
    reason = _rnn_supported(layer)
    if reason is None and layer.get_config()["padding"] not in ("valid", "same"):
        reason = f"ConvLSTM padding={layer.get_config()['padding']!r}"
    return reason


@register_layer("ConvLSTM1D", "ConvLSTM2D", "ConvLSTM3D", policy=Policy.CANONICAL,
                supports=_conv_lstm_supported)
def ConvLSTM(ctx: Context, layer, inputs, initial_state=None, **_call_kwargs):
    """keras.layers.ConvLSTM{1,2,3}D -> torch_layers.KerasConvLSTM (Keras' layout in and
    out; TF SAME padding of the input conv per step, at the run-time sizes)."""
    inputs = _guard_dropout(ctx, layer, inputs)
    module = KerasConvLSTM.from_keras(layer)
    args = (inputs,) if initial_state is None else (inputs, list(initial_state))
    result = ctx.call_module(module, *args)
    if not layer.get_config()["return_state"]:
        return result
    return [ctx.call_function(operator.getitem, result, i) for i in range(3)]


def _projected_supported(layer) -> str | None:
    if layer.get_config().get("stateful"):
        return "stateful RNNs are not converted (pass initial_state instead)"
    if layer.cell.dropout or layer.cell.recurrent_dropout:
        return "ProjectedLSTM with dropout (its cell's Keras masks have no torch twin here)"
    return None


@register_layer("ProjectedLSTM", policy=Policy.CANONICAL, supports=_projected_supported)
def ProjectedLSTM(ctx: Context, layer, inputs, initial_state=None, **_call_kwargs):
    """crossport.layers.ProjectedLSTM -> nn.LSTM(proj_size=P, batch_first=True): Keras'
    LSTM weights as for LSTM, and ``weight_hr`` = the cell's ``projection`` transposed."""
    cfg, cell = layer.get_config(), layer.cell
    module = nn.LSTM(int(cell.kernel.shape[0]), int(cfg["units"]), bias=cfg["use_bias"],
                     batch_first=True, proj_size=int(cfg["proj_size"]))
    bias = _arr(cell.bias) if cell.bias is not None else None
    w_ih, w_hh, b_ih, b_hh = lstm_weights_from_keras(_arr(cell.kernel),
                                                     _arr(cell.recurrent_kernel), bias)
    weights = {"weight_ih": w_ih, "weight_hh": w_hh, "weight_hr": _arr(cell.projection).T}
    if bias is not None:
        weights.update(bias_ih=b_ih, bias_hh=b_hh)
    with torch.no_grad():
        for name, value in weights.items():
            getattr(module, f"{name}_l0").copy_(torch.from_numpy(np.ascontiguousarray(value)))
    x = ctx.call_function(torch.flip, inputs, [1]) if cfg["go_backwards"] else inputs
    state0 = _initial(ctx, "LSTM", initial_state)
    result = ctx.call_module(module, *((x,) if state0 is None else (x, state0)))
    seq = ctx.call_function(operator.getitem, result, 0)
    out = seq if cfg["return_sequences"] else ctx.call_function(
        operator.getitem, seq, (slice(None), -1))
    if not cfg["return_state"]:
        return out
    return [out, *_states(ctx, "LSTM", ctx.call_function(operator.getitem, result, 1))]
