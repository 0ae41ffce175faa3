"""keras.ops linear algebra in functional graphs: norm, normalize, dot, tensordot, and the
SVD / eigenvalue ops (svd, eigh, pinv, lstsq, matrix_rank) with cdist and erfinv.

Each runs Keras' TF-backend formula (``keras/src/backend/tensorflow``), not torch's own
kernel for the same name, where the two differ at special values or in dtype: a vector
2-norm is ``sqrt(sum(x * x))`` (no rescaling), ``ord=0`` counts non-zeros (NaN counts),
``normalize`` multiplies by ``min(rsqrt(sum(x^2)), 1 / epsilon)``, and an integer ``dot`` is
computed in float32 and cast back. Vector norms and ``normalize`` run at the held axes.
``pinv`` / ``lstsq`` / ``matrix_rank`` are TF's formulas (their cut-offs, TF's default
``rcond``) on torch's SVD, NaN for a matrix holding NaN or inf as TF's SVD (torch's raises);
singular vectors and eigenvectors, unique only up to sign, are refused when read. The LU,
QR and Cholesky family is in ``kops_matrix``.
"""

from __future__ import annotations

import math
import operator

import numpy as np
import torch

from crossport.layout import (
    after_reduce,
    canonical,
    normalize_dims,
    physical_axes,
)
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.ops.kops import _operands
from crossport.to_torch.ops.kops_matrix import (
    emit_one,
    emit_torch,
    held_outputs,
    matrix_size,
    operand,
    output_dtype,
    refuse,
    unconverted,
)
from crossport.to_torch.registry import register_op

_INF = float("inf")
_NAN = float("nan")
_SVD_ORDS = ("nuc", 2, -2)


def _norm_axes(op, rank: int) -> list[int]:
    axis = op.axis
    if axis is None:
        return list(range(rank))
    return list(normalize_dims(axis if isinstance(axis, (list, tuple)) else [axis], rank))


def _norm_supported(op) -> str | None:
    axis = op.axis
    if (op.keepdims and op.ord in _SVD_ORDS and isinstance(axis, (list, tuple))
            and len(axis) == 2 and not (0 <= axis[0] < axis[1])):
        return (f"keras.ops.norm(ord={op.ord!r}, axis={tuple(axis)}, keepdims=True): Keras' "
                "TF backend re-inserts the kept dims with expand_dims at those axes of the "
                "reduced tensor, which puts them elsewhere than its declared output shape "
                "(or fails); give the axes non-negative and ascending")
    return None


@register_op(policy=Policy.CUSTOM, supports=_norm_supported)
def Norm(ctx: Context, op, x: Held) -> Held:
    """keras.ops.norm(x, ord, axis, keepdims): vector norms (one axis; ``None``, 2, ±inf, 0,
    any other number p: ``sum(|x|^p)^(1/p)``) and matrix norms (two axes; ``None``/``'fro'``,
    ±1, ±inf, and ``'nuc'``/±2 from ``torch.linalg.svdvals``), in Keras' float dtype (ints
    become float32), with TF's formulas (see the module docstring)."""
    x = ctx.plain(x)
    axes = _norm_axes(op, x.rank)
    node = _as_float(ctx, x.node)
    keepdims = bool(op.keepdims)
    if len(axes) == 2 and op.ord in _SVD_ORDS:
        return _svd_norm(ctx, op, Held(node, x.layout, x.shape), axes)
    held = physical_axes(x.layout, axes)
    node = norm_on_held(ctx, node, op.ord, held, keepdims)
    return Held(node, after_reduce(x.layout, sorted(axes), keepdims), ctx.output_shapes[0])


def _as_float(ctx: Context, node):
    want = ctx.output_dtype()
    return node if ctx.input_dtype == str(want).replace("torch.", "") else ctx.call_method(
        "to", node, want)


