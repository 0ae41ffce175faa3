"""Run-time resampling taps: ``crossport.layers.resize``'s numpy rules as ``keras.ops``.

When a spatial size is only known at run time (a dynamic H/W), the source indices and
weights of torch's ``nearest`` / ``nearest-exact`` / linear / cubic modes are computed in the
graph with the same float32 arithmetic, in the same order, as the build-time numpy versions
(``nearest_indices``, ``linear_taps``), including torch's special cases (2D nearest's
``out == in`` and ``out == 2*in``, linear modes copying an axis whose size is unchanged).
torch's fused multiply-add source index is a float64 product rounded once to float32, as in
numpy. Every function takes ``size`` / ``out`` as ints or int scalar tensors.
"""

from __future__ import annotations

from typing import Any

from keras import ops

_CUBIC_A = -0.75


def output_size(size: Any, scale_factor: float) -> Any:
    """torch's ``floor(in * scale_factor)`` (a double product) as an int32 scalar."""
    return ops.cast(ops.floor(ops.cast(size, "float64") * float(scale_factor)), "int32")


def _f32(value: Any) -> Any:
    return ops.cast(value, "float32")


def _scale(size: Any, out: Any, scale_factor: float | None, align_corners: bool) -> Any:
    """``area_pixel_compute_scale`` in float32 (see ``resize._scale``)."""
    if align_corners:
        ratio = _f32(size - 1) / _f32(ops.maximum(out - 1, 1))
        return ops.where(out > 1, ratio, ops.zeros_like(ratio))
    if scale_factor is not None and scale_factor > 0:
        return _f32(1.0 / scale_factor)
    return _f32(size) / _f32(out)


def _positions(out: Any) -> Any:
    return ops.arange(0, out, dtype="int32")


def _fma_source_index(scale: Any, out: Any) -> Any:
    """``scale * (i + 0.5) - 0.5`` rounded once to float32 (torch's fused multiply-add)."""
    i = ops.cast(_positions(out), "float64")
    return _f32(ops.cast(scale, "float64") * (i + 0.5) - 0.5)


def nearest_indices(size: Any, out: Any, scale_factor: float | None, exact: bool,
                    n_spatial: int) -> Any:
    """Source index of every output position (``resize.nearest_indices`` at run time)."""
    i = _positions(out)
    scale = _scale(size, out, scale_factor, False)
    floor_scaled = ops.cast(ops.floor(_f32(i) * scale), "int32")
    if n_spatial == 2:
        if exact:
            src = ops.cast(ops.floor(_f32((ops.cast(i, "float64") + 0.5)
                                          * ops.cast(scale, "float64"))), "int32")
        else:
            src = ops.where(ops.equal(out, size), i,
                            ops.where(ops.equal(out, 2 * size), i // 2, floor_scaled))
    elif exact:
        real = ops.maximum(_fma_source_index(scale, out), 0.0)
        src = ops.cast(ops.floor(_f32(ops.cast(real, "float64") + 0.5)), "int32")
    else:
        src = floor_scaled
    return ops.minimum(src, size - 1)


def linear_taps(size: Any, out: Any, scale_factor: float | None, align_corners: bool,
                cubic: bool) -> tuple[list[Any], list[Any]]:
    """Per tap: source indices ``[out]`` and float32 weights ``[out]`` (``resize.linear_taps``)."""
    scale = _scale(size, out, scale_factor, align_corners)
    if align_corners:
        src = scale * _f32(_positions(out))
    else:
        src = _fma_source_index(scale, out)
        if not cubic:
            src = ops.maximum(src, 0.0)
    index = ops.minimum(ops.cast(ops.floor(src), "int32"), size - 1)
    t = ops.clip(src - _f32(index), 0.0, 1.0)
    if not cubic:
        upper = index + ops.cast(index < size - 1, "int32")
        return [index, upper], [1.0 - t, t]
    a = _CUBIC_A

    def near(x):  # |x| <= 1, the numpy version's operation order
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    weights = [far(t + 1), near(t), near(1 - t), far(2 - t)]
    taps = [ops.clip(index + offset, 0, size - 1) for offset in (-1, 0, 1, 2)]
    return taps, weights


def _along(values: Any, axis: int, rank: int) -> Any:
    """``values [out]`` shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    shape = [1] * rank
    shape[axis] = -1
    return ops.reshape(values, shape)


def resample_axis(x: Any, axis: int, mode: str, size: Any, out: Any,
                  scale_factor: float | None, align_corners: bool,
                  out_from_scale: bool = False) -> Any:
    """Resample ``axis`` of channels-last ``x`` from ``size`` to ``out`` samples, torch's way.

    ``out_from_scale``: ``out`` is ``floor(size * scale_factor)``, which rules out
    ``out == size`` for factors below 1 or of 2 and more (no copy test needed).
    """
    rank = len(x.shape)
    if mode in ("nearest", "nearest-exact"):
        index = nearest_indices(size, out, scale_factor, mode == "nearest-exact", rank - 2)
        return ops.take(x, index, axis=axis)
    taps, weights = linear_taps(size, out, scale_factor, align_corners, mode == "bicubic")
    y = None
    for index, weight in zip(taps, weights):
        term = ops.take(x, index, axis=axis) * ops.cast(_along(weight, axis, rank), x.dtype)
        y = term if y is None else y + term
    if mode == "bicubic" or (out_from_scale and not _size_may_stay(scale_factor)):
        return y
    # torch copies an axis whose size is unchanged (no 0 * inf from a zero-weight tap)
    same = ops.take(x, ops.minimum(_positions(out), size - 1), axis=axis)
    return ops.where(ops.equal(out, size), same, y)


def _size_may_stay(scale_factor: float | None) -> bool:
    """Whether ``floor(size * scale_factor) == size`` is possible."""
    return scale_factor is None or 1.0 <= scale_factor < 2.0
