"""Copy weights between a torch module and a hand-written Keras twin, either direction.

Modules and layers that hold weights are paired like the parity doctor pairs them (explicit
mapping, then names, then order and family; ``crossport/parity/align.py``), every tensor is
moved with its layout rule (``crossport/weights``), and nothing is written unless every
pair fits: a count or shape mismatch raises :class:`~crossport.errors.InputError` listing
all problems, with both models unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import torch

from crossport.errors import InputError
from crossport.parity.align import Side, align, keras_family, torch_family
from crossport.weights.rules import (
    conv_transpose_weight_from_keras,
    conv_transpose_weight_to_keras,
    conv_weight_from_keras,
    conv_weight_to_keras,
    dense_weight_from_keras,
    dense_weight_to_keras,
    depthwise_weight_from_keras,
    depthwise_weight_to_keras,
    flat_feature_order,
    gru_weights_from_keras,
    gru_weights_to_keras,
    lstm_weights_from_keras,
    lstm_weights_to_keras,
    rnn_weights_from_keras,
    rnn_weights_to_keras,
)

_RNN_RULES = {"LSTM": (lstm_weights_to_keras, lstm_weights_from_keras),
              "GRU": (gru_weights_to_keras, gru_weights_from_keras),
              "RNN": (rnn_weights_to_keras, rnn_weights_from_keras)}

_BN = {"weight": "gamma", "bias": "beta", "running_mean": "moving_mean",
       "running_var": "moving_variance"}
_AFFINE = {"weight": "gamma", "bias": "beta"}


@dataclass
class TransferRecord:
    """One pair and the rule used to move its weights."""

    torch_name: str
    torch_type: str
    keras_name: str
    keras_type: str
    rule: str
    matched_by: str
    tensors: int


def _torch_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    state = dict(module.named_parameters(recurse=False))
    state.update({n: b for n, b in module.named_buffers(recurse=False)
                  if b is not None and n != "num_batches_tracked"})
    return {n: t for n, t in state.items() if t is not None}


def _keras_vars(layer: Any) -> dict[str, Any]:
    return {v.name.split("/")[-1].split(":")[0]: v for v in layer.weights}


def _flatten_layers(model: Any) -> list[Any]:
    out = []
    for layer in getattr(model, "layers", [model]):
        if isinstance(layer, keras.Model) and layer is not model:
            out.extend(_flatten_layers(layer))
        else:
            out.append(layer)
    return out


def _keras_flat_block(layers: list[Any], j: int) -> tuple | None:
    """Torch ``(C, H, W)`` of a channels-last Flatten right before Keras layer ``j``."""
    for layer in reversed(layers[:j]):
        kind = type(layer).__name__
        if kind == "Flatten":
            try:
                shape = tuple(layer.input.shape)
            except (AttributeError, ValueError):
                return None
            if len(shape) >= 3 and layer.get_config().get("data_format") != "channels_first":
                return (shape[-1], *shape[1:-1])
            return None
        if keras_family(layer) not in ("dropout", "act"):
            return None
    return None


def _ln_to_keras(w: np.ndarray, shape: tuple) -> np.ndarray:
    """A multi-dim LayerNorm affine ``(C, *s)`` -> channels-last ``(*s, C)``.

    Image blocks (3+ dims) always move; a 2-D affine moves only when the unmoved shape
    does not fit (a ``LayerNorm([T, D])`` over a sequence keeps its layout).
    """
    moved = np.ascontiguousarray(np.moveaxis(w, 0, -1)) if w.ndim >= 2 else w
    if w.ndim >= 3 or (w.ndim == 2 and w.shape != shape):
        return moved
    return w


def _ln_from_keras(k: np.ndarray, shape: tuple) -> np.ndarray:
    moved = np.ascontiguousarray(np.moveaxis(k, -1, 0)) if k.ndim >= 2 else k
    if k.ndim >= 3 or (k.ndim == 2 and k.shape != shape):
        return moved
    return k


def _to_keras(module: torch.nn.Module, layer: Any, t: dict[str, np.ndarray],
              kshapes: dict[str, tuple], block: tuple | None) -> tuple[str, dict[str, np.ndarray]]:
    tt, kt = type(module).__name__, type(layer).__name__
    if set(t) <= set(kshapes) and all(kshapes[n] == t[n].shape for n in t):
        return "same names and shapes", dict(t)
    if tt.startswith("ConvTranspose"):
        return "conv_transpose_weight_to_keras", _with_bias(
            conv_transpose_weight_to_keras(t["weight"]), t)
    if tt.startswith("Conv") and kt.startswith("Depthwise"):
        return "depthwise_weight_to_keras", _with_bias(
            depthwise_weight_to_keras(t["weight"], module.in_channels), t)
    if tt.startswith("Conv"):
        return "conv_weight_to_keras", _with_bias(conv_weight_to_keras(t["weight"]), t)
    if tt == "Linear":
        kernel = dense_weight_to_keras(t["weight"])
        if block is not None and kernel.shape[0] == int(np.prod(block)):
            kernel = kernel[flat_feature_order(block, (*range(1, len(block)), 0))]
            return "dense_weight_to_keras + flat_feature_order", _with_bias(kernel, t)
        return "dense_weight_to_keras", _with_bias(kernel, t)
    if tt.startswith("BatchNorm"):
        return "BN (incl. running stats)", {_BN[n]: a for n, a in t.items() if n in _BN}
    if tt in ("LayerNorm", "GroupNorm", "RMSNorm"):
        return "affine (channels-last)", {_AFFINE[n]: _ln_to_keras(a, kshapes.get(_AFFINE[n], ()))
                                          for n, a in t.items() if n in _AFFINE}
    if tt == "Embedding":
        return "embedding", {"embeddings": t["weight"]}
    if tt in _RNN_RULES:
        _check_rnn(module)
        rule = _RNN_RULES[tt][0]
        arrays = rule(t["weight_ih_l0"], t["weight_hh_l0"], t.get("bias_ih_l0"),
                      t.get("bias_hh_l0"))
        names = ["kernel", "recurrent_kernel", "bias"]
        return rule.__name__, {n: a for n, a in zip(names, arrays) if a is not None}
    raise InputError(f"no weight rule for torch {tt} -> Keras {kt}")


def _from_keras(module: torch.nn.Module, layer: Any, k: dict[str, np.ndarray],
                tshapes: dict[str, tuple], block: tuple | None
                ) -> tuple[str, dict[str, np.ndarray]]:
    tt, kt = type(module).__name__, type(layer).__name__
    if set(tshapes) <= set(k) and all(k[n].shape == tshapes[n] for n in tshapes):
        return "same names and shapes", {n: k[n] for n in tshapes}
    kernel = k.get("kernel")
    if tt.startswith("ConvTranspose"):
        return "conv_transpose_weight_from_keras", _with_bias(
            conv_transpose_weight_from_keras(kernel), k, "weight")
    if tt.startswith("Conv") and kt.startswith("Depthwise"):
        return "depthwise_weight_from_keras", _with_bias(
            depthwise_weight_from_keras(kernel), k, "weight")
    if tt.startswith("Conv"):
        return "conv_weight_from_keras", _with_bias(conv_weight_from_keras(kernel), k, "weight")
    if tt == "Linear":
        rule = "dense_weight_from_keras"
        if block is not None and kernel.shape[0] == int(np.prod(block)):
            order = flat_feature_order(block, (*range(1, len(block)), 0))
            rows = np.empty_like(kernel)
            rows[order] = kernel
            kernel, rule = rows, rule + " + flat_feature_order"
        return rule, _with_bias(dense_weight_from_keras(kernel), k, "weight")
    if tt.startswith("BatchNorm"):
        return "BN (incl. running stats)", {n: k[kn] for n, kn in _BN.items()
                                            if kn in k and n in tshapes}
    if tt in ("LayerNorm", "GroupNorm", "RMSNorm"):
        return "affine (channels-last)", {n: _ln_from_keras(k[kn], tshapes[n])
                                          for n, kn in _AFFINE.items() if kn in k and n in tshapes}
    if tt == "Embedding":
        return "embedding", {"weight": k["embeddings"]}
    if tt in _RNN_RULES:
        _check_rnn(module)
        rule = _RNN_RULES[tt][1]
        arrays = rule(k["kernel"], k["recurrent_kernel"], k.get("bias"))
        names = ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
        return rule.__name__, {n: a for n, a in zip(names, arrays) if a is not None}
    raise InputError(f"no weight rule for Keras {kt} -> torch {tt}")


def _with_bias(kernel: np.ndarray, src: dict[str, np.ndarray], name: str = "kernel"
               ) -> dict[str, np.ndarray]:
    out = {name: kernel}
    if src.get("bias") is not None:
        out["bias"] = src["bias"]
    return out


def _check_rnn(module: torch.nn.Module) -> None:
    if module.num_layers != 1 or module.bidirectional or getattr(module, "proj_size", 0):
        raise InputError(f"{type(module).__name__}(num_layers={module.num_layers}, "
                         f"bidirectional={module.bidirectional}): transfer supports one "
                         f"unidirectional layer per Keras layer; split the torch module")


def _torch_items(module: torch.nn.Module) -> list[Side]:
    items = []
    for name, m in module.named_modules():
        if _torch_state(m):
            items.append(Side(name or type(m).__name__, m, torch_family(m)))
    return items


def _keras_items(model: Any) -> list[Side]:
    layers = _flatten_layers(model)
    for layer in layers:
        if not layer.built:
            raise InputError(f"Keras layer {layer.name} is not built: call the model on an "
                             f"input (or give keras.Input) before transferring weights")
    return [Side(layer.name, layer, keras_family(layer)) for layer in layers if layer.weights]


def transfer_weights(src: Any, dst: Any, mapping: Mapping[str, str] | None = None,
                     verbose: bool = True) -> list[TransferRecord]:
    """Copy every weight from ``src`` to ``dst`` (torch -> Keras or Keras -> torch).

    Conv, depthwise and transposed conv kernels, Dense after a channels-last Flatten (rows
    permuted), BatchNorm with running statistics, LayerNorm (multi-dim affine moved to
    channels-last), GroupNorm, Embedding and one-layer LSTM/GRU/RNN (gate orders) each use their
    layout rule. Nothing is written unless every pair fits.

    Args:
        src: a ``torch.nn.Module`` or a built Keras model.
        dst: the other one.
        mapping: explicit ``{torch module name: Keras layer name}`` pairs.
        verbose: print the mapping used (a rich table).

    Returns:
        The list of :class:`TransferRecord` pairs used.

    Raises:
        InputError: the models do not pair up, or a tensor's shape does not fit.

    Example:
        >>> import keras, torch, crossport
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(),
        ...                           torch.nn.Linear(4 * 6 * 6, 2))
        >>> twin = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3),
        ...                          keras.layers.Flatten(), keras.layers.Dense(2)])
        >>> [r.rule for r in crossport.transfer_weights(net, twin, verbose=False)]
        ['conv_weight_to_keras', 'dense_weight_to_keras + flat_feature_order']
    """
    to_keras = isinstance(src, torch.nn.Module)
    module, model = (src, dst) if to_keras else (dst, src)
    if not isinstance(module, torch.nn.Module) or not isinstance(model, keras.layers.Layer):
        raise InputError(f"transfer_weights needs a torch.nn.Module and a Keras model, got "
                         f"{type(src).__name__} and {type(dst).__name__}")
    t_items, k_items = _torch_items(module), _keras_items(model)
    pairs = align(t_items, k_items, mapping)
    problems = _count_problems(t_items, k_items, pairs)
    layers = _flatten_layers(model)
    index = {id(layer): j for j, layer in enumerate(layers)}
    plan: list[tuple[Any, np.ndarray]] = []
    records = []
    for ti, kj, how in pairs:
        t, k = t_items[ti], k_items[kj]
        block = _keras_flat_block(layers, index[id(k.obj)])
        tstate, kvars = _torch_state(t.obj), _keras_vars(k.obj)
        try:
            if to_keras:
                rule, arrays = _to_keras(t.obj, k.obj, {n: v.detach().cpu().numpy()
                                                        for n, v in tstate.items()},
                                         {n: tuple(v.shape) for n, v in kvars.items()}, block)
                targets = kvars
            else:
                rule, arrays = _from_keras(t.obj, k.obj, {n: np.asarray(v.numpy())
                                                          for n, v in kvars.items()},
                                           {n: tuple(v.shape) for n, v in tstate.items()}, block)
                targets = tstate
        except (InputError, KeyError) as exc:
            problems.append(f"{t.name} ({type(t.obj).__name__}) <-> {k.name} "
                            f"({type(k.obj).__name__}): {exc}")
            continue
        problems += _shape_problems(t, k, arrays, targets)
        if set(arrays) != set(targets):
            problems.append(f"{t.name} <-> {k.name}: tensors {sorted(arrays)} do not cover "
                            f"{sorted(targets)}")
        plan += [(targets[n], a) for n, a in arrays.items() if n in targets]
        records.append(TransferRecord(t.name, type(t.obj).__name__, k.name, type(k.obj).__name__,
                                      rule, how, len(arrays)))
    if problems:
        raise InputError("transfer_weights changed nothing:\n  " + "\n  ".join(problems))
    _apply(plan)
    if verbose:
        _print(records, "torch -> Keras" if to_keras else "Keras -> torch")
    return records


def _count_problems(t_items: list[Side], k_items: list[Side], pairs: list) -> list[str]:
    problems = []
    left_t = [t.name for i, t in enumerate(t_items) if i not in {p[0] for p in pairs}]
    left_k = [k.name for j, k in enumerate(k_items) if j not in {p[1] for p in pairs}]
    if left_t or left_k:
        problems.append(f"{len(t_items)} torch modules with weights vs {len(k_items)} Keras "
                        f"layers with weights; unpaired torch: {left_t}, unpaired Keras: "
                        f"{left_k} (pass mapping={{torch_name: keras_name}})")
    return problems


def _shape_problems(t: Side, k: Side, arrays: dict, targets: dict) -> list[str]:
    out = []
    for n, a in arrays.items():
        if n in targets and tuple(a.shape) != tuple(targets[n].shape):
            out.append(f"{t.name} ({type(t.obj).__name__}) <-> {k.name} "
                       f"({type(k.obj).__name__}): {n} needs shape {tuple(targets[n].shape)}, "
                       f"the source gives {tuple(a.shape)}")
    return out


def _apply(plan: list[tuple[Any, np.ndarray]]) -> None:
    with torch.no_grad():
        for target, array in plan:
            if isinstance(target, torch.Tensor):
                target.copy_(torch.from_numpy(np.ascontiguousarray(array)).to(target.dtype))
            else:
                target.assign(np.asarray(array, dtype=target.dtype))


def _print(records: list[TransferRecord], direction: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"crossport.transfer_weights ({direction})")
    for col in ("torch module", "Keras layer", "rule", "matched by"):
        table.add_column(col)
    for r in records:
        table.add_row(f"{r.torch_name} ({r.torch_type})", f"{r.keras_name} ({r.keras_type})",
                      r.rule, r.matched_by)
    import sys

    console = Console() if sys.stdout.isatty() else Console(width=140)  # logs: no wrapping
    console.print(table)
