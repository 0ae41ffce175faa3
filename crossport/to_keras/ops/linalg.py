"""Vector and matrix norms: dims remapped through the layout like every reduction.

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
from crossport.to_keras.ops.reduce import _reduce, nan_max, nan_min
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.values import TensorValue, keras_dtype

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
