"""keras.ops LU, QR and Cholesky family (``inv``, ``solve``, ``det``, ``slogdet``, ``lu_factor``,
``qr``, ``cholesky``, ``cholesky_inverse``, ``logdet``, ``solve_triangular``) as Keras' TF
backend computes them, and the helpers ``linalg``'s SVD ops share.

TF runs Eigen where torch runs LAPACK (MKL). Where the two only round differently torch's
kernel is used; where they mean different things, TF's algorithm is written out in torch ops
(unrolled over the static sizes):

- LU: Eigen's unblocked partial-pivoting loop, which PartialPivLU runs up to 16 rows, so the
  pivots (bit for bit), a singular matrix's exactly zero pivot and TF's "Input is not
  invertible" error are TF's. Larger matrices (Eigen blocks there) use torch's LU: a pivot
  exactly zero in one may be rounding-sized in the other.
- QR: Eigen's Householder QR step by step (a column whose tail's squared norm is below the
  smallest normal float is left unreflected, where LAPACK reflects it; NaN and inf spread as
  Eigen's reflections and its one block update of a wide matrix spread them).
- Cholesky: TF returns NaN for a matrix that is not positive-definite and Keras'
  ``check_numerics`` raises on any NaN or inf; ``logdet`` is NaN there and runs Eigen's LLT
  (it carries an inf pivot through where LAPACK makes NaN).

The formulas are plain torch functions run on fx proxies (:func:`emit_torch`): their torch
calls become the converted graph's nodes, and the same functions run eagerly on tensors.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.fx.proxy import GraphAppendingTracer, Proxy

from crossport.errors import UnsupportedLayerError
from crossport.layout import canonical
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.registry import register_op

_NAN = float("nan")
_INF = float("inf")
UNBLOCKED_LU = 16       # Eigen's PartialPivLU runs its unblocked loop up to this size
UNBLOCKED_QR = 48       # Eigen's HouseholderQR forms Q reflector by reflector below this


# -- emitting torch code --------------------------------------------------------------------

def emit_torch(ctx: Context, fn, *args, **static):
    """``fn(*args, **static)`` recorded into the converted graph: fx nodes in ``args`` become
    proxies, so each torch call ``fn`` makes is a node (tagged with the Keras op); ``static``
    holds Python values fixed at conversion (sizes, flags). Returns the output node(s)."""
    tracer = GraphAppendingTracer(ctx.graph)
    before = set(ctx.graph.nodes)
    out = fn(*(Proxy(a, tracer) if isinstance(a, torch.fx.Node) else a for a in args),
             **static)
    for node in ctx.graph.nodes:
        if node not in before:
            node.meta["keras_layer"] = ctx.path
    if isinstance(out, (tuple, list)):
        return [o.node for o in out]
    return out.node


def operand(ctx: Context, value) -> tuple:
    """(node, Keras shape) of an operand: a tensor in Keras order, a numpy / Python constant
    as a buffer in the op's output dtype."""
    if isinstance(value, Held):
        return ctx.canonical(value).node, value.shape
    array = np.asarray(value).astype(ctx.output_dtypes[0])
    return ctx.constant(array).node, array.shape


def refuse(ctx: Context, why: str):
    name = type(ctx.layer).__name__
    raise UnsupportedLayerError(f"{name} {ctx.path!r}: {why}", [(ctx.path, name, why)])


def matrix_size(ctx: Context, shape) -> tuple[int, int]:
    """The static (rows, columns) of a Keras matrix shape: TF's algorithm is unrolled over
    them."""
    rows, columns = shape[-2:]
    if rows is None or columns is None:
        refuse(ctx, "needs static matrix sizes (the last two dims), over which TF's "
                    "algorithm is written out")
    return int(rows), int(columns)


def held_outputs(ctx: Context, nodes, shapes=None) -> list[Held]:
    shapes = shapes or ctx.output_shapes
    return [Held(node, canonical(len(shape)), tuple(shape)) for node, shape in
            zip(nodes, shapes)]


