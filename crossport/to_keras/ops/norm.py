"""Normalisation in inference mode (pitfalls.md items 3, 5, 14)."""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.layers.fused_norm import FusedBatchNormalization, StableLayerNormalization
from crossport.layers.normalization import normalize_moments
from crossport.layout import after_reduce, physical_array, physical_axes
from crossport.to_keras.dynamic_dims import is_dynamic_size, static_dims, tied_to_static
from crossport.to_keras.fold import is_constant
from crossport.to_keras.initial import call_with_weights
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, bind_arguments, register
from crossport.weights import flat_feature_order

aten = torch.ops.aten


def _is_param(arg) -> bool:
    return arg is None or is_constant(arg)


def _batch_norm_supports(node: torch.fx.Node) -> str | None:
    args = list(node.args) + [None] * 9
    weight, bias, mean, var, training = args[1], args[2], args[3], args[4], args[5]
    if node.target is aten.batch_norm.default and training:
        # crossport captures in eval mode: this is code that asks for batch statistics
        return ("batch_norm with batch statistics in eval mode (a BatchNorm with "
                "track_running_stats=False, or F.batch_norm(..., training=True), normalises "
                "each batch by its own statistics): give it running statistics")
    if mean is None or var is None:
        return "batch_norm without running statistics (track_running_stats=False)"
    if not all(_is_param(a) for a in (weight, bias, mean, var)):
        return "batch_norm statistics computed in the graph"
    return None


_CONVS = (aten.conv2d.default, aten.conv2d.padding, aten.convolution.default)


def _folds_into_conv(node) -> bool:
    """``node`` (a BN's input) is a 2-D, not depthwise, not transposed convolution read by
    that BN alone: TF's remapper then folds a fused BN into it (``_FusedConv2D``)."""
    if not isinstance(node, torch.fx.Node) or node.target not in _CONVS or len(node.users) != 1:
        return False
    arguments = bind_arguments(node)
    weight = getattr(arguments["weight"], "meta", {}).get("val")
    if weight is None or weight.ndim != 4 or arguments.get("transposed", False):
        return False
    return arguments["groups"] == 1 or int(weight.shape[1]) > 1  # depthwise: 1 input/group


def emit_batch_norm(ctx, input, weight, bias, running_mean, running_var, momentum, eps):
    """Keras BatchNormalization with torch's eps (Keras' default is 1e-3: pitfall 5).

    A 4-D BN right after a conv TF can fuse it into is crossport.layers.FusedBatchNormalization:
    the same layer, run by TF's fused kernel, which Grappler folds into that conv. Elsewhere
    (after a depthwise conv, an add) TF's fused kernel runs on its own and is slower than
    Keras' multiply-add (1 thread: mobilenet_v2 12.9 vs 11.8 ms, efficientnet_b0 19.7 vs 17.7).
    """
    fused = len(input.shape) == 4 and _folds_into_conv(ctx.node.args[0])
    layer = (FusedBatchNormalization if fused else keras.layers.BatchNormalization)(
        axis=-1, epsilon=eps, momentum=1.0 - momentum,  # Keras momentum is mirrored
        center=bias is not None, scale=weight is not None, name=ctx.name(),
    )
    arrays = {"gamma_initializer": weight, "beta_initializer": bias,
              "moving_mean_initializer": running_mean,
              "moving_variance_initializer": running_var}
    return call_with_weights(layer, input, **{name: np.asarray(w, dtype=np.float32)
                                              for name, w in arrays.items() if w is not None})


@register(aten.batch_norm.default, policy=Policy.CHANNELS_LAST, supports=_batch_norm_supports, dynamic=True)
def aten_batch_norm_default(ctx, input, weight, bias, running_mean, running_var, training,
                            momentum, eps, cudnn_enabled):
    """batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float momentum, float eps, bool cudnn_enabled) -> Tensor"""
    return emit_batch_norm(ctx, input, weight, bias, running_mean, running_var, momentum, eps)


@register(aten._native_batch_norm_legit_no_training.default, policy=Policy.CHANNELS_LAST,
          supports=_batch_norm_supports, dynamic=True)
def aten_native_batch_norm_legit_no_training(ctx, input, weight, bias, running_mean,
                                             running_var, momentum, eps):
    """_native_batch_norm_legit_no_training(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor)

    Only output 0 is used in inference graphs; the saved statistics are not materialised.
    """
    y = emit_batch_norm(ctx, input, weight, bias, running_mean, running_var, momentum, eps)
    return (y, None, None)


def _affine_supports(node: torch.fx.Node) -> str | None:
    """weight/bias (and running stats) must be parameters or buffers, not graph values."""
    schema = node.target._schema
    names = {"weight", "bias", "running_mean", "running_var"}
    for i, argument in enumerate(schema.arguments):
        if argument.name in names and i < len(node.args) and not _is_param(node.args[i]):
            return f"{node.target.__name__} with {argument.name} computed in the graph"
    return None


def _float32(array):
    return None if array is None else np.asarray(array, dtype=np.float32)


def _normalized_dims_static(node: torch.fx.Node) -> str | None:
    """A ``dynamic=`` predicate: a normalized dim may be a run-time size only where
    ``normalized_shape`` is one too. A static entry over a dynamic dim (``flatten`` of
    dynamic H and W into a ``LayerNorm(48)``) holds the model to ``4*H*W == 48``: those
    dims are not free, and Keras' gamma needs a static size."""
    x = node.args[0].meta.get("val")
    shape = node.args[1]
    if not isinstance(x, torch.Tensor):
        return None
    for i, entry in enumerate(shape):
        size = entry.meta.get("val") if isinstance(entry, torch.fx.Node) else entry
        dim = x.shape[x.ndim - len(shape) + i]
        if is_dynamic_size(dim) and not is_dynamic_size(size):
            return tied_to_static(f"dim {x.ndim - len(shape) + i} of 'input', normalized by "
                                  f"layer_norm's normalized size {int(size)},", dim, size)
    return None


