"""Vector and matrix norms (dims remapped through the layout like every reduction) and
pairwise distances (cdist).

``torch.norm``, ``F.normalize`` and ``linalg.matrix_norm`` ('fro', 1, -1, inf, -inf) all
reach ``linalg_vector_norm`` after capture; ``matrix_norm`` 'nuc'/2/-2 and ``svdvals``
reach ``_linalg_svd``, whose singular values (unique, unlike the singular vectors) convert.
"""

from __future__ import annotations

import math
import operator

import keras
import numpy as np
import torch

from crossport.layout import after_reduce, canonical, normalize_dims, physical_axes
from crossport.to_keras.dynamic_dims import static_dims
from crossport.to_keras.ops.elementwise import is_infinite
from crossport.to_keras.ops.reduce import _reduce, nan_max, nan_min
from crossport.to_keras.ops.shape import _harmonised, as_value
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.scalars import promoted
from crossport.to_keras.values import TensorValue, concrete, keras_dtype

aten = torch.ops.aten
ops = keras.ops


def _norm_fn(order: float):
    """``fn(x, axis, keepdims)`` computing torch's ``ord`` norm of ``x`` over ``axis``."""
    if order == 2:
        return lambda x, axis, keepdims: ops.sqrt(ops.sum(ops.square(x), axis, keepdims))
    if order == 1:
        return lambda x, axis, keepdims: ops.sum(ops.abs(x), axis, keepdims)
    if order == math.inf:
        return lambda x, axis, keepdims: nan_max(ops.abs(x), axis, keepdims)
    if order == -math.inf:
        return lambda x, axis, keepdims: nan_min(ops.abs(x), axis, keepdims)
    if order == 0:  # the number of non-zeros, as a float
        return lambda x, axis, keepdims: ops.sum(
            ops.cast(ops.not_equal(x, 0), x.dtype), axis, keepdims)
    # |x|^p summed, then the 1/p-th power (p < 0: a zero entry gives inf, the norm 0)
    return lambda x, axis, keepdims: ops.power(
        ops.sum(ops.power(ops.abs(x), order), axis, keepdims), 1.0 / order)


@register(aten.linalg_vector_norm.default, policy=Policy.CUSTOM, dynamic=True)
def aten_linalg_vector_norm_default(ctx, self, ord=2, dim=None, keepdim=False, dtype=None):
    """linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor

    ord 0 counts non-zeros, inf/-inf are max/min of |x|, other p (fractional, negative)
    are ``sum(|x|^p)^(1/p)``; ``dtype`` casts the input first, as torch does.
    """
    value = as_value(ctx, self)
    want = keras_dtype(ctx.out_dtype)
    x = value.tensor if value.tensor.dtype == want else ops.cast(value.tensor, want)
    value = TensorValue(x, value.layout, value.shape, ctx.out_dtype)
    return _reduce(ctx, value, dim, keepdim, _norm_fn(float(ord)))


@register(aten.dist.default, policy=Policy.CUSTOM, dynamic=True)
def aten_dist_default(ctx, self, other, p=2):
    """dist(Tensor self, Tensor other, Scalar p=2) -> Tensor

    The ``p``-norm of ``self - other`` (broadcast) over every element, as torch computes it
    (``linalg.vector_norm`` of the difference, equal bit for bit in float32 on torch).
    Operands of one rank are subtracted in a shared layout (a conv output stays
    channels-last: the sum over every element does not see the order).
    """
    a, b = as_value(ctx, self), as_value(ctx, other)
    if a.rank == b.rank:
        (x, y), _layout = _harmonised(ctx, [a, b])
    else:
        x, y = ctx.canonical(a), ctx.canonical(b)
    x, y = promoted(ctx, x, y)
    ctx.out_layout = canonical(0)
    return _norm_fn(float(p))(ops.subtract(x, y), axis=None, keepdims=False)


def _svd_supports(node: torch.fx.Node) -> str | None:
    """Only the singular values may be used: U and Vh are unique only up to signs."""
    for user in node.users:
        if user.target is not operator.getitem or user.args[1] != 1:
            return ("the singular vectors U/Vh are used: they are unique only up to sign "
                    "(and rotation for repeated singular values), so TF's need not match "
                    "torch's; only the singular values (svdvals, matrix_norm 'nuc'/2) convert")
    return None


@register(aten._linalg_svd.default, policy=Policy.CUSTOM, supports=_svd_supports,
          dynamic=True)
