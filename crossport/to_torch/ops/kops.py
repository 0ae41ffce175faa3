"""keras.ops calls inside functional graphs (``keras.ops.add(x, 1.0)`` becomes a graph node).

Elementwise ops keep whatever layout arrives; ops naming axes get them remapped or run on the
Keras-ordered tensor. The op's attributes (``axes``, ``axis``) are read off the operation.
"""

from __future__ import annotations

import math
import operator
import string

import numpy as np
import torch
import torch.nn.functional as F

from crossport.errors import UnsupportedLayerError
from crossport.layout import (
    after_insert,
    after_permute,
    after_reduce,
    canonical,
    normalize_dim,
    normalize_dims,
    physical_axes,
    physical_axis,
    physical_order,
    reduction_dims,
    shared_layout,
    transpose_perm,
)
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.ops.kops_numpy import floor_mod
from crossport.to_torch.ops.shape import flatten_held, unit_reshape
from crossport.to_torch.registry import register_op
from crossport.to_torch.sizes import RunSize

_BINARY = {
    "Add": operator.add, "Subtract": operator.sub, "Multiply": operator.mul,
    "Divide": operator.truediv, "TrueDivide": operator.truediv, "Power": torch.pow,
    "Maximum": torch.maximum, "Minimum": torch.minimum,
    # comparisons and logic: what Keras builds masks from (Embedding mask_zero, Masking)
    "NotEqual": torch.ne, "Equal": torch.eq, "Greater": torch.gt, "GreaterEqual": torch.ge,
    "Less": torch.lt, "LessEqual": torch.le, "LogicalAnd": torch.logical_and,
    "LogicalOr": torch.logical_or,
}
_UNARY = {
    "Relu": torch.relu, "Relu6": F.relu6, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh,
    "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt, "Abs": torch.abs,
    "Absolute": torch.abs,  # keras.ops.abs builds an Absolute op
    "Negative": torch.neg, "Square": torch.square, "Silu": F.silu, "Rsqrt": torch.rsqrt,
    "Softplus": torch.logaddexp,  # logaddexp(x, 0): two graph nodes (no lambda: pickles)
    "HardSigmoid": F.hardsigmoid, "HardSilu": F.hardswish, "Gelu": None,
    "Sin": torch.sin, "Cos": torch.cos, "Tan": torch.tan, "Arctan": torch.atan,
    "Arcsin": torch.asin, "Arccos": torch.acos, "Sinh": torch.sinh, "Cosh": torch.cosh,
    "Log1p": torch.log1p, "Expm1": torch.expm1, "Log2": torch.log2, "Log10": torch.log10,
    "Exp2": torch.exp2, "Floor": torch.floor, "Ceil": torch.ceil, "Sign": torch.sign,
    "Reciprocal": torch.reciprocal, "LogicalNot": torch.logical_not, "Isnan": torch.isnan,
    "Isinf": torch.isinf, "Isfinite": torch.isfinite, "Softsign": F.softsign,
    "LogSigmoid": F.logsigmoid, "Selu": F.selu, "HardTanh": F.hardtanh,
    # with the op's own parameter
    "Elu": None, "Celu": None, "LeakyRelu": None, "Round": None,
}


# torch functions (not Python operators) that take tensors only: a Python number operand
# (keras.ops.maximum(x, 0.5), keras.ops.not_equal(0, x)) becomes a 0-d tensor first
_TENSORS_ONLY = frozenset({"Maximum", "Minimum", "LogicalAnd", "LogicalOr", "NotEqual", "Equal",
                           "Greater", "GreaterEqual", "Less", "LessEqual"})


def _binary(name, fn):
    def convert(ctx: Context, op, x1, x2):
        if name in _TENSORS_ONLY:
            x1, x2 = (_number_as_tensor(ctx, x1, x2), _number_as_tensor(ctx, x2, x1))
        return ctx.call_function(fn, x1, x2)

    convert.__name__ = name
    convert.__doc__ = f"keras.ops.{name.lower()}(x1, x2): elementwise, layout kept."
    register_op(name, policy=Policy.AGNOSTIC, sizes=name in _SIZED)(convert)


# arithmetic a traced call does with a run-time size (``x / ops.shape(x)[1]``): the size
# is read at run time and enters as a Python int, as in Keras
_SIZED = frozenset({"Add", "Subtract", "Multiply", "Divide", "TrueDivide"})


