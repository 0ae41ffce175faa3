"""Cholesky factors, triangular solves, symmetric eigenvalues, the pseudo-inverse and the
matrix exponential (``linalg.cholesky``/``cholesky_ex``/``cholesky``,
``linalg.solve_triangular``/``triangular_solve``, ``linalg.eigvalsh``, ``linalg.pinv``/
``pinverse``, ``matrix_exp``, ``linalg.qr``) by TF's kernels, and ``linalg.householder_product``.

What each reads is torch's: a Cholesky factor only the lower triangle (the upper one for
``upper=True``), eigvalsh the ``UPLO`` triangle, a triangular solve its triangle (and not
the diagonal when ``unitriangular``). Measured (tests/ops/test_factor.py):

- A matrix that is not positive-definite makes ``linalg.cholesky`` raise in torch; the
  Keras model raises too (``keras.ops.cholesky`` checks its factor for NaN/inf, so a
  factor with an inf entry, which torch returns, raises as well). ``cholesky_ex`` does not
  raise: it is built column by column as LAPACK's ``potf2`` (MKL's potrf up to order 128),
  so its ``info`` (the first pivot ``<= 0`` or NaN) and its partial factor are torch's.
- A zero on a triangular matrix's diagonal gives the same inf/NaN in both.
- Eigenvectors (``linalg.eigh``) are refused: TF's differ from LAPACK's in sign. QR's
  Householder reflectors take LAPACK's signs in TF too. A NaN is placed where LAPACK's
  is (``_nan_like_lapack``): Q NaN from the first non-finite column on, R from that row
  on and in every non-finite column. Q is refused past 32 rows and columns, where MKL's
  blocked orgqr spreads the NaN back into its block. **Left**: an inf (torch's reflector
  then has exact zeros and LAPACK skips the rows after its last non-zero, so its ±inf/NaN
  pattern depends on the inf's row) and matrices with exact-zero column tails (triangular
  ones: LAPACK skips those reflections) can differ in which entries are NaN, as can a NaN
  only at ``a[0, 0]`` up to 20 rows with 18 to 20 columns (MKL's R[0, 0] varies by shape).
- ``matrix_exp`` of a finite matrix whose exponential overflows float32: both give
  non-finite entries, in the same ±inf/NaN positions in 427 of 481 measured matrices; in
  the other 54 torch's Taylor squaring made NaN (inf - inf) where TF's Padé gives ±inf.
  No rule from the output reproduces that without torch's algorithm: **left**.

``linalg.householder_product`` runs LAPACK's org2r step by step (MKL's orgqr up to 32
columns, measured; more are refused), so its NaN/inf positions are torch's.

TFLite has no builtin for these kernels: the export refuses, naming the torch op;
``cholesky_ex`` and ``householder_product`` (keras.ops arithmetic only) export.
"""

from __future__ import annotations

import operator

import keras
import numpy as np
import torch

from crossport.layout import after_reduce, canonical
from crossport.to_keras.dynamic_dims import static_dims
from crossport.to_keras.ops.elementwise import isnan
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register

aten = torch.ops.aten
ops = keras.ops
_FLOATS = (torch.float32, torch.float64)


def _read_outputs(node) -> set[int]:
    """Output indices read by anything but torch's run-time error check."""
    return {user.args[1] for user in node.users if user.target is operator.getitem
            and any(u.target is not aten._linalg_check_errors.default for u in user.users)}


def _checked(node) -> bool:
    """Whether torch raises on a failed factorization (``linalg.cholesky``, not ``_ex``)."""
    return any(u.target is aten._linalg_check_errors.default
               for user in node.users if user.target is operator.getitem
               for u in user.users)


def _float_matrices(*names: str):
    """A ``supports`` predicate: the named inputs are float32/float64."""

    def supports(node, **arguments):
        for name in names:
            value = arguments.get(name)
            dtype = value.meta["val"].dtype if isinstance(value, torch.fx.Node) else None
            if dtype is not None and dtype not in _FLOATS:
                return (f"{str(node.target).split('.')[1]} of {dtype} (converted for float32 "
                        "and float64 matrices)")
        return None
    return supports


