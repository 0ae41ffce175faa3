"""Vector and matrix norms: dims remapped through the layout like every reduction.

``torch.norm``, ``F.normalize`` and ``linalg.matrix_norm`` ('fro', 1, -1, inf, -inf) all
reach ``linalg_vector_norm`` after capture; ``matrix_norm`` 'nuc'/2/-2 and ``svdvals``
reach ``_linalg_svd``, whose singular values (unique, unlike the singular vectors) convert.
"""

from __future__ import annotations

import math
import operator

import keras
import torch

from crossport.layout import after_reduce, canonical, physical_axes
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