def _number_as_tensor(ctx: Context, value, other):
    """A Python number operand as a 0-d tensor that keeps Keras' result dtype: an int keeps
    the tensor's dtype, a float with an int tensor computes in float32 (a 0-d tensor takes
    part in torch's promotion only across categories, as a Python number does)."""
    if not isinstance(value, (bool, int, float)) or not isinstance(other, torch.fx.Node):
        return value
    dtype = (torch.bool if isinstance(value, bool) else
             torch.int64 if isinstance(value, int) else torch.float32)
    return ctx.call_function(torch.scalar_tensor, value, dtype=dtype)


def _unary(name, fn):
    def convert(ctx: Context, op, x):
        want = ctx.output_dtype()
        if want.is_floating_point and "float" not in ctx.input_dtype:
            x = ctx.call_method("to", x, want)  # Keras computes an int's sin, floor ... in float
        if name == "Gelu":
            return ctx.call_function(F.gelu, x, approximate="tanh" if op.approximate else "none")
        if name in ("Elu", "Celu"):
            return ctx.call_function(getattr(F, name.lower()), x, alpha=float(op.alpha))
        if name == "LeakyRelu":
            return ctx.call_function(F.leaky_relu, x, float(op.negative_slope))
        if name == "Round":
            return _round(ctx, x, int(op.decimals))
        if name == "Softplus":
            return ctx.call_function(fn, x, ctx.call_function(torch.zeros_like, x))
        if name == "Sign" and want.is_floating_point:  # tf.sign(NaN) is NaN, torch's 0
            return ctx.call_function(torch.where, ctx.call_function(torch.isnan, x), x,
                                     ctx.call_function(fn, x))
        return ctx.call_function(fn, x)

    convert.__name__ = name
    convert.__doc__ = f"keras.ops.{name.lower()}(x): elementwise, layout kept."
    register_op(name, policy=Policy.AGNOSTIC)(convert)


def _round(ctx: Context, x, decimals: int):
    """keras.ops.round: half to even (TF and torch); ``decimals`` as Keras' TF backend:
    ``round(x * 10**d) / 10**d`` in the input's float dtype, an int with ``d > 0`` unchanged,
    with ``d < 0`` computed in float32 and cast back."""
    if decimals == 0:
        return ctx.call_function(torch.round, x)
    integer = "int" in ctx.input_dtype
    if integer and decimals > 0:
        return x
    factor = math.pow(10, decimals)
    if integer:
        x = ctx.call_method("to", x, torch.float32)
    y = ctx.call_function(operator.truediv, ctx.call_function(
        torch.round, ctx.call_function(operator.mul, x, factor)), factor)
    return ctx.call_method("to", y, ctx.output_dtype()) if integer else y


# Keras converts both operands to the result dtype first (int32 mod float32 is float32, bool
# mod is int32, logaddexp and divide_no_nan of ints are float32)
_PROMOTED = ("Mod", "FloorDivide", "DivideNoNan", "Logaddexp")


def _promoted(name):
    def convert(ctx: Context, op, x1, x2):
        want = ctx.output_dtype()
        if any(d != ctx.output_dtypes[0] for d in ctx.input_dtypes):
            x1, x2 = (ctx.call_method("to", v, want) if isinstance(v, torch.fx.Node) else v
                      for v in (x1, x2))
        if name == "Mod":  # floor-mod: the sign of the divisor, as tf.math.floormod
            return floor_mod(ctx, x1, x2, want)
        if name == "Logaddexp":
            return ctx.call_function(torch.logaddexp, x1, x2)
        if name == "FloorDivide" and not want.is_floating_point:
            return ctx.call_function(torch.floor_divide, x1, x2)
        quotient = ctx.call_function(operator.truediv, x1, x2)
        if name == "FloorDivide":  # tf: floor(x1 / x2); torch.floor_divide is Python's //
            return ctx.call_function(torch.floor, quotient)  # (1 // 0.1 == 9.0, floor: 10)
        if not isinstance(x2, torch.fx.Node):  # divide_no_nan by a number
            return ctx.call_function(torch.zeros_like, quotient) if x2 == 0 else quotient
        return ctx.call_function(torch.where, ctx.call_function(operator.eq, x2, 0), 0.0,
                                 quotient)

    convert.__name__ = name
    convert.__doc__ = (f"keras.ops.{name.lower()}(x1, x2): elementwise in Keras' result dtype "
                       "(TF's floor-mod, floor-division and divide_no_nan rules), layout kept.")
    register_op(name, policy=Policy.AGNOSTIC)(convert)


