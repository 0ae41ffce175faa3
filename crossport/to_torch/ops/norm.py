"""Normalization: BatchNormalization, LayerNormalization, GroupNormalization -> torch.

Keras eps defaults are 1e-3 (torch 1e-5) and BN momentum is mirrored (torch = 1 - Keras),
pitfall 5; multi-axis LayerNormalization keeps its elementwise gamma over all its axes
(pitfall 3). Plain ``nn.BatchNormNd`` / ``nn.LayerNorm`` / ``nn.GroupNorm`` where the held
axes allow, ``crossport.torch_layers`` otherwise.
"""

from __future__ import annotations

import math
import operator

import keras
import numpy as np
import torch
from torch import nn

from crossport.errors import UnsupportedLayerError
from crossport.layout import dims_at, dims_last, normalize_dims, physical_axes, physical_axis
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.modules import KerasUnitNorm
from crossport.to_torch.registry import register_layer, register_op
from crossport.torch_layers import (
    KerasBatchNorm,
    KerasBatchNorm1d,
    KerasBatchNorm2d,
    KerasBatchNorm3d,
    KerasGroupNorm,
    KerasLayerNorm,
)

# nn.BatchNormNd subclasses: same state_dict and inference, Keras' biased running variance
_BN = {2: KerasBatchNorm1d, 3: KerasBatchNorm1d, 4: KerasBatchNorm2d, 5: KerasBatchNorm3d}


def _arr(variable) -> np.ndarray:
    return np.asarray(variable.numpy())


def _copy(param: torch.Tensor | None, array: np.ndarray) -> None:
    if param is not None:
        with torch.no_grad():
            param.copy_(torch.from_numpy(np.ascontiguousarray(array)))


def _axes(cfg_axis, rank: int) -> list[int]:
    axes = cfg_axis if isinstance(cfg_axis, (list, tuple)) else [cfg_axis]
    return sorted(normalize_dims([int(a) for a in axes], rank))


def _bn_supported(layer) -> str | None:
    cfg = layer.get_config()
    if cfg.get("renorm"):
        return "batch renormalization (renorm=True) is not converted"
    axis = cfg["axis"]
    if isinstance(axis, (list, tuple)) and len(axis) != 1:
        return f"BatchNormalization over several axes {axis} is not converted"
    return None


# FusedBatchNormalization: crossport's Keras BN with TF's fused inference kernel (same
# config, weights and function), which the forward converter emits for image BatchNorm.
@register_layer("BatchNormalization", "FusedBatchNormalization", policy=Policy.CUSTOM,
                supports=_bn_supported, keeps_layout=True)
def BatchNormalization(ctx: Context, layer, inputs: Held, **_call_kwargs) -> Held:
    """keras.layers.BatchNormalization -> KerasBatchNorm{1,2,3}d(eps, momentum=1-momentum).

    The feature axis must be held at dim 1 for torch's BN: a channels-last axis of a rank>=3
    tensor is laid out channels-first (the CNN case costs nothing). Without both gamma and
    beta, torch_layers.KerasBatchNorm. KerasBatchNormNd is nn.BatchNormNd (same state_dict,
    same inference) except in training, where it updates the running variance with the
    biased batch variance as Keras does (torch: unbiased).
    """
    cfg = layer.get_config()
    axis = _axes(cfg["axis"], inputs.rank)[0]
    inputs = ctx.plain(inputs)
    if inputs.rank >= 3 and physical_axis(inputs.layout, axis) != 1:
        perm = list(range(inputs.rank))  # bring the feature axis to dim 1, rest in order
        perm.remove(axis)
        perm.insert(1, axis)
        inputs = ctx.to_layout(inputs, type(inputs.layout)(tuple(perm)))
    held_axis = physical_axis(inputs.layout, axis)
    mean = _arr(layer.moving_mean)
    eps, momentum = float(cfg["epsilon"]), 1.0 - float(cfg["momentum"])
    frozen = not layer.trainable  # Keras: moving statistics in training mode too
    if cfg["center"] and cfg["scale"] and held_axis == 1 and inputs.rank in _BN:
        module = _BN[inputs.rank](mean.shape[0], eps=eps, momentum=momentum,
                                  **({"frozen": True} if frozen else {}))
    else:
        module = KerasBatchNorm(mean.shape[0], eps, momentum, bool(cfg["center"]),
                                bool(cfg["scale"]), held_axis, frozen)
    _copy(module.weight, _arr(layer.gamma) if cfg["scale"] else None)
    _copy(module.bias, _arr(layer.beta) if cfg["center"] else None)
    _copy(module.running_mean, mean)
    _copy(module.running_var, _arr(layer.moving_variance))
    return Held(ctx.call_module(module, inputs.node), inputs.layout, inputs.shape)


