"""Matrix inverse, linear solves and determinants (``linalg.inv``/``inv_ex``, ``solve``/
``solve_ex``, ``det``, ``slogdet``, ``logdet``) by TF's LU kernels.

torch (LAPACK ``getrf``) and TF (Eigen's ``PartialPivLU``) both factor with partial
pivoting, so they round alike: within the float64 acceptance rule even on ill-conditioned
matrices, where both are far from the truth. Measured special cases (tests/ops/
test_solve.py): an exactly singular matrix makes ``linalg.inv``/``linalg.solve`` raise in
torch (``_linalg_check_errors`` on LAPACK's info) and the Keras model raise too (TF's
MatrixInverse/MatrixSolve refuse a zero pivot: InvalidArgumentError), so the check node is
dropped; ``det`` is 0 (-0.0 alike), ``slogdet`` (0, -inf); NaN and inf propagate alike,
except ``slogdet``'s sign of a NaN matrix (torch 0: the sign of a NaN pivot; TF NaN, put
right). ``inv_ex``/``solve_ex``'s ``info`` is 0 wherever the Keras model returns: LAPACK's
info is the first exactly-zero pivot, and on such a matrix the Keras model raises where
torch returns inf/NaN and a positive info (TF's LU kernels have no non-raising mode).
Their LU and pivots outputs are refused (``linalg.lu_factor`` converts: ops/lu.py). TFLite has no builtin for any of these: the
export refuses, naming the torch op.
"""

from __future__ import annotations

import operator

import keras
import torch

from crossport.layout import after_reduce, canonical
from crossport.to_keras.ops.elementwise import isnan
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register

aten = torch.ops.aten
ops = keras.ops


def _used_outputs(node) -> set[int]:
    """The output indices something reads, the singular-matrix check excepted."""
    return {user.args[1] for user in node.users if user.target is operator.getitem
            and any(u.target is not aten._linalg_check_errors.default for u in user.users)}


def _only(*allowed: int, names: tuple[str, ...]):
    """A ``supports`` predicate: float32/float64 matrices, only outputs ``allowed`` read
    (another is named in the refusal)."""

    def supports(node, A, **_):
        dtype = A.meta["val"].dtype
        if dtype not in (torch.float32, torch.float64):
            return (f"{node.target.__name__.split('.')[0]} of {dtype} (converted for float32 "
                    "and float64 matrices)")
        extra = sorted(_used_outputs(node) - set(allowed))
        if extra:
            return (f"its {', '.join(names[i] for i in extra)} output(s) are used: TF's "
                    "kernel does not return LAPACK's LU factors and pivots; only "
                    f"{', '.join(names[i] for i in allowed)} converts (torch.linalg.lu_factor "
                    "gives the factors and pivots, up to 16x16)")
        return None
    return supports


def _matrices(ctx, A):
    return ctx.canonical(as_value(ctx, A))


@register(aten.linalg_inv_ex.default, policy=Policy.CUSTOM,
          supports=_only(0, 1, names=("inverse", "info")), dynamic=True)
def aten_linalg_inv_ex_default(ctx, A, check_errors=False):
    """linalg_inv_ex(Tensor A, *, bool check_errors=False) -> (Tensor inverse, Tensor info)

    torch.linalg.inv and torch.inverse capture as this plus ``_linalg_check_errors``.
    """
    a = _matrices(ctx, A)
    inverse = ops.inv(a)
    rank = len(ctx.out_shape)
    ctx.out_layout = (canonical(rank), canonical(rank - 2))
    return inverse, _no_error(ctx, a, inverse, 1)


def _no_error(ctx, a, result, index: int):
    """LAPACK's info, 0 per matrix of ``a``'s batch, if output ``index`` is read: a matrix
    torch reports singular (info > 0) makes the Keras model raise instead.

    The 0 is computed from ``result`` (an always-false test of its sum, which no graph
    optimizer folds away): read alone, info must still run the kernel that raises."""
    if index not in _used_outputs(ctx.node):
        return None
    total = ops.sum(result)
    never = ops.cast(ops.logical_and(isnan(total), ops.logical_not(isnan(total))), "int32")
    return ops.zeros_like(a[..., 0, 0], dtype="int32") + never