for _name in _PROMOTED:
    _promoted(_name)
for _name, _fn in _BINARY.items():
    _binary(_name, _fn)
for _name, _fn in _UNARY.items():
    _unary(_name, _fn)


@register_op("Transpose", "Swapaxes", "Moveaxis", policy=Policy.CUSTOM)
def Transpose(ctx: Context, op, x: Held) -> Held:
    """keras.ops.transpose(x, axes), swapaxes(x, axis1, axis2), moveaxis(x, source,
    destination): a relabelled layout, no op (see layers' Permute)."""
    x = ctx.plain(x)
    axes = _permutation(op, x.rank)
    return Held(x.node, after_permute(x.layout, axes), tuple(x.shape[a] for a in axes))


def _permutation(op, rank: int) -> tuple[int, ...]:
    """The Keras dims in result order of a transpose, swapaxes or moveaxis (numpy's rules)."""
    name = type(op).__name__
    if name == "Swapaxes":
        return transpose_perm(rank, op.axis1, op.axis2)
    if name == "Moveaxis":
        source = normalize_dims(op.source, rank)
        destination = normalize_dims(op.destination, rank)
        order = [d for d in range(rank) if d not in source]
        for dest, src in sorted(zip(destination, source)):
            order.insert(dest, src)
        return tuple(order)
    return transpose_perm(rank) if op.axes is None else normalize_dims(op.axes, rank)


@register_op(policy=Policy.CUSTOM, sizes=True)
def Reshape(ctx: Context, op, x: Held) -> Held:
    """keras.ops.reshape(x, newshape): on the held tensor when only unit dims move (see layers'
    Reshape), else on the Keras-ordered tensor.

    A run-time size (a traced call's ``ops.shape(x)[1]``, a RunSize) is read at run time; a
    None size (one Keras does not know) alone is the size torch infers (-1); beside a -1 or
    another None the shape is not determined, and the op is refused by name."""
    unknown = sum(s is None for s in op.newshape) + sum(s == -1 for s in op.newshape)
    if unknown > 1 and None in op.newshape:
        raise UnsupportedLayerError(
            f"keras.ops.reshape {ctx.path!r} to {tuple(op.newshape)}: sizes known only at run "
            "time (read with ops.shape in a traced call) beside -1 or each other; not "
            "converted", [(ctx.path, "Reshape", "several run-time sizes")])
    if any(isinstance(s, RunSize) for s in op.newshape):
        x = ctx.canonical(x)
        newshape = ctx.size(tuple(-1 if s is None else s for s in op.newshape))
        node = ctx.call_method("reshape", x.node, *newshape)
        return Held(node, canonical(len(newshape)), ctx.output_shapes[0])
    newshape = tuple(-1 if s is None else int(s) for s in op.newshape)
    if _is_flatten(x, newshape):  # a flatten in Keras order: Dense permutes its weight
        return flatten_held(ctx, x)
    if -1 not in newshape:
        held = unit_reshape(ctx, x, newshape)
        if held is not None:
            return held
    x = ctx.canonical(x)
    known = [s for s in x.shape if s is not None]
    shape = tuple(None if s == -1 and len(known) != len(x.shape) else s for s in newshape)
    return Held(ctx.call_method("reshape", x.node, *newshape), canonical(len(newshape)), shape)


def _is_flatten(x: Held, newshape: tuple) -> bool:
    if x.rank < 3 or None in x.shape[1:] or len(newshape) != 2:  # (flat ones are rank 2)
        return False
    return newshape[1] in (-1, math.prod(x.shape[1:])) and newshape[0] in (-1, x.shape[0])