def emit_one(ctx: Context, fn, *args, **static) -> Held:
    """The op's one output, ``fn``'s torch calls recorded (:func:`emit_torch`)."""
    return held_outputs(ctx, [emit_torch(ctx, fn, *args, **static)])[0]


def output_dtype(ctx: Context) -> np.dtype:
    return np.dtype(ctx.output_dtypes[0])


class Unconverted(Held):
    """An output TF computes in a way the converter does not reproduce (Eigen's eigenvector
    signs): reading it, in a later op or as a model output, refuses the op by name; the op's
    other outputs convert."""

    def __init__(self, shape, path: str, class_name: str, why: str) -> None:
        object.__setattr__(self, "layout", canonical(len(shape)))
        object.__setattr__(self, "shape", tuple(shape))
        object.__setattr__(self, "refusal", (path, class_name, why))

    @property
    def node(self):
        path, class_name, why = self.refusal
        raise UnsupportedLayerError(f"{class_name} {path!r}: {why}", [self.refusal])

    def __repr__(self) -> str:
        return f"Unconverted({self.refusal[2]!r})"

    __eq__ = object.__eq__
    __hash__ = object.__hash__


def unconverted(ctx: Context, index: int, why: str) -> Unconverted:
    return Unconverted(ctx.output_shapes[index], ctx.path, type(ctx.layer).__name__, why)


# -- LU: Eigen's partial pivoting -------------------------------------------------------------

def eigen_lu(a, n: int):
    """Eigen's unblocked partial-pivoting LU of ``a`` (..., n, n): the packed factors, the
    row order (row i of the factored matrix is row ``order[i]`` of ``a``) and the number of
    row swaps. The pivot is the first largest |a| down the column, a NaN only when it is
    the first entry (Eigen's max keeps its running value against NaN); an all-zero column is
    not divided; the update ``a - l * u`` is rounded twice (TF's Eigen has no FMA)."""
    positions = torch.arange(n, device=a.device)
    order = torch.zeros_like(a[..., 0], dtype=torch.int64) + positions
    swaps = torch.zeros_like(a[..., 0, 0], dtype=torch.int64)
    for k in range(n):
        score = a[..., k:, k].abs()
        first_nan = torch.isnan(score[..., 0])
        score = torch.where(torch.isnan(score), -1.0, score)
        pick = torch.where(first_nan, 0, score.argmax(-1)) + k
        nonzero = first_nan | (score.amax(-1) != 0)
        a = _swap(a, positions, k, pick, dim=-2)
        order = _swap(order, positions, k, pick, dim=-1)
        swaps = swaps + (pick != k).long()
        if k < n - 1:
            a = _eliminate(a, k, nonzero)
    return a, order, swaps


def _swap(x, positions, k: int, pick, dim: int):
    """``x`` with its entries (dim -1) or rows (dim -2) ``k`` and ``pick`` exchanged."""
    index = pick[..., None] if dim == -1 else pick[..., None, None]
    at_k = positions == k
    at_pick = positions == pick[..., None]
    if dim == -2:
        at_k, at_pick = at_k[:, None], at_pick[..., None]
    here = x[..., k:k + 1] if dim == -1 else x[..., k:k + 1, :]
    there = torch.take_along_dim(x, index, dim=dim)
    return torch.where(at_k, there, torch.where(at_pick, here, x))


def _eliminate(a, k: int, nonzero):
    """One elimination step: the column below pivot ``k`` divided by it (unless the column
    was all zero), the trailing block updated as ``block - column * row``."""
    column = a[..., k + 1:, k:k + 1]
    column = torch.where(nonzero[..., None, None], column / a[..., k:k + 1, k:k + 1], column)
    block = a[..., k + 1:, k + 1:] - column * a[..., k:k + 1, k + 1:]
    lower = torch.cat([a[..., k + 1:, :k], column, block], dim=-1)
    return torch.cat([a[..., :k + 1, :], lower], dim=-2)