def _mT(x):
    rank = len(x.shape)
    return ops.transpose(x, list(range(rank - 2)) + [rank - 1, rank - 2])


def _matrices(ctx, A):
    return ctx.canonical(as_value(ctx, A))


def _broadcast_batch(a, b):
    """``a`` and ``b`` with their batch dims broadcast (a multiplication by ones: exact)."""
    return a * ops.ones_like(b[..., :1, :1]), b * ops.ones_like(a[..., :1, :1])


# --- Cholesky ---------------------------------------------------------------------------

_UNBLOCKED_LIMIT = 128  # MKL's potrf factors up to this order column by column


def _cholesky_ex_supports(node, self, upper=False, check_errors=False):
    reason = _float_matrices("self")(node, self=self)
    if reason or check_errors or _checked(node):
        return reason
    n = self.meta["val"].shape[-1]
    if isinstance(n, int) and n > _UNBLOCKED_LIMIT:
        return (f"cholesky_ex of {n}x{n} matrices: where a matrix is not positive-definite "
                "torch returns LAPACK's partial factorization, which the Keras model "
                f"reproduces up to order {_UNBLOCKED_LIMIT} (MKL's unblocked algorithm; "
                "larger orders are blocked); use torch.linalg.cholesky, which raises there")
    return None


def _cholesky_ex_dynamic(node, **_):
    if _checked(node) or node.kwargs.get("check_errors"):
        return None
    return static_dims("self", lambda n: [-2, -1],
                       "cholesky_ex's column-by-column factorization")(node)


def _lower_cholesky(ctx, x, upper: bool):
    """torch's factor of the ``upper``/lower triangle of ``x``: the Keras model raises
    where it fails (``keras.ops.cholesky`` checks its factor for NaN/inf)."""
    if upper:
        return _mT(ops.cholesky(_mT(x)))  # its upper triangle becomes the lower one TF reads
    return ops.cholesky(x)


def _partial_cholesky(a):
    """LAPACK potf2's lower Cholesky, column by column, of the lower triangle of ``a``
    (static order): ``(L, info)`` with torch's values where a matrix is not
    positive-definite too.

    Column ``j``'s pivot is ``a_jj - |L_j,:j|^2``; the first that is not > 0 (NaN
    included) stops the factorization: info is its order, the pivot is stored on the
    diagonal, that column and the later ones keep ``a``'s lower triangle (what MKL's
    potrf returns up to order 128, measured).
    """
    n = int(a.shape[-1])
    rows = ops.arange(n)
    columns, failed = [], ops.zeros_like(a[..., 0, 0], dtype="bool")
    info = ops.zeros_like(a[..., 0, 0], dtype="int32")
    for j in range(n):
        raw = a[..., :, j]
        if j == 0:
            pivot, below = a[..., 0, 0], raw
        else:
            done = ops.stack(columns, axis=-1)  # [..., n, j]
            row = done[..., j, :]
            pivot = a[..., j, j] - ops.sum(row * row, axis=-1)
            below = raw - ops.squeeze(ops.matmul(done, ops.expand_dims(row, -1)), -1)
        # not (pivot > 0) spelled out: LiteRT's export turns it into pivot <= 0, false for NaN
        positive = ops.logical_not(ops.logical_or(ops.less_equal(pivot, 0), isnan(pivot)))
        root = ops.sqrt(ops.where(positive, pivot, ops.ones_like(pivot)))
        on_diagonal = ops.equal(rows, j)
        factored = ops.where(on_diagonal, ops.expand_dims(root, -1),
                             below / ops.expand_dims(root, -1))
        fails_here = ops.logical_and(ops.logical_not(positive), ops.logical_not(failed))
        stopped = ops.where(ops.logical_and(on_diagonal, ops.expand_dims(fails_here, -1)),
                            ops.expand_dims(pivot, -1), raw)
        column = ops.where(ops.expand_dims(ops.logical_or(failed, fails_here), -1),
                           stopped, factored)
        columns.append(ops.where(ops.greater_equal(rows, j), column, ops.zeros_like(column)))
        info = ops.where(fails_here, ops.full_like(info, j + 1), info)
        failed = ops.logical_or(failed, fails_here)
    return ops.stack(columns, axis=-1), info