# StableLayerNormalization: crossport's Keras LayerNormalization with torch's arithmetic
# (same config, weights and function), which the forward converter emits.
@register_layer("LayerNormalization", "StableLayerNormalization", policy=Policy.CUSTOM,
                keeps_layout=True)
def LayerNormalization(ctx: Context, layer, inputs: Held) -> Held:
    """keras.layers.LayerNormalization(axis, epsilon) over the held dims of its Keras axes.

    nn.LayerNorm when those dims are the trailing ones in Keras' order (gamma and beta both
    or gamma only, no rms_scaling); otherwise torch_layers.KerasLayerNorm with the held dims
    (ConvNeXt's channel LayerNorm on an NCHW tensor) and gamma/beta transposed to match.
    """
    cfg = layer.get_config()
    inputs = ctx.plain(inputs)
    keras_axes = _axes(cfg["axis"], inputs.rank)
    sizes = tuple(inputs.shape[a] for a in keras_axes)
    weights = [w for w in (layer.gamma, layer.beta) if w is not None]
    if weights and None in sizes:
        sizes = _sizes_of_built_weights(ctx, keras_axes, sizes, tuple(weights[0].shape))
    if weights and math.prod(weights[0].shape) != math.prod(sizes):
        raise UnsupportedLayerError(  # a shared layer called on other sizes than it was built
            f"Keras layer {ctx.path!r} (LayerNormalization) is called on a tensor whose "
            f"normalized axes {keras_axes} have sizes {sizes}; its gamma/beta of shape "
            f"{tuple(weights[0].shape)} do not reshape to them, so Keras itself fails on this "
            "call at run time", [(ctx.path, "LayerNormalization", "gamma does not fit")])
    shared = ctx.registered()
    if shared is not None:  # a later call of a shared layer, maybe on another rank
        inputs = _as_shared_norm_expects(ctx, shared, inputs, keras_axes, sizes)
        return Held(ctx.call_module(shared, inputs.node), inputs.layout, inputs.shape)
    if len({len(n.input_tensors()[0].shape) for n in ctx.calls.get(id(layer), ())}) > 1:
        inputs = _normalized_last(ctx, inputs, keras_axes)  # a module for every rank
    held_axes = list(physical_axes(inputs.layout, keras_axes))
    order = list(np.argsort(held_axes))
    ctx.memo[("LayerNormalization", id(layer))] = order, sizes  # for the layer's later calls
    shape = tuple(sizes[i] for i in order)
    has_gamma = cfg["scale"] or cfg.get("rms_scaling", False)
    gamma = np.transpose(_arr(layer.gamma).reshape(sizes), order) if has_gamma else None
    rms = bool(cfg.get("rms_scaling", False))
    has_beta = cfg["center"] and not rms
    beta = np.transpose(_arr(layer.beta).reshape(sizes), order) if has_beta else None
    trailing = sorted(held_axes) == list(range(inputs.rank - len(held_axes), inputs.rank))
    if trailing and not rms and cfg["scale"]:
        module = nn.LayerNorm(shape, eps=float(cfg["epsilon"]), bias=bool(cfg["center"]))
    else:  # trailing dims counted from the end: the module serves a shared call's other rank
        dims = [a - inputs.rank for a in sorted(held_axes)] if trailing else sorted(held_axes)
        module = KerasLayerNorm(shape, dims, float(cfg["epsilon"]), bool(cfg["center"]),
                                bool(cfg["scale"]), rms)
    _copy(module.weight, gamma)
    _copy(module.bias, beta)
    return Held(ctx.call_module(module, inputs.node), inputs.layout, inputs.shape)


