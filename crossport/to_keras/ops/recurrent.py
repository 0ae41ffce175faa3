"""LSTM, GRU and RNN as Keras recurrent layers (not unrolled; pitfalls.md item 13).

The graph has ``crossport::lstm`` etc. (``crossport.capture.recurrent``) when captured by
crossport, ``aten.lstm.input`` etc. when exported by hand; both convert here.

One Keras layer per torch layer and direction, named like torch's parameters
(``lstm.l0``, ``lstm.l0_reverse``). The reverse direction is a ``go_backwards`` layer whose
output is flipped back in time. Sequence-first inputs are held batch-major in Keras
(layout ``(1, 0, 2)``): no transpose, and the output keeps that layout.
"""

from __future__ import annotations

import functools

import keras
import numpy as np
import torch

import crossport.capture.packed  # noqa: F401  (defines torch.ops.crossport.*_packed)
import crossport.capture.recurrent  # noqa: F401  (defines torch.ops.crossport.*)
from crossport.layers.dynamic import SequenceMask
from crossport.layers.projected_lstm import ProjectedLSTM
from crossport.layout import Layout, canonical
from crossport.to_keras.fold import is_constant
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register
from crossport.weights import gru_weights_to_keras, lstm_weights_to_keras, rnn_weights_to_keras

aten = torch.ops.aten
opaque = torch.ops.crossport  # the aten ops made opaque for capture (defined on import below)
ops = keras.ops

_SEQ_FIRST = Layout((1, 0, 2))
_GATES = {"lstm": 4, "gru": 3}


_PACKED = {opaque.lstm_packed.default, opaque.gru_packed.default,
           opaque.rnn_tanh_packed.default, opaque.rnn_relu_packed.default}


def _rnn_supports(node):
    args = list(node.args)
    if node.target in _PACKED:  # (input, lengths, hx, ...): the rest as the .input overload
        del args[1]
    params, has_biases, num_layers, bidirectional = args[2], args[3], args[4], args[7]
    plain, runs = (4 if has_biases else 2), (2 if bidirectional else 1) * num_layers
    if len(params) not in (plain * runs, (plain + 1) * runs):  # + weight_hr: proj_size
        return f"{len(params)} recurrent weights for {runs} layer(s) and direction(s)"
    if not all(is_constant(p) for p in params):
        return "recurrent weights computed in the graph"
    if args[6] and args[5]:
        return ("recurrent dropout with train=True in eval mode (the call asks for it "
                "whatever the module's mode: pass train=self.training)")
    if node.args[0].meta["val"].dim() != 3:
        return "unbatched (2-D) recurrent input; add a batch dim"
    return None


def _batch_major(ctx, input, batch_first):
    """The input as Keras ``[N, T, F]`` (a sequence-first input is held so: no transpose)."""
    return ctx.to_layout(as_value(ctx, input), canonical(3) if batch_first else _SEQ_FIRST)


def _layer_params(params, has_biases, layer, direction, directions, num_layers):
    """``(w_ih, w_hh, b_ih, b_hh, w_hr)`` of one layer and direction (None where absent)."""
    per = len(params) // (num_layers * directions)
    start = (layer * directions + direction) * per
    chunk = [np.asarray(p) for p in params[start:start + per]]
    plain = 4 if has_biases else 2
    weights = chunk[:plain] + ([] if has_biases else [None, None])
    return (*weights, chunk[plain] if per > plain else None)


def _initial(ctx, state, index):
    """The ``[N, H]`` initial state of one layer/direction, or None for torch's zeros."""
    if state is None:
        return None
    if isinstance(state, np.ndarray):
        return None if not state.any() else ctx.constant(state, "h0")[index]
    return ctx.canonical(state)[index]


def _run(ctx, kind, input, states, params, has_biases, num_layers, bidirectional, batch_first,
         lengths=None, **layer_kw):
    """Stack the Keras layers; returns the output and the final states per state kind.

    With ``lengths`` (a packed sequence kept padded), each sequence runs for its own length:
    the layers skip the masked steps (the state carries over them, so the reverse direction
    starts at the last real step) and the output is zero past the length, as torch pads it.
    """
    x = _batch_major(ctx, input, batch_first)
    mask = None if lengths is None else SequenceMask(name=ctx.name("mask"))(
        x, ctx.canonical(as_value(ctx, lengths)))
    directions = 2 if bidirectional else 1
    finals: list[list] = [[] for _ in states]
    for layer in range(num_layers):
        outputs = []
        for direction in range(directions):
            index = layer * directions + direction
            w_ih, w_hh, b_ih, b_hh, w_hr = _layer_params(params, has_biases, layer,
                                                         direction, directions, num_layers)
            rule = {"lstm": lstm_weights_to_keras, "gru": gru_weights_to_keras}.get(
                kind, rnn_weights_to_keras)
            kernel, recurrent, bias = rule(w_ih, w_hh, b_ih, b_hh)
            units = w_ih.shape[0] // _GATES.get(kind, 1)
            cls = {"lstm": keras.layers.LSTM, "gru": keras.layers.GRU}.get(
                kind, keras.layers.SimpleRNN)
            extra = []
            if w_hr is not None:  # torch's proj_size: h = W_hr (o * tanh(c))
                cls = functools.partial(ProjectedLSTM, proj_size=w_hr.shape[0])
                extra = [np.ascontiguousarray(w_hr.T)]
            suffix = f"l{layer}" + ("_reverse" if direction else "")
            rnn = cls(units, return_sequences=True, return_state=True,
                      go_backwards=bool(direction), use_bias=has_biases,
                      name=ctx.name(suffix), **layer_kw)
            initial = [_initial(ctx, s, index) for s in states]
            initial = None if all(i is None for i in initial) else [
                ops.zeros_like(_first(initial)) if i is None else i for i in initial]
            call_kw = {} if mask is None else {"mask": mask}
            if initial is not None:
                call_kw["initial_state"] = initial
            result = rnn(x, **call_kw)
            rnn.set_weights([kernel, recurrent] + ([bias] if has_biases else []) + extra)
            sequence, *final = result
            if direction:
                sequence = ops.flip(sequence, axis=1)
            outputs.append(sequence)
            for kind_finals, f in zip(finals, final):
                kind_finals.append(f)
        x = outputs[0] if directions == 1 else keras.layers.Concatenate(
            axis=-1, name=ctx.name(f"l{layer}_concat"))(outputs)
    if mask is not None:
        x = ops.where(ops.expand_dims(mask, -1), x, ops.zeros_like(x))
    layout = canonical(3) if batch_first else _SEQ_FIRST
    return x, [ops.stack(f, axis=0) for f in finals], layout