@register(aten.linalg_cholesky_ex.default, policy=Policy.CUSTOM,
          supports=_cholesky_ex_supports, dynamic=_cholesky_ex_dynamic)
def aten_linalg_cholesky_ex_default(ctx, self, upper=False, check_errors=False):
    """linalg_cholesky_ex(Tensor self, *, bool upper=False, bool check_errors=False) -> (Tensor L, Tensor info)

    torch.linalg.cholesky captures as this plus ``_linalg_check_errors`` on ``info``: TF's
    Cholesky kernel, and the Keras model raises where torch does. Otherwise (cholesky_ex)
    the factorization is built column by column, so ``L`` and ``info`` are torch's for
    matrices that are not positive-definite too.
    """
    x = _matrices(ctx, self)
    rank = len(ctx.out_shape)
    ctx.out_layout = (canonical(rank), canonical(rank - 2))
    if _checked(ctx.node) or check_errors:
        return _lower_cholesky(ctx, x, upper), None
    factor, info = _partial_cholesky(_mT(x) if upper else x)
    return (_mT(factor) if upper else factor), info


@register(aten.cholesky.default, policy=Policy.CUSTOM, supports=_float_matrices("self"),
          dynamic=True)
def aten_cholesky_default(ctx, self, upper=False):
    """cholesky(Tensor self, bool upper=False) -> Tensor

    The deprecated torch.cholesky: raises on a matrix that is not positive-definite, as
    the Keras model does.
    """
    ctx.out_layout = canonical(len(ctx.out_shape))
    return _lower_cholesky(ctx, _matrices(ctx, self), upper)


# --- triangular solves ------------------------------------------------------------------

def _triangular_solve(a, b, lower: bool, unitriangular: bool):
    """``A X = B`` for the ``lower``/upper triangle of ``a`` (batch dims broadcast), with
    ones on its diagonal when ``unitriangular`` (its stored diagonal unread, as in torch)."""
    if unitriangular:
        ones = ops.ones_like(a)
        diagonal = ops.cast(ops.tril(ops.triu(ones)), "bool")  # any (run-time) order
        a = ops.where(diagonal, ones, a)
    a, b = _broadcast_batch(a, b)
    return ops.solve_triangular(a, b, lower=lower)


@register(aten.linalg_solve_triangular.default, policy=Policy.CUSTOM,
          supports=_float_matrices("self", "B"), dynamic=True)
def aten_linalg_solve_triangular_default(ctx, self, B, upper, left=True,
                                         unitriangular=False):
    """linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True, bool unitriangular=False) -> Tensor

    ``left=False`` solves ``X A = B`` as ``A^T X^T = B^T`` (A^T's triangle is the other).
    """
    a, b = _matrices(ctx, self), _matrices(ctx, B)
    ctx.out_layout = canonical(len(ctx.out_shape))
    if left:
        return _triangular_solve(a, b, lower=not upper, unitriangular=unitriangular)
    return _mT(_triangular_solve(_mT(a), _mT(b), lower=upper, unitriangular=unitriangular))


@register(aten.triangular_solve.default, policy=Policy.CUSTOM,
          supports=_float_matrices("self", "A"), dynamic=True)