def _sizes_of_built_weights(ctx: Context, keras_axes: list[int], sizes: tuple,
                            built: tuple) -> tuple:
    """The normalized sizes of a built LayerNormalization called with run-time dims there.

    A layer built on fixed sizes and then called on ``None`` dims (reused in a new model)
    runs in Keras only where its gamma/beta reshape to the call's sizes, so the module
    normalizes the built sizes and refuses others, rather than Keras' reshape that would
    reinterpret gamma at another split of the same element count.
    """
    fits = len(built) == len(sizes) and all(s in (None, b) for s, b in zip(sizes, built))
    if not fits:
        raise UnsupportedLayerError(
            f"Keras layer {ctx.path!r} (LayerNormalization) normalizes axes {keras_axes} of "
            f"sizes {sizes}, which do not match its gamma/beta built at {built}; build the "
            "layer on the sizes it is called on",
            [(ctx.path, "LayerNormalization", "gamma does not fit")])
    return tuple(int(b) for b in built)


def _normalized_last(ctx: Context, inputs: Held, keras_axes: list[int]) -> Held:
    """``inputs`` with the normalized Keras axes held last (in their held order): the
    first call of a LayerNormalization shared by tensors of several ranks builds a module
    over trailing dims, which every rank's call can use."""
    return ctx.to_layout(inputs, dims_last(inputs.layout, keras_axes))


def _as_shared_norm_expects(ctx: Context, module, inputs: Held, keras_axes: list[int],
                            sizes: tuple) -> Held:
    """A shared LayerNormalization's input laid out for the module of its first call.

    Keras keeps the layer's ``axis`` as given, so ``LayerNormalization()`` shared by a
    rank-3 and a rank-4 tensor normalizes each over its last axis with one gamma. The
    torch module normalizes fixed dims (the trailing ones, or held dims such as an NCHW
    channel dim); this call's normalized Keras axes are moved there, in the order the
    module's weight holds them (the first call's), the other axes keeping their order.
    """
    rank = inputs.rank
    order, first_sizes = ctx.memo[("LayerNormalization", id(ctx.layer))]

    def refuse(why: str):
        return UnsupportedLayerError(
            f"Keras layer {ctx.path!r} (LayerNormalization) is shared, and its call on a "
            f"rank-{rank} tensor normalizing axes {keras_axes} (sizes {sizes}) {why}; use one "
            "layer per call (copying the weights)",
            [(ctx.path, "LayerNormalization", f"shared call: {why}")])

    if sizes != first_sizes:
        raise refuse(f"does not match the sizes {first_sizes} its gamma was built for (Keras "
                     "reshapes gamma to them: an error, or its entries reinterpreted)")
    if isinstance(module, nn.LayerNorm):
        dims = list(range(rank - len(module.normalized_shape), rank))
    else:
        try:
            dims = list(normalize_dims(module.axis, rank))
        except ValueError:  # a held axis this rank does not have
            dims = [None]
    if None in dims or len(set(dims)) != len(keras_axes) or 0 in dims:
        raise refuse("cannot be normalized by the torch module built for its first call")
    placed = {d: keras_axes[j] for d, j in zip(dims, order)}
    return ctx.to_layout(inputs, dims_at(inputs.layout, placed))


