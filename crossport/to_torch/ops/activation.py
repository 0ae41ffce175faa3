"""Activations: Keras activation names -> plain torch modules (torch_layers where none is exact).

Keras 3 ``hard_sigmoid`` is ``relu6(x + 3) / 6`` = ``nn.Hardsigmoid``; ``gelu`` defaults to the
exact form; ``leaky_relu`` (the function) has slope 0.2, the ``LeakyReLU`` layer 0.3;
``softmax`` runs over Keras' last axis, which the held tensor may keep elsewhere.
"""

from __future__ import annotations

import torch
from torch import nn

from crossport.errors import InputError
from crossport.layout import physical_axes, physical_axis, physical_broadcast
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.registry import register_layer
from crossport.torch_layers import KerasActivation, KerasPReLU, activation_name, keras_activation

_PLAIN = {
    "relu": nn.ReLU,
    "relu6": nn.ReLU6,
    "sigmoid": nn.Sigmoid,
    "tanh": nn.Tanh,
    "elu": nn.ELU,
    "selu": nn.SELU,
    "silu": nn.SiLU,
    "swish": nn.SiLU,
    "gelu": nn.GELU,
    "hard_sigmoid": nn.Hardsigmoid,
    "hard_silu": nn.Hardswish,
    "hard_swish": nn.Hardswish,
    "mish": nn.Mish,
    "softsign": nn.Softsign,
    "log_sigmoid": nn.LogSigmoid,
    "tanh_shrink": nn.Tanhshrink,
    "hard_tanh": nn.Hardtanh,
}
_AXIS_WISE = {"softmax": nn.Softmax, "log_softmax": nn.LogSoftmax}


def layer_activation(layer, attribute: str = "activation"):
    """The layer's activation function itself, not its config: a config names a user
    function ``relu`` exactly as it names Keras' ``relu``."""
    fn = getattr(layer, attribute, None)
    return fn if callable(fn) else layer.get_config()[attribute]


def activation_unsupported(identifier) -> str | None:
    """A reason when a Keras activation identifier has no torch equivalent here."""
    try:
        keras_activation(activation_name(identifier))
    except InputError as err:
        return str(err)
    return None


def activation_module(identifier, dim: int = -1) -> nn.Module | None:
    """A torch module computing the Keras activation (None for ``linear``)."""
    name = activation_name(identifier)
    if name == "linear":
        return None
    if name in _PLAIN:
        return _PLAIN[name]()
    if name in _AXIS_WISE:
        return _AXIS_WISE[name](dim=dim)
    if name == "leaky_relu":
        return nn.LeakyReLU(0.2)
    return KerasActivation(name, axis=dim)  # softplus without threshold, exponential, glu


def apply_activation(ctx: Context, identifier, x: torch.fx.Node, dim: int = -1) -> torch.fx.Node:
    """``x`` through the layer's fused ``activation`` (a sibling module ``<layer>_act``)."""
    module = activation_module(identifier, dim)
    return x if module is None else ctx.call_module(module, x, suffix="_act")


def _activation_supported(layer) -> str | None:
    return activation_unsupported(layer_activation(layer))


@register_layer(policy=Policy.CUSTOM, supports=_activation_supported, keeps_layout=True)
def Activation(ctx: Context, layer, inputs: Held) -> Held:
    """keras.layers.Activation: elementwise ones keep the layout; softmax's axis is remapped."""
    name = activation_name(layer_activation(layer))
    if name in ("softmax", "log_softmax", "glu"):  # they see the feature order
        inputs = ctx.plain(inputs)
    dim = physical_axis(inputs.layout, -1) if inputs.rank else -1  # a scalar (a gate) too
    module = activation_module(name, dim)
    node = inputs.node if module is None else ctx.call_module(module, inputs.node)
    return Held(node, inputs.layout, inputs.shape)


@register_layer(policy=Policy.AGNOSTIC,
                supports=lambda l: None if l.get_config()["threshold"] == 0 else
                "ReLU threshold != 0 is not converted")
