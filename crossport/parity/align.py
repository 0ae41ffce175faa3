"""Pairing torch modules with Keras layers: explicit mapping, then names, then order and shapes.

Used by the parity doctor (``crossport.check``) and by ``crossport.transfer_weights``. Layers
are sorted into coarse *families* (conv, dense, norm, act, pool, ...); a torch module and a
Keras layer of the same family, in the same relative order, with compatible output shapes,
are the same layer of the two networks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_TORCH_FAMILIES: dict[str, tuple[str, ...]] = {
    "conv": ("Conv1d", "Conv2d", "Conv3d", "LazyConv1d", "LazyConv2d", "LazyConv3d"),
    "conv_transpose": ("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"),
    "dense": ("Linear", "LazyLinear", "Bilinear"),
    "norm": ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "KerasBatchNorm1d",
             "KerasBatchNorm2d", "KerasBatchNorm3d", "LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "RMSNorm", "SyncBatchNorm"),
    "act": ("ReLU", "ReLU6", "LeakyReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "Hardswish",
            "Hardsigmoid", "ELU", "SELU", "Softmax", "LogSoftmax", "PReLU", "Mish", "Softplus",
            "Hardtanh", "Softsign", "GLU", "CELU"),
    "pool": ("MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
             "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d",
             "AdaptiveMaxPool2d", "AdaptiveMaxPool3d"),
    "flatten": ("Flatten", "Unflatten"),
    "upsample": ("Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d"),
    "dropout": ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "Identity"),
    "embedding": ("Embedding",),
    "rnn": ("LSTM", "GRU", "RNN"),
    "pad": ("ZeroPad1d", "ZeroPad2d", "ZeroPad3d", "ConstantPad1d", "ConstantPad2d",
            "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad1d",
            "ReplicationPad2d"),
}

_KERAS_FAMILIES: dict[str, tuple[str, ...]] = {
    "conv": ("Conv1D", "Conv2D", "Conv3D", "GroupedConv1D", "GroupedConv2D",
             "DepthwiseConv1D", "DepthwiseConv2D", "SeparableConv1D", "SeparableConv2D",
             "Conv1d", "Conv2d", "Conv3d"),
    "conv_transpose": ("Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose",
                       "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"),
    "dense": ("Dense", "EinsumDense"),
    "norm": ("BatchNormalization", "FusedBatchNormalization", "LayerNormalization",
             "StableLayerNormalization", "GroupNormalization",
             "UnitNormalization", "RMSNormalization", "LayerNorm", "GroupNorm", "BatchNorm1d",
             "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d",
             "InstanceNorm3d"),
    "act": ("ReLU", "LeakyReLU", "Activation", "ELU", "PReLU", "Softmax", "GELU"),
    "pool": ("MaxPooling1D", "MaxPooling2D", "MaxPooling3D", "AveragePooling1D",
             "AveragePooling2D", "AveragePooling3D", "GlobalAveragePooling1D",
             "GlobalAveragePooling2D", "GlobalAveragePooling3D", "GlobalMaxPooling1D",
             "GlobalMaxPooling2D", "GlobalMaxPooling3D", "MaxPool1d", "MaxPool2d",
             "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
             "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d",
             "AdaptiveMaxPool2d", "AdaptiveMaxPool3d"),
    "flatten": ("Flatten", "Reshape"),
    "upsample": ("UpSampling1D", "UpSampling2D", "UpSampling3D", "Resizing"),
    "dropout": ("Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D",
                "AlphaDropout", "GaussianDropout", "Identity"),
    "embedding": ("Embedding",),
    "rnn": ("LSTM", "GRU", "SimpleRNN", "RNN"),
    "pad": ("ZeroPadding1D", "ZeroPadding2D", "ZeroPadding3D", "Pad"),
}


def _invert(table: dict[str, tuple[str, ...]]) -> dict[str, str]:
    return {cls: family for family, classes in table.items() for cls in classes}


_TORCH_FAMILY = _invert(_TORCH_FAMILIES)
_KERAS_FAMILY = _invert(_KERAS_FAMILIES)


def torch_family(module: Any) -> str | None:
    """The family of a torch module (``"conv"``, ``"norm"`` ...), ``None`` if unknown."""
    return _TORCH_FAMILY.get(type(module).__name__)


def keras_family(layer: Any) -> str | None:
    """The family of a Keras layer, ``None`` if unknown."""
    name = type(layer).__name__
    if name.startswith(("Keras", "TF")):
        name = name.removeprefix("Keras").removeprefix("TF")
    return _KERAS_FAMILY.get(name)


def normalize_name(name: str) -> str:
    """``layer1.0.conv1`` and ``layer1_0_conv1`` compare equal."""
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


@dataclass
class Side:
    """One aligned item: a name, the object (module or layer), its family and output shape."""

    name: str
    obj: Any
    family: str | None
    shape: tuple[int, ...] | None = None


def shapes_compatible(torch_shape: Sequence[int] | None, keras_shape: Sequence[int] | None) -> bool:
    """Same shape, the channels-last permutation of it, or the same element count."""
    if torch_shape is None or keras_shape is None:
        return True
    ts, ks = tuple(torch_shape), tuple(keras_shape)
    if ts == ks:
        return True
    if len(ts) >= 3 and (ts[0], *ts[2:], ts[1]) == ks:
        return True
    return _numel(ts) == _numel(ks)


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def pair_score(t: Side, k: Side) -> float:
    """How likely ``t`` and ``k`` are the same layer (0: not a pair)."""
    if t.family is not None and k.family is not None:
        if t.family != k.family:
            return 0.0
        return 3.0 if shapes_compatible(t.shape, k.shape) else 1.0
    if t.family is None and k.family is None and t.shape is not None and k.shape is not None:
        return 0.5 if tuple(t.shape) == tuple(k.shape) else 0.0
    return 0.0


def _dp(ts: list[Side], ks: list[Side], score: Callable[[Side, Side], float]) -> list[tuple[int, int]]:
    """Monotone pairing maximising the total score (Needleman-Wunsch without gap costs)."""
    n, m = len(ts), len(ks)
    best = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            s = score(ts[i], ks[j])
            take = best[i + 1][j + 1] + s if s > 0 else -1.0
            best[i][j] = max(take, best[i + 1][j], best[i][j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        s = score(ts[i], ks[j])
        if s > 0 and best[i][j] == best[i + 1][j + 1] + s:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif best[i][j] == best[i + 1][j]:
            i += 1
        else:
            j += 1
    return pairs


def align(torch_items: list[Side], keras_items: list[Side],
          mapping: Mapping[str, str] | None = None) -> list[tuple[int, int, str]]:
    """Pairs ``(torch index, keras index, how)`` with ``how`` in mapping / name / order.

    An explicit ``mapping`` (torch name -> Keras name) wins; then equal normalised names;
    the rest is paired by execution order, family and output shape.
    """
    pairs: list[tuple[int, int, str]] = []
    used_t: set[int] = set()
    used_k: set[int] = set()
    k_by_name = {k.name: j for j, k in enumerate(keras_items)}
    for tname, kname in (mapping or {}).items():
        ti = [i for i, t in enumerate(torch_items) if t.name == tname]
        if not ti or kname not in k_by_name:
            from crossport.errors import InputError

            raise InputError(f"mapping {tname!r} -> {kname!r}: no such "
                             f"{'torch module' if not ti else 'Keras layer'} "
                             f"(torch: {[t.name for t in torch_items][:20]}, "
                             f"Keras: {list(k_by_name)[:20]})")
        pairs.append((ti[0], k_by_name[kname], "mapping"))
        used_t.add(ti[0])
        used_k.add(k_by_name[kname])
    k_by_norm: dict[str, int] = {}
    for j, k in enumerate(keras_items):
        k_by_norm.setdefault(normalize_name(k.name), j)
    for i, t in enumerate(torch_items):
        j = k_by_norm.get(normalize_name(t.name))
        if i in used_t or j is None or j in used_k:
            continue
        if pair_score(t, keras_items[j]) > 0 or t.family is None or keras_items[j].family is None:
            pairs.append((i, j, "name"))
            used_t.add(i)
            used_k.add(j)
    rest_t = [i for i in range(len(torch_items)) if i not in used_t]
    rest_k = [j for j in range(len(keras_items)) if j not in used_k]
    for a, b in _dp([torch_items[i] for i in rest_t], [keras_items[j] for j in rest_k],
                    pair_score):
        pairs.append((rest_t[a], rest_k[b], "order"))
    pairs.sort(key=lambda p: (p[0], p[1]))
    return pairs