def norm_on_held(ctx: Context, node, ord, held: list[int], keepdims: bool):
    """The vector (one dim) or non-SVD matrix (two dims, Keras order row, column) norm of
    ``node`` over its dims ``held`` (Keras' axis=None is every axis: a matrix norm of a
    rank-2 tensor, batch included)."""
    call = ctx.call_function
    if len(held) == 1:
        dims = list(held)
        if ord is None or ord == 2:
            return call(torch.sqrt, call(torch.sum, call(operator.mul, node, node), dim=dims,
                                         keepdim=keepdims))
        if ord in (_INF, -_INF):
            fn = torch.amax if ord > 0 else torch.amin
            return call(fn, call(torch.abs, node), dim=dims, keepdim=keepdims)
        if ord == 0:
            nonzero = ctx.call_method("to", call(torch.ne, node, 0), ctx.output_dtype())
            return call(torch.sum, nonzero, dim=dims, keepdim=keepdims)
        p = float(ord)
        inverse = float(np.float32(1.0) / np.float32(p))  # TF: 1.0 / ord in x's dtype
        total = call(torch.sum, call(torch.pow, call(torch.abs, node), p), dim=dims,
                     keepdim=keepdims)
        return call(torch.pow, total, inverse)
    row, col = held
    if ord is None or ord == "fro":
        return call(torch.sqrt, call(torch.sum, call(operator.mul, node, node), dim=[row, col],
                                     keepdim=keepdims))
    if ord not in (1, -1, _INF, -_INF):
        raise ValueError(f"invalid matrix norm ord {ord!r}")
    # 1-norms sum over rows then reduce over columns; inf-norms the other way round
    summed, reduced = (row, col) if ord in (1, -1) else (col, row)
    fn = torch.amax if ord > 0 else torch.amin
    total = call(torch.sum, call(torch.abs, node), dim=summed, keepdim=True)
    node = call(fn, total, dim=reduced, keepdim=True)
    return node if keepdims else call(torch.squeeze, node, sorted(held))


def _svd_norm(ctx: Context, op, x: Held, axes: list[int]) -> Held:
    """'nuc' / 2 / -2: the sum / max / min of the singular values of the matrices over
    ``axes`` (moved last, in Keras' row, column order), on the Keras-ordered tensor; a matrix
    holding NaN or ±inf gives NaN, as TF's SVD (torch's raises on it)."""
    call = ctx.call_function
    x = ctx.canonical(x)
    node = call(torch.movedim, x.node, tuple(axes), (-2, -1))
    finite = call(torch.isfinite, node)
    values = call(torch.linalg.svdvals, call(torch.where, finite, node, 0.0))
    fn = {"nuc": torch.sum, 2: torch.amax, -2: torch.amin}[op.ord]
    bad = call(torch.logical_not, call(torch.all, ctx.call_method("flatten", finite, -2), -1))
    node = call(torch.where, bad, float("nan"), call(fn, values, dim=-1))
    rank = x.rank - 2
    if op.keepdims:  # axes ascending and non-negative (supports)
        for a in axes:
            node = ctx.call_method("unsqueeze", node, a)
        rank = x.rank
    return Held(node, canonical(rank), ctx.output_shapes[0])


def _normalize_supported(op) -> str | None:
    if not isinstance(op.order, int) or op.order < 1:
        return f"keras.ops.normalize(order={op.order!r}): Keras takes an int >= 1"
    return None


@register_op(policy=Policy.CUSTOM, supports=_normalize_supported, keeps_layout=True)
def Normalize(ctx: Context, op, x: Held) -> Held:
    """keras.ops.normalize(x, axis, order, epsilon): order 2 is Keras' special case
    ``x * min(rsqrt(sum(x^2, axis)), 1 / epsilon)`` (a zero vector gives zeros; NaN
    propagates through the minimum in both), any other order
    ``x / max(norm(x, order, axis), epsilon)``; ``epsilon=None`` is ``keras.config.epsilon()``
    at conversion time, as Keras reads it when the op runs."""
    import keras

    x = ctx.plain(x)
    epsilon = keras.config.epsilon() if op.epsilon is None else op.epsilon
    axes = _norm_axes(op, x.rank)
    held = physical_axes(x.layout, axes)
    call = ctx.call_function
    node = x.node
    if op.order == 2:
        square_sum = call(torch.sum, call(torch.square, node), dim=held, keepdim=True)
        bound = float(np.float32(1.0 / epsilon))
        inverse = call(torch.clamp, call(torch.rsqrt, square_sum), max=bound)
        return Held(call(operator.mul, node, inverse), x.layout, x.shape)
    norm = norm_on_held(ctx, node, op.order, held, True)
    denominator = call(torch.clamp, norm, min=float(np.float32(epsilon)))
    return Held(call(operator.truediv, node, denominator), x.layout, x.shape)


