"""Carry a Keras model's regularizers into the converted module (the runtime side is
``crossport.to_torch.regularization``).

- Activity regularizers: after each call of a layer with an ``activity_regularizer``, emit
  puts a :class:`KerasActivityPenalty` node on the layer's outputs as held (an elementwise
  penalty does not care about the layout; a row/column one gets the Keras order).
- Weight regularizers: the torch parameters holding each regularized Keras variable are
  found by converting the model again with the variables' values replaced by codes, twice
  (``1..n`` and ``2^23 + 1..n``): an element of a torch parameter is element ``k`` of a
  variable exactly when it holds code ``k`` in the first pass and ``k + 2^23`` in the
  second, whatever permute, reshape, split or gate reorder the converter applied (a value
  the converter computes from several weights, or an unrelated weight, cannot match both).
  More than 2^23 elements take more pairs of conversions, each coding a piece.
  The variables get their own values back bit for bit; the gather found must read each
  variable's real value from the real module exactly, or conversion refuses.

Regularizers crossport cannot reproduce (a custom ``Regularizer`` subclass, a plain
function) are an ``UnsupportedLayerError`` naming the layer at conversion.
"""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.errors import UnsupportedLayerError
from crossport.layout import physical_axis
from crossport.to_torch.regularization import (
    KerasActivityPenalty,
    KerasWeightPenalties,
    Penalty,
)

_SHIFT = 2 ** 23  # codes 1..n and SHIFT + 1..n stay exact integers in float32 (< 2^24)
_CHUNK = _SHIFT  # elements coded per pair of conversions (a larger variable takes several)
_NAME = "keras_weight_penalties"


def _refuse(where: str, class_name: str, why: str) -> UnsupportedLayerError:
    return UnsupportedLayerError(f"Keras layer {where!r} ({class_name}): {why}",
                                 [(where, class_name, why)])


def penalty_spec(regularizer, where: str, class_name: str, rank: int | None = None) -> Penalty:
    """Keras ``regularizer`` as the penalty data the module computes, or a refusal naming
    the layer (``where``) for one crossport cannot reproduce."""
    kind = type(regularizer)
    R = keras.regularizers
    if kind is R.L1L2:
        return ("l1l2", float(regularizer.l1), float(regularizer.l2))
    if kind is R.L1:
        return ("l1", float(np.asarray(regularizer.l1)))
    if kind is R.L2:
        return ("l2", float(np.asarray(regularizer.l2)))
    if kind is R.OrthogonalRegularizer:
        if rank is not None and rank != 2:
            raise _refuse(where, class_name, f"OrthogonalRegularizer on a rank-{rank} tensor "
                          "(Keras' own model.losses fails: it takes rank 2 only)")
        return ("orthogonal", float(np.asarray(regularizer.factor)), regularizer.mode)
    name = getattr(kind, "__name__", repr(regularizer))
    raise _refuse(where, class_name, (
        f"its regularizer {name} is not one crossport reproduces in torch (L1, L2, L1L2, "
        "OrthogonalRegularizer); use one of those, or remove it before converting and add "
        "the penalty to your torch loss (module.regularization_loss() covers the others)"))


# -- activity regularizers ---------------------------------------------------------------

def add_activity_penalty(ctx, knode, outputs: list) -> None:
    """After a call of a layer with an ``activity_regularizer``: a node keeping its penalty
    on every tensor output of this call (a shared layer: one node per call)."""
    layer = knode.operation
    regularizer = getattr(layer, "activity_regularizer", None)
    if regularizer is None or not outputs:
        return
    ranks = {value.rank for value in outputs}
    spec = penalty_spec(regularizer, knode.path, knode.class_name,
                        ranks.pop() if len(ranks) == 1 else None)
    for tensor in knode.outputs:
        if not keras.backend.is_float_dtype(tensor.dtype):
            raise _refuse(knode.path, knode.class_name, (
                f"its activity_regularizer gets a {tensor.dtype} output; crossport "
                "reproduces activity penalties on float outputs only"))
    if spec[0] == "orthogonal":  # (rows and columns: the Keras order)
        outputs = [ctx.canonical(value) for value in outputs]
    axes = tuple(physical_axis(value.layout, 0) if value.rank else None for value in outputs)
    calls = ctx.memo.setdefault(("activity calls", id(layer)), [0])
    calls[0] += 1
    suffix = "_activity" if calls[0] == 1 else f"_activity_call{calls[0]}"
    module = KerasActivityPenalty(knode.path, spec, axes)
    ctx.call_module(module, *(value.node for value in outputs), suffix=suffix)