def tf_lu(a, n: int):
    """(packed LU, rows, swaps) as TF's kernels factor ``a``: Eigen's loop up to 16 rows
    (``rows`` the row order), torch's LU past that (``rows`` LAPACK's pivots)."""
    if n <= UNBLOCKED_LU:
        return eigen_lu(a, n)
    lu, pivots, _ = torch.linalg.lu_factor_ex(a)
    positions = torch.arange(1, n + 1, device=a.device, dtype=pivots.dtype)
    return lu, pivots, (pivots != positions).sum(-1)


def assert_invertible(a, lu, message: str):
    """TF's check before it inverts or solves: Eigen's ``min(|diag(U)|) > 0``, whose minimum
    keeps a NaN only when it is the first pivot, which Eigen takes only from a NaN at
    ``a[0, 0]`` (measured; MKL may pick a NaN lower in the column)."""
    diagonal = lu.diagonal(dim1=-2, dim2=-1)
    singular = torch.isnan(a[..., 0, 0]) | (diagonal == 0).any(-1)
    torch._assert(~singular.any(), message)


def lu_solve(lu, rows, b, n: int):
    """``a^-1 b`` from ``tf_lu``'s factors: Eigen's solve (the rows permuted, then the unit
    lower and the upper triangular solves) or, past 16 rows, torch's ``lu_solve``."""
    if n > UNBLOCKED_LU:
        return torch.linalg.lu_solve(lu, rows, b)
    permuted = torch.take_along_dim(b, rows[..., :, None], dim=-2)
    lower = torch.linalg.solve_triangular(lu, permuted, upper=False, unitriangular=True)
    return torch.linalg.solve_triangular(lu, lower, upper=True)


def signed_log_det(lu, swaps):
    """TF's ``slogdet`` from the LU: ``prod(sign(diag(U)))`` times the permutation's sign
    (a NaN pivot's sign is NaN in TF, 0 in ``torch.sign``), and ``sum(log|diag(U)|)``."""
    diagonal = lu.diagonal(dim1=-2, dim2=-1)
    signs = torch.where(torch.isnan(diagonal), diagonal, torch.sign(diagonal))
    sign = signs.prod(-1) * (1 - 2 * (swaps % 2))
    return sign, diagonal.abs().log().sum(-1)


_NOT_INVERTIBLE = "Input is not invertible (a zero pivot: TF raises in Keras' {})"


def tf_inv(a, n: int):
    lu, rows, _ = tf_lu(a, n)
    assert_invertible(a, lu, _NOT_INVERTIBLE.format("inv"))
    identity = torch.diag_embed(torch.ones_like(a[..., 0]))
    return lu_solve(lu, rows, identity, n)


def tf_solve(a, b, n: int, vector: bool):
    lu, rows, _ = tf_lu(a, n)
    assert_invertible(a, lu, _NOT_INVERTIBLE.format("solve"))
    if vector:
        return lu_solve(lu, rows, b[..., None], n)[..., 0]
    return lu_solve(lu, rows, b, n)


def tf_slogdet(a, n: int):
    lu, _, swaps = tf_lu(a, n)
    return signed_log_det(lu, swaps)


def tf_det(a, n: int):
    """TF's determinant: ``sign * exp(log|det|)`` from its slogdet (not the pivots'
    product: a zero pivot beside an overflowing product is 0, not NaN)."""
    sign, log_abs = tf_slogdet(a, n)
    return sign * torch.exp(log_abs)


def tf_lu_factor(a, n: int):
    """keras.ops.lu_factor on TF: ``tf.linalg.lu`` (which raises as ``inv`` does) and the
    inverse of its row permutation, int32."""
    lu, order, _ = eigen_lu(a, n)
    assert_invertible(a, lu, _NOT_INVERTIBLE.format("lu_factor"))
    return lu, order.argsort(-1).to(torch.int32)


# -- QR: Eigen's Householder reflections ------------------------------------------------------