def _computed(ctx: Context, values: list[Held], dtype: torch.dtype) -> list:
    """Keras-ordered operand nodes in ``dtype`` (the operands are in the result dtype)."""
    nodes = [ctx.canonical(v).node for v in values]
    if dtype == ctx.output_dtype():
        return nodes
    return [ctx.call_method("to", n, dtype) for n in nodes]


@register_op(policy=Policy.CUSTOM)
def Dot(ctx: Context, op, x1, x2) -> Held:
    """keras.ops.dot(x1, x2), numpy's rule as Keras' TF backend runs it: a 0-d operand
    multiplies, a vector ``x2`` contracts both last dims, otherwise ``x1``'s last with
    ``x2``'s second-to-last (``torch.tensordot``), computed in float (ints in float32) and
    cast to Keras' result dtype."""
    values = _operands(ctx, [x1, x2])
    want = ctx.output_dtype()
    compute = want if want.is_floating_point else torch.float32
    a, b = _computed(ctx, values, compute)
    if values[0].rank == 0 or values[1].rank == 0:
        node = ctx.call_function(operator.mul, a, b)
    else:
        other = -1 if values[1].rank == 1 else -2
        node = ctx.call_function(torch.tensordot, a, b, dims=([-1], [other]))
    if compute != want:
        node = ctx.call_method("to", node, want)
    return Held(node, canonical(len(ctx.output_shapes[0])), ctx.output_shapes[0])


@register_op(policy=Policy.CUSTOM)
def Tensordot(ctx: Context, op, x1, x2) -> Held:
    """keras.ops.tensordot(x1, x2, axes): ``torch.tensordot`` with the same ``axes`` (an int:
    the last ``axes`` dims of ``x1`` with the first of ``x2``; a pair of ints or of lists),
    in Keras' result dtype (ints stay ints, as tf.tensordot computes them; bools in
    float32)."""
    values = _operands(ctx, [x1, x2])
    want = ctx.output_dtype()
    compute = want if (want.is_floating_point or want in (torch.int32, torch.int64)) \
        else torch.float32
    a, b = _computed(ctx, values, compute)
    axes = op.axes
    if isinstance(axes, (int, np.integer)):
        dims = int(axes)
    else:
        first, second = axes
        first = [int(first)] if isinstance(first, (int, np.integer)) else [int(d) for d in first]
        second = [int(second)] if isinstance(second, (int, np.integer)) else [
            int(d) for d in second]
        dims = (first, second)
    node = ctx.call_function(torch.tensordot, a, b, dims=dims)
    if compute != want:
        node = ctx.call_method("to", node, want)
    return Held(node, canonical(len(ctx.output_shapes[0])), ctx.output_shapes[0])


# -- SVD and eigenvalues: TF's formulas on torch's SVD / eigensolver ----------------------

def _finite_matrices(a):
    return torch.isfinite(a).flatten(-2).all(-1)


def tf_svd(a):
    """TF's ``svd(full_matrices=False)`` as (u, s, vh): torch's SVD, all NaN for a matrix
    holding NaN or inf (TF's; torch's SVD raises on one)."""
    finite = _finite_matrices(a)
    u, s, vh = torch.linalg.svd(torch.where(finite[..., None, None], a, 0.0),
                                full_matrices=False)
    return (torch.where(finite[..., None, None], u, _NAN), torch.where(finite[..., None], s, _NAN),
            torch.where(finite[..., None, None], vh, _NAN))


def tf_singular_values(a):
    finite = _finite_matrices(a)
    values = torch.linalg.svdvals(torch.where(finite[..., None, None], a, 0.0))
    return torch.where(finite[..., None], values, _NAN)