def check_regularizers(kmodel, graph) -> None:
    """Before converting: every regularizer is one crossport reproduces, and every layer with
    an ``activity_regularizer`` is a node of the captured graph (a nested model's own
    regularizer, or a layer called inside a traced custom layer, would be lost)."""
    owners = _owners(kmodel)
    for variable in regularized_variables(kmodel):
        where, class_name = owners.get(id(variable), (variable.path, "Variable"))
        penalty_spec(variable.regularizer, where, class_name, len(variable.shape))
    in_graph = {id(node.operation) for node in graph.nodes}
    for layer in kmodel._flatten_layers(include_self=True):
        regularizer = getattr(layer, "activity_regularizer", None)
        if regularizer is None:
            continue
        penalty_spec(regularizer, layer.name, type(layer).__name__)
        if id(layer) not in in_graph:
            raise _refuse(layer.name, type(layer).__name__, (
                "its activity_regularizer applies to a call crossport does not convert as "
                "a layer (a nested model, or a layer called inside another layer's call); "
                "move the regularizer to a layer of the model's graph"))


# -- weight regularizers -----------------------------------------------------------------

def regularized_variables(kmodel) -> list:
    """The variables Keras' ``model.losses`` penalises: trainable, with a regularizer."""
    return [v for v in kmodel.trainable_weights if getattr(v, "regularizer", None) is not None]


def _owners(kmodel) -> dict[int, tuple[str, str]]:
    owners = {}
    for layer in kmodel._flatten_layers(include_self=False):
        for variable in layer.weights:
            owners.setdefault(id(variable), (layer.name, type(layer).__name__))
    return owners


def attach_weight_penalties(kmodel, graph, emitted, channels_first_io: bool) -> None:
    """Add ``keras_weight_penalties`` to ``emitted.module`` for the model's regularized
    variables (nothing when there are none)."""
    variables = regularized_variables(kmodel)
    if not variables:
        return
    owners = _owners(kmodel)

    def owner(v):
        return owners.get(id(v), (v.path, "Variable"))

    module = emitted.module
    names = [name for name, p in module.named_parameters() if p.is_floating_point()]
    found = {id(v): _Found(v) for v in variables}
    for batch in _batches(variables):
        _locate(batch, graph, channels_first_io, names, found, owner)
    entries, indices = [], []
    for variable in variables:
        params, index = found[id(variable)].gather(names, module, owner)
        spec = penalty_spec(variable.regularizer, *owner(variable), len(variable.shape))
        entries.append((variable.path, spec, params, tuple(variable.shape)))
        indices.append(index)
    penalties = KerasWeightPenalties(entries)
    for i, index in enumerate(indices):
        getattr(penalties, f"index_{i}").copy_(torch.from_numpy(index))
    _check_values(penalties, module, variables, owner)
    module.add_module(_NAME, penalties)


class _Found:
    """Where each element of one Keras variable was found: parameter (index into the
    module's parameter names) and position in it, -1 until found."""

    def __init__(self, variable) -> None:
        self.variable = variable
        n = int(np.prod(variable.shape))
        self.param = np.full(n, -1, dtype=np.int64)
        self.position = np.full(n, -1, dtype=np.int64)

    def gather(self, names: list, module, owner) -> tuple[tuple, np.ndarray]:
        """(parameter names, index into their flattened concatenation giving the variable
        in Keras order)."""
        if np.any(self.param < 0):
            raise _refuse(*owner(self.variable), (
                f"its regularized weight {self.variable.path!r} is not held element for "
                "element by a parameter of the converted module (computed from or folded "
                "into another value), so crossport cannot compute its penalty; add it to your "
                "torch loss"))
        used = sorted(set(self.param.tolist()))
        starts, start = np.zeros(len(names), dtype=np.int64), 0
        for k in used:
            starts[k] = start
            start += module.get_parameter(names[k]).numel()
        return tuple(names[k] for k in used), starts[self.param] + self.position


