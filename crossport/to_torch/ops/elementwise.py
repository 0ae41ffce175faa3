"""More elementwise keras.ops: inverse hyperbolics, arctan2, trunc, cbrt, signbit, the shrink
and sparse activations, glu, logical_xor, broadcast_to, stop_gradient / copy.

Each follows Keras' TF-backend formula (``keras/src/backend/tensorflow``) with ``torch.where``
where TF uses it, so NaN lands where TF puts it: ``soft_shrink``/``hard_shrink``/
``sparse_plus``/``sparse_sigmoid`` give 0 (or 1) for NaN where TF's comparisons fail, not
NaN; torch's own ``F.softshrink``/``F.hardshrink`` propagate it.
"""

from __future__ import annotations

import operator

import numpy as np
import torch
import torch.nn.functional as F

from crossport.layout import canonical, normalize_dim, physical_axis, physical_order
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.ops.kops import _unary
from crossport.to_torch.registry import register_op

# float results of any input (ints are computed in float32, as Keras' TF backend casts them)
for _name, _fn in {"Arcsinh": torch.asinh, "Arccosh": torch.acosh, "Arctanh": torch.atanh,
                   "Erfc": torch.erfc, "Deg2rad": torch.deg2rad,
                   "Rad2deg": torch.rad2deg}.items():
    _unary(_name, _fn)


def _float(ctx: Context, x):
    """``x`` in the op's (float) output dtype: Keras computes an int input in float32."""
    want = ctx.output_dtype()
    if "float" not in ctx.input_dtype and want.is_floating_point:
        return ctx.call_method("to", x, want)
    return x


@register_op(policy=Policy.AGNOSTIC)
def Trunc(ctx: Context, op, x):
    """keras.ops.trunc(x): TF's ``where(x < 0, ceil(x), floor(x))`` (-0.5 gives -0.0 in
    both); ints and bools unchanged."""
    if "float" not in ctx.input_dtype:
        return x
    call = ctx.call_function
    return call(torch.where, call(operator.lt, x, 0), call(torch.ceil, x), call(torch.floor, x))


@register_op(policy=Policy.AGNOSTIC)
def Cbrt(ctx: Context, op, x):
    """keras.ops.cbrt(x): TF's ``sign(x) * pow(|x|, 1/3)`` (torch has no cbrt), in float."""
    call = ctx.call_function
    x = _float(ctx, x)
    third = float(np.float32(1.0 / 3.0))
    return call(operator.mul, call(torch.sign, x), call(torch.pow, call(torch.abs, x), third))


@register_op(policy=Policy.AGNOSTIC)
def Signbit(ctx: Context, op, x):
    """keras.ops.signbit(x): the sign bit (-0.0 and -NaN set); ``x < 0`` for ints, False
    for bools."""
    if ctx.input_dtype == "bool":
        return ctx.call_function(torch.zeros_like, x, dtype=torch.bool)
    return ctx.call_function(torch.signbit, x)


@register_op("Isposinf", "Isneginf", policy=Policy.AGNOSTIC)
def Isposinf(ctx: Context, op, x):
    """keras.ops.isposinf / isneginf(x): ``x == ±inf`` (False for ints)."""
    fn = torch.isposinf if type(op).__name__ == "Isposinf" else torch.isneginf
    if "float" not in ctx.input_dtype:
        return ctx.call_function(torch.zeros_like, x, dtype=torch.bool)
    return ctx.call_function(fn, x)


@register_op(policy=Policy.AGNOSTIC)
def Arctan2(ctx: Context, op, x1, x2):
    """keras.ops.arctan2(x1, x2): torch.atan2 in Keras' float result dtype (ints in
    float32); signed zeros and infinities follow C99 in both."""
    want = ctx.output_dtype()
    x1, x2 = (ctx.call_method("to", v, want) if isinstance(v, torch.fx.Node) else
              ctx.call_function(torch.scalar_tensor, float(v), dtype=want) for v in (x1, x2))
    return ctx.call_function(torch.atan2, x1, x2)


@register_op(policy=Policy.AGNOSTIC)
def LogicalXor(ctx: Context, op, x1, x2):
    """keras.ops.logical_xor(x1, x2): both cast to bool (NaN is True), then xor."""
    x1, x2 = (ctx.call_method("to", v, torch.bool) if isinstance(v, torch.fx.Node) else
              ctx.call_function(torch.scalar_tensor, bool(v), dtype=torch.bool)
              for v in (x1, x2))
    return ctx.call_function(torch.logical_xor, x1, x2)


def _where(ctx: Context, condition, x, y):
    return ctx.call_function(torch.where, condition, x, y)