def _reduce(name, fn, keras_dtype: bool = False, **extra):
    def convert(ctx: Context, op, x: Held) -> Held:
        x = ctx.plain(x)
        axes = sorted(reduction_dims(op.axis, x.rank))
        # sum and mean take Keras' result dtype (torch widens an int32 sum to int64 and
        # refuses the mean of ints, which Keras returns as float32)
        dtype = {"dtype": ctx.output_dtype()} if keras_dtype else {}
        node = x.node
        if extra and "float" not in ctx.input_dtype:  # var / std of ints: in float32
            node = ctx.call_method("to", node, ctx.output_dtype())
        node = ctx.call_function(fn, node, dim=physical_axes(x.layout, axes),
                                 keepdim=bool(op.keepdims), **dtype, **extra)
        layout = after_reduce(x.layout, axes, bool(op.keepdims))
        if op.keepdims:
            return Held(node, layout, tuple(1 if i in axes else s for i, s in enumerate(x.shape)))
        return Held(node, layout, tuple(s for i, s in enumerate(x.shape) if i not in axes))

    convert.__name__ = name
    convert.__doc__ = f"keras.ops.{name.lower()}(x, axis, keepdims): held axes remapped."
    register_op(name, policy=Policy.CUSTOM)(convert)


_reduce("Mean", torch.mean, keras_dtype=True)
_reduce("Sum", torch.sum, keras_dtype=True)
_reduce("Max", torch.amax)
_reduce("Min", torch.amin)
_reduce("Any", torch.any)
_reduce("All", torch.all)
_reduce("Var", torch.var, correction=0)  # TF's reduce_variance: the biased one
_reduce("Std", torch.std, correction=0)
_reduce("Logsumexp", torch.logsumexp)  # TF's reduce_logsumexp: the same shift by a finite max


@register_op(policy=Policy.CUSTOM)
def Prod(ctx: Context, op, x: Held) -> Held:
    """keras.ops.prod(x, axis, keepdims): torch.prod over each held axis in turn (torch
    reduces one dim at a time), in Keras' dtype (an int32 product stays int32)."""
    x = ctx.plain(x)
    axes = sorted(reduction_dims(op.axis, x.rank))
    node = x.node
    for dim in sorted(physical_axes(x.layout, axes), reverse=True):  # later axes first
        node = ctx.call_function(torch.prod, node, dim, keepdim=bool(op.keepdims),
                                 dtype=ctx.output_dtype())
    return Held(node, after_reduce(x.layout, axes, bool(op.keepdims)), ctx.output_shapes[0])


def _softmax_supported(op) -> str | None:
    if op.axis is None or isinstance(op.axis, int):
        return None
    name = type(op).__name__
    return (f"keras.ops.{'log_softmax' if name == 'LogSoftmax' else 'softmax'} over axes "
            f"{op.axis}: Keras' {name} op cannot run it in a functional graph (TF's softmax "
            "takes one axis); reshape to one axis first")


@register_op("Softmax", "LogSoftmax", policy=Policy.CUSTOM, keeps_layout=True,
             supports=_softmax_supported)
def Softmax(ctx: Context, op, x: Held) -> Held:
    """keras.ops.softmax / log_softmax(x, axis): torch.softmax / log_softmax on the held dim
    (axis None: over every element, batch included, as TF's backend flattens the tensor)."""
    fn = torch.log_softmax if type(op).__name__ == "LogSoftmax" else torch.softmax
    x = ctx.plain(x)
    if op.axis is None:
        x = ctx.canonical(x)
        flat = ctx.call_method("flatten", x.node, 0)
        # back to the input's own run-time shape: one -1 per None dim cannot say it
        node = ctx.call_method("reshape_as", ctx.call_function(fn, flat, 0), x.node)
        return Held(node, x.layout, x.shape)
    return Held(ctx.call_function(fn, x.node, physical_axis(x.layout, op.axis)),
                x.layout, x.shape)


@register_op(policy=Policy.CANONICAL)
def Matmul(ctx: Context, op, x1, x2):
    """keras.ops.matmul(x1, x2) on Keras-ordered tensors."""
    return ctx.call_function(torch.matmul, x1, x2)


def _einsum_supported(op) -> str | None:
    subscripts = op.subscripts.replace(" ", "")
    if "->" in subscripts or "..." not in subscripts:
        return None
    terms = subscripts.split(",")
    for node in getattr(op, "_inbound_nodes", ()):
        ranks = [len(getattr(a, "shape", np.shape(a))) for a in node.arguments.args]
        if any("..." in t and r > len(t) - 3 for t, r in zip(terms, ranks)):
            return (f"keras.ops.einsum({op.subscripts!r}): an implicit output with '...' "
                    "standing for dims (Keras' TF backend fails on it at run time: 'no "
                    "ellipsis in the output subscripts'); write the output subscripts "
                    "('...j,jk->...k')")
    return None


