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

    specs = {id(v): penalty_spec(v.regularizer, *owner(v), len(v.shape)) for v in variables}
    module = emitted.module
    params = dict(module.named_parameters())
    entries, indices = [], []
    for batch in _batches(variables):
        located = _locate(batch, graph, channels_first_io, params, owner)
        for variable, (names, index) in zip(batch, located):
            entries.append((variable.path, specs[id(variable)], names,
                            tuple(variable.shape)))
            indices.append(index)
    penalties = KerasWeightPenalties(entries)
    for i, index in enumerate(indices):
        getattr(penalties, f"index_{i}").copy_(torch.from_numpy(index))
    _check_values(penalties, module, variables, owner)
    module.add_module(_NAME, penalties)


def _batches(variables: list) -> list[list]:
    """Variables in groups of at most ``_SHIFT`` elements (one code per element)."""
    batches, current, size = [], [], 0
    for variable in variables:
        n = int(np.prod(variable.shape))
        if n > _SHIFT:
            raise UnsupportedLayerError(
                f"the regularized variable {variable.path!r} has {n} elements; crossport "
                f"locates up to {_SHIFT} per variable: add its penalty to your torch loss")
        if current and size + n > _SHIFT:
            batches.append(current)
            current, size = [], 0
        current.append(variable)
        size += n
    return batches + [current] if current else batches


def _coded_parameters(batch: list, graph, channels_first_io: bool, shift: int) -> dict:
    """The parameters of the model converted with ``batch``'s values replaced by codes."""
    from crossport.to_torch.emit import emit

    originals = [np.array(keras.ops.convert_to_numpy(v)) for v in batch]
    start = 1 + shift
    try:
        for variable, value in zip(batch, originals):
            codes = np.arange(start, start + value.size, dtype=np.float64)
            variable.assign(codes.reshape(value.shape).astype(value.dtype))
            start += value.size
        coded = emit(graph, channels_first_io).module
    finally:  # the user's variables get their values back bit for bit
        for variable, value in zip(batch, originals):
            variable.assign(value)
    return {name: p.detach().double().reshape(-1).numpy()
            for name, p in coded.named_parameters() if p.is_floating_point()}


def _locate(batch: list, graph, channels_first_io: bool, params: dict, owner) -> list:
    """Per variable of ``batch``: (parameter names, index into their flattened
    concatenation giving the variable in Keras order)."""
    first = _coded_parameters(batch, graph, channels_first_io, 0)
    second = _coded_parameters(batch, graph, channels_first_io, _SHIFT)
    total = sum(int(np.prod(v.shape)) for v in batch)
    where_name = np.full(total, -1, dtype=np.int64)
    where_pos = np.full(total, -1, dtype=np.int64)
    names = [name for name in first if name in second and name in params]
    for k, name in enumerate(names):
        a, b = first[name], second[name]
        if a.shape != b.shape:
            continue
        hit = np.flatnonzero((b - a == _SHIFT) & (a >= 1) & (a <= total) & (a == np.round(a)))
        codes = a[hit].astype(np.int64) - 1
        if np.any(where_name[codes] >= 0) or len(np.unique(codes)) != len(codes):
            copied = batch[_variable_of(batch, int(codes[0]))]
            raise _refuse(*owner(copied), (
                f"its regularized weight {copied.path!r} is copied into more than one torch "
                "parameter element, so its penalty has no single parameter to act on; add it "
                "to your torch loss yourself"))
        where_name[codes], where_pos[codes] = k, hit
    located, offset = [], 0
    for variable in batch:
        n = int(np.prod(variable.shape))
        name_idx, pos = where_name[offset:offset + n], where_pos[offset:offset + n]
        offset += n
        if np.any(name_idx < 0):
            where, class_name = owner(variable)
            raise _refuse(where, class_name, (
                f"its regularized weight {variable.path!r} is not held element for element by "
                "a parameter of the converted module (computed from or folded into another "
                "value), so crossport cannot compute its penalty; add it to your torch loss"))
        used = sorted(set(name_idx.tolist()))
        starts, start = {}, 0
        for k in used:
            starts[k] = start
            start += first[names[k]].size
        index = np.array([starts[k] for k in name_idx.tolist()], dtype=np.int64) + pos
        located.append((tuple(names[k] for k in used), index))
    return located


def _variable_of(batch: list, code: int) -> int:
    offset = 0
    for i, variable in enumerate(batch):
        offset += int(np.prod(variable.shape))
        if code < offset:
            return i
    return len(batch) - 1


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