@register_op(policy=Policy.AGNOSTIC)
def SoftShrink(ctx: Context, op, x):
    """keras.ops.soft_shrink(x, threshold): ``where(x > t, x - t, where(x < -t, x + t, 0))``
    (NaN gives 0, as in TF)."""
    t = float(op.threshold)
    call = ctx.call_function
    inner = _where(ctx, call(operator.lt, x, -t), call(operator.add, x, t),
                   call(torch.zeros_like, x))
    return _where(ctx, call(operator.gt, x, t), call(operator.sub, x, t), inner)


@register_op(policy=Policy.AGNOSTIC)
def HardShrink(ctx: Context, op, x):
    """keras.ops.hard_shrink(x, threshold): ``where(|x| > t, x, 0)`` (NaN gives 0)."""
    call = ctx.call_function
    return _where(ctx, call(operator.gt, call(torch.abs, x), float(op.threshold)), x,
                  call(torch.zeros_like, x))


@register_op(policy=Policy.AGNOSTIC)
def Threshold(ctx: Context, op, x):
    """keras.ops.threshold(x, threshold, default_value): ``where(x > t, x, default)``."""
    condition = ctx.call_function(operator.gt, x, float(op.threshold))
    default = ctx.call_function(torch.full_like, x, op.default_value)
    return _where(ctx, condition, x, default)


@register_op(policy=Policy.AGNOSTIC)
def TanhShrink(ctx: Context, op, x):
    """keras.ops.tanh_shrink(x): ``x - tanh(x)``."""
    return ctx.call_function(operator.sub, x, ctx.call_function(torch.tanh, x))


@register_op(policy=Policy.AGNOSTIC)
def Squareplus(ctx: Context, op, x):
    """keras.ops.squareplus(x, b): ``(x + sqrt(x^2 + b)) / 2``."""
    call = ctx.call_function
    root = call(torch.sqrt, call(operator.add, call(torch.square, x), float(op.b)))
    return call(operator.truediv, call(operator.add, x, root), 2.0)


@register_op(policy=Policy.AGNOSTIC)
def SparsePlus(ctx: Context, op, x):
    """keras.ops.sparse_plus(x): 0 for ``x <= -1``, ``(x + 1)^2 / 4`` below 1, else ``x``."""
    call = ctx.call_function
    quadratic = call(operator.mul, 0.25, call(torch.pow, call(operator.add, x, 1.0), 2.0))
    inner = _where(ctx, call(operator.lt, x, 1.0), quadratic, x)
    return _where(ctx, call(operator.le, x, -1.0), call(torch.zeros_like, x), inner)


@register_op(policy=Policy.AGNOSTIC)
def SparseSigmoid(ctx: Context, op, x):
    """keras.ops.sparse_sigmoid(x): 0 for ``x <= -1``, 1 for ``x >= 1``, else
    ``(x + 1) / 2`` (NaN: ``(NaN + 1) / 2``, as TF)."""
    call = ctx.call_function
    inner = _where(ctx, call(operator.ge, x, 1.0), call(torch.ones_like, x),
                   call(operator.mul, 0.5, call(operator.add, x, 1.0)))
    return _where(ctx, call(operator.le, x, -1.0), call(torch.zeros_like, x), inner)


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def Glu(ctx: Context, op, x: Held) -> Held:
    """keras.ops.glu(x, axis): ``a * sigmoid(b)`` of the two halves along the axis
    (``F.glu`` at the held dim)."""
    x = ctx.plain(x)
    axis = normalize_dim(int(op.axis), x.rank)
    node = ctx.call_function(F.glu, x.node, physical_axis(x.layout, axis))
    return Held(node, x.layout, ctx.output_shapes[0])


@register_op(policy=Policy.CUSTOM, sizes=True)
def BroadcastTo(ctx: Context, op, x: Held) -> Held:
    """keras.ops.broadcast_to(x, shape): ``expand`` at the held axes when the rank stays,
    else ``torch.broadcast_to`` on the Keras-ordered tensor (leading dims added); a size
    that does not broadcast (the batch included) is an error in both. Run-time sizes (a
    traced call's ``ops.shape(x)``) are read at run time."""
    shape = list(ctx.size(tuple(op.shape)))
    x = ctx.plain(x)
    if len(shape) == x.rank:
        node = ctx.call_method("expand", x.node, *physical_order(x.layout, shape))
        return Held(node, x.layout, ctx.output_shapes[0])
    x = ctx.canonical(x)
    node = ctx.call_function(torch.broadcast_to, x.node, shape)
    return Held(node, canonical(len(shape)), ctx.output_shapes[0])


@register_op("StopGradient", "Copy", policy=Policy.AGNOSTIC)
def StopGradient(ctx: Context, op, x):
    """keras.ops.stop_gradient / copy(x): the value itself (``detach`` for stop_gradient,
    so training the module keeps Keras' gradient rule)."""
    if type(op).__name__ == "StopGradient":
        return ctx.call_method("detach", x)
    return ctx.call_function(torch.clone, x)