def eigen_qr(a, m: int, n: int, tiny: float):
    """Eigen's blocked Householder QR of ``a`` (..., m, n) with one panel (fewer than 48
    reflectors): the packed matrix (R on and above the diagonal) and each step's essential
    vector and ``tau``. Step k reflects column k's rows k.. onto ``beta e1`` with ``beta =
    -sign(c0) |column|`` (``c0 >= 0`` counts -0.0 as positive); a column whose tail's
    squared norm is at most ``tiny`` (the smallest normal float) is left as it is (``tau =
    0``, ``beta = c0``), where LAPACK would reflect it."""
    size = min(m, n)
    vectors, taus = [], []
    for k in range(size):
        column = a[..., k:, k]
        c0, tail = column[..., 0], column[..., 1:]
        tail_norm = (tail * tail).sum(-1)
        kept = tail_norm <= tiny
        norm = torch.sqrt(c0 * c0 + tail_norm)
        beta = torch.where(c0 >= 0, -norm, norm)
        essential = torch.where(kept[..., None], 0.0, tail / (c0 - beta)[..., None])
        tau = torch.where(kept, 0.0, (beta - c0) / beta)
        beta = torch.where(kept, c0, beta)
        block = reflect_left(a[..., k:, k + 1:size], essential, tau, m - k, size - k - 1)
        reflected = torch.cat([beta[..., None], essential], dim=-1)[..., None]
        rows = torch.cat([a[..., k:, :k], reflected, block, a[..., k:, size:]], dim=-1)
        a = torch.cat([a[..., :k, :], rows], dim=-2)
        vectors.append(essential)
        taus.append(tau)
    if n > size:  # a wide matrix: the columns right of the square panel, by one block
        a = torch.cat([a[..., :size], block_reflect_left(a[..., size:], vectors, taus, m)], -1)
    return a, vectors, taus


def reflect_left(block, essential, tau, rows: int, columns: int):
    """Eigen's ``applyHouseholderOnTheLeft``: ``block - tau v (v^T block)`` with ``v = [1,
    essential]``, as ``tmp = essential^T bottom + top``; a one-row block is scaled by
    ``1 - tau``, and a reflector with ``tau == 0`` is not applied at all (a NaN or inf in the
    block stays where it is)."""
    if columns == 0:
        return block
    scale = tau[..., None, None]
    if rows == 1:
        return block * (1 - scale)
    top, bottom = block[..., :1, :], block[..., 1:, :]
    tmp = essential[..., None, :] @ bottom + top
    reflected = torch.cat([top - scale * tmp, bottom - (scale * essential[..., :, None]) * tmp],
                          dim=-2)
    return torch.where(scale != 0, reflected, block)


def householder_q(a, vectors, taus, m: int, columns: int, corner: bool):
    """Q (m, ``columns``): the reflectors applied to the identity, the last first, as TF's
    kernel forms it: each on the bottom-right corner (rows and columns k.., Eigen's
    ``evalTo``: mode 'complete') or on every column of rows k.. (the product
    ``householderQ() * Identity(m, min(m, n))``: mode 'reduced', where a NaN reflector spreads
    into every column)."""
    q = torch.zeros_like(a[..., :1, :1]) + torch.eye(m, columns, dtype=a.dtype,
                                                      device=a.device)
    for k in reversed(range(len(vectors))):
        if corner:
            block = reflect_left(q[..., k:, k:], vectors[k], taus[k], m - k, columns - k)
            block = torch.cat([q[..., k:, :k], block], dim=-1)
        else:
            block = reflect_left(q[..., k:, :], vectors[k], taus[k], m - k, columns)
        q = torch.cat([q[..., :k, :], block], dim=-2)
    return q


