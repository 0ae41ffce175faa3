"""LU factorization with partial pivoting (``linalg.lu_factor``/``lu_factor_ex``,
``linalg.lu``, ``torch.lu``), its unpacking (``lu_unpack``) and solves
(``linalg.lu_solve``/``lu_solve``), built from keras.ops as LAPACK's ``getf2``.

torch returns LAPACK's ``getrf`` output: the packed factors (``L`` below the diagonal,
its unit diagonal implied, ``U`` on and above) and 1-based int32 pivots, row ``j``
swapped with row ``pivots[j] - 1`` in turn. The Keras model runs the same right-looking
elimination column by column (a static number of steps):

- the pivot is LAPACK's ``idamax``: the first largest ``|a|`` of the column from the
  diagonal down, NaN skipped, except that a NaN on the diagonal is kept (the running
  maximum starts there and nothing compares greater than NaN);
- a non-zero pivot scales the column below it by its reciprocal; an exactly zero one
  leaves the column as it is and sets ``info`` (the first such column, 1-based);
- the rank-1 update ``a - l u`` of the trailing matrix is rounded once, as MKL's fused
  multiply-add does (Dekker's error-free product, in the input's dtype).

Measured against torch's CPU build (MKL 2024.2): bit for bit on random float32 matrices,
and the same pivots, ``info`` and NaN/±inf positions on NaN, inf, singular, tied and
all-zero matrices, up to 16 rows and columns. At extreme magnitudes the emulated fused
multiply-subtract loses its exactness (Veltkamp's split overflows above ~8e34 in float32,
1e300 in float64, and the error terms underflow near 1e-30) and the update is rounded
twice: same pivots, entries within float rounding (8.6e-6 relative at 1e36 in float32,
1.4e-14 at 1e300 in float64, measured on 64 random 6x6 matrices). Past 16 MKL changes algorithm (a vectorized
``idamax`` that picks a NaN in the column, blocked updates rounding differently, so an
exactly singular matrix may keep a rounding-sized pivot): those sizes are refused.

``linalg.lu_solve`` permutes ``B``'s rows as LAPACK's ``getrs`` does and runs TF's
triangular solves (within rounding of LAPACK's ``trsm``).

TFLite: the elimination, ``linalg.lu`` and ``lu_unpack`` are builtins (float32) and
export; ``lu_solve`` (MatrixTriangularSolve) and the raising ``lu_factor`` (MatrixInverse)
have no builtin and are refused at export, naming the torch op.
"""

from __future__ import annotations

import operator

import keras
import numpy as np
import torch

from crossport.layout import canonical
from crossport.to_keras.dynamic_dims import static_dims
from crossport.to_keras.ops.elementwise import isnan
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register

aten = torch.ops.aten
ops = keras.ops
_FLOATS = (torch.float32, torch.float64)
_SMALL = 16  # MKL's getrf is LAPACK's getf2 up to this many rows and columns (measured)
_SPLIT_64 = 134217729.0  # 2**27 + 1: Veltkamp's split of a float64's 53-bit mantissa
_SPLIT_32 = 4097.0  # 2**12 + 1: of a float32's 24 bits


def _checked(node) -> bool:
    """Whether torch raises on a singular matrix (``linalg.lu_factor``, ``torch.lu``)."""
    return any(u.target is aten._linalg_check_errors.default
               for user in node.users if user.target is operator.getitem
               for u in user.users)


def _size_reason(op: str, shape) -> str | None:
    m, n = shape[-2:]
    if isinstance(m, int) and isinstance(n, int) and max(m, n) > _SMALL:
        return (f"{op} of {m}x{n} matrices: torch's LAPACK (MKL) factors matrices with more "
                f"than {_SMALL} rows or columns by another algorithm (its pivot choice with "
                "NaN and its rounding of singular matrices differ), which the Keras model "
                f"does not reproduce; LU converts up to {_SMALL}x{_SMALL}")
    return None


def _float_reason(op: str, *values) -> str | None:
    for value in values:
        if isinstance(value, torch.fx.Node) and value.meta["val"].dtype not in _FLOATS:
            return (f"{op} of {value.meta['val'].dtype} (converted for float32 and float64 "
                    "matrices)")
    return None


def _mT(x):
    rank = len(x.shape)
    return ops.transpose(x, list(range(rank - 2)) + [rank - 1, rank - 2])