@register_op(policy=Policy.CUSTOM, supports=_einsum_supported)
def Einsum(ctx: Context, op, *operands) -> Held:
    """keras.ops.einsum(subscripts, *operands): torch.einsum on the tensors as held, each
    operand's subscripts listed in its held order (no permute), the result in Keras order.

    ``...`` is spelled out in unused letters, aligned from the right (numpy's broadcast); an
    implicit output is Keras' (its TF backend renames the letters in order of first
    appearance, then keeps the ones seen once, sorted; a ``...`` standing for no dim, as
    in ``'...bij,...bjk'`` on rank-3 operands, adds none). Integer operands are computed in
    float32 and cast back, as Keras' TF backend does.
    """
    letters = string.ascii_letters
    names: dict[str, str] = {}
    subscripts = "".join(names.setdefault(c, letters[len(names)]) if c in letters else c
                         for c in op.subscripts.replace(" ", ""))
    inputs, arrow, output = subscripts.partition("->")
    terms = inputs.split(",")
    want = ctx.output_dtype()
    compute = want if want.is_floating_point else torch.float32
    values = _operands(ctx, operands)
    spare = [c for c in letters if c not in subscripts]
    widths = [v.rank - (len(t) - 3) for t, v in zip(terms, values) if "..." in t]
    batch = spare[:max(widths, default=0)]
    held_terms = []
    for term, value in zip(terms, values):
        if "..." in term:
            width = value.rank - (len(term) - 3)
            term = term.replace("...", "".join(batch[len(batch) - width:]))
        held_terms.append("".join(physical_order(value.layout, list(term))))
    if arrow:
        output = output.replace("...", "".join(batch))
    else:
        joined = "".join(terms)
        output = "".join(sorted(c for c in set(joined) if joined.count(c) == 1))
    nodes = [v.node if compute == want else ctx.call_method("to", v.node, compute)
             for v in values]
    node = ctx.call_function(torch.einsum, f"{','.join(held_terms)}->{output}", *nodes)
    if compute != want:
        node = ctx.call_method("to", node, want)
    return Held(node, canonical(len(output)), ctx.output_shapes[0])


@register_op("Concatenate", "Append", "Hstack", "Vstack", policy=Policy.CUSTOM,
             keeps_layout=True)
def Concatenate(ctx: Context, op, xs, x2=None) -> Held:
    """keras.ops.concatenate(xs, axis), append(x1, x2, axis), hstack(xs), vstack(xs):
    torch.cat on the held dim of the shared layout, in Keras' result dtype. ``append``
    without an axis concatenates the flattened tensors (batch included); ``hstack`` joins
    axis 1 (axis 0 for vectors), ``vstack`` axis 0, the batch."""
    name = type(op).__name__
    values = _operands(ctx, [xs, x2] if name == "Append" else list(xs))
    if name == "Append" and op.axis is None:
        values = [ctx.canonical(v) for v in values]
        values = [Held(ctx.call_method("reshape", v.node, -1), canonical(1), (None,))
                  for v in values]
        axis = 0
    else:
        axis = {"Hstack": 0 if values[0].rank == 1 else 1, "Vstack": 0}.get(
            name, getattr(op, "axis", 0))
    layout = shared_layout([v.layout for v in values])
    values = [ctx.to_layout(v, layout) for v in values]
    axis = normalize_dim(axis, layout.rank)
    node = ctx.call_function(torch.cat, [v.node for v in values],
                             dim=physical_axis(layout, axis))
    return Held(node, layout, ctx.output_shapes[0])


@register_op(policy=Policy.CUSTOM)
def Stack(ctx: Context, op, xs) -> Held:
    """keras.ops.stack(xs, axis): torch.stack of the inputs held alike, the new axis where
    ``after_insert`` holds it (last for a permuted layout: no permute), Keras' dtype."""
    values = _operands(ctx, xs)
    layout = shared_layout([v.layout for v in values])
    values = [ctx.to_layout(v, layout) for v in values]
    axis = normalize_dim(int(op.axis), layout.rank + 1)
    result = after_insert(layout, axis)
    node = ctx.call_function(torch.stack, [v.node for v in values],
                             dim=physical_axis(result, axis))
    return Held(node, result, ctx.output_shapes[0])


