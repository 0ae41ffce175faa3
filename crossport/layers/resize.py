"""``Interpolate``: ``torch.nn.functional.interpolate`` / ``nn.Upsample`` (pitfalls.md item 12).

Each spatial axis is resampled separably with gathers and weights computed *at build time*
in numpy, replicating torch's CPU index arithmetic (float32 scales, its rounding, its
special cases), so nearest modes pick exactly torch's source pixels and linear/cubic modes
use torch's taps and weights. Fast paths where a Keras op is provably the same: integer
nearest upscaling (a repeat, checked index by index) and half-pixel bilinear resize.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from crossport.errors import InputError
from crossport.layers import resize_runtime
from crossport.layers.base import (
    SpatialLayer,
    contract_axis,
    static_spatial,
    to_channels_first,
    to_channels_last,
)

MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")
_LINEAR_RANK = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
_CUBIC_A = -0.75
f32 = np.float32


def _scale(size: int, out: int, scale_factor: float | None, align_corners: bool) -> np.float32:
    """torch's ``area_pixel_compute_scale`` in float32 (``compute_scales_value`` without align)."""
    if align_corners:
        return f32(size - 1) / f32(out - 1) if out > 1 else f32(0)
    if scale_factor is not None and scale_factor > 0:
        return f32(1.0 / scale_factor)  # 1/scale in double, then cast, as torch
    return f32(size) / f32(out)


def _fma_source_index(scale: np.float32, out: int) -> np.ndarray:
    """torch's ``scale * (i + 0.5) - 0.5`` in float32 as its CPU build computes it: one fused
    multiply-add (the exact product minus 0.5, rounded once). Measured: it decides ties."""
    i = np.arange(out)
    return (np.float64(scale) * (i + 0.5) - 0.5).astype(f32)


def nearest_indices(
    size: int, out: int, scale_factor: float | None, exact: bool, n_spatial: int = 2
) -> np.ndarray:
    """Source index of every output position for torch's ``nearest`` / ``nearest-exact``.

    torch 2.13's CPU kernels differ by rank (each rule below was checked index by index
    against torch): the 2D kernel uses ``nearest_idx`` (with its ``out == in`` and
    ``out == 2*in`` special cases, which matter with a scale_factor) and
    ``floorf((i + 0.5) * scale)``; the 1D/3D kernels use ``floorf(i * scale)`` and
    ``floorf(max(fma(scale, i + 0.5, -0.5), 0) + 0.5)``.
    """
    i = np.arange(out)
    scale = _scale(size, out, scale_factor, False)
    if n_spatial == 2:
        if exact:  # a double product rounded to float, then floored
            src = np.floor(((i + 0.5) * np.float64(scale)).astype(f32))
        elif out == size:
            src = i
        elif out == 2 * size:
            src = i >> 1
        else:
            src = np.floor(i.astype(f32) * scale)
    elif exact:
        real = np.maximum(_fma_source_index(scale, out), f32(0))
        src = np.floor((real.astype(np.float64) + 0.5).astype(f32))
    else:
        src = np.floor(i.astype(f32) * scale)
    return np.minimum(src.astype(np.int64), size - 1)


def linear_taps(
    size: int, out: int, scale_factor: float | None, align_corners: bool, cubic: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, weights)`` of shape ``[out, taps]`` for torch's linear / cubic modes."""
    scale = _scale(size, out, scale_factor, align_corners)
    if align_corners:
        src = scale * np.arange(out).astype(f32)
    else:
        src = _fma_source_index(scale, out)
        if not cubic:
            src = np.maximum(src, f32(0))
    # guard_index_and_lambda
    index = np.minimum(np.floor(src).astype(np.int64), size - 1)
    t = np.clip(src - index.astype(f32), f32(0), f32(1)).astype(f32)
    if not cubic:
        upper = index + (index < size - 1)
        return np.stack([index, upper], 1), np.stack([f32(1) - t, t], 1)
    a = f32(_CUBIC_A)

    def near(x: np.ndarray) -> np.ndarray:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: np.ndarray) -> np.ndarray:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    weights = np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], 1).astype(f32)
    taps = np.clip(index[:, None] + np.arange(-1, 3)[None, :], 0, size - 1)
    return taps, weights


def _area_matrix(size: int, out: int) -> np.ndarray:
    """``area`` = adaptive average pooling: ``[size, out]`` averaging matrix."""
    i = np.arange(out)
    start, end = (i * size) // out, ((i + 1) * size + out - 1) // out
    matrix = np.zeros((size, out), f32)
    for j, (a, b) in enumerate(zip(start, end)):
        matrix[a:b, j] = 1.0 / (b - a)
    return matrix


