"""keras.ops numpy functions that name axes or change shapes: diagonals and trace, cross and
kron, rot90 and the flips, the split family and dstack, count_nonzero, average, trapezoid,
inner / vdot, correlate, bincount, vander, size, argpartition and in_top_k, each Keras'
TF-backend computation (``keras/src/backend/tensorflow/numpy.py``, ``math.py``).

Ops on axes run at the held axes where the result's layout follows (a diagonal of an NCHW
tensor takes no permute); the others take the Keras-ordered tensors. Where TF's result has a
length the values decide (bincount beyond ``minlength``), the module checks the values at
run time and fails by name rather than return a shorter result.
"""

from __future__ import annotations

import operator

import keras
import numpy as np
import torch
import torch.nn.functional as F

from crossport.layout import (
    after_insert,
    after_reduce,
    canonical,
    dims_last,
    normalize_dim,
    normalize_dims,
    physical_array,
    physical_axes,
    physical_axis,
    shared_layout,
)
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.ops.kops import _operands
from crossport.to_torch.ops.kops_numpy import _refused
from crossport.to_torch.registry import register_op


def _tensor(ctx: Context, value, dtype: torch.dtype):
    """A CANONICAL converter's operand as a tensor of ``dtype`` (numpy: a buffer)."""
    if isinstance(value, torch.fx.Node):
        return ctx.call_method("to", value, dtype)
    return ctx.constant(np.asarray(value).astype(str(dtype).removeprefix("torch."))).node


def _recorded_shapes(op) -> list[list[tuple]]:
    """The Keras shapes of each call's positional operands (numpy ones too)."""
    return [[tuple(getattr(a, "shape", np.shape(a))) for a in node.arguments.args]
            for node in getattr(op, "_inbound_nodes", ())]


# -- diagonals and trace --------------------------------------------------------------------


def _diagonal(ctx: Context, x: Held, offset: int, axis1: int, axis2: int) -> Held:
    """torch.diagonal at the held axes: the other dims stay where they are held, the
    diagonal last (where Keras puts it)."""
    x = ctx.plain(x)
    axes = (normalize_dim(int(axis1), x.rank), normalize_dim(int(axis2), x.rank))
    node = ctx.call_function(torch.diagonal, x.node, int(offset),
                             *physical_axes(x.layout, axes))
    rest = after_reduce(x.layout, axes, False)
    return Held(node, after_insert(rest, rest.rank), ctx.output_shapes[0])


@register_op(policy=Policy.CUSTOM)
def Diagonal(ctx: Context, op, x: Held) -> Held:
    """keras.ops.diagonal(x, offset, axis1, axis2): torch.diagonal at the held axes, the
    diagonal last as in Keras (an offset past the matrix fails in Keras' TF backend)."""
    return _diagonal(ctx, x, op.offset, op.axis1, op.axis2)


@register_op(policy=Policy.CUSTOM)
def Diag(ctx: Context, op, x: Held) -> Held:
    """keras.ops.diag(x, k): a vector's ``k``-th diagonal matrix (torch.diag), a matrix's
    ``k``-th diagonal (torch.diagonal at the held axes)."""
    if x.rank == 2:
        return _diagonal(ctx, x, op.k, 0, 1)
    x = ctx.canonical(x)
    return Held(ctx.call_function(torch.diag, x.node, int(op.k)), canonical(2),
                ctx.output_shapes[0])


@register_op(policy=Policy.CANONICAL)
def Diagflat(ctx: Context, op, x):
    """keras.ops.diagflat(x, k): torch.diagflat of the Keras-ordered tensor (flattened
    row-major, batch included)."""
    return ctx.call_function(torch.diagflat, x, int(op.k))


