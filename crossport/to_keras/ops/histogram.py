"""torch.histc: element counts in equal-width bins, binned exactly as ATen's CPU kernel does.

ATen (``histogramdd_cpu_contiguous``, ``LINEAR_INTERPOLATION``) skips elements outside
``[lo, hi]`` and NaN, and puts ``x`` in bin ``trunc((x - lo) * bins / (hi - lo))``, each
step rounded in the input's dtype (``lo``/``hi`` are ``min``/``max`` in that dtype), the
last bin also taking ``hi``. Near a bin edge that rounding, not the real quotient, decides
the bin, and a TFLite converter turns a division by a constant into a multiplication by its
rounded reciprocal. So the converter finds, once and with the kernel's own arithmetic in
numpy, the smallest value of the dtype that lands in each bin (the function is monotonic),
and the model counts the elements at or above each of these starts: comparisons only,
exact in any runtime. transformers 5's mixture-of-experts routing counts tokens per
expert with it (``histc(expert_ids.float(), bins=E, min=0, max=E - 1)``).
"""

from __future__ import annotations

import math

import keras
import numpy as np
import torch

from crossport.layout import canonical
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.values import keras_dtype

aten = torch.ops.aten
ops = keras.ops

_NUMPY = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}
_KEYS = {np.float16: np.int16, np.float32: np.int32, np.float64: np.int64}


def _edges(bins: int, min: float, max: float, dtype: torch.dtype) -> tuple:
    """(lo, hi) as the kernel reads them: the ends of torch's ``linspace`` in ``dtype``."""
    edges = torch.linspace(float(min), float(max), bins + 1, dtype=dtype)
    return edges[0].item(), edges[-1].item()


def _histc_supports(node, self, bins=100, min=0, max=0):
    dtype = self.meta["val"].dtype
    if dtype not in _NUMPY:
        return f"histc of {dtype} (float16, float32 and float64 convert)"
    if not all(isinstance(v, (int, float)) for v in (bins, min, max)):
        return "histc with a bin count or range computed at run time"
    if bins < 1 or not math.isfinite(min) or not math.isfinite(max):
        return None  # torch raises on these; the check shows torch's own error
    if min == max:
        return ("histc over the data's own range (min == max: the bins follow each input's "
                "minimum and maximum); give min < max")
    lo, hi = _edges(bins, min, max, dtype)
    if not lo < hi:
        return f"histc with min and max equal in {dtype} ({min}, {max})"
    float_type = _NUMPY[dtype]
    with np.errstate(over="ignore"):
        span = (float_type(hi) - float_type(lo)) * float_type(bins)
    if not np.isfinite(span):  # the kernel's bin index is then inf cast to an integer
        return f"histc whose (max - min) * bins overflows {dtype}"
    return None


def _order_keys(values: np.ndarray, key_type) -> np.ndarray:
    """Integers in the order of the floats (-0.0 and 0.0 alike), as int64."""
    bits = values.view(key_type).astype(np.int64)
    magnitude = bits & np.int64(np.iinfo(key_type).max)
    return np.where(bits < 0, -magnitude, bits)


def _from_keys(keys: np.ndarray, float_type, key_type) -> np.ndarray:
    sign = np.int64(np.iinfo(key_type).min)
    bits = np.where(keys < 0, (-keys) | sign, keys).astype(key_type)
    return bits.view(float_type)


def bin_starts(bins: int, lo: float, hi: float, float_type) -> np.ndarray:
    """The smallest ``float_type`` value ATen puts in each bin (``lo`` for the first; a bin
    no value reaches starts where the next one does)."""
    key_type = _KEYS[float_type]
    lo_f, hi_f = float_type(lo), float_type(hi)
    width, scale = np.asarray(hi_f - lo_f), np.asarray(float_type(bins))

    def position(keys):
        x = _from_keys(keys, float_type, key_type)
        with np.errstate(over="ignore"):
            return np.trunc((((x - lo_f) * scale) / width)).astype(np.int64)

    wanted = np.arange(1, bins, dtype=np.int64)
    below = np.full(wanted.shape, _order_keys(np.asarray([lo_f]), key_type)[0])
    at_or_above = np.full(wanted.shape, _order_keys(np.asarray([hi_f]), key_type)[0])
    while np.any(below + 1 < at_or_above):  # below lands under the bin, at_or_above in it
        middle = below // 2 + at_or_above // 2 + (below % 2 + at_or_above % 2) // 2
        inside = position(middle) >= wanted
        at_or_above = np.where(inside, middle, at_or_above)
        below = np.where(inside, below, middle)
    starts = _from_keys(at_or_above, float_type, key_type)
    return np.concatenate([np.asarray([lo_f]), starts]).astype(float_type)


@register(aten.histc.default, policy=Policy.CUSTOM, supports=_histc_supports, dynamic=True)
def aten_histc_default(ctx, self, bins=100, min=0, max=0):
    """histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor

    Counts per bin from comparisons with each bin's first value and the next bin's (module
    docstring); NaN
    and values outside ``[min, max]`` are not counted; the counts in the input's dtype.
    """
    value = as_value(ctx, self)
    float_type = _NUMPY[value.dtype]
    lo, hi = _edges(bins, min, max, value.dtype)
    starts = bin_starts(bins, lo, hi, float_type)
    x = ops.reshape(value.tensor, (-1, 1))  # every element, in any layout
    inside = ops.logical_and(ops.greater_equal(x, float_type(lo)), ops.less_equal(x, float_type(hi)))
    last = np.arange(bins) == bins - 1  # the last bin runs to hi, inclusive (inside)
    before_next = ops.logical_or(ops.less(x, np.append(starts[1:], hi).astype(float_type)), last)
    in_bin = ops.logical_and(ops.logical_and(ops.greater_equal(x, starts), before_next), inside)
    counts = ops.sum(ops.cast(in_bin, "int32"), axis=0)
    ctx.out_layout = canonical(1)
    return ops.cast(counts, keras_dtype(value.dtype))