def _operands(ctx: Context, values) -> list[Held]:
    """Tensor operands held in a plain layout, each in Keras' result dtype (Keras promotes
    mixed inputs first: int32 with float32 is float32; a cast only where a dtype differs);
    numpy / Python constants as buffers in that dtype."""
    want = ctx.output_dtypes[0]
    keras_dtypes = iter(ctx.input_dtypes)
    held = []
    for value in values:
        if not isinstance(value, Held):
            held.append(ctx.constant(np.asarray(value).astype(want)))
            continue
        value = ctx.plain(value)
        if next(keras_dtypes, None) != want:
            value = Held(ctx.call_method("to", value.node, ctx.output_dtype()), value.layout,
                         value.shape)
        held.append(value)
    return held


def _as_output_dtype(ctx: Context, node):
    """``node`` in the Keras output's dtype (torch's promotion may differ: an int cumsum
    widens to int64, an int clipped to float bounds turns float)."""
    return ctx.call_method("to", node, ctx.output_dtype())


@register_op(policy=Policy.AGNOSTIC)
def Cast(ctx: Context, op, x):
    """keras.ops.cast(x, dtype): ``x.to(dtype)`` (floats to ints truncate toward zero in
    both)."""
    return _as_output_dtype(ctx, x)


@register_op(policy=Policy.AGNOSTIC)
def ConvertToTensor(ctx: Context, op, x, *_args, **_kwargs):
    """keras.ops.convert_to_tensor(x, dtype, sparse=False) of a tensor: ``x`` in the
    output's dtype (a densified sparse tensor is dense already in torch)."""
    return _as_output_dtype(ctx, x)


@register_op(policy=Policy.AGNOSTIC)
def Erf(ctx: Context, op, x):
    """keras.ops.erf(x): torch.erf."""
    return ctx.call_function(torch.erf, x)


@register_op(policy=Policy.AGNOSTIC)
def Clip(ctx: Context, op, x):
    """keras.ops.clip(x, x_min, x_max): torch.clamp, in Keras' result dtype (a bool input
    is clipped as int32, as TF's backend does)."""
    x = _as_output_dtype(ctx, x)
    return _as_output_dtype(ctx, ctx.call_function(torch.clamp, x, op.x_min, op.x_max))


@register_op(policy=Policy.AGNOSTIC)
def Where(ctx: Context, op, condition, x1=None, x2=None):
    """keras.ops.where(condition, x1, x2): torch.where in Keras' result dtype (the one-
    argument form, the indices of nonzero entries, has a data-dependent shape: refused)."""
    if x1 is None or x2 is None:
        raise UnsupportedLayerError(
            f"keras.ops.where {ctx.path!r} with one argument (nonzero indices) has a "
            "data-dependent shape; not converted", [(ctx.path, "Where", "one argument")])
    if isinstance(condition, torch.fx.Node) and ctx.input_dtypes[0] != "bool":  # as TF: bool
        condition = ctx.call_method("to", condition, torch.bool)
    return _as_output_dtype(ctx, ctx.call_function(torch.where, condition, x1, x2))


@register_op(policy=Policy.AGNOSTIC)
def NanToNum(ctx: Context, op, x):
    """keras.ops.nan_to_num(x, nan, posinf, neginf): torch.nan_to_num (an infinity without a
    replacement becomes the dtype's max / min in both); ints pass unchanged."""
    if "float" not in ctx.input_dtype:
        return x
    return ctx.call_function(torch.nan_to_num, x, nan=float(op.nan), posinf=op.posinf,
                             neginf=op.neginf)


@register_op("Tril", "Triu", policy=Policy.CANONICAL)
def Tril(ctx: Context, op, x):
    """keras.ops.tril / triu(x, k): torch.tril / triu over the last two Keras dims (zeros
    elsewhere, NaN included, as TF's band_part / where)."""
    fn = torch.tril if type(op).__name__ == "Tril" else torch.triu
    return ctx.call_function(fn, x, int(op.k))


@register_op("ZerosLike", "OnesLike", "EmptyLike", "FullLike", policy=Policy.AGNOSTIC)
def FullLike(ctx: Context, op, x, fill_value=None):
    """keras.ops.zeros_like / ones_like / empty_like (zeros, as TF's backend) / full_like(x,
    fill_value, dtype): ``torch.full_like`` in Keras' dtype (a float fill of an int tensor
    truncates in both); a tensor fill is cast and expanded to ``x``'s shape."""
    name = type(op).__name__
    want = ctx.output_dtype()
    if isinstance(fill_value, torch.fx.Node):
        return ctx.call_method("expand_as", ctx.call_method("to", fill_value, want), x)
    fill = {"ZerosLike": 0, "EmptyLike": 0, "OnesLike": 1}.get(name, fill_value)
    return ctx.call_function(torch.full_like, x, fill, dtype=want)