@register_layer(policy=Policy.CUSTOM, keeps_layout=True)
def GroupNormalization(ctx: Context, layer, inputs: Held) -> Held:
    """keras.layers.GroupNormalization(groups, axis, epsilon 1e-3) -> nn.GroupNorm.

    Groups are contiguous channel chunks in both frameworks; nn.GroupNorm needs the channel
    axis held at dim 1 (torch_layers.KerasGroupNorm otherwise, or without gamma/beta both).
    F.group_norm raises where a group holds a single value (one channel per group over 1x1
    spatial sizes; Keras gives beta there): KerasGroupNorm when a run-time size allows that.
    """
    cfg = layer.get_config()
    inputs = ctx.plain(inputs)
    axis = _axes(cfg["axis"], inputs.rank)[0]
    held_axis = physical_axis(inputs.layout, axis)
    channels = inputs.shape[axis]
    groups = channels if cfg["groups"] == -1 else int(cfg["groups"])
    if held_axis == 1 and cfg["center"] and cfg["scale"] and _groups_never_single(
            inputs.shape, axis, channels // groups):
        module = nn.GroupNorm(groups, channels, eps=float(cfg["epsilon"]))
    else:
        module = KerasGroupNorm(groups, channels, float(cfg["epsilon"]), bool(cfg["center"]),
                                bool(cfg["scale"]), held_axis)
    _copy(module.weight, _arr(layer.gamma) if cfg["scale"] else None)
    _copy(module.bias, _arr(layer.beta) if cfg["center"] else None)
    return Held(ctx.call_module(module, inputs.node), inputs.layout, inputs.shape)


def _groups_never_single(shape: tuple, axis: int, per_group: int) -> bool:
    """Every group holds two or more values at every size Keras accepts."""
    spatial = [s for d, s in enumerate(shape[1:], 1) if d != axis]
    return per_group > 1 or (None not in spatial and int(np.prod(spatial)) > 1)


@register_layer(policy=Policy.CUSTOM, keeps_layout=True)
def UnitNormalization(ctx: Context, layer, inputs: Held) -> Held:
    """keras.layers.UnitNormalization(axis): ``x * min(rsqrt(sum(x^2)), 1e12)`` over the held
    dims of its axes (Keras' ops.normalize with order 2, epsilon 1e-12)."""
    inputs = ctx.plain(inputs)
    axis = layer.get_config()["axis"]
    dims = sorted(physical_axes(inputs.layout, _axes(axis, inputs.rank)))
    module = KerasUnitNorm(dims, 1e-12)
    return Held(ctx.call_module(module, inputs.node), inputs.layout, inputs.shape)


@register_layer(policy=Policy.CUSTOM, keeps_layout=True)
def RMSNormalization(ctx: Context, layer, inputs: Held) -> Held:
    """keras.layers.RMSNormalization(axis, epsilon) over trailing Keras axes -> nn.RMSNorm
    with those axes held last (``x * rsqrt(mean(x^2) + eps) * scale``, the same formula; an
    NCHW channel axis is moved back last)."""
    cfg = layer.get_config()
    inputs = ctx.plain(inputs)
    keras_axes = _axes(cfg["axis"], inputs.rank)
    sizes = tuple(inputs.shape[a] for a in keras_axes)
    trailing = keras_axes == list(range(inputs.rank - len(keras_axes), inputs.rank))
    if tuple(layer.scale.shape) != sizes or not trailing:
        # Keras multiplies by scale broadcast from the right, whatever the axes
        raise UnsupportedLayerError(
            f"Keras layer {ctx.path!r} (RMSNormalization) normalizes axes {keras_axes} "
            f"(sizes {sizes}) of a rank-{inputs.rank} tensor, and Keras multiplies by its scale "
            f"{tuple(layer.scale.shape)} broadcast over the last axes instead: only "
            "trailing axes convert", [(ctx.path, "RMSNormalization", "non-trailing axes")])
    inputs = ctx.to_layout(inputs, dims_last(inputs.layout, keras_axes, held_order=False))
    module = nn.RMSNorm(sizes, eps=float(cfg["epsilon"]))
    _copy(module.weight, _arr(layer.scale).reshape(sizes))
    return Held(ctx.call_module(module, inputs.node), inputs.layout, inputs.shape)


def _epsilon(op) -> float:
    return float(keras.backend.epsilon() if op.epsilon is None else op.epsilon)


def _in_compute_dtype(ctx: Context, x):
    """Keras computes norms in at least float32 and casts back to the input's dtype."""
    if ctx.input_dtype in ("float32", "float64"):
        return x, None
    return ctx.call_method("to", x, torch.float32), ctx.output_dtype()


@register_op(policy=Policy.CANONICAL)
def LayerNorm(ctx: Context, op, x, gamma=None, beta=None):
    """keras.ops.layer_normalization(x, gamma, beta, axis, epsilon): Keras' TF formula,
    ``inv = rsqrt(var + eps) * gamma``, ``x * inv + (beta - mean * inv)`` with tf.nn.moments'
    mean and variance over the sorted axes; a gamma/beta of another rank reshaped to the
    normalized axes when they are not just the last (Keras' ``_broadcast``). The deprecated
    ``rms_scaling=True``: ``x * rsqrt(var + eps) * gamma``."""
    call = ctx.call_function
    rank = len(ctx.input_shape)
    axes = sorted(normalize_dims(op.axis, rank))
    x, back = _in_compute_dtype(ctx, x)
    mean = call(torch.mean, x, dim=axes, keepdim=True)
    variance = call(torch.mean, call(torch.square, call(operator.sub, x, mean)), dim=axes,
                    keepdim=True)
    inv = call(torch.rsqrt, call(operator.add, variance, _epsilon(op)))
    ranks = iter(len(s) for s in ctx.tensor_shapes[1:])

    def broadcast(value):
        if value is None:
            return None
        if isinstance(value, np.ndarray):  # a numpy gamma / beta: a buffer
            value, value_rank = ctx.constant(value).node, value.ndim
        else:
            value_rank = next(ranks)
        if value_rank == rank or axes == [rank - 1]:
            return value
        target = [1] * rank
        for a in axes:
            target[a] = -1 if ctx.input_shape[a] is None else ctx.input_shape[a]
        return ctx.call_method("reshape", value, *target)

    gamma = broadcast(gamma)
    beta = broadcast(beta)
    if op.rms_scaling:
        out = call(operator.mul, x, inv)
        if gamma is not None:
            out = call(operator.mul, out, gamma)
    else:
        if gamma is not None:
            inv = call(operator.mul, inv, gamma)
        res = call(operator.mul, call(operator.neg, mean), inv)
        if beta is not None:
            res = call(operator.add, res, beta)
        out = call(operator.add, call(operator.mul, x, inv), res)
    return ctx.call_method("to", out, back) if back is not None else out


@register_op(policy=Policy.CANONICAL)
def RMSNorm(ctx: Context, op, x, scale=None):
    """keras.ops.rms_normalization(x, scale, axis, epsilon): ``x * rsqrt(mean(x²) + eps)
    * scale`` (Keras' formula; ``F.rms_norm`` is Keras' torch backend only)."""
    call = ctx.call_function
    rank = len(ctx.input_shape)
    if rank == 0:
        raise UnsupportedLayerError(f"keras.ops.rms_normalization {ctx.path!r} of a 0-d "
                                    "tensor is not converted",
                                    [(ctx.path, "RMSNorm", "0-d input")])
    x, back = _in_compute_dtype(ctx, x)
    mean = call(torch.mean, call(torch.square, x), dim=sorted(normalize_dims(op.axis, rank)), keepdim=True)
    out = call(operator.mul, x, call(torch.rsqrt, call(operator.add, mean, _epsilon(op))))
    if isinstance(scale, np.ndarray):
        scale = ctx.constant(scale).node
    if scale is not None:
        out = call(operator.mul, out, scale)
    return ctx.call_method("to", out, back) if back is not None else out