def _minus_product(c, a, b):
    """``c - a * b`` rounded once, as a fused multiply-subtract (broadcasting): Dekker's
    error-free product and Knuth's two-sum, in the input's own dtype (so float32 stays
    float32 for TFLite). Where an operand or the result is not finite the error terms
    are NaN and the plain difference is the fused one."""
    product = a * b
    a_hi, a_lo = _split(a)
    b_hi, b_lo = _split(b)
    error = ((a_hi * b_hi - product) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    plain = c - product
    virtual = plain - c
    plain_error = (c - (plain - virtual)) + (-product - virtual)
    fused = plain + (plain_error - error)
    return ops.where(ops.isfinite(fused), fused, plain)


def _split(x):
    """``x`` as a high and a low half of half its mantissa each (Veltkamp)."""
    scaled = (_SPLIT_64 if x.dtype == "float64" else _SPLIT_32) * x
    high = scaled - (scaled - x)
    return high, x - high


def _pivot_row(column, rows, j: int):
    """LAPACK's idamax from row ``j`` down: the first largest ``|a|``, NaN skipped,
    except a NaN at row ``j`` itself (nothing compares greater than it)."""
    magnitude = ops.abs(column)
    candidate = ops.where(ops.logical_and(ops.greater_equal(rows, j),
                                          ops.logical_not(isnan(magnitude))),
                          magnitude, ops.full_like(magnitude, -1.0))
    largest = ops.max(candidate, axis=-1, keepdims=True)
    m = int(column.shape[-1])
    first = ops.min(ops.where(ops.equal(candidate, largest), rows, m), axis=-1)
    return ops.where(isnan(magnitude[..., j]), ops.full_like(first, j), first)


def _swap_rows(a, rows, j: int, p):
    """Rows ``j`` and ``p`` (a per-matrix index) of ``a`` exchanged (gathers: exact)."""
    index = ops.expand_dims(ops.expand_dims(p, -1), -1) * ops.ones_like(a[..., :1, :],
                                                                        dtype="int32")
    row_p = ops.take_along_axis(a, index, axis=-2)  # row p repeated
    row_j = a[..., j:j + 1, :]
    at = ops.expand_dims(rows, -1)
    return ops.where(ops.equal(at, j), row_p,
                     ops.where(ops.equal(at, ops.expand_dims(ops.expand_dims(p, -1), -1)),
                               row_j, a))


def getf2(a):
    """LAPACK getf2 of ``a`` [..., m, n] (static m, n): ``(LU, pivots, info)``, pivots
    1-based int32, info the first exactly-zero pivot's column (1-based) or 0."""
    m, n = int(a.shape[-2]), int(a.shape[-1])
    rows = ops.arange(m, dtype="int32")
    columns = ops.arange(n, dtype="int32")
    tiny = float(np.finfo(np.float32 if a.dtype == "float32" else np.float64).tiny)
    pivots, info = [], ops.zeros_like(a[..., 0, 0], dtype="int32")
    for j in range(min(m, n)):
        p = _pivot_row(a[..., :, j], rows, j)
        pivots.append(p + 1)
        a = _swap_rows(a, rows, j, p)
        pivot = a[..., j:j + 1, j:j + 1]
        nonzero = ops.not_equal(pivot, 0)
        column = a[..., :, j:j + 1]
        # LAPACK multiplies by the reciprocal unless the pivot is below the safe minimum
        scaled = ops.where(ops.greater_equal(ops.abs(pivot), tiny),
                           column * (1.0 / ops.where(nonzero, pivot, ops.ones_like(pivot))),
                           column / ops.where(nonzero, pivot, ops.ones_like(pivot)))
        below = ops.greater(ops.expand_dims(rows, -1), j)  # [m, 1]
        multipliers = ops.where(ops.logical_and(below, nonzero), scaled, column)
        info = ops.where(ops.logical_and(ops.equal(info, 0), ops.equal(a[..., j, j], 0)),
                         ops.full_like(info, j + 1), info)
        updated = _minus_product(a, multipliers, a[..., j:j + 1, :])
        trailing = ops.logical_and(below, ops.greater(columns, j))  # [m, n]
        is_column = ops.logical_and(below, ops.equal(columns, j))
        a = ops.where(trailing, updated, ops.where(is_column, multipliers, a))
    return a, ops.stack(pivots, axis=-1), info


def permutation(pivots, m: int):
    """The row order ``perm`` the sequential swaps give: ``(P^T A)[i] = A[perm[i]]``."""
    rows = ops.arange(m, dtype="int32")
    perm = ops.zeros_like(pivots[..., :1]) + rows  # [..., m]
    for j in range(int(pivots.shape[-1])):
        p = ops.expand_dims(pivots[..., j] - 1, -1)
        at_j = ops.take_along_axis(perm, p, axis=-1)  # perm[p]
        old_j = perm[..., j:j + 1]
        perm = ops.where(ops.equal(rows, j), at_j, ops.where(ops.equal(rows, p), old_j, perm))
    return perm


def _inverse_permutation(perm):
    m = int(perm.shape[-1])
    hits = ops.equal(ops.expand_dims(perm, -1), ops.arange(m, dtype="int32"))  # [.., i, r]
    return ops.sum(ops.where(hits, ops.expand_dims(ops.arange(m, dtype="int32"), -1), 0),
                   axis=-2)


def _permutation_matrix(perm, dtype):
    """P with ``P[perm[i], i] = 1``, so that ``A = P L U``."""
    m = int(perm.shape[-1])
    return ops.cast(ops.equal(ops.expand_dims(ops.arange(m, dtype="int32"), -1),
                              ops.expand_dims(perm, -2)), dtype)


def _unpack(lu):
    """``L`` (unit lower, m x k) and ``U`` (upper, k x n) of packed factors."""
    m, n = int(lu.shape[-2]), int(lu.shape[-1])
    k = min(m, n)
    lower = ops.tril(lu[..., :, :k], -1) + ops.eye(m, k, dtype=lu.dtype)
    return lower, ops.triu(lu[..., :k, :])


def _rows_gathered(b, order):
    index = ops.expand_dims(order, -1) * ops.ones_like(b[..., :1, :], dtype="int32")
    return ops.take_along_axis(b, index, axis=-2)


def _broadcast_batch(a, b):
    return a * ops.ones_like(b[..., :1, :1]), b * ops.ones_like(a[..., :1, :1])


def _raise_if_singular(lu, info):
    """torch.linalg.lu_factor raises where info > 0: so does the Keras model, through
    TF's MatrixInverse of a 1x1 zero (``LU * 1`` otherwise: exact, -0.0 and NaN kept)."""
    ok = ops.where(ops.greater(info, 0), ops.zeros_like(info, dtype=lu.dtype),
                   ops.ones_like(info, dtype=lu.dtype))
    one = ops.inv(ops.expand_dims(ops.expand_dims(ok, -1), -1))
    return lu * one


def _matrices(ctx, value):
    return ctx.canonical(as_value(ctx, value))


# --- converters --------------------------------------------------------------------------

def _factor_supports(node, A, pivot=True, check_errors=False):
    op = str(node.target).split(".")[1]
    reason = _float_reason(op, A)
    if reason:
        return reason
    if not pivot:
        return (f"{op}(pivot=False): torch computes LU without pivoting on CUDA only (its "
                "CPU build raises)")
    return _size_reason(op, A.meta["val"].shape)


_STATIC = static_dims("A", lambda node: [-2, -1], "LU's column-by-column elimination")


@register(aten.linalg_lu_factor_ex.default, policy=Policy.CUSTOM, supports=_factor_supports,
          dynamic=_STATIC)
def aten_linalg_lu_factor_ex_default(ctx, A, pivot=True, check_errors=False):
    """linalg_lu_factor_ex(Tensor A, *, bool pivot=True, bool check_errors=False) -> (Tensor LU, Tensor pivots, Tensor info)

    torch.linalg.lu_factor and torch.lu capture as this plus ``_linalg_check_errors``
    (raising on a singular matrix): the Keras model raises there too.
    """
    lu, pivots, info = getf2(_matrices(ctx, A))
    if _checked(ctx.node) or check_errors:
        lu = _raise_if_singular(lu, info)
    rank = len(A.shape)
    ctx.out_layout = (canonical(rank), canonical(rank - 1), canonical(rank - 2))
    return lu, pivots, info


@register(aten.linalg_lu.default, policy=Policy.CUSTOM, supports=_factor_supports,
          dynamic=_STATIC)
def aten_linalg_lu_default(ctx, A, pivot=True):
    """linalg_lu(Tensor A, *, bool pivot=True) -> (Tensor P, Tensor L, Tensor U)

    ``A = P L U`` from the factorization torch.linalg.lu_factor returns.
    """
    a = _matrices(ctx, A)
    lu, pivots, _ = getf2(a)
    lower, upper = _unpack(lu)
    p = _permutation_matrix(permutation(pivots, int(a.shape[-2])), a.dtype)
    rank = len(A.shape)
    ctx.out_layout = (canonical(rank),) * 3
    return p, lower, upper


def _unpack_supports(node, LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    reason = _float_reason("lu_unpack", LU_data)
    if reason:
        return reason
    if isinstance(LU_pivots, torch.fx.Node) and LU_pivots.meta["val"].dtype != torch.int32:
        return f"lu_unpack of {LU_pivots.meta['val'].dtype} pivots (torch's are int32)"
    read = {user.args[1] for user in node.users if user.target is operator.getitem}
    for index, flag, name in ((0, unpack_pivots, "unpack_pivots"), (1, unpack_data, "unpack_data"),
                              (2, unpack_data, "unpack_data")):
        if index in read and not flag:
            return (f"lu_unpack({name}=False)'s {'PLU'[index]} output (an empty tensor) is "
                    "used")
    return None


@register(aten.lu_unpack.default, policy=Policy.CUSTOM, supports=_unpack_supports,
          dynamic=static_dims("LU_data", lambda node: [-2, -1], "lu_unpack"))
def aten_lu_unpack_default(ctx, LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """lu_unpack(Tensor LU_data, Tensor LU_pivots, bool unpack_data=True, bool unpack_pivots=True) -> (Tensor P, Tensor L, Tensor U)

    ``P`` from the pivots' sequential swaps, ``L`` (unit lower) and ``U`` from the packed
    factors; an output not unpacked is torch's empty tensor (refused if read).
    """
    lu, pivots = _matrices(ctx, LU_data), _matrices(ctx, LU_pivots)
    rank = len(LU_data.shape)
    ctx.out_layout = (canonical(rank),) * 3
    lower, upper = _unpack(lu) if unpack_data else (None, None)
    p = None
    if unpack_pivots:
        perm = permutation(pivots, int(lu.shape[-2]))
        p = _permutation_matrix(perm, lu.dtype)
    return p, lower, upper


def _solve_supports(node, LU, pivots, B, left=True, adjoint=False):
    reason = _float_reason("linalg.lu_solve", LU, B)
    if reason:
        return reason
    return None


@register(aten.linalg_lu_solve.default, policy=Policy.CUSTOM, supports=_solve_supports,
          dynamic=static_dims("LU", lambda node: [-2, -1], "lu_solve"))
def aten_linalg_lu_solve_default(ctx, LU, pivots, B, left=True, adjoint=False):
    """linalg_lu_solve(Tensor LU, Tensor pivots, Tensor B, *, bool left=True, bool adjoint=False) -> Tensor

    ``A X = B`` for ``A = P L U``: ``B``'s rows in the pivots' order, then L's unit lower
    and U's upper triangular solves (``adjoint``: ``U^T``, ``L^T``, then the rows put
    back). ``left=False`` solves ``X A = B`` as ``A^T X^T = B^T``. torch.lu_solve
    captures as this.
    """
    lu, piv, b = _matrices(ctx, LU), _matrices(ctx, pivots), _matrices(ctx, B)
    ctx.out_layout = canonical(len(ctx.out_shape))
    if not left:
        return _mT(_lu_solve(lu, piv, _mT(b), adjoint=not adjoint))
    return _lu_solve(lu, piv, b, adjoint=adjoint)


def _lu_solve(lu, pivots, b, adjoint: bool):
    n = int(lu.shape[-1])
    lower, upper = _unpack(lu)
    lower, upper = lower[..., :n, :n], upper[..., :n, :n]
    perm = permutation(pivots, n)
    lower, b = _broadcast_batch(lower, b)
    upper, _ = _broadcast_batch(upper, b)
    if not adjoint:
        b = _rows_gathered(b, ops.zeros_like(b[..., :1, 0], dtype="int32") + perm)
        y = ops.solve_triangular(lower, b, lower=True)
        return ops.solve_triangular(upper, y, lower=False)
    y = ops.solve_triangular(_mT(upper), b, lower=True)
    z = ops.solve_triangular(_mT(lower), y, lower=False)
    inverse = _inverse_permutation(perm)
    return _rows_gathered(z, ops.zeros_like(z[..., :1, 0], dtype="int32") + inverse)