def _first(items):
    return next(i for i in items if i is not None)


def _states(hx, count):
    hx = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    return hx + [None] * (count - len(hx))


@register(aten.lstm.input, opaque.lstm.default, policy=Policy.CUSTOM, supports=_rnn_supports, dynamic=True)
def aten_lstm_input(ctx, input, hx, params, has_biases, num_layers, dropout, train,
                    bidirectional, batch_first):
    """lstm.input(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor, Tensor)

    Gates (i, f, g, o) = Keras (i, f, c, o); Keras' one bias is b_ih + b_hh.
    """
    out, (h, c), layout = _run(ctx, "lstm", input, _states(hx, 2), params, has_biases,
                               num_layers, bidirectional, batch_first)
    ctx.out_layout = (layout, canonical(3), canonical(3))
    return out, h, c


@register(aten.gru.input, opaque.gru.default, policy=Policy.CUSTOM, supports=_rnn_supports, dynamic=True)
def aten_gru_input(ctx, input, hx, params, has_biases, num_layers, dropout, train,
                   bidirectional, batch_first):
    """gru.input(Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor)

    Gates (r, z, n) with the reset after the recurrent matmul = Keras GRU(reset_after=True)
    with gates (z, r, h) and two bias rows.
    """
    out, (h,), layout = _run(ctx, "gru", input, _states(hx, 1), params, has_biases,
                             num_layers, bidirectional, batch_first, reset_after=True)
    ctx.out_layout = (layout, canonical(3))
    return out, h


@register(aten.rnn_tanh.input, aten.rnn_relu.input, opaque.rnn_tanh.default,
          opaque.rnn_relu.default,
          policy=Policy.CUSTOM,
          supports=_rnn_supports, dynamic=True)
def aten_rnn_tanh_input(ctx, input, hx, params, has_biases, num_layers, dropout, train,
                        bidirectional, batch_first):
    """rnn_tanh.input(Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor)

    rnn_relu alike: Keras SimpleRNN with the same activation; one bias b_ih + b_hh.
    """
    relu = ctx.node.target in (aten.rnn_relu.input, opaque.rnn_relu.default)
    activation = "relu" if relu else "tanh"
    out, (h,), layout = _run(ctx, "rnn", input, _states(hx, 1), params, has_biases,
                             num_layers, bidirectional, batch_first, activation=activation)
    ctx.out_layout = (layout, canonical(3))
    return out, h


@register(opaque.lstm_packed.default, policy=Policy.CUSTOM, supports=_rnn_supports,
          dynamic=True)
def crossport_lstm_packed(ctx, input, lengths, hx, params, has_biases, num_layers, dropout,
                          train, bidirectional, batch_first):
    """lstm_packed(Tensor input, Tensor lengths, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor, Tensor)

    A packed sequence's LSTM on its padded batch (``capture/packed.py``): Keras LSTM layers
    called with the sequence mask of ``lengths``.
    """
    out, (h, c), layout = _run(ctx, "lstm", input, _states(hx, 2), params, has_biases,
                               num_layers, bidirectional, batch_first, lengths=lengths)
    ctx.out_layout = (layout, canonical(3), canonical(3))
    return out, h, c


@register(opaque.gru_packed.default, opaque.rnn_tanh_packed.default,
          opaque.rnn_relu_packed.default, policy=Policy.CUSTOM, supports=_rnn_supports,
          dynamic=True)
def crossport_gru_packed(ctx, input, lengths, hx, params, has_biases, num_layers, dropout,
                         train, bidirectional, batch_first):
    """gru_packed(Tensor input, Tensor lengths, Tensor hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor)

    rnn_tanh_packed / rnn_relu_packed alike: the GRU or SimpleRNN layers of the padded
    converters, called with the sequence mask of ``lengths``.
    """
    target = ctx.node.target
    kind = "gru" if target == opaque.gru_packed.default else "rnn"
    layer_kw = {"reset_after": True} if kind == "gru" else {
        "activation": "relu" if target == opaque.rnn_relu_packed.default else "tanh"}
    out, (h,), layout = _run(ctx, kind, input, _states(hx, 1), params, has_biases,
                             num_layers, bidirectional, batch_first, lengths=lengths,
                             **layer_kw)
    ctx.out_layout = (layout, canonical(3))
    return out, h
