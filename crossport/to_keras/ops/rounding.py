"""round(x, decimals=n) as ATen computes it (``round_decimals_kernel``).

torch: ``ten = float(10 ** |n|)`` in the op math type (float32 for float32 and half,
float64 for float64); ``nearbyint(x * ten) / ten`` for ``n >= 0``, ``nearbyint(x / ten) *
ten`` for ``n < 0``, half to even. The same steps in the same precision give torch's
values bit for bit, overflow included: ``round(3e38, 2)`` is inf in torch (``3e38 * 100``
overflows), and so it is here. Where ``10 ** |n|`` itself overflows the type (float32:
``|n| >= 39``) torch returns NaN for every element; that is refused (an infinite constant
is saturated to the largest float by the TFLite converter, docs/parity.md).
"""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.to_keras.ops.elementwise import keras_multiply
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.scalars import in_float32

aten = torch.ops.aten
ops = keras.ops


def _opmath(dtype: torch.dtype) -> str:
    return "float64" if dtype == torch.float64 else "float32"


def _scale(dtype: torch.dtype, decimals: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(10.0 ** abs(decimals), dtype=_opmath(dtype))


def _finite_scale(node, self, decimals=0, **_):
    if not np.isfinite(_scale(node.meta["val"].dtype, decimals)):
        return (f"round(decimals={decimals}): 10**{abs(decimals)} overflows "
                f"{_opmath(node.meta['val'].dtype)}, so torch returns NaN for every element; "
                "round to fewer decimals")
    return None


def round_half_even_signed(x):
    """Half to even, a zero result with ``x``'s sign (``nearbyint(-0.4)`` is -0.0: TF's
    Round keeps it, LiteRT's ROUND gave +0.0)."""
    r = ops.round(x)
    return ops.where(ops.equal(r, 0), keras_multiply(x, 0.0), r)


@register(aten.round.decimals, policy=Policy.AGNOSTIC, supports=_finite_scale, dynamic=True)
def aten_round_decimals(ctx, self, decimals=0):
    """round.decimals(Tensor self, *, int decimals) -> Tensor: ATen's steps in its op math
    type (float32 for half), so an overflowing ``x * 10**n`` is inf as in torch."""
    ten = _scale(ctx.out_dtype, decimals)

    def rounded(x):
        if decimals >= 0:
            return ops.divide(round_half_even_signed(keras_multiply(x, ten)), ten)
        return keras_multiply(round_half_even_signed(ops.divide(x, ten)), ten)
    return in_float32(self, rounded)