def ReLU(ctx: Context, layer, inputs):
    """keras.layers.ReLU(max_value, negative_slope): nn.ReLU / nn.ReLU6 / nn.Hardtanh forms."""
    cfg = layer.get_config()
    max_value, slope = cfg["max_value"], float(cfg["negative_slope"])
    if slope == 0 and max_value is None:
        return ctx.call_module(nn.ReLU(), inputs)
    if slope == 0 and float(max_value) == 6.0:
        return ctx.call_module(nn.ReLU6(), inputs)
    y = ctx.call_function(torch.nn.functional.leaky_relu, inputs, slope) if slope else \
        ctx.call_function(torch.relu, inputs)
    if max_value is not None:
        y = ctx.call_function(torch.clamp, y, max=float(max_value))
    return y


@register_layer(policy=Policy.AGNOSTIC)
def LeakyReLU(ctx: Context, layer, inputs):
    """keras.layers.LeakyReLU: slope from the config (default 0.3, torch 0.01)."""
    return ctx.call_module(nn.LeakyReLU(float(layer.get_config()["negative_slope"])), inputs)


@register_layer(policy=Policy.AGNOSTIC)
def ELU(ctx: Context, layer, inputs):
    """keras.layers.ELU(alpha) -> nn.ELU(alpha)."""
    return ctx.call_module(nn.ELU(float(layer.get_config()["alpha"])), inputs)


@register_layer(policy=Policy.CUSTOM, masks=True)
def Softmax(ctx: Context, layer, inputs: Held, mask=None) -> Held:
    """keras.layers.Softmax(axis): nn.Softmax on the held dim of the Keras axis; over
    several axes ``exp(x - logsumexp(x, axes))`` as Keras (a 1-tuple is the one axis, as
    MultiHeadAttention's softmax with dropout builds it).

    A mask (``softmax(scores, mask)``, positional in keras_hub's attention) as Keras: the
    masked scores set to -1e9 first (a mask not bool: kept where > 0.5), the masked
    outputs zeroed after (a fully masked row is zeros, not uniform)."""
    inputs = ctx.plain(inputs)
    axis = layer.get_config()["axis"]
    axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    keep = None
    scores = inputs.node
    if mask is not None:
        keep = ctx.broadcast_to(mask, inputs.layout) if mask.rank < inputs.rank else \
            ctx.to_layout(ctx.plain(mask), inputs.layout).node
        if ctx.input_dtypes[1] != "bool":
            keep = ctx.call_function(torch.gt, keep, 0.5)
        scores = ctx.call_function(torch.where, keep, scores, -1e9)
    dims = list(physical_axes(inputs.layout, axes))
    if len(dims) == 1:
        out = ctx.call_module(nn.Softmax(dim=dims[0]), scores)
    else:
        total = ctx.call_function(torch.logsumexp, scores, dims, keepdim=True)
        out = ctx.call_function(torch.exp, ctx.call_function(torch.sub, scores, total))
    if keep is not None:
        out = ctx.call_function(torch.where, keep, out, 0.0)
    return Held(out, inputs.layout, inputs.shape)


@register_layer(policy=Policy.CUSTOM, keeps_layout=True)
def PReLU(ctx: Context, layer, inputs: Held) -> Held:
    """keras.layers.PReLU: a learned slope per element (shared axes 1), laid out like the input.

    Keras computes ``relu(x) - alpha * relu(-x)`` with zero-initialised alphas, not torch's
    single 0.25: torch_layers.KerasPReLU with ``alpha`` held in the input's layout.
    """
    inputs = ctx.plain(inputs)
    held = physical_broadcast(layer.alpha.numpy(), inputs.layout)[0]
    module = KerasPReLU(held.shape)
    with torch.no_grad():
        module.alpha.copy_(torch.from_numpy(held))
    return Held(ctx.call_module(module, inputs.node), inputs.layout, inputs.shape)