def block_reflect_left(block, vectors, taus, m: int):
    """Eigen's ``apply_block_householder_on_the_left`` with the ``m`` reflectors of a square
    panel at once, as its blocked QR updates the columns right of the panel (a wide matrix):
    ``block - V (T^T (V^T block))``, V unit lower triangular and T the upper triangular factor.
    Every reflector takes part (one with ``tau == 0`` too) and the triangular factors are
    multiplied whole, zeros included (as Eigen's kernels do), so NaN and inf spread as in TF
    (a NaN reflector makes every column right of the panel NaN)."""
    v = torch.stack([F.pad(e, (i + 1, 0)) for i, e in enumerate(vectors)], dim=-1)
    v = v + torch.eye(m, dtype=block.dtype, device=block.device)
    t = _triangular_factor(v, taus, m)
    return block - v @ (t.mT @ (v.mT @ block))


def _triangular_factor(v, taus, m: int):
    """Eigen's ``make_block_householder_triangular_factor``, from the last row up: ``T[i, i] =
    tau_i`` and the row right of it ``(-tau_i v_i^T V_corner) T_corner``, the second product
    over T's upper triangle only (Eigen's loop adds ``z * T[j, j:]`` row by row)."""
    upper = torch.ones(m, m, dtype=torch.bool, device=v.device).triu()
    rows = [taus[m - 1][..., None]]
    for i in reversed(range(m - 1)):
        tail = m - i - 1
        w = -taus[i][..., None] * v[..., i + 1:, i]
        start = (w[..., None, :] @ v[..., i + 1:, i + 1:])[..., 0, :]
        corner = torch.stack([F.pad(row, (j, 0)) for j, row in enumerate(rows)], dim=-2)
        rest = torch.where(upper[:tail, :tail], start[..., :, None] * corner, 0.0).sum(-2)
        rows.insert(0, torch.cat([taus[i][..., None], rest], dim=-1))
    return torch.stack([F.pad(row, (i, 0)) for i, row in enumerate(rows)], dim=-2)


def tf_qr(a, m: int, n: int, complete: bool, tiny: float):
    """TF's Qr kernel: ``householderQ()`` (complete) or ``householderQ() * Identity(m,
    min(m, n))`` (reduced), and R the upper triangle of the packed matrix (its first
    ``min(m, n)`` rows when reduced)."""
    size = min(m, n)
    packed, vectors, taus = eigen_qr(a, m, n, tiny)
    columns = m if complete else size
    q = householder_q(a, vectors, taus, m, columns, corner=complete)
    r = torch.triu(packed if complete else packed[..., :size, :])
    return q, r


# -- Cholesky -----------------------------------------------------------------------------------

def tf_cholesky(a, upper: bool):
    """keras.ops.cholesky: TF's factor of the lower triangle; a matrix that is not
    positive-definite gives NaN there and Keras' ``check_numerics`` raises on any NaN or inf
    in the factor (LAPACK stops at a pivot <= 0 or NaN: ``info`` counts it)."""
    factor, info = torch.linalg.cholesky_ex(a)
    torch._assert(((info == 0).all() & torch.isfinite(factor).all()),
                  "Cholesky decomposition failed (Keras' cholesky: TF's factor holds NaN "
                  "or inf: the matrix is not positive-definite)")
    return factor.mT if upper else factor


def tf_cholesky_inverse(factor, upper: bool):
    """keras.ops.cholesky_inverse(factor): Keras' TF formula, ``L^-1`` by a triangular solve
    of the identity (the other triangle unread), then ``L^-T L^-1`` (``U^-1 U^-T`` for
    ``upper``); a zero on the diagonal gives inf/NaN in both kernels."""
    identity = torch.diag_embed(torch.ones_like(factor[..., 0]))
    inverse = torch.linalg.solve_triangular(factor, identity, upper=upper)
    return inverse @ inverse.mT if upper else inverse.mT @ inverse


