"""torch.special's orthogonal polynomials (Chebyshev T/U/V/W, shifted Chebyshev T/U/V/W,
Hermite H/He, Laguerre L, Legendre P; were "no converter") as ATen's kernels compute them:
:class:`crossport.layers.polynomial.OrthogonalPolynomial` (the degree read as ATen reads
it, its early returns in its order, the recurrence as one while loop, its FMA rounding).
Measured against torch 2.13 (tests/ops/test_polynomials.py): Hermite, Laguerre, Legendre
and the recurrences of the Chebyshev ones bit-equal in float32 and float64; the Chebyshev
closed forms (|x| < 1 past degree 4-8) within the trigonometric kernels' rounding, which
the degree amplifies (TF's sin/cos/atan2 against the C library's: both within ~2x of
torch float32's own distance from float64). The float32 model exports to TFLite.
"""

from __future__ import annotations

import keras
import torch

from crossport.layers.polynomial import OrthogonalPolynomial
from crossport.to_keras.ops.elementwise import _float_operand
from crossport.to_keras.ops.special import _floats_only
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.values import keras_dtype

aten = torch.ops.aten
ops = keras.ops


def _operands(ctx, x, n):
    """``x`` and ``n`` as tensors of the result dtype (torch computes in the promoted
    dtype); a Python number is filled in the other operand's shape."""
    want = keras_dtype(ctx.out_dtype)
    like = n if isinstance(x, (int, float, bool)) else x
    return [ops.full_like(like, float(v), dtype=want) if isinstance(v, (int, float, bool))
            else ops.cast(_float_operand(v, want), want) for v in (x, n)]


def _polynomial(ctx, kind: str, x, n):
    x, n = _operands(ctx, x, n)
    layer = OrthogonalPolynomial(kind, dtype=keras_dtype(ctx.out_dtype), name=ctx.name())
    return layer([x, n])


def _overloads(kind: str):
    packet = getattr(aten, f"special_{kind}")
    return packet.default, packet.x_scalar, packet.n_scalar


@register(*_overloads("chebyshev_polynomial_t"), policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_chebyshev_polynomial_t_default(ctx, x, n):
    """special_chebyshev_polynomial_t(Tensor x, Tensor n) -> Tensor: T_n(x); cos(n acos x)
    for |x| < 1 past n = 6."""
    return _polynomial(ctx, "chebyshev_polynomial_t", x, n)


@register(*_overloads("chebyshev_polynomial_u"), policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_chebyshev_polynomial_u_default(ctx, x, n):
    """special_chebyshev_polynomial_u(Tensor x, Tensor n) -> Tensor: U_n(x); its
    trigonometric form for |x| < 1 past n = 8."""
    return _polynomial(ctx, "chebyshev_polynomial_u", x, n)


@register(*_overloads("chebyshev_polynomial_v"), policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_chebyshev_polynomial_v_default(ctx, x, n):
    """special_chebyshev_polynomial_v(Tensor x, Tensor n) -> Tensor: V_n(x)."""
    return _polynomial(ctx, "chebyshev_polynomial_v", x, n)


@register(*_overloads("chebyshev_polynomial_w"), policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_chebyshev_polynomial_w_default(ctx, x, n):
    """special_chebyshev_polynomial_w(Tensor x, Tensor n) -> Tensor: W_n(x)."""
    return _polynomial(ctx, "chebyshev_polynomial_w", x, n)


@register(*_overloads("shifted_chebyshev_polynomial_t"), policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_shifted_chebyshev_polynomial_t_default(ctx, x, n):
    """special_shifted_chebyshev_polynomial_t(Tensor x, Tensor n) -> Tensor: T_n(2x - 1)."""
    return _polynomial(ctx, "shifted_chebyshev_polynomial_t", x, n)


@register(*_overloads("shifted_chebyshev_polynomial_u"), policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_shifted_chebyshev_polynomial_u_default(ctx, x, n):
    """special_shifted_chebyshev_polynomial_u(Tensor x, Tensor n) -> Tensor: U_n(2x - 1)."""
    return _polynomial(ctx, "shifted_chebyshev_polynomial_u", x, n)


@register(*_overloads("shifted_chebyshev_polynomial_v"), policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_shifted_chebyshev_polynomial_v_default(ctx, x, n):
    """special_shifted_chebyshev_polynomial_v(Tensor x, Tensor n) -> Tensor: V_n(2x - 1)."""
    return _polynomial(ctx, "shifted_chebyshev_polynomial_v", x, n)


@register(*_overloads("shifted_chebyshev_polynomial_w"), policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_shifted_chebyshev_polynomial_w_default(ctx, x, n):
    """special_shifted_chebyshev_polynomial_w(Tensor x, Tensor n) -> Tensor: W_n(2x - 1)."""
    return _polynomial(ctx, "shifted_chebyshev_polynomial_w", x, n)


@register(*_overloads("hermite_polynomial_h"), policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_hermite_polynomial_h_default(ctx, x, n):
    """special_hermite_polynomial_h(Tensor x, Tensor n) -> Tensor: the physicists' H_n(x);
    NaN past n = 128 (float32) / 512 (float64), as ATen."""
    return _polynomial(ctx, "hermite_polynomial_h", x, n)


@register(*_overloads("hermite_polynomial_he"), policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_hermite_polynomial_he_default(ctx, x, n):
    """special_hermite_polynomial_he(Tensor x, Tensor n) -> Tensor: the probabilists'
    He_n(x); NaN past n = 128 (float32) / 512 (float64)."""
    return _polynomial(ctx, "hermite_polynomial_he", x, n)


@register(*_overloads("laguerre_polynomial_l"), policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_laguerre_polynomial_l_default(ctx, x, n):
    """special_laguerre_polynomial_l(Tensor x, Tensor n) -> Tensor: L_n(x), 1 at x = 0."""
    return _polynomial(ctx, "laguerre_polynomial_l", x, n)


@register(*_overloads("legendre_polynomial_p"), policy=Policy.AGNOSTIC,
          supports=_floats_only, dynamic=True)
def aten_special_legendre_polynomial_p_default(ctx, x, n):
    """special_legendre_polynomial_p(Tensor x, Tensor n) -> Tensor: P_n(x), +-1 at x = +-1."""
    return _polynomial(ctx, "legendre_polynomial_p", x, n)