def tf_eigenvalues(a):
    """TF's SelfAdjointEigV2 eigenvalues: of the lower triangle, ascending. A NaN or inf
    there makes TF's eigensolver fail (raise) on most matrices and return NaN on others, by
    where it meets it; the converted module always raises."""
    torch._assert(torch.isfinite(torch.tril(a)).all(),
                  "Keras' eigh: the matrix holds NaN or inf (TF's eigensolver raises "
                  "'Self-adjoint eigen decomposition was not successful' on most such "
                  "matrices)")
    return torch.linalg.eigvalsh(a)


def tf_pinv(a, rcond: float):
    """``tf.linalg.pinv``: singular values above ``rcond * max(s)`` (strictly) inverted by
    dividing V's columns, the others set to inf: ``(V / s) U^T``."""
    u, s, vh = tf_svd(a)
    s = torch.where(s > rcond * s.amax(-1, keepdim=True), s, _INF)
    return (vh.mT / s[..., None, :]) @ u.mT


def tf_matrix_rank(a, tol: float | None, scale: float):
    """``tf.linalg.matrix_rank``: the singular values above ``tol`` (default ``eps *
    max(m, n) * max(s)``, ``scale`` the first product), int32; 0 for a NaN/inf matrix."""
    s = tf_singular_values(a)
    threshold = scale * s.amax(-1, keepdim=True) if tol is None else tol
    return (s > threshold).sum(-1).to(torch.int32)


def tf_lstsq(a, b, rcond: float | None, eps: float, columns: int, vector: bool):
    """Keras' TF ``lstsq`` (one matrix): singular values ``>= rcond * s[0]`` inverted (the
    rest 0), ``x = V (s_inv * (U^T b))``; ``rcond`` defaults to ``eps * max(m, n)`` with the
    rows ``m`` read at run time."""
    if vector:
        b = b[:, None]
    u, s, vh = tf_svd(a)
    if rcond is None:
        rows = torch.ones_like(a[:, 0]).sum()
        rcond = torch.clamp(rows, min=columns) * eps
    kept = s >= rcond * s[0]
    inverse = torch.where(kept, 1 / torch.where(kept, s, 1.0), 0.0)[:, None]
    x = vh.mT @ (inverse * (u.mT @ b))
    return x[:, 0] if vector else x


# -- elementwise and distances ------------------------------------------------------------------

def tf_cdist(x, y):
    """Keras' TF ``cdist``: ``sqrt(sum((x[..., :, None, :] - y[..., None, :, :])**2, -1))``
    on broadcast batch dims (not torch.cdist, which switches to a matmul form past 25
    rows)."""
    difference = x[..., :, None, :] - y[..., None, :, :]
    return torch.sqrt(torch.square(difference).sum(-1))


def tf_erfinv(x, half_sqrt2: float):
    """TF's Erfinv: ``ndtri((x + 1) / 2) / sqrt(2)`` (so ``erfinv(1e-7)`` is 19% high and
    ``erfinv(1 - 2**-24)`` is inf in float32, as in TF; torch.erfinv is exact there)."""
    return torch.special.ndtri((x + 1) / 2) * half_sqrt2


# -- converters: SVD, eigenvalues, cdist, erfinv ------------------------------------------

_SIGNS = ("unique only up to sign (a rotation for repeated values), and TF's are its "
          "Eigen solver's, which torch's LAPACK does not reproduce")


@register_op(policy=Policy.CUSTOM)
def Eigh(ctx: Context, op, x) -> list[Held]:
    """keras.ops.eigh(x): the eigenvalues of the lower triangle, ascending (TF's
    SelfAdjointEigV2); a NaN or inf there raises. Reading the eigenvectors refuses the op
    (their signs are Eigen's)."""
    node, _ = operand(ctx, x)
    values = emit_one(ctx, tf_eigenvalues, node)
    why = f"keras.ops.eigh's eigenvectors are {_SIGNS}; use the eigenvalues only"
    return [values, unconverted(ctx, 1, why)]