def eigen_llt(a, n: int):
    """Eigen's unblocked LLT of the lower triangle, column by column (the pivot ``a[k, k] -
    |L[k, :k]|^2``, the column ``(a[k+1:, k] - L[k+1:, :k] L[k, :k]) / sqrt(pivot)``) and
    whether a pivot was <= 0, where Eigen stops and TF fills the factor with NaN. Unlike
    LAPACK it carries an inf pivot through (``x / inf = 0`` below it)."""
    factor = torch.zeros_like(a)
    failed = torch.zeros_like(a[..., 0, 0], dtype=torch.bool)
    for k in range(n):
        row = factor[..., k, :k]
        pivot = a[..., k, k] - (row * row).sum(-1)
        failed = failed | (pivot <= 0)
        pivot = torch.sqrt(pivot)
        below = a[..., k + 1:, k] - (factor[..., k + 1:, :k] @ row[..., :, None])[..., 0]
        column = torch.cat([pivot[..., None], below / pivot[..., None]], dim=-1)
        factor = torch.cat([factor[..., :k], F.pad(column, (k, 0))[..., None],
                            factor[..., k + 1:]], dim=-1)
    return factor, failed


def tf_logdet(a, n: int):
    """``tf.linalg.logdet``: ``2 sum(log(diag(L)))`` of TF's Cholesky factor (Eigen's LLT of
    the lower triangle), NaN for a matrix that is not positive-definite (TF's factor is NaN
    there); an inf on the diagonal gives inf, as Eigen carries it through."""
    factor, failed = eigen_llt(a, n)
    value = 2.0 * factor.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    return torch.where(failed, _NAN, value)


def tf_solve_triangular(a, b, upper: bool, vector: bool):
    """TF's MatrixTriangularSolve: only ``a``'s triangle read, a vector ``b`` as a column."""
    if vector:
        return torch.linalg.solve_triangular(a, b[..., None], upper=upper)[..., 0]
    return torch.linalg.solve_triangular(a, b, upper=upper)


# -- converters ---------------------------------------------------------------------------------

def _square(ctx: Context, x) -> tuple:
    """(node, size n, Keras shape) of a batch of n x n matrices."""
    node, shape = operand(ctx, x)
    return node, matrix_size(ctx, shape)[1], shape


@register_op(policy=Policy.CUSTOM)
def Inv(ctx: Context, op, x) -> Held:
    """keras.ops.inv(x): TF's MatrixInverse, Eigen's partial-pivoting LU solved against the
    identity; raises where TF does (a zero pivot, NaN at ``x[0, 0]``)."""
    node, n, _ = _square(ctx, x)
    return emit_one(ctx, tf_inv, node, n=n)


@register_op(policy=Policy.CUSTOM)
def Solve(ctx: Context, op, a, b) -> Held:
    """keras.ops.solve(a, b): TF's MatrixSolve (Eigen's LU, raising as ``inv``); a ``b`` of
    one rank less than ``a`` is a vector, as Keras' TF backend reads it."""
    a_node, n, a_shape = _square(ctx, a)
    b_node, b_shape = operand(ctx, b)
    vector = len(b_shape) == len(a_shape) - 1
    return emit_one(ctx, tf_solve, a_node, b_node, n=n, vector=vector)


@register_op(policy=Policy.CUSTOM)
def Det(ctx: Context, op, x) -> Held:
    """keras.ops.det(x): TF's ``sign * exp(log|det|)`` from Eigen's LU (a singular matrix is
    exactly 0 where its pivot is)."""
    node, n, _ = _square(ctx, x)
    return emit_one(ctx, tf_det, node, n=n)


@register_op(policy=Policy.CUSTOM)
def Slogdet(ctx: Context, op, x) -> list[Held]:
    """keras.ops.slogdet(x): TF's (sign, log|det|) from Eigen's LU: sign 0 and -inf for a
    singular matrix, NaN and NaN for one holding NaN. The sign has the batch shape TF gives
    it (Keras declares it 0-d)."""
    node, n, shape = _square(ctx, x)
    nodes = emit_torch(ctx, tf_slogdet, node, n=n)
    return held_outputs(ctx, nodes, [shape[:-2], shape[:-2]])