@register_op(policy=Policy.CUSTOM)
def Trace(ctx: Context, op, x: Held) -> Held:
    """keras.ops.trace(x, offset, axis1, axis2): the sum of torch.diagonal at the held axes
    in Keras' dtype (bool and small ints as int32; uint8 / uint16 give uint32, which the
    pre-flight refuses); entries off the diagonal, NaN too, never count, as TF's mask."""
    x = ctx.plain(x)
    axes = (normalize_dim(int(op.axis1), x.rank), normalize_dim(int(op.axis2), x.rank))
    diagonal = ctx.call_function(torch.diagonal, x.node, int(op.offset),
                                 *physical_axes(x.layout, axes))
    node = ctx.call_function(torch.sum, diagonal, -1, dtype=ctx.output_dtype())
    return Held(node, after_reduce(x.layout, axes, False), ctx.output_shapes[0])


# -- products ---------------------------------------------------------------------------------


def _cross_supported(op) -> str | None:
    for shapes in _recorded_shapes(op):
        sizes = (shapes[0][op.axisa], shapes[1][op.axisb])
        if None in sizes:
            return "keras.ops.cross over an axis of unknown size (2 or 3 decides the result)"
    return None


@register_op(policy=Policy.CANONICAL, supports=_cross_supported)
def Cross(ctx: Context, op, x1, x2):
    """keras.ops.cross(x1, x2, axisa, axisb, axisc): TF's kernel ``a1 b2 - a2 b1, ...`` of
    the vectors moved last, in Keras' dtype, each product rounded on its own (torch.linalg.cross
    fuses them: ``inf - inf`` there is not NaN); a 2-vector gets a zero third component (TF
    pads it), two 2-vectors give only the third component."""
    call = ctx.call_function
    want = ctx.output_dtype()
    shapes = _recorded_shapes(op)[0]
    sizes = (shapes[0][op.axisa], shapes[1][op.axisb])
    vectors = []
    for value, axis, size in zip((x1, x2), (op.axisa, op.axisb), sizes):
        node = call(torch.movedim, _tensor(ctx, value, want), int(axis), -1)
        vectors.append(call(F.pad, node, (0, 1)) if size == 2 else node)
    if sizes == (2, 2):
        return _cross_term(ctx, *vectors, 0, 1)
    product = call(torch.stack, [_cross_term(ctx, *vectors, i, j) for i, j in
                                 ((1, 2), (2, 0), (0, 1))], -1)
    return call(torch.movedim, product, -1, int(op.axisc))


def _cross_term(ctx: Context, a, b, i: int, j: int):
    """``a_i b_j - a_j b_i`` of the last dims (broadcast)."""
    call = ctx.call_function

    def part(v, k):
        return call(operator.getitem, v, (Ellipsis, k))

    return call(operator.sub, call(operator.mul, part(a, i), part(b, j)),
                call(operator.mul, part(a, j), part(b, i)))


def _kron_supported(op) -> str | None:
    for shapes in _recorded_shapes(op):
        if len(shapes[0]) != len(shapes[1]):
            return ("keras.ops.kron of operands of different ranks: Keras declares a result "
                    "of the lower rank than TF's; expand the lower-rank operand first")
    return None


@register_op(policy=Policy.CANONICAL, supports=_kron_supported)
def Kron(ctx: Context, op, x1, x2):
    """keras.ops.kron(x1, x2): torch.kron of the Keras-ordered operands in Keras' dtype
    (the batch dims multiply too, as in TF)."""
    want = ctx.output_dtype()
    return ctx.call_function(torch.kron, _tensor(ctx, x1, want), _tensor(ctx, x2, want))


def _inner_dtypes(ctx: Context) -> tuple[torch.dtype, torch.dtype]:
    """inner / vdot's result dtype and the float one TF computes in (ints in float32)."""
    want = ctx.output_dtypes[0]
    return getattr(torch, want), getattr(torch, keras.backend.result_type(want, float))