@register_op(policy=Policy.CUSTOM)
def SVD(ctx: Context, op, x) -> Held | list[Held]:
    """keras.ops.svd(x): the singular values (torch's, NaN for a matrix holding NaN or inf,
    as TF's); reading ``u`` or ``v`` (``compute_uv=True``) refuses the op (their signs are
    Eigen's)."""
    node, _ = operand(ctx, x)
    if not op.compute_uv:
        return emit_one(ctx, tf_singular_values, node)
    node = emit_torch(ctx, tf_singular_values, node)
    values = held_outputs(ctx, [node], ctx.output_shapes[1:2])[0]
    why = f"keras.ops.svd's singular vectors are {_SIGNS}; use compute_uv=False"
    return [unconverted(ctx, 0, why), values, unconverted(ctx, 2, why)]


@register_op(policy=Policy.CUSTOM)
def Pinv(ctx: Context, op, x) -> Held:
    """keras.ops.pinv(x, rcond): ``tf.linalg.pinv``, singular values above ``rcond * max(s)``
    inverted, ``rcond`` defaulting to TF's ``10 * max(m, n) * eps`` (not torch's); a matrix
    holding NaN or inf gives NaN."""
    node, shape = operand(ctx, x)
    m, n = matrix_size(ctx, shape)
    dtype = output_dtype(ctx)
    rcond = 10.0 * max(m, n) * np.finfo(dtype).eps if op.rcond is None else op.rcond
    return emit_one(ctx, tf_pinv, node, rcond=float(dtype.type(rcond)))


@register_op(policy=Policy.CUSTOM)
def MatrixRank(ctx: Context, op, x) -> Held:
    """keras.ops.matrix_rank(x, tol): ``tf.linalg.matrix_rank``, the singular values above
    ``tol`` (default ``eps * max(m, n) * max(s)``), int32; 0 for a matrix holding NaN/inf."""
    node, shape = operand(ctx, x)
    m, n = matrix_size(ctx, shape)
    dtype = np.dtype(ctx.input_dtype)
    scale = float(dtype.type(np.finfo(dtype).eps) * dtype.type(max(m, n)))
    tol = None if op.tol is None else float(dtype.type(op.tol))
    return emit_one(ctx, tf_matrix_rank, node, tol=tol, scale=scale)


@register_op(policy=Policy.CUSTOM)
def Lstsq(ctx: Context, op, a, b) -> Held:
    """keras.ops.lstsq(a, b, rcond): Keras' TF formula on one matrix, singular values
    ``>= rcond * s[0]`` inverted; ``rcond`` defaults to ``eps * max(m, n)`` (the rows read
    at run time), a negative one is ``eps``."""
    a_node, a_shape = operand(ctx, a)
    b_node, b_shape = operand(ctx, b)
    columns = a_shape[-1]
    if columns is None:
        refuse(ctx, "needs a static column count (TF's default rcond reads it)")
    eps = float(np.finfo(output_dtype(ctx)).eps)
    rcond = op.rcond
    if rcond is not None:
        rcond = float(output_dtype(ctx).type(eps if rcond < 0 else rcond))
    return emit_one(ctx, tf_lstsq, a_node, b_node, rcond=rcond, eps=eps, columns=columns,
                    vector=len(b_shape) == 1)


@register_op(policy=Policy.CUSTOM)
def CDist(ctx: Context, op, x, y) -> Held:
    """keras.ops.cdist(x, y): Keras' TF formula ``sqrt(sum((x_i - y_j)^2))`` on broadcast batch
    dims, in float (not torch.cdist's matmul form past 25 rows)."""
    (x_node, _), (y_node, _) = operand(ctx, x), operand(ctx, y)
    return emit_one(ctx, tf_cdist, x_node, y_node)


@register_op(policy=Policy.AGNOSTIC)
def Erfinv(ctx: Context, op, x):
    """keras.ops.erfinv(x): TF's ``ndtri((x + 1) / 2) / sqrt(2)`` in the input's dtype (its
    inaccuracy near 0 and its inf at ``1 - 2**-24`` included), layout kept."""
    dtype = output_dtype(ctx)
    return emit_torch(ctx, tf_erfinv, x, half_sqrt2=float(dtype.type(1 / math.sqrt(2))))