@register_op(policy=Policy.CUSTOM)
def LuFactor(ctx: Context, op, x) -> list[Held]:
    """keras.ops.lu_factor(x) on TF: ``tf.linalg.lu``'s packed factors (Eigen's pivots, bit
    for bit) and the inverse of its row permutation, int32 (Keras declares the float dtype);
    raises where ``tf.linalg.lu`` does. A NaN or inf in a pivot column of 12 or more rows is
    where TF's vectorized pivot search may choose another row than the first largest."""
    node, n, shape = _square(ctx, x)
    if len(shape) != 2:
        refuse(ctx, "a batch of matrices: Keras' TF backend inverts the permutation with "
                    "tf.math.invert_permutation, which takes one (the Keras model fails)")
    if n > UNBLOCKED_LU:
        refuse(ctx, f"a {n}x{n} matrix: Eigen factors matrices over {UNBLOCKED_LU} rows in "
                    "blocks, whose pivots on near ties are not reproduced")
    return held_outputs(ctx, emit_torch(ctx, tf_lu_factor, node, n=n))


@register_op(policy=Policy.CUSTOM)
def Qr(ctx: Context, op, x) -> list[Held]:
    """keras.ops.qr(x, mode): TF's Qr kernel step by step (Eigen's Householder QR: its signs,
    its unreflected tiny columns, its NaN/inf spread; ``complete`` Q formed on the trailing
    corners, ``reduced`` Q on whole rows); matrices of 48 or more columns and rows are
    refused (Eigen applies its reflectors in blocks there)."""
    node, shape = operand(ctx, x)
    m, n = matrix_size(ctx, shape)
    if min(m, n) >= UNBLOCKED_QR:
        refuse(ctx, f"a {m}x{n} matrix: Eigen's QR works in blocks of {UNBLOCKED_QR} "
                    "reflectors there, whose NaN/inf spread is not reproduced")
    tiny = float(np.finfo(output_dtype(ctx)).tiny)
    nodes = emit_torch(ctx, tf_qr, node, m=m, n=n, complete=op.mode == "complete", tiny=tiny)
    return held_outputs(ctx, nodes)


@register_op(policy=Policy.CUSTOM)
def Cholesky(ctx: Context, op, x) -> Held:
    """keras.ops.cholesky(x, upper): the factor of the lower triangle (``upper``: its
    transpose, as TF's adjoint); raises where Keras' ``check_numerics`` does (a matrix that is
    not positive-definite, a NaN or inf in the factor)."""
    node, _ = operand(ctx, x)
    return emit_one(ctx, tf_cholesky, node, upper=bool(op.upper))


@register_op(policy=Policy.CUSTOM)
def CholeskyInverse(ctx: Context, op, x) -> Held:
    """keras.ops.cholesky_inverse(factor, upper): Keras' TF formula from the triangular
    factor (its other triangle unread): ``L^-T L^-1``, or ``U^-1 U^-T`` for ``upper``."""
    node, _ = operand(ctx, x)
    return emit_one(ctx, tf_cholesky_inverse, node, upper=bool(op.upper))


@register_op(policy=Policy.CUSTOM)
def Logdet(ctx: Context, op, x) -> Held:
    """keras.ops.logdet(x): ``tf.linalg.logdet``, ``2 sum(log(diag(L)))`` of Eigen's Cholesky
    factor of the lower triangle (not torch.logdet's LU): NaN for a matrix that is not
    positive-definite."""
    node, n, _ = _square(ctx, x)
    return emit_one(ctx, tf_logdet, node, n=n)


@register_op(policy=Policy.CUSTOM)
def SolveTriangular(ctx: Context, op, a, b) -> Held:
    """keras.ops.solve_triangular(a, b, lower): TF's MatrixTriangularSolve (only ``a``'s
    triangle read, a zero pivot gives inf/NaN in both, batch dims broadcast); a ``b`` of one
    rank less than ``a`` is a vector."""
    a_node, a_shape = operand(ctx, a)
    b_node, b_shape = operand(ctx, b)
    vector = len(b_shape) == len(a_shape) - 1
    return emit_one(ctx, tf_solve_triangular, a_node, b_node, upper=not op.lower,
                    vector=vector)