@register_op(policy=Policy.CUSTOM)
def ExpandDims(ctx: Context, op, x: Held) -> Held:
    """keras.ops.expand_dims(x, axis): unsqueeze on the Keras-ordered tensor."""
    x = ctx.canonical(x)
    axes = op.axis if isinstance(op.axis, (list, tuple)) else (op.axis,)
    rank = x.rank + len(axes)
    axes = sorted(normalize_dim(int(a), rank) for a in axes)
    node, shape = x.node, list(x.shape)
    for a in axes:
        node = ctx.call_method("unsqueeze", node, a)
        shape.insert(a, 1)
    return Held(node, canonical(rank), tuple(shape))


def _squeeze_supported(op) -> str | None:
    if op.axis is None:
        return ("keras.ops.squeeze without axes drops every size-1 dim at run time (the batch "
                "too when it is 1); give the axes")
    return None


@register_op(policy=Policy.CUSTOM, supports=_squeeze_supported)
def Squeeze(ctx: Context, op, x: Held) -> Held:
    """keras.ops.squeeze(x, axis): the held dims of those axes dropped (layout kept)."""
    x = ctx.plain(x)
    axes = sorted(normalize_dims(op.axis if isinstance(op.axis, (list, tuple)) else [op.axis],
                                 x.rank))
    node = ctx.call_function(torch.squeeze, x.node, physical_axes(x.layout, axes))
    shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    return Held(node, after_reduce(x.layout, axes, False), shape)


def _argmax_supported(op) -> str | None:
    if op.axis is None:
        return (f"keras.ops.{type(op).__name__.lower()} over the flattened tensor (axis=None) "
                "is not converted")
    return None


def _never_picked_as_infinity(ctx: Context, node, argmin: bool):
    """NaN and the values at or past the dtype's extreme (TF's arg reducer's start) as the
    infinity the reduction never prefers."""
    extreme = torch.finfo(getattr(torch, ctx.input_dtype)).max
    past = (ctx.call_function(torch.ge, node, extreme) if argmin
            else ctx.call_function(torch.le, node, -extreme))
    never = ctx.call_function(torch.logical_or, ctx.call_function(torch.isnan, node), past)
    return ctx.call_function(torch.where, never, math.inf if argmin else -math.inf, node)


@register_op("Argmax", "Argmin", policy=Policy.CUSTOM, supports=_argmax_supported)
def Argmax(ctx: Context, op, x: Held) -> Held:
    """keras.ops.argmax / argmin(x, axis, keepdims): torch.argmax / argmin on the held dim,
    int32 as Keras.

    Keras' TF backend reads -0.0 as just below 0.0 (its flush-to-zero fix) and so does the
    module; ties give the first index in both. TF's kernel (Eigen's arg reducer) starts from
    index 0 holding the dtype's lowest value (highest for argmin) and moves on a strictly
    greater (smaller) value, so NaN is never picked, nor are -inf and the lowest value
    itself: the module reads those as -inf, whose ties torch also breaks by the first
    index (an all-NaN row is 0 in both)."""
    x = ctx.plain(x)
    axis = normalize_dim(int(op.axis), x.rank)
    node = x.node
    argmin = type(op).__name__ == "Argmin"
    if "float" in ctx.input_dtype:
        zero = ctx.call_function(torch.eq, node, 0.0)
        negative_zero = ctx.call_function(torch.logical_and, zero,
                                          ctx.call_function(torch.signbit, node))
        tiny = -torch.finfo(torch.float32).tiny
        node = ctx.call_function(torch.where, negative_zero, tiny, node)
        node = _never_picked_as_infinity(ctx, node, argmin)
    fn = torch.argmin if argmin else torch.argmax
    node = ctx.call_function(fn, node, physical_axis(x.layout, axis), keepdim=bool(op.keepdims))
    node = _as_output_dtype(ctx, node)
    layout = after_reduce(x.layout, [axis], bool(op.keepdims))
    shape = tuple((1 if i == axis else s) for i, s in enumerate(x.shape)) if op.keepdims \
        else tuple(s for i, s in enumerate(x.shape) if i != axis)
    return Held(node, layout, shape)