def aten_triangular_solve_default(ctx, self, A, upper=True, transpose=False,
                                  unitriangular=False):
    """triangular_solve(Tensor self, Tensor A, bool upper=True, bool transpose=False, bool unitriangular=False) -> (Tensor solution, Tensor cloned_coefficient)

    Solves ``A X = self`` (``A^T X = self`` when ``transpose``); the second output is ``A``
    broadcast to the batch dims of both.
    """
    b, a = _matrices(ctx, self), _matrices(ctx, A)
    lower = not upper
    if transpose:
        a_used, lower = _mT(a), upper
    else:
        a_used = a
    x = _triangular_solve(a_used, b, lower=lower, unitriangular=unitriangular)
    coefficient, _ = _broadcast_batch(a, b)
    ctx.out_layout = (canonical(len(x.shape)), canonical(len(coefficient.shape)))
    return x, coefficient


# --- symmetric eigenvalues ---------------------------------------------------------------

def _eigh_supports(node, A, UPLO="L", compute_v=True):
    dtype = A.meta["val"].dtype
    if dtype not in _FLOATS:
        return f"linalg.eigh/eigvalsh of {dtype} (converted for float32 and float64 matrices)"
    if 1 in _read_outputs(node):
        return ("its eigenvectors are used: TF's eigensolver (Eigen) and torch's (LAPACK "
                "syevd) return them with different signs (each is unique only up to sign, "
                "and up to rotation for repeated eigenvalues), so they would not match "
                "torch's; only the eigenvalues convert (torch.linalg.eigvalsh)")
    return None


@register(aten._linalg_eigh.default, policy=Policy.CUSTOM, supports=_eigh_supports,
          dynamic=True)
def aten__linalg_eigh_default(ctx, A, UPLO="L", compute_v=True):
    """_linalg_eigh(Tensor A, str UPLO="L", bool compute_v=True) -> (Tensor eigenvalues, Tensor eigenvectors)

    The eigenvalues, ascending as in torch, of the symmetric matrix read from the
    ``UPLO`` triangle (TF reads the lower one: ``'U'`` transposes first).
    """
    x = _matrices(ctx, A)
    if UPLO.upper() == "U":
        x = _mT(x)
    rank = len(A.shape)
    ctx.out_layout = (after_reduce(canonical(rank), [-1], False), canonical(rank))
    return ops.eigh(x)[0], None


# --- pseudo-inverse ------------------------------------------------------------------------

def _tolerance(ctx, value, batch_rank: int):
    """An atol/rtol tensor as float64 with a trailing unit dim (torch's ``unsqueeze(-1)``)."""
    tensor = ops.cast(ctx.canonical(as_value(ctx, value)), "float64")
    return ops.expand_dims(tensor, -1)


def _pinv_tolerances(ctx, node, atol, rtol, shape):
    """torch's get_atol_rtol: atol 0 when not given; rtol ``eps * max(m, n)`` when neither
    is given, 0 where a given atol is positive, else the given one (all float64)."""
    eps = float(np.finfo(np.float32 if node.args[0].meta["val"].dtype == torch.float32
                         else np.float64).eps)
    default_rtol = eps * max(int(shape[-1]), int(shape[-2]))
    atol_t = (_tolerance(ctx, atol, len(shape) - 2) if atol is not None
              else ops.zeros((1,), "float64"))
    if rtol is not None:
        rtol_t = _tolerance(ctx, rtol, len(shape) - 2)
    elif atol is not None:
        rtol_t = ops.where(ops.greater(atol_t, 0), ops.zeros_like(atol_t),
                           ops.full_like(atol_t, default_rtol))
    else:
        rtol_t = ops.full((1,), default_rtol, "float64")
    return atol_t, rtol_t


@register(aten.linalg_pinv.atol_rtol_tensor, policy=Policy.CUSTOM,
          supports=_float_matrices("self"), dynamic=False)