def _transposed(x):
    rank = len(x.shape)
    return ops.transpose(x, list(range(rank - 2)) + [rank - 1, rank - 2])


@register(aten._linalg_solve_ex.default, policy=Policy.CUSTOM,
          supports=_only(0, 3, names=("result", "LU", "pivots", "info")), dynamic=True)
def aten__linalg_solve_ex_default(ctx, A, B, left=True, check_errors=False):
    """_linalg_solve_ex(Tensor A, Tensor B, *, bool left=True, bool check_errors=False) -> (Tensor result, Tensor LU, Tensor pivots, Tensor info)

    ``B`` is a batch of vectors when it is 1-D or ``A``'s shape without the last dim
    (torch's rule); batch dims broadcast (a multiplication by ones, exact); ``left=False``
    solves ``X A = B`` as ``(A^T X^T = B^T)^T``.
    """
    a_shape, b_value = tuple(A.shape), as_value(ctx, B)
    a, b = _matrices(ctx, A), ctx.canonical(b_value)
    a_unbroadcast = a  # info has A's batch dims: torch factors A before broadcasting
    vector = b_value.rank == 1 or (b_value.rank == len(a_shape) - 1
                                   and tuple(b_value.shape) == a_shape[:-1])
    if vector:
        b = ops.expand_dims(b, -1)
    if not left:
        a, b = _transposed(a), _transposed(b)
    a = a * ops.ones_like(b[..., :1, :1])  # the batch dims broadcast both ways
    b = b * ops.ones_like(a[..., :1, :1])
    x = ops.solve(a, b)
    if not left:
        x = _transposed(x)
    if vector:  # [..., 0]: broadcast against run-time batch dims, Keras loses the 1
        x = x[..., 0]
    rank = len(ctx.out_shape)
    ctx.out_layout = (canonical(rank), None, None, canonical(len(a_shape) - 2))
    return x, None, None, _no_error(ctx, a_unbroadcast, x, 3)


@register(aten._linalg_det.default, policy=Policy.CUSTOM,
          supports=_only(0, names=("result", "LU", "pivots")), dynamic=True)
def aten__linalg_det_default(ctx, A):
    """_linalg_det(Tensor A) -> (Tensor result, Tensor LU, Tensor pivots)"""
    rank = len(A.shape)
    ctx.out_layout = (after_reduce(canonical(rank), [-2, -1], False), None, None)
    return ops.det(_matrices(ctx, A)), None, None


@register(aten._linalg_slogdet.default, policy=Policy.CUSTOM,
          supports=_only(0, 1, names=("sign", "logabsdet", "LU", "pivots")), dynamic=True)
def aten__linalg_slogdet_default(ctx, A):
    """_linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet, Tensor LU, Tensor pivots)

    torch's sign is the product of its pivots' signs, 0 for a NaN pivot (TF's is NaN).
    torch.logdet captures as this plus a ``where``.
    """
    sign, logabsdet = ops.slogdet(_matrices(ctx, A))
    sign = ops.where(isnan(sign), ops.zeros_like(sign), sign)
    layout = after_reduce(canonical(len(A.shape)), [-2, -1], False)
    ctx.out_layout = (layout, layout, None, None)
    return sign, logabsdet, None, None


@register(aten._linalg_check_errors.default, policy=Policy.CUSTOM, dynamic=True)
def aten__linalg_check_errors_default(ctx, info, api_name, is_matrix):
    """_linalg_check_errors(Tensor info, str api_name, *, bool is_matrix) -> ()

    torch.linalg.inv/solve raise on an exactly singular matrix; so do TF's MatrixInverse
    and MatrixSolve in the Keras model (a zero pivot): nothing to add to the graph.
    """
    return None
