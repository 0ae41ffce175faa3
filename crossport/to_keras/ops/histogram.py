"""torch.histc and torch.histogram: element counts in bins, binned exactly as ATen's CPU
kernel does.

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

torch.histogram searches its bin edges (``upper_bound``; histc interpolates only), so its
bins are comparisons with the edges themselves: torch's edges for a fixed range, or edges
given as a tensor. Over the data's own range the edges are a run-time linspace: refused.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import torch

from crossport.layout import canonical
from crossport.to_keras.dynamic_dims import static_dims
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


def _histogram_supports(node, self, bins=100, *, range=None, weight=None, density=False):
    dtype = self.meta["val"].dtype
    if dtype not in _NUMPY:
        return f"histogram of {dtype} (float16, float32 and float64 convert)"
    if range is None:
        return ("histogram over the data's own range (range=None: the bin edges are "
                "torch's linspace between each input's minimum and maximum, computed at "
                "run time); give range=(lo, hi), or the bin edges as a tensor")
    return None


def _bin_edges_of(bins: int, range, dtype: torch.dtype) -> np.ndarray:
    """torch's own bin edges for a fixed range (lo == hi widened as torch does), from an
    empty input: they do not depend on the data."""
    edges = torch.histogram(torch.zeros(0, dtype=dtype), bins, range=range)[1]
    return edges.numpy()


def _upper_bound(x, edges, count: int):
    """``std::upper_bound(edges, edges + count, x)`` for every element of ``x`` ([N]): its
    binary search step by step (``count.bit_length()`` gathers), so that edges out of order
    (torch does not check) land where torch's search puts them too."""
    first = ops.zeros_like(x, dtype="int32")
    length = ops.zeros_like(x, dtype="int32") + count
    for _ in range(count.bit_length()):
        half = ops.floor_divide(length, 2)
        middle = first + half
        right = ops.logical_and(ops.greater(length, 0), ops.logical_not(
            ops.less(x, ops.take(edges, ops.minimum(middle, count - 1)))))
        first = ops.where(right, middle + 1, first)
        length = ops.where(right, length - half - 1, half)
    return first


def _histogram(ctx, self, edges, weight, density: bool):
    """``(hist, bin_edges)`` as ATen's histogram kernel: an element in ``[edges[0],
    edges[-1]]`` (NaN is not) goes to bin ``upper_bound(edges, x) - 1``, the right edge to
    the last bin (for bin_ct torch interpolates first, then searches next to it: the same
    bin on its sorted edges); ``weight`` sums instead of counting; ``density`` divides by
    the total and by each bin's width, as torch does."""
    value = as_value(ctx, self)
    x = ops.reshape(ctx.canonical(value), (-1,))  # torch order: weights pair up by position
    count = int(edges.shape[0])
    dtype = keras_dtype(value.dtype)
    if isinstance(edges, np.ndarray):
        edges = ops.convert_to_tensor(edges, dtype=dtype)
    lowest, highest = edges[(slice(0, 1),)], edges[(slice(count - 1, count),)]
    position = _upper_bound(x, edges, count) - 1
    position = ops.where(ops.equal(position, count - 1), position - 1, position)
    inside = ops.logical_and(ops.greater_equal(x, lowest), ops.less_equal(x, highest))
    in_bin = ops.logical_and(ops.expand_dims(inside, -1), ops.equal(
        ops.expand_dims(position, -1), np.arange(count - 1, dtype=np.int32)))
    if weight is None:
        hist = ops.cast(ops.sum(ops.cast(in_bin, "int32"), axis=0), dtype)
    else:
        w = ops.reshape(ctx.canonical(as_value(ctx, weight)), (-1, 1))
        hist = ops.sum(ops.where(in_bin, w, ops.zeros_like(w)), axis=0)
    if density:
        widths = edges[(slice(1, count),)] - edges[(slice(0, count - 1),)]
        hist = ops.divide(ops.divide(hist, ops.sum(hist)), widths)
    ctx.out_layout = (canonical(1), canonical(1))
    anchor = ops.sum(ops.zeros_like(x[(slice(0, 1),)]), keepdims=True)  # constant edges: a Keras output
    return hist, ops.add(edges, ops.reshape(anchor, (1,)))


@register(aten.histogram.bin_ct, policy=Policy.CUSTOM, supports=_histogram_supports,
          dynamic=True)
def aten_histogram_bin_ct(ctx, self, bins=100, *, range=None, weight=None, density=False):
    """histogram.bin_ct(Tensor self, int bins=100, *, float[]? range=None, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor bin_edges)

    ``bins`` equal bins over a fixed ``range``: torch's edges (a constant) and the
    comparisons of ``_histogram``; a range from the data is refused (_histogram_supports).
    """
    edges = _bin_edges_of(bins, tuple(range), ctx.node.args[0].meta["val"].dtype)
    return _histogram(ctx, self, edges, weight, density)


def _bins_tensor_supports(node, self, bins, *, weight=None, density=False):
    dtype = self.meta["val"].dtype
    if dtype not in _NUMPY:
        return f"histogram of {dtype} (float16, float32 and float64 convert)"
    return None


@register(aten.histogram.bins_tensor, policy=Policy.CUSTOM, supports=_bins_tensor_supports,
          dynamic=static_dims("bins", lambda node: [0], "histogram's bin count"))
def aten_histogram_bins_tensor(ctx, self, bins, *, weight=None, density=False):
    """histogram.bins_tensor(Tensor self, Tensor bins, *, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor bin_edges)

    Given edges (a constant or computed at run time), as ``_histogram`` bins them.
    """
    if not isinstance(bins, np.ndarray):
        bins = ctx.canonical(as_value(ctx, bins))
    return _histogram(ctx, self, bins, weight, density)