def aten_linalg_pinv_atol_rtol_tensor(ctx, self, atol=None, rtol=None, hermitian=False):
    """linalg_pinv.atol_rtol_tensor(Tensor self, *, Tensor? atol=None, Tensor? rtol=None, bool hermitian=False) -> Tensor

    torch's formula: singular values (``|eigenvalues|`` when ``hermitian``, the lower
    triangle read) above ``max(atol, rtol * largest)`` inverted, the rest 0, compared in
    float64 as torch does; then ``V diag(1/s) U^T``. The singular vectors' signs cancel in
    that product, so TF's SVD and eigensolver give torch's result. torch.pinverse
    captures as this.
    """
    x = _matrices(ctx, self)
    atol_t, rtol_t = _pinv_tolerances(ctx, ctx.node, atol, rtol, x.shape)
    if hermitian:
        values, vectors = ops.eigh(x)
        magnitude = ops.abs(values)
        largest = ops.max(magnitude, axis=-1, keepdims=True)
    else:
        vectors, values, vh = ops.svd(x, full_matrices=False)
        magnitude = values
        largest = values[..., :1]
    tolerance = ops.maximum(atol_t, rtol_t * ops.cast(largest, "float64"))
    kept = ops.greater(ops.cast(magnitude, "float64"), tolerance)
    inverse = ops.where(kept, 1.0 / values, ops.zeros_like(values))
    ctx.out_layout = canonical(len(ctx.out_shape))
    if hermitian:
        return ops.matmul(vectors * ops.expand_dims(inverse, -2), _mT(vectors))
    return ops.matmul(_mT(vh) * ops.expand_dims(inverse, -2), _mT(vectors))


# --- matrix exponential ------------------------------------------------------------------

@register(aten.linalg_matrix_exp.default, policy=Policy.CUSTOM,
          supports=_float_matrices("self"), dynamic=True)
def aten_linalg_matrix_exp_default(ctx, self):
    """linalg_matrix_exp(Tensor self) -> Tensor

    TF's Padé approximant with scaling and squaring (torch sums a Taylor series of degree
    up to 18 with scaling and squaring): both within rounding of the exact exponential.
    A matrix holding NaN or inf is all NaN in torch; ``tf.linalg.expm`` made the *whole
    batch* NaN (one finiteness test for all), so such matrices are zeroed before it and
    filled with NaN after.
    """
    from crossport.layers.linalg import MatrixExponential

    x = _matrices(ctx, self)
    finite = ops.all(ops.isfinite(x), axis=(-2, -1), keepdims=True)
    exp = MatrixExponential(name=ctx.name("matrix_exp"))(
        ops.where(finite, x, ops.zeros_like(x)))
    ctx.out_layout = canonical(len(ctx.out_shape))
    return ops.where(finite, exp, ops.full_like(exp, float("nan")))


# --- QR ----------------------------------------------------------------------------------

# MKL's unblocked orgqr up to this many reflectors (measured, float32 and float64): past it,
# its blocked one spreads a NaN reflector's NaN to earlier columns of Q in its block.
_QR_UNBLOCKED = 32


def _qr_supports(node, A, mode="reduced"):
    reason = _float_matrices("A")(node, A=A)
    if reason:
        return reason
    read = _read_outputs(node)
    if mode == "r" and 0 in read:
        return "linalg.qr(mode='r')'s Q output (an empty tensor) is used"
    m, n = node.args[0].meta["val"].shape[-2:]
    if mode != "r" and 0 in read and isinstance(m, int) and isinstance(n, int) \
            and min(m, n) > _QR_UNBLOCKED:
        return (f"linalg.qr's Q of {m}x{n} matrices is used: past {_QR_UNBLOCKED} "
                "reflectors torch's LAPACK (MKL's blocked orgqr) spreads a NaN to earlier "
                "columns of Q in a way that is not reproduced; use mode='r' (R matches at "
                "every size) or matrices with at most 32 rows or columns")
    return None


@register(aten.linalg_qr.default, policy=Policy.CUSTOM, supports=_qr_supports,
          dynamic=static_dims("A", lambda n: [-2, -1],
                              "keras.ops.qr (it needs its matrices' shape)"))