@register(aten.layer_norm.default, policy=Policy.CUSTOM, supports=_affine_supports,
          dynamic=_normalized_dims_static)
def aten_layer_norm_default(ctx, input, normalized_shape, weight=None, bias=None, eps=1e-05,
                            cudnn_enable=True):
    """layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor

    Normalises over the last len(normalized_shape) torch dims with an elementwise affine of
    exactly that shape (pitfall 3): Keras LayerNormalization over the Keras axes holding
    those dims, its gamma/beta permuted to Keras order; eps passed (Keras' is 1e-3).
    Any arriving layout is kept (no transpose); after flatten of an NHWC block the affine
    vectors are permuted to the flat feature order instead (pitfall 9).
    """
    value = as_value(ctx, input)
    rank, k = value.rank, len(normalized_shape)
    layout, x = value.layout, value.tensor
    weight, bias = _float32(weight), _float32(bias)
    if layout.flat is not None and k == 1:  # like Linear: the affine takes the feature order
        order = flat_feature_order(layout.flat.block_shape, layout.flat.block_perm)
        weight = None if weight is None else weight[order]
        bias = None if bias is None else bias[order]
        axes, out_layout = [rank - 1], layout
    else:
        value = ctx.plain(value)
        x, layout = value.tensor, value.layout
        axes = sorted(physical_axes(layout, range(rank - k, rank)))
        affine = after_reduce(layout, range(rank - k), keepdim=False)  # the affine's dims
        weight = None if weight is None else physical_array(weight, affine)
        bias = None if bias is None else physical_array(bias, affine)
        out_layout = layout
    layer = StableLayerNormalization(  # Keras' layer, torch's (faster) arithmetic
        axis=axes, epsilon=eps, center=bias is not None, scale=weight is not None,
        name=ctx.name())
    y = layer(x)
    params = [w for w in (weight, bias) if w is not None]
    if params:
        layer.set_weights(params)
    ctx.out_layout = out_layout
    return y


def emit_group_norm(ctx, input, groups, weight, bias, eps):
    """crossport's GroupNorm on channels-last: groups of contiguous channels like torch.

    Not Keras' GroupNormalization: its statistics are TF sums over outer axes, which drift
    from float64 with the element count (an InstanceNorm3d over 96^3 voxels: 2000x torch's
    error); crossport's layer sums pairwise, as torch does.
    """
    from crossport.layers import GroupNorm

    channels = int(ctx.arg_shape(0)[1])
    affine = weight is not None or bias is not None
    layer = GroupNorm(groups, channels, eps=eps, affine=affine, name=ctx.name())
    y = layer(input)
    if affine:  # a missing half of the affine is the identity (exact: * 1, + 0)
        layer.set_weights([_float32(weight) if weight is not None else np.ones(channels, "f4"),
                           _float32(bias) if bias is not None else np.zeros(channels, "f4")])
    return y


@register(aten.group_norm.default, policy=Policy.CHANNELS_LAST, supports=_affine_supports, dynamic=True)
def aten_group_norm_default(ctx, input, num_groups, weight=None, bias=None, eps=1e-05,
                            cudnn_enabled=True):
    """group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1e-05, bool cudnn_enabled=True) -> Tensor

    Keras GroupNormalization's eps default is 1e-3 (pitfall 14): torch's eps is passed.
    GroupNorm(1, C) is the TF1 layer_norm (all non-batch dims, per-channel affine; pitfall 3).
    """
    return emit_group_norm(ctx, input, num_groups, weight, bias, eps)


def _instance_norm_supports(node: torch.fx.Node) -> str | None:
    args = list(node.args) + [None] * 9
    if not args[5] and (args[3] is None or args[4] is None):
        return "instance_norm without input statistics nor running statistics"
    return _affine_supports(node)


def _instance_norm_dynamic(node, weight=None, bias=None, use_input_stats=True, **_arguments):
    """Input statistics with a run-time channel count are per-channel moments over the
    spatial axes (no group count to fix); only an affine (static, one value per channel)
    needs the channels static, and torch.export fixes them then anyway."""
    if not use_input_stats or (weight is None and bias is None):
        return None
    return static_dims("input", lambda _n: [1],
                       "instance_norm's per-channel affine (weight/bias)")(node)


@register(aten.instance_norm.default, policy=Policy.CHANNELS_LAST,
          supports=_instance_norm_supports, dynamic=_instance_norm_dynamic)
def aten_instance_norm_default(ctx, input, weight, bias, running_mean, running_var,
                               use_input_stats, momentum, eps, cudnn_enabled):
    """instance_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool use_input_stats, float momentum, float eps, bool cudnn_enabled) -> Tensor

    InstanceNorm has no affine and no running stats by default (pitfall 14): with input
    statistics it is GroupNorm(C, C); with track_running_stats in eval it is a batch norm
    on the running statistics.
    """
    if not use_input_stats:
        return emit_batch_norm(ctx, input, weight, bias, running_mean, running_var, momentum,
                               eps)
    if ctx.is_dynamic(ctx.node.args[0].meta["val"].shape[1]):  # so no affine (see
        # _instance_norm_dynamic): moments per channel over the spatial axes, no group count
        return normalize_moments(input, range(1, len(input.shape) - 1), eps)[0]
    return emit_group_norm(ctx, input, ctx.arg_shape(0)[1], weight, bias, eps)