def aten__linalg_svd_default(ctx, A, full_matrices=False, compute_uv=True, driver=None):
    """_linalg_svd(Tensor A, bool full_matrices=False, bool compute_uv=True, *, str? driver=None) -> (Tensor U, Tensor S, Tensor Vh)

    Only S is built (``supports`` rejects graphs that read U or Vh). The singular values
    of a matrix and of its transpose agree, so a layout holding the two matrix dims last
    in either order is used as it is.
    """
    value = ctx.plain(as_value(ctx, A))
    rank, layout = value.rank, value.layout
    if sorted(physical_axes(layout, (-2, -1))) != [rank - 2, rank - 1]:
        layout = canonical(rank)  # the matrix dims are not the last two held axes
    x = ctx.to_layout(value, layout)
    if any(ctx.is_dynamic(d) for d in value.shape[-2:]):  # ops.svd needs static matrices
        from crossport.layers.linalg import SingularValues

        singular = SingularValues(name=ctx.name("svdvals"))(x)
    else:
        singular = ops.svd(x, full_matrices=False, compute_uv=False)
    singular_layout = after_reduce(layout, [-1], keepdim=False)  # S: [..., min(m, n)]
    ctx.out_layout = (canonical(rank), singular_layout, canonical(rank))
    return None, singular, None


def _diagonal_dims(node: torch.fx.Node) -> tuple[int, int]:
    args = list(node.args) + [None] * 4
    dim1 = node.kwargs.get("dim1", args[2] if args[2] is not None else 0)
    dim2 = node.kwargs.get("dim2", args[3] if args[3] is not None else 1)
    return dim1, dim2


@register(aten.diagonal.default, policy=Policy.CUSTOM,
          dynamic=static_dims("self", _diagonal_dims, "diagonal's gather indices"))
def aten_diagonal_default(ctx, self, offset=0, dim1=0, dim2=1):
    """diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)

    The two dims moved last and merged, then one GATHER of the elements ``(i, i + offset)``
    (TF's MatrixDiagPart has no TFLite builtin); the diagonal is the last dim, as in torch.
    diag of a matrix and trace capture as this (and a sum).
    """
    value = as_value(ctx, self)
    rank = value.rank
    dim1, dim2 = normalize_dims((dim1, dim2), rank)
    rest = [d for d in range(rank) if d not in (dim1, dim2)]
    value = ctx.plain(value)
    order = list(physical_axes(value.layout, rest + [dim1, dim2]))  # one transpose at most
    x = value.tensor
    if order != list(range(rank)):
        x = ops.transpose(x, order)
    n, m = int(value.shape[dim1]), int(value.shape[dim2])
    start_row, start_col = max(-offset, 0), max(offset, 0)
    length = max(0, min(n - start_row, m - start_col))
    flat = ctx.reshape(x, [value.shape[d] for d in rest] + [n * m])
    index = np.array([(start_row + i) * m + start_col + i for i in range(length)], "int32")
    ctx.out_layout = canonical(rank - 1)
    return ops.take(flat, index, axis=-1)


def _uses_matmul(p: float, compute_mode, rows: tuple[int, int]) -> bool:
    """torch's cdist_impl: p = 2 takes the matmul expansion when asked to (mode 1) or, by
    default, when either input has more than 25 rows."""
    return p == 2 and (compute_mode == 1 or (compute_mode in (None, 0) and max(rows) > 25))


def _cdist_supports(node, x1, x2, p, compute_mode=None):
    # the example's sizes (hints): int() of a dynamic size would specialise it in torch's
    # shape environment and hide it from the dynamic-dims check
    rows = (concrete(x1.meta["val"].shape[-2]), concrete(x2.meta["val"].shape[-2]))
    if _uses_matmul(p, compute_mode, rows):
        return ("_cdist_forward with p=2 by the matmul expansion (torch.cdist decomposes into "
                "it before this op; calling the op directly is not converted): use "
                "torch.cdist")
    if p < 0:
        return f"cdist with p={p} (torch takes p >= 0)"
    return None


def _cdist_dynamic(node, x1, x2, p, compute_mode=None):
    """p = 2 by default picks torch's formula by the row counts: those must be static."""
    if p != 2 or compute_mode not in (None, 0):
        return None
    for argument in ("x1", "x2"):
        reason = static_dims(argument, lambda n: [-2], "cdist's choice of formula (p=2 "
                             "switches to a matmul past 25 rows)")(node)
        if reason:
            return reason
    return None