def aten_linalg_qr_default(ctx, A, mode="reduced"):
    """linalg_qr(Tensor A, str mode='reduced') -> (Tensor Q, Tensor R)

    TF's Householder QR (Eigen) chooses each reflector as LAPACK's geqrf does (``beta =
    -sign(alpha) * norm``, no reflection for a zero tail), so Q and R carry torch's signs,
    not just a valid factorization (measured equal within rounding on random matrices,
    tall, wide, square). 'complete' gives the square Q, 'r' only R. A NaN is placed
    where torch's is (``_nan_like_lapack``) on the QR of the matrix with its non-finite
    columns zeroed (which leaves the entries that stay finite unchanged).
    """
    x = _matrices(ctx, A)
    bad = ops.logical_not(ops.all(ops.isfinite(x), axis=-2))  # (..., n) non-finite columns
    q, r = ops.qr(ops.where(ops.expand_dims(bad, -2), ops.zeros_like(x), x),
                  mode="complete" if mode == "complete" else "reduced")
    q, r = _nan_like_lapack(x, bad, q, r)
    rank = len(x.shape)
    ctx.out_layout = (canonical(rank), canonical(rank))
    return (None if mode == "r" else q), r


def _nan_like_lapack(x, bad, q, r):
    """torch's NaN pattern (LAPACK geqrf/orgqr, measured up to 32 reflectors for Q, 200
    for R). Reflector ``j`` reads only columns ``<= j``, so the first non-finite column
    ``c`` makes reflectors ``c..`` NaN (none when ``c >= m - 1``: the last row's reflector
    is the identity): Q's columns from ``c`` and R's rows from ``c`` are NaN, and so is
    every non-finite column of R. One exception: up to 20x17, a NaN only at ``a[0, 0]`` (a
    finite, non-zero rest of column 0) leaves ``R[0, 0] = sqrt(2) |a[1:, 0]|`` (MKL's
    small-matrix dlapy2 skips the NaN; past 20 rows or columns it is NaN)."""
    m, n = int(x.shape[-2]), int(x.shape[-1])
    columns = ops.arange(n, dtype="int32")
    none = max(m, n)  # past every column of Q and R
    first = ops.min(ops.where(bad, columns, none), axis=-1)
    first_nan = ops.expand_dims(ops.expand_dims(
        ops.where(ops.less(first, m - 1), first, none), -1), -1)  # (..., 1, 1)
    nan_q = ops.greater_equal(ops.arange(q.shape[-1], dtype="int32"), first_nan)
    q = ops.where(nan_q, ops.full_like(q, float("nan")), q)
    rows = ops.expand_dims(ops.arange(r.shape[-2], dtype="int32"), -1)
    nan_r = ops.logical_and(ops.greater_equal(columns, rows), ops.logical_or(
        ops.greater_equal(rows, first_nan), ops.expand_dims(bad, -2)))
    r = ops.where(nan_r, ops.full_like(r, float("nan")), r)
    if m == 1 or m > 20 or n > 17:  # MKL's small-matrix path only (measured)
        return q, r
    tail = x[..., 1:, 0]
    tail_norm = ops.sqrt(ops.sum(ops.square(tail), axis=-1))
    quirk = ops.logical_and(ops.logical_and(isnan(x[..., 0, 0]), ops.all(
        ops.isfinite(tail), axis=-1)), ops.greater(tail_norm, 0))
    is_00 = ops.logical_and(ops.equal(rows, 0), ops.equal(columns, 0))
    quirk_00 = ops.logical_and(is_00, ops.expand_dims(ops.expand_dims(quirk, -1), -1))
    value = ops.expand_dims(ops.expand_dims(tail_norm * np.sqrt(2.0), -1), -1)
    return q, ops.where(quirk_00, ops.cast(value, r.dtype), r)


# --- Householder product ------------------------------------------------------------------

