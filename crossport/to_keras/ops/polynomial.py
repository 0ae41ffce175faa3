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
from crossport.to_keras.ops.special import _floats_only
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.scalars import float_operand
from crossport.to_keras.values import keras_dtype

aten = torch.ops.aten
ops = keras.ops


def _operands(ctx, x, n):
    """``x`` and ``n`` as tensors of the result dtype (torch computes in the promoted
    dtype); a Python number is filled in the other operand's shape."""
    want = keras_dtype(ctx.out_dtype)
    like = n if isinstance(x, (int, float, bool)) else x
    return [ops.full_like(like, float(v), dtype=want) if isinstance(v, (int, float, bool))
            else ops.cast(float_operand(v, want), want) for v in (x, n)]


def _polynomial(ctx, kind: str, x, n):
    x, n = _operands(ctx, x, n)
    layer = OrthogonalPolynomial(kind, dtype=keras_dtype(ctx.out_dtype), name=ctx.name())
    return layer([x, n])


# kind -> what the docs add to torch's schema line (ATen's special cases)
_KINDS = {
    "chebyshev_polynomial_t": "T_n(x); cos(n acos x) for |x| < 1 past n = 6.",
    "chebyshev_polynomial_u": "U_n(x); its trigonometric form for |x| < 1 past n = 8.",
    "chebyshev_polynomial_v": "V_n(x).",
    "chebyshev_polynomial_w": "W_n(x).",
    "shifted_chebyshev_polynomial_t": "T_n(2x - 1).",
    "shifted_chebyshev_polynomial_u": "U_n(2x - 1).",
    "shifted_chebyshev_polynomial_v": "V_n(2x - 1).",
    "shifted_chebyshev_polynomial_w": "W_n(2x - 1).",
    "hermite_polynomial_h": "the physicists' H_n(x); NaN past n = 128 (float32) / 512 "
                            "(float64), as ATen.",
    "hermite_polynomial_he": "the probabilists' He_n(x); NaN past n = 128 (float32) / 512 "
                             "(float64).",
    "laguerre_polynomial_l": "L_n(x), 1 at x = 0.",
    "legendre_polynomial_p": "P_n(x), +-1 at x = +-1.",
}


def _register_kind(kind: str, note: str) -> None:
    """One converter for the three overloads (tensor x and n, a Python x, a Python n)."""
    packet = getattr(aten, f"special_{kind}")

    def convert(ctx, x, n):
        return _polynomial(ctx, kind, x, n)

    convert.__name__ = convert.__qualname__ = f"aten_special_{kind}_default"
    convert.__doc__ = f"special_{kind}(Tensor x, Tensor n) -> Tensor: {note}"
    register(packet.default, packet.x_scalar, packet.n_scalar, policy=Policy.AGNOSTIC,
             supports=_floats_only, dynamic=True)(convert)


for _kind, _note in _KINDS.items():
    _register_kind(_kind, _note)