def _batches(variables: list) -> list[list[tuple]]:
    """Pieces ``(variable, start, stop)`` of the variables' flat elements in groups of at
    most ``_CHUNK`` elements (one code per element; a larger variable spans groups)."""
    batches, current, size = [], [], 0
    for variable in variables:
        n, start = int(np.prod(variable.shape)), 0
        while start < n:
            stop = min(n, start + _CHUNK - size)
            current.append((variable, start, stop))
            size += stop - start
            start = stop
            if size == _CHUNK:
                batches.append(current)
                current, size = [], 0
    return batches + [current] if current else batches


def _coded_parameters(batch: list, graph, channels_first_io: bool, shift: int) -> dict:
    """The parameters of the model converted with ``batch``'s pieces set to codes
    ``shift + 1, shift + 2, ...`` in order (the rest of each variable as it was)."""
    from crossport.to_torch.emit import emit

    variables = list({id(v): v for v, _, _ in batch}.values())
    originals = {id(v): np.array(keras.ops.convert_to_numpy(v)) for v in variables}
    coded = {id(v): originals[id(v)].reshape(-1).copy() for v in variables}
    code = 1 + shift
    for variable, start, stop in batch:
        coded[id(variable)][start:stop] = np.arange(code, code + stop - start)
        code += stop - start
    try:
        for variable in variables:
            variable.assign(coded[id(variable)].reshape(originals[id(variable)].shape))
        module = emit(graph, channels_first_io).module
    finally:  # the user's variables get their values back bit for bit
        for variable in variables:
            variable.assign(originals[id(variable)])
    return {name: p.detach().double().reshape(-1).numpy()
            for name, p in module.named_parameters() if p.is_floating_point()}


def _locate(batch: list, graph, channels_first_io: bool, names: list, found: dict,
            owner) -> None:
    """Record in ``found`` where the module holds each element of ``batch``'s pieces."""
    first = _coded_parameters(batch, graph, channels_first_io, 0)
    second = _coded_parameters(batch, graph, channels_first_io, _SHIFT)
    sizes = np.array([stop - start for _, start, stop in batch], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    total = int(offsets[-1])
    for k, name in enumerate(names):
        a, b = first.get(name), second.get(name)
        if a is None or b is None or a.shape != b.shape:
            continue
        hit = np.flatnonzero((b - a == _SHIFT) & (a >= 1) & (a <= total) & (a == np.round(a)))
        codes = a[hit].astype(np.int64) - 1
        pieces = np.searchsorted(offsets, codes, side="right") - 1
        for piece in np.unique(pieces):
            variable, start, _stop = batch[piece]
            mine = pieces == piece
            elements = start + codes[mine] - offsets[piece]
            record = found[id(variable)]
            if np.any(record.param[elements] >= 0) or len(np.unique(elements)) != len(elements):
                raise _refuse(*owner(variable), (
                    f"its regularized weight {variable.path!r} is copied into more than one "
                    "torch parameter element, so its penalty has no single parameter to act "
                    "on; add it to your torch loss yourself"))
            record.param[elements], record.position[elements] = k, hit[mine]


def _check_values(penalties: KerasWeightPenalties, module, variables: list, owner) -> None:
    """Each gather reads its variable's real value from the real module, bit for bit."""
    with torch.no_grad():
        for i, variable in enumerate(variables):
            got = penalties.keras_value(module, i).numpy()
            want = np.asarray(keras.ops.convert_to_numpy(variable))
            if got.shape != want.shape or not np.array_equal(got.astype(want.dtype), want,
                                                             equal_nan=True):
                where, class_name = owner(variable)
                raise _refuse(where, class_name, (
                    f"its regularized weight {variable.path!r} was located in "
                    f"{penalties.entries[i][2]} but does not read back as the Keras value; "
                    "please report it"))