@register_op(policy=Policy.CANONICAL)
def Inner(ctx: Context, op, x1, x2):
    """keras.ops.inner(x1, x2): torch.tensordot over both last dims (a 0-d operand
    multiplies), computed in float and cast to Keras' dtype, as TF does."""
    want, compute = _inner_dtypes(ctx)
    a, b = _tensor(ctx, x1, compute), _tensor(ctx, x2, compute)
    if 0 in (len(s) for s in _recorded_shapes(op)[0][:2]):
        node = ctx.call_function(operator.mul, a, b)
    else:
        node = ctx.call_function(torch.tensordot, a, b, dims=([-1], [-1]))
    return ctx.call_method("to", node, want)


@register_op(policy=Policy.CANONICAL)
def Vdot(ctx: Context, op, x1, x2):
    """keras.ops.vdot(x1, x2): torch.dot of both flattened (batch included), in float and
    cast to Keras' dtype."""
    want, compute = _inner_dtypes(ctx)
    a, b = (ctx.call_method("reshape", _tensor(ctx, v, compute), -1) for v in (x1, x2))
    return ctx.call_method("to", ctx.call_function(torch.dot, a, b), want)


def _correlate_supported(op) -> str | None:
    for shapes in _recorded_shapes(op):
        n, m = shapes[0][0], shapes[1][0]
        if op.mode != "full" and m > n:
            return (f"keras.ops.correlate mode {op.mode!r} with x2 longer than x1: Keras' TF "
                    "backend fails (a negative conv output size)")
    return None