@register(aten._cdist_forward.default, policy=Policy.CANONICAL, supports=_cdist_supports,
          dynamic=_cdist_dynamic)
def aten__cdist_forward_default(ctx, x1, x2, p, compute_mode=None):
    """_cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor

    torch's direct kernel (DistanceOpsKernel.cpp) on ``|x1[i] - x2[j]|`` over the last dim,
    batch dims broadcast: p = 0 counts the non-zero differences (NaN stays NaN), 1 sums
    them, 2 is ``sqrt(sum d²)``, inf is their max with NaN skipped (torch's running max
    from 0 ignores it; 0 for no features), other p ``(sum d^p)^(1/p)``. The matmul form
    torch uses for p = 2 past 25 rows (or compute_mode='use_mm_for_euclid_dist') is
    decomposed before this op (pow, sum, cat, matmul, clamp_min, sqrt).
    """
    x1, x2 = (ops.convert_to_tensor(v) if isinstance(v, np.ndarray) else v for v in (x1, x2))
    d = ops.abs(ops.expand_dims(x1, -2) - ops.expand_dims(x2, -3))  # [..., r1, r2, m]
    return _distance(d, p, _running_max_from_zero)


def _running_max_from_zero(d):
    """cdist's inf-norm: NaN skipped, 0 for no features (torch's running max from 0)."""
    kept = ops.where(ops.not_equal(d, d), ops.zeros_like(d), d)
    zero = [(0, 0)] * (len(d.shape) - 1) + [(0, 1)]
    return ops.max(ops.pad(kept, zero), axis=-1)


def _distance(d, p: float, inf_norm):
    """The p-"norm" over the last dim of absolute differences ``d`` as torch's distance
    kernels: p = 0 counts the non-zero ones (NaN stays NaN), 1 sums them, 2 is
    ``sqrt(sum d²)``, inf is ``inf_norm(d)`` (cdist and pdist differ on NaN), others
    ``(sum d^p)^(1/p)``."""
    if p == 0:
        return ops.sum(ops.where(ops.not_equal(d, d), d, ops.cast(ops.not_equal(d, 0.0),
                                                                   d.dtype)), axis=-1)
    if p == 1:
        return ops.sum(d, axis=-1)
    if p == 2:
        return ops.sqrt(ops.sum(ops.square(d), axis=-1))
    if math.isinf(p):
        return inf_norm(d)
    return _power(ops.sum(_power(d, p), axis=-1), 1.0 / p)


def _power(x, exponent: float):
    """``x ** exponent`` for ``x >= 0`` with IEEE overflow: LiteRT's POW gives the largest
    finite float for inf and for an overflowing power (cdist p=3 of 1e30 came out 7e12 in a
    .tflite file); that value is doubled to inf (no inf constant, which the TFLite converter
    would saturate the same way)."""
    y = ops.where(is_infinite(x), x, ops.power(x, exponent))
    largest = np.asarray(np.finfo(keras.backend.standardize_dtype(y.dtype)).max, y.dtype)
    return ops.where(ops.greater_equal(y, largest), y * 2.0, y)


def _pdist_supports(node, self, p=2.0):
    if p < 0:
        return f"pdist with p={p} (torch takes p >= 0)"
    return None


@register(aten._pdist_forward.default, policy=Policy.CANONICAL, supports=_pdist_supports)
def aten__pdist_forward_default(ctx, self, p=2.0):
    """_pdist_forward(Tensor self, float p=2.) -> Tensor

    ``F.pdist``: the distance of rows ``i < j`` of ``[n, m]`` in ``triu_indices`` order
    (``n(n-1)/2`` of them, static: ``n`` must be), as torch's kernel: p = 0 counts the
    non-zero differences, 1 sums them, 2 is ``sqrt(sum d²)``, inf their max, others
    ``(sum d^p)^(1/p)``; a NaN difference (NaN, or inf - inf) gives NaN for every p
    (measured on 912 random rows with NaN and inf: no other rule), no features give 0.
    """
    x = ops.convert_to_tensor(self) if isinstance(self, np.ndarray) else self
    n, m = (int(s) for s in x.shape)
    first, second = np.triu_indices(n, 1)
    d = ops.abs(ops.take(x, first.astype("int32"), axis=0)
                - ops.take(x, second.astype("int32"), axis=0))
    if m == 0:
        return ops.sum(d, axis=-1)  # zeros
    return _distance(d, p, lambda d: nan_max(d, -1, False))