@keras.saving.register_keras_serializable(package="crossport")
class Interpolate(SpatialLayer):
    """``F.interpolate(x, size, scale_factor, mode, align_corners, recompute_scale_factor)``.

    Modes ``nearest`` (torch's ``floor(i * in/out)``, not TF's rounding), ``nearest-exact``,
    ``linear``/``bilinear``/``trilinear`` and ``bicubic`` (A = -0.75, border taps clamped),
    with ``align_corners`` False (default) or True, and ``area``. With ``scale_factor`` the
    output size is ``floor(in * scale_factor)`` and, as in torch, the sampling uses
    ``1/scale_factor`` unless ``recompute_scale_factor=True``. Works on 1, 2 or 3 spatial dims
    Dynamic (``None``) spatial sizes are resampled with indices and weights computed at run
    time by the same rules (not ``area``). ``antialias=True`` is not supported.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(1, 4, 5, 3)).astype("float32")  # NHWC
        >>> Interpolate(scale_factor=2, mode="bilinear", align_corners=True)(x).shape
        TensorShape([1, 8, 10, 3])
    """

    def __init__(
        self,
        size: int | Sequence[int] | None = None,
        scale_factor: float | Sequence[float] | None = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
        antialias: bool = False,
        data_format: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(data_format=data_format, **kwargs)
        if mode not in MODES:
            raise InputError(f"Interpolate: mode must be one of {MODES}, got {mode!r}.")
        if (size is None) == (scale_factor is None):
            raise InputError("Interpolate: give exactly one of size and scale_factor.")
        if align_corners is not None and mode not in _LINEAR_RANK:
            raise InputError(f"Interpolate: align_corners only applies to linear modes, not "
                             f"{mode!r} (torch raises too).")
        if antialias:
            raise InputError("Interpolate: antialias=True is not supported.")
        if recompute_scale_factor and size is not None:
            raise InputError("Interpolate: recompute_scale_factor needs scale_factor, not size.")
        self.size = (size if size is None or isinstance(size, int)
                     else [None if s is None else int(s) for s in size])
        self.scale_factor = (scale_factor if scale_factor is None
                             or isinstance(scale_factor, (int, float))
                             else [float(s) for s in scale_factor])
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor
        self.fast_paths = True  # tests switch this off to check the fast paths against the rest

    def _check_rank(self, rank: int) -> None:
        n = _LINEAR_RANK.get(self.mode)
        if rank not in (3, 4, 5) or (n is not None and rank != n + 2):
            raise InputError(f"Interpolate: mode {self.mode!r} does not take a rank-{rank} "
                             "input (torch raises too).")

    def _plan(self, sizes: Sequence[int]) -> tuple[list[int], list[float | None]]:
        """Output sizes and the scale factors torch passes to its kernels."""
        n = len(sizes)
        if self.size is not None:
            outs = [self.size] * n if isinstance(self.size, int) else list(self.size)
            scales: list[float | None] = [None] * n
        else:
            factors = (self.scale_factor if isinstance(self.scale_factor, list)
                       else [self.scale_factor] * n)
            outs = [math.floor(float(s) * float(f)) for s, f in zip(sizes, factors)]
            scales = [None if self.recompute_scale_factor else float(f) for f in factors]
        if len(outs) != n or min(outs) < 1:
            raise InputError(f"Interpolate: output size {outs} invalid for input sizes {sizes}.")
        return outs, scales

    def forward_channels_last(self, x: Any, training: bool | None = None) -> Any:
        if any(s is None for s in x.shape[1:-1]) or self._run_time_outs():
            return self._forward_run_time(x, ())
        sizes = static_spatial(x, "Interpolate", "resampling")
        outs, scales = self._plan(sizes)
        align = bool(self.align_corners)
        if (self.fast_paths and self.mode == "bilinear" and not align
                and all(o == s or _scale(s, o, f, False) == f32(s) / f32(o)
                        for s, o, f in zip(sizes, outs, scales))):
            # TF's half-pixel bilinear: same source coordinates and clamping as torch. It
            # interpolates as top + (bottom - top) * t, so an inf beside a finite pixel
            # becomes NaN where torch's w0 * x0 + w1 * x1 keeps inf: kept for speed (the
            # tap gathers below are 3.5x slower), noted by parity/nan.py, docs/parity.md
            return ops.image.resize(x, outs, interpolation="bilinear", antialias=False,
                                    data_format="channels_last")
        for axis, (size, out, scale) in enumerate(zip(sizes, outs, scales), start=1):
            x = self._resample_axis(x, axis, size, out, scale, align)
        return x

    def _sampling_scale(self, axis: int) -> float | None:
        """The scale torch samples ``axis`` with when the output size is given."""
        return None

    def _run_time_outs(self) -> bool:
        return isinstance(self.size, list) and any(s is None for s in self.size)

    def _forward_run_time(self, x: Any, given_outs: Sequence[Any]) -> Any:
        """Indices and weights computed in the graph from the run-time sizes
        (``resize_runtime``); output sizes given as ``None`` are taken from ``given_outs``."""
        if self.mode == "area":
            static_spatial(x, "Interpolate", "mode 'area'")
        n = len(x.shape) - 2
        given = iter(given_outs)
        align = bool(self.align_corners)
        for axis in range(1, n + 1):
            size = ops.shape(x)[axis]
            if self.size is not None:
                out = self.size if isinstance(self.size, int) else self.size[axis - 1]
                out = next(given) if out is None else out
                scale, from_scale = self._sampling_scale(axis), False
            else:
                factors = (self.scale_factor if isinstance(self.scale_factor, list)
                           else [self.scale_factor] * n)
                out = resize_runtime.output_size(size, factors[axis - 1])
                scale = None if self.recompute_scale_factor else float(factors[axis - 1])
                from_scale = True
            x = resize_runtime.resample_axis(x, axis, self.mode, size, out, scale, align,
                                             out_from_scale=from_scale)
        return x

    def _resample_axis(self, x: Any, axis: int, size: int, out: int, scale: float | None,
                       align: bool) -> Any:
        mode = self.mode
        if out == size and mode in ("area", "linear", "bilinear", "trilinear"):
            # torch copies an axis whose size is unchanged, even with a scale_factor that
            # would move the samples (measured; bicubic and 1D/3D nearest do resample)
            return x
        if mode == "area":
            return contract_axis(x, _area_matrix(size, out), axis)
        if mode in ("nearest", "nearest-exact"):
            index = nearest_indices(size, out, scale, mode == "nearest-exact", len(x.shape) - 2)
            if np.array_equal(index, np.arange(size)):
                return x
            if self.fast_paths and out % size == 0 and np.array_equal(
                    index, np.repeat(np.arange(size), out // size)):
                return ops.repeat(x, out // size, axis=axis)  # what UpSampling2D runs
            return ops.take(x, ops.convert_to_tensor(index.astype(np.int32)), axis=axis)
        taps, weights = linear_taps(size, out, scale, align, cubic=mode == "bicubic")
        shape = [1] * len(x.shape)
        shape[axis] = out
        y = None
        for t in range(taps.shape[1]):
            gathered = ops.take(x, ops.convert_to_tensor(taps[:, t].astype(np.int32)), axis=axis)
            term = gathered * ops.cast(np.reshape(weights[:, t], shape), x.dtype)
            y = term if y is None else y + term
        return y

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(size=self.size, scale_factor=self.scale_factor, mode=self.mode,
                      align_corners=self.align_corners,
                      recompute_scale_factor=self.recompute_scale_factor)
        return config

    @classmethod
    def from_torch(cls, module: Any, data_format: str | None = None) -> Interpolate:
        """From ``nn.Upsample`` / ``UpsamplingNearest2d`` / ``UpsamplingBilinear2d``."""
        size, scale = module.size, module.scale_factor
        if isinstance(size, tuple):
            size = list(size)
        if isinstance(scale, tuple):
            scale = list(scale)
        return cls(size, scale, module.mode, module.align_corners,
                   getattr(module, "recompute_scale_factor", None), data_format=data_format)


@keras.saving.register_keras_serializable(package="crossport")
class InterpolateTo(Interpolate):
    """``Interpolate`` to output sizes known only at run time: ``call(x, *sizes)``.

    ``size`` lists one entry per spatial dim; each ``None`` entry is taken, in order, from
    the int scalars passed after ``x`` (e.g. another tensor's run-time height). What a
    converted ``F.interpolate(x, size=skip.shape[2:])`` with dynamic sizes becomes.

    ``sampling_scales`` (one per spatial dim, ``None`` entries allowed) are the scales
    torch's ``aten.upsample_*`` kernels take beside an output size (``scales_h``,
    ``scales_w``): a given scale maps output ``i`` to input ``i / scale`` whatever the
    sizes, where ``None`` maps it by ``in / out``.

    Example:
        >>> import numpy as np
        >>> x = np.zeros((1, 4, 5, 3), "float32")  # NHWC
        >>> height = np.array(6, "int32")  # e.g. another tensor's run-time size
        >>> InterpolateTo(size=[None, 7], mode="bilinear", align_corners=False)(x, height).shape
        TensorShape([1, 6, 7, 3])
    """

    def __init__(
        self,
        size: int | Sequence[int | None] | None = None,
        scale_factor: float | Sequence[float] | None = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
        antialias: bool = False,
        data_format: str | None = None,
        sampling_scales: Sequence[float | None] | None = None,
        **kwargs: Any,
    ):
        super().__init__(size, scale_factor, mode, align_corners, recompute_scale_factor,
                         antialias, data_format, **kwargs)
        if sampling_scales is not None and self.size is None:
            raise InputError("InterpolateTo: sampling_scales needs size.")
        self.sampling_scales = (None if sampling_scales is None
                                else [None if f is None else float(f) for f in sampling_scales])

    def _sampling_scale(self, axis: int) -> float | None:
        return None if self.sampling_scales is None else self.sampling_scales[axis - 1]

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(sampling_scales=self.sampling_scales)
        return config

    def call(self, inputs: Any, *sizes: Any, training: bool | None = None) -> Any:
        self._check_rank(len(inputs.shape))
        channels_first = self.data_format == "channels_first"
        x = to_channels_last(inputs) if channels_first else inputs
        y = self._forward_run_time(x, sizes)
        return to_channels_first(y) if channels_first else y