def _householder_supports(node, input, tau):
    reason = _float_matrices("input", "tau")(node, input=input, tau=tau)
    if reason:
        return reason
    m, n = input.meta["val"].shape[-2:]
    if isinstance(n, int) and n > _QR_UNBLOCKED:
        return (f"linalg.householder_product of {m}x{n} matrices: past {_QR_UNBLOCKED} "
                "columns torch's LAPACK (MKL's blocked orgqr) spreads a NaN differently, "
                f"which is not reproduced; it converts up to {_QR_UNBLOCKED} columns")
    return None


@register(aten.linalg_householder_product.default, policy=Policy.CUSTOM,
          supports=_householder_supports,
          dynamic=static_dims("input", lambda n: [-2, -1],
                              "householder_product's reflector-by-reflector product"))
def aten_linalg_householder_product_default(ctx, input, tau):
    """linalg_householder_product(Tensor input, Tensor tau) -> Tensor

    LAPACK's org2r (MKL's orgqr up to 32 columns), step by step, so a NaN/inf or a zero
    ``tau`` leaves torch's NaN positions: the reflectors from the last to the first, each
    applied to the trailing block only (dlarf: none when ``tau == 0``, only up to the
    reflector's last non-zero row and the block's last non-zero column), then its column
    ``-tau v`` with ``1 - tau`` on the diagonal and zeros above.
    """
    a, t = _matrices(ctx, input), _matrices(ctx, tau)
    ctx.out_layout = canonical(len(ctx.out_shape))
    return _org2r(a, t)


def _last_index(mask, axis: int):
    """The last index along ``axis`` where ``mask`` holds (-1 where none)."""
    size = int(mask.shape[axis])
    positions = ops.reshape(ops.arange(size, dtype="int32"),
                            [size] + [1] * (-axis - 1))
    return ops.max(ops.where(mask, positions, -1), axis=axis)


def _org2r(a, tau):
    m, n, k = int(a.shape[-2]), int(a.shape[-1]), int(tau.shape[-1])
    rows = ops.expand_dims(ops.arange(m, dtype="int32"), -1)  # [m, 1]
    columns = ops.arange(n, dtype="int32")  # [n]
    eye = ops.eye(m, n, dtype=a.dtype)
    q = ops.where(ops.greater_equal(columns, k), eye, a)
    for i in range(k - 1, -1, -1):
        t = ops.expand_dims(ops.expand_dims(tau[..., i], -1), -1)  # [..., 1, 1]
        if i < n - 1:
            q = _reflect_trailing(q, t, rows, columns, i)
        below = ops.greater(rows, i)
        column = ops.where(below, -t * q, ops.where(ops.equal(rows, i), 1 - t,
                                                    ops.zeros_like(q)))
        q = ops.where(ops.equal(columns, i), column, q)
    return q


def _reflect_trailing(q, t, rows, columns, i: int):
    """dlarf('Left') of reflector ``i`` (``v = [1, q[i+1:, i]]``) on ``q[i:, i+1:]``."""
    v = ops.where(ops.equal(rows, i), ops.ones_like(q[..., :, i:i + 1]), q[..., :, i:i + 1])
    in_v = ops.greater_equal(rows, i)
    last_row = _last_index(ops.logical_and(in_v, ops.not_equal(v, 0)), -2)  # [..., 1]
    in_v = ops.logical_and(in_v, ops.less_equal(rows, ops.expand_dims(last_row, -1)))
    block = ops.logical_and(in_v, ops.greater(columns, i))
    non_zero = ops.any(ops.logical_and(block, ops.not_equal(q, 0)), axis=-2)  # [..., n]
    last_column = ops.expand_dims(_last_index(non_zero, -1), -1)  # [..., 1]
    block = ops.logical_and(block, ops.expand_dims(ops.less_equal(columns, last_column), -2))
    w = ops.sum(ops.where(block, v * q, ops.zeros_like(q)), axis=-2, keepdims=True)
    updated = q - v * (t * w)
    return ops.where(ops.logical_and(block, ops.not_equal(t, 0)), updated, q)