@register_op(policy=Policy.CANONICAL, supports=_correlate_supported)
def Correlate(ctx: Context, op, x1, x2):
    """keras.ops.correlate(x1, x2, mode) of vectors (of static lengths, as Keras needs):
    F.conv1d (a cross-correlation, as TF's conv1d) in Keras' float dtype (int64 as float64,
    other ints float32); ``full`` pads ``len(x2) - 1`` zeros each side, ``same`` keeps the
    middle ``len(x1)`` of that."""
    call = ctx.call_function
    want = ctx.output_dtype()
    n, m = (shape[0] for shape in _recorded_shapes(op)[0][:2])
    signal, kernel = _tensor(ctx, x1, want), _tensor(ctx, x2, want)
    if op.mode != "valid":
        signal = call(F.pad, signal, (m - 1, m - 1))
    out = call(F.conv1d, ctx.call_method("reshape", signal, 1, 1, -1),
               ctx.call_method("reshape", kernel, 1, 1, -1))
    out = ctx.call_method("reshape", out, -1)
    if op.mode == "same":  # (TF: the middle max(n, m) of the n + m - 1; m > n is refused)
        out = call(operator.getitem, out, slice((m - 1) // 2, (m - 1) // 2 + n))
    return out


# -- rotations, flips, flattening -------------------------------------------------------------


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def Rot90(ctx: Context, op, x: Held) -> Held:
    """keras.ops.rot90(x, k, axes): torch.rot90 at the held axes (``k % 4`` quarter turns
    from the first axis towards the second); a half turn of a non-square plane as TF's
    backend computes it, which differs from numpy: it reads the once-turned ``[w, h]``
    planes as ``[h, w]`` (a reshape) before turning again."""
    x = ctx.plain(x)
    k = int(op.k) % 4
    axes = normalize_dims(tuple(op.axes), x.rank)
    if k == 0:
        return x
    height, width = (x.shape[a] for a in axes)
    if k == 2 and (height != width or height is None):
        return _half_turn_as_tf(ctx, x, axes)
    node = ctx.call_function(torch.rot90, x.node, k, list(physical_axes(x.layout, axes)))
    shape = list(x.shape)
    if k % 2:
        shape[axes[0]], shape[axes[1]] = width, height
    return Held(node, x.layout, tuple(shape))


def _half_turn_as_tf(ctx: Context, x: Held, axes) -> Held:
    """TF's rot90 with k=2: the plane's axes held last, the planes as ``[-1, h, w]``, turned
    (reverse the last axis, swap the two), reshaped to ``[-1, h, w]`` again and turned once
    more, then given back their ``[..., h, w]`` shape."""
    call = ctx.call_function
    held = ctx.to_layout(x, dims_last(x.layout, axes, held_order=False))
    shape = call(getattr, held.node, "shape")
    plane = [call(operator.getitem, shape, -2), call(operator.getitem, shape, -1)]
    node = held.node
    for _ in range(2):
        node = ctx.call_method("reshape", node, -1, *plane)
        node = ctx.call_method("transpose", call(torch.flip, node, [2]), 1, 2)
    node = ctx.call_method("reshape", node, shape)
    return Held(node, held.layout, held.shape)


@register_op("Fliplr", "Flipud", policy=Policy.CUSTOM, keeps_layout=True)
def Fliplr(ctx: Context, op, x: Held) -> Held:
    """keras.ops.fliplr / flipud(x): torch.flip of axis 1 / 0 at its held axis."""
    x = ctx.plain(x)
    axis = 1 if type(op).__name__ == "Fliplr" else 0
    node = ctx.call_function(torch.flip, x.node, [physical_axis(x.layout, axis)])
    return Held(node, x.layout, ctx.output_shapes[0])


@register_op(policy=Policy.CANONICAL)
def Ravel(ctx: Context, op, x):
    """keras.ops.ravel(x): the Keras-ordered tensor flattened, batch included."""
    return ctx.call_method("reshape", x, -1)


# -- reductions ---------------------------------------------------------------------------------


@register_op(policy=Policy.CUSTOM)
def CountNonzero(ctx: Context, op, x: Held) -> Held:
    """keras.ops.count_nonzero(x, axis): torch.count_nonzero over the held axes (NaN counts,
    -0.0 does not, as TF's ``x != 0``) as int32; ``axis=()`` counts each element."""
    x = ctx.plain(x)
    want = ctx.output_dtype()
    if op.axis is not None and len(op.axis) == 0:
        node = ctx.call_method("to", ctx.call_function(operator.ne, x.node, 0), want)
        return Held(node, x.layout, ctx.output_shapes[0])
    axes = list(range(x.rank)) if op.axis is None else sorted(
        normalize_dim(int(a), x.rank) for a in op.axis)
    node = ctx.call_function(torch.count_nonzero, x.node, physical_axes(x.layout, axes))
    return Held(ctx.call_method("to", node, want), after_reduce(x.layout, axes, False),
                ctx.output_shapes[0])


@register_op(policy=Policy.CUSTOM)
def Average(ctx: Context, op, x: Held, weights=None) -> Held:
    """keras.ops.average(x, axis, weights): the mean, or TF's ``sum(x * w) / sum(w)`` over
    the held axis (a 1-D ``w`` along it: TF's tensordot), in Keras' float dtype (ints in
    float32); ``axis=None``: over every element, batch included."""
    call = ctx.call_function
    want = ctx.output_dtype()
    x = ctx.plain(x)
    values = ctx.call_method("to", x.node, want)
    axes = list(range(x.rank)) if op.axis is None else [normalize_dim(int(op.axis), x.rank)]
    dims = physical_axes(x.layout, axes)
    layout = after_reduce(x.layout, axes, False)
    if weights is None:
        return Held(call(torch.mean, values, dims), layout, ctx.output_shapes[0])
    w = _weights_held_like(ctx, x, weights, dims, want)
    total = call(torch.sum, call(operator.mul, values, w), dims)
    weight_sum = call(torch.sum, w, dims) if _full_weights(weights, x) else call(torch.sum, w)
    return Held(call(operator.truediv, total, weight_sum), layout, ctx.output_shapes[0])


def _full_weights(weights, x: Held) -> bool:
    """Whether average's weights have ``x``'s shape (else they are 1-D, along the axis)."""
    rank = weights.rank if isinstance(weights, Held) else np.ndim(weights)
    return rank == x.rank


def _weights_held_like(ctx: Context, x: Held, weights, dims, dtype: torch.dtype):
    """Average's weights laid out as ``x`` is held (1-D ones along the axis's held dim)."""
    full = _full_weights(weights, x)
    if not isinstance(weights, Held):
        array = np.asarray(weights)
        if full:
            array = physical_array(array, x.layout)
        weights = ctx.constant(array)
    elif full:
        weights = ctx.to_layout(ctx.plain(weights), x.layout)
    node = ctx.call_method("to", weights.node, dtype)
    if full:
        return node
    return ctx.call_method("reshape", node, *[-1 if d == dims[0] else 1 for d in range(x.rank)])


def _trapezoid_supported(op) -> str | None:
    if isinstance(op.x, keras.KerasTensor) or not isinstance(op.dx, (int, float)):
        return ("keras.ops.trapezoid with a tensor x or dx: Keras keeps them as the op's "
                "attributes, outside the graph; pass numpy sample points")
    return None


@register_op(policy=Policy.CUSTOM, supports=_trapezoid_supported)
def Trapezoid(ctx: Context, op, y: Held) -> Held:
    """keras.ops.trapezoid(y, x, dx, axis): TF's ``sum(0.5 * (y[1:] + y[:-1]) * dx)`` along
    the axis moved last, in Keras' float dtype; sample points ``x`` give ``dx = diff(x)``
    (computed once, in that dtype, as TF does)."""
    call = ctx.call_function
    want = ctx.output_dtype()
    y = ctx.canonical(y)
    axis = normalize_dim(int(op.axis), y.rank)
    values = call(torch.movedim, ctx.call_method("to", y.node, want), axis, -1)
    upper = call(operator.getitem, values, (Ellipsis, slice(1, None)))
    lower = call(operator.getitem, values, (Ellipsis, slice(None, -1)))
    heights = call(operator.mul, 0.5, call(operator.add, upper, lower))
    if op.x is None:
        step = call(torch.scalar_tensor, float(op.dx), dtype=want)
    else:
        points = np.asarray(op.x).astype(str(want).removeprefix("torch."))
        step = ctx.constant(np.moveaxis(np.diff(points, axis=op.axis), op.axis, -1)).node
    return Held(call(torch.sum, call(operator.mul, heights, step), -1), canonical(y.rank - 1),
                ctx.output_shapes[0])


# -- splits and stacking ------------------------------------------------------------------------


def _split(ctx: Context, op, x: Held, sections, axis: int) -> list[Held]:
    """torch.tensor_split at the held axis: equal sections (a run-time size that they do not
    divide fails, as tf.split does) or split points."""
    x = ctx.plain(x)
    axis = normalize_dim(int(axis), x.rank)
    dim = physical_axis(x.layout, axis)
    if isinstance(sections, (int, np.integer)):
        sections = int(sections)
        if x.shape[axis] is None and type(op).__name__ != "ArraySplit":
            size = ctx.call_method("size", x.node, dim)
            ctx.call_function(torch._assert, ctx.call_function(
                operator.eq, ctx.call_function(operator.mod, size, sections), 0),
                f"{type(op).__name__.lower()} {ctx.path!r}: {sections} sections do not divide "
                "the axis (tf.split raises)")
    else:
        sections = [int(i) for i in sections]
    parts = ctx.call_function(torch.tensor_split, x.node, sections, dim=dim)
    return [Held(ctx.call_function(operator.getitem, parts, i), x.layout, shape)
            for i, shape in enumerate(ctx.output_shapes)]


@register_op("Hsplit", "Vsplit", "Dsplit", policy=Policy.CUSTOM, keeps_layout=True)
def Hsplit(ctx: Context, op, x: Held) -> list[Held]:
    """keras.ops.hsplit / vsplit / dsplit(x, indices_or_sections): split axis 1 (0 for a
    vector) / 0 / 2 at the held axis (torch.tensor_split)."""
    axis = {"Hsplit": 0 if x.rank == 1 else 1, "Vsplit": 0, "Dsplit": 2}[type(op).__name__]
    return _split(ctx, op, x, op.indices_or_sections, axis)


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def ArraySplit(ctx: Context, op, x: Held) -> list[Held]:
    """keras.ops.array_split(x, sections, axis): torch.tensor_split at the held axis (the
    first ``size % sections`` parts one longer, as TF's sizes)."""
    return _split(ctx, op, x, op.indices_or_sections, op.axis)


@register_op(policy=Policy.CUSTOM)
def Dstack(ctx: Context, op, xs) -> Held:
    """keras.ops.dstack(xs): torch.cat along axis 2 of the inputs in Keras' dtype, a vector
    as ``[1, n, 1]`` and a matrix as ``[m, n, 1]`` (TF's reshapes); rank 3 and up joined at
    the held axis of their shared layout."""
    values = []
    for value in _operands(ctx, list(xs)):
        if value.rank < 3:
            value = ctx.canonical(value)
            shape = {0: (1, 1, 1), 1: (1, -1, 1)}.get(value.rank)
            node = (ctx.call_method("unsqueeze", value.node, 2) if shape is None
                    else ctx.call_method("reshape", value.node, *shape))
            value = Held(node, canonical(3), value.shape)
        values.append(value)
    layout = shared_layout([v.layout for v in values])
    values = [ctx.to_layout(v, layout) for v in values]
    node = ctx.call_function(torch.cat, [v.node for v in values],
                             dim=physical_axis(layout, 2))
    return Held(node, layout, ctx.output_shapes[0])


# -- counting and indices -------------------------------------------------------------------------


def _bincount_supported(op) -> str | None:
    if op.sparse:
        return "keras.ops.bincount(sparse=True) is not converted"
    if not op.minlength:
        return ("keras.ops.bincount without minlength: its length is the largest value + 1, "
                "known only at run time; give a minlength above every value")
    if isinstance(op.weights, keras.KerasTensor):
        return "keras.ops.bincount with tensor weights (Keras cannot build it)"
    return None


@register_op(policy=Policy.CANONICAL, supports=_bincount_supported)
def Bincount(ctx: Context, op, x):
    """keras.ops.bincount(x, weights, minlength): counts (or weight sums) of each value per
    row, ``minlength`` long, by scatter_add in Keras' dtype (weights summed in their own
    dtype first, as TF); a value at or past ``minlength`` fails at run time (TF's result
    would be longer), a negative one too (TF raises)."""
    call = ctx.call_function
    minlength = int(op.minlength)
    ids = ctx.call_method("to", x, torch.int64)  # (floats truncate, as TF's cast to int32)
    inside = call(torch.all, call(torch.logical_and, call(operator.ge, ids, 0),
                                  call(operator.lt, ids, minlength)))
    call(torch._assert, inside, f"bincount {ctx.path!r}: a value outside [0, "
         f"{minlength}) (TF raises for a negative one and returns a longer result past "
         "minlength)")
    want = ctx.output_dtype()
    if op.weights is None:
        total, values = torch.int64, call(torch.ones_like, ids)
    else:
        array = np.asarray(op.weights)
        if array.dtype.name not in ("int32", "int64", "float32", "float64"):
            array = array.astype("int32" if array.dtype.kind in "biu" else "float32")
        total, values = getattr(torch, array.dtype.name), ctx.constant(array).node
    shape = (*[ctx.call_method("size", ids, d) for d in range(len(ctx.input_shape) - 1)],
             minlength)
    base = call(torch.zeros, shape, dtype=total)
    counts = ctx.call_method("scatter_add", base, -1, ids, call(torch.broadcast_to, values,
                                                                call(getattr, ids, "shape")))
    return ctx.call_method("to", counts, want)


def _vander_supported(op) -> str | None:
    for node in getattr(op, "_inbound_nodes", ()):
        dtype = keras.backend.standardize_dtype(node.arguments.args[0].dtype)
        if not keras.backend.is_float_dtype(dtype):
            return (f"keras.ops.vander of {dtype}: TF computes the powers in float32 with a pow "
                    "that is not correctly rounded (5.0 ** 8 is 390624.97) and truncates them "
                    "back to ints; cast x to float first")
    return None


@register_op(policy=Policy.CANONICAL, supports=_vander_supported)
def Vander(ctx: Context, op, x):
    """keras.ops.vander(x, N, increasing) of floats: ``x[:, None] ** powers`` (torch.pow,
    within an ulp of TF's); ``N`` defaults to ``len(x)``, read at run time."""
    call = ctx.call_function
    compute = ctx.output_dtype()
    count = int(op.N) if op.N is not None else ctx.call_method("size", x, 0)
    powers = (call(torch.arange, count, dtype=compute) if op.increasing else
              call(torch.arange, call(operator.sub, count, 1), -1, -1, dtype=compute))
    return call(torch.pow, call(torch.unsqueeze, x, -1), powers)


@register_op(policy=Policy.CANONICAL)
def Size(ctx: Context, op, x):
    """keras.ops.size(x): the element count (batch included, read at run time) as an int32
    0-d tensor."""
    return ctx.call_function(torch.scalar_tensor, ctx.call_method("numel", x),
                             dtype=torch.int32)


@register_op(policy=Policy.CANONICAL, supports=lambda op: (
    "keras.ops.ndim returns a Python int in Keras' TF backend, not a tensor (its symbolic "
    "output is a float32 vector); use len(x.shape)"))
def Ndim(ctx: Context, op, x):
    """keras.ops.ndim(x): refused (a Python int in Keras, not a tensor)."""
    raise _refused(ctx, op, "a Python int, not a tensor")


def _argpartition_supported(op) -> str | None:
    for shapes in _recorded_shapes(op):
        if op.axis is not None and len(shapes[0]) != 1:
            return ("keras.ops.argpartition along an axis of a rank > 1 tensor: Keras' TF "
                    "backend sums its one-hot mask over axis 0, mixing rows; flatten first "
                    "(axis=None) or pass a vector")
    return None


@register_op(policy=Policy.CANONICAL, supports=_argpartition_supported)
def Argpartition(ctx: Context, op, x):
    """keras.ops.argpartition(x, kth, axis) of a vector (or axis=None): TF's computation on
    ``x`` cast to int32: the ``kth + 1`` smallest by top_k (ties: lower index first, a
    stable sort here), then the top ``n - kth - 1`` of ``x`` with those set to 0."""
    call = ctx.call_function
    values = ctx.call_method("reshape", ctx.call_method("to", x, torch.int32), -1)
    size = ctx.call_method("numel", values)
    count = call(operator.add, call(min, max(int(op.kth), 0), call(operator.sub, size, 1)), 1)
    order = call(torch.argsort, call(torch.neg, values), descending=True, stable=True)
    bottom = call(operator.getitem, order, slice(None, count))
    rest = call(torch.index_fill, values, 0, bottom, 0)
    top = call(torch.argsort, rest, descending=True, stable=True)
    top = call(operator.getitem, top, slice(None, call(operator.sub, size, count)))
    return ctx.call_method("to", call(torch.cat, [bottom, top]), torch.int32)


@register_op(policy=Policy.CANONICAL)
def InTopK(ctx: Context, op, targets, predictions):
    """keras.ops.in_top_k(targets, predictions, k): tf.math.in_top_k's count of predictions
    above the target's, below ``k`` (ties at the boundary are in); False for a target out
    of range or a row holding NaN or an infinity, as TF's kernel."""
    call = ctx.call_function
    ids = ctx.call_method("to", targets, torch.int64)
    classes = ctx.call_method("size", predictions, -1)
    valid = call(torch.logical_and, call(operator.ge, ids, 0), call(operator.lt, ids, classes))
    safe = call(torch.where, valid, ids, 0)
    target = call(torch.gather, predictions, -1, call(torch.unsqueeze, safe, -1))
    above = call(torch.sum, call(operator.gt, predictions, target), -1)
    finite = call(torch.all, call(torch.isfinite, predictions), -1)
    result = call(torch.logical_and, valid, finite)
    return call(torch.logical_and, result, call(operator.lt, above, int(op.k)))

