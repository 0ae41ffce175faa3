"""``tf.image.resize`` (TF2) in torch, for channels-first images (pitfall 12).

TF2's resize always uses half-pixel centres and differs from ``F.interpolate`` in ways that
matter: ``nearest`` rounds (torch ``'nearest'`` floors), ``bicubic`` is Keys' cubic with
``a=-0.5`` read from a 1024-entry table and renormalized at the borders (torch: ``a=-0.75``,
edge replication), ``area`` is TF's box filter, and ``antialias=True`` (plus ``lanczos3/5``,
``gaussian``, ``mitchellcubic``) goes through ``ScaleAndTranslate``, whose kernel is widened by
the downscale factor. Every method is separable, so each is built here as one
``[out, in]`` matrix per spatial dim, computed in float32 with TF's formulas.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
import torch
from torch import nn

from crossport.errors import ExportError, InputError

__all__ = ["METHODS", "KerasUpSampling2D", "TFResize", "tf_resize"]

f32 = np.float32
_FLT_MIN = np.finfo(np.float32).tiny
_TABLE_SIZE = 1024  # resize_bicubic_op.cc kTableSize


def _keys_cubic(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    far = ((f32(-0.5) * x + f32(2.5)) * x - f32(4.0)) * x + f32(2.0)
    near = ((f32(1.5) * x - f32(2.5)) * x) * x + f32(1.0)
    return np.where(x >= 2, f32(0), np.where(x >= 1, far, near)).astype(f32)


def _mitchell_cubic(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    far = ((f32(-7.0 / 18.0) * x + f32(2.0)) * x - f32(10.0 / 3.0)) * x + f32(16.0 / 9.0)
    near = ((f32(7.0 / 6.0) * x - f32(2.0)) * x) * x + f32(8.0 / 9.0)
    return np.where(x >= 2, f32(0), np.where(x >= 1, far, near)).astype(f32)


def _lanczos(radius: float) -> Callable[[np.ndarray], np.ndarray]:
    def kernel(x: np.ndarray) -> np.ndarray:
        x = np.abs(x).astype(f32)
        pi = f32(3.14159265359)
        with np.errstate(divide="ignore", invalid="ignore"):
            v = f32(radius) * np.sin(pi * x) * np.sin(pi * x / f32(radius)) / (pi * pi * x * x)
        return np.where(x > radius, f32(0), np.where(x <= 1e-3, f32(1), v)).astype(f32)

    return kernel


def _gaussian(x: np.ndarray) -> np.ndarray:
    radius, sigma = f32(1.5), f32(1.5 / 3.0)
    x = np.abs(x).astype(f32)
    v = np.exp(-x * x / (f32(2.0) * sigma * sigma)).astype(f32)
    return np.where(x >= radius, f32(0), v).astype(f32)


def _triangle(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return np.where(x < 1, f32(1) - x, f32(0)).astype(f32)


# ScaleAndTranslate kernels (sampling_kernels.h): function and radius.
_SAT_KERNELS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], float]] = {
    "triangle": (_triangle, 1.0),
    "keyscubic": (_keys_cubic, 2.0),
    "mitchellcubic": (_mitchell_cubic, 2.0),
    "lanczos3": (_lanczos(3.0), 3.0),
    "lanczos5": (_lanczos(5.0), 5.0),
    "gaussian": (_gaussian, 1.5),
}

METHODS = (
    "bilinear",
    "nearest",
    "bicubic",
    "area",
    "lanczos3",
    "lanczos5",
    "gaussian",
    "mitchellcubic",
)


def _half_pixel_source(in_size: int, out_size: int) -> np.ndarray:
    scale = f32(in_size) / f32(out_size)
    return (np.arange(out_size, dtype=f32) + f32(0.5)) * scale - f32(0.5)


def _bilinear(in_size: int, out_size: int) -> np.ndarray:
    src = _half_pixel_source(in_size, out_size)
    floor = np.floor(src)
    lower = np.maximum(floor.astype(np.int64), 0)
    upper = np.minimum(np.ceil(src).astype(np.int64), in_size - 1)
    lerp = (src - floor).astype(f32)
    w = np.zeros((out_size, in_size), f32)
    rows = np.arange(out_size)
    np.add.at(w, (rows, lower), f32(1) - lerp)
    np.add.at(w, (rows, upper), lerp)
    return w


@lru_cache(maxsize=1)
def _cubic_table() -> np.ndarray:
    a = -0.5  # Keys; TF1's non-half-pixel bicubic used -0.75
    x = np.arange(_TABLE_SIZE + 1, dtype=np.float64) / _TABLE_SIZE
    table = np.empty((_TABLE_SIZE + 1, 2), f32)
    table[:, 0] = ((a + 2) * x - (a + 3)) * x * x + 1
    x1 = x + 1.0
    table[:, 1] = ((a * x1 - 5 * a) * x1 + 8 * a) * x1 - 4 * a
    return table


def _bicubic(in_size: int, out_size: int) -> np.ndarray:
    table = _cubic_table()
    src = _half_pixel_source(in_size, out_size)
    loc = np.floor(src).astype(np.int64)
    delta = (src - loc.astype(f32)).astype(f32)
    offset = np.rint(delta * f32(_TABLE_SIZE)).astype(np.int64)  # lrintf: the table is quantized
    weights = np.stack(
        [
            table[offset, 1],
            table[offset, 0],
            table[_TABLE_SIZE - offset, 0],
            table[_TABLE_SIZE - offset, 1],
        ],
        axis=1,
    )
    index = loc[:, None] + np.arange(-1, 3)[None, :]
    weights = np.where((index >= 0) & (index < in_size), weights, f32(0)).astype(
        f32
    )  # drop outside
    total = ((weights[:, 0] + weights[:, 1]) + weights[:, 2]) + weights[:, 3]
    norm = np.abs(total) >= f32(1000) * _FLT_MIN
    weights[norm] *= (f32(1) / total[norm])[:, None]  # renormalize the border windows
    w = np.zeros((out_size, in_size), f32)
    np.add.at(
        w,
        (np.repeat(np.arange(out_size), 4), np.clip(index, 0, in_size - 1).ravel()),
        weights.ravel(),
    )
    return w


def _area(in_size: int, out_size: int) -> np.ndarray:
    scale = f32(in_size) / f32(out_size)
    w = np.zeros((out_size, in_size), f32)
    for o in range(out_size):
        lo, hi = f32(o) * scale, f32(o + 1) * scale
        for i in range(math.floor(lo), math.ceil(hi)):
            if i < lo:
                part = scale if i + 1 > hi else f32(i + 1) - lo
            else:
                part = hi - f32(i) if i + 1 > hi else f32(1)
            w[o, min(i, in_size - 1)] += f32(part)
    return (w * (f32(1) / scale)).astype(f32)


def _scale_and_translate(
    in_size: int, out_size: int, kernel_name: str, antialias: bool
) -> np.ndarray:
    kernel, radius = _SAT_KERNELS[kernel_name]
    scale = f32(out_size) / f32(in_size)
    inv_scale = f32(1.0 / float(scale))
    kernel_scale = max(inv_scale, f32(1)) if antialias else f32(1)
    reach = f32(radius) * kernel_scale
    w = np.zeros((out_size, in_size), f32)
    for o in range(out_size):
        sample = (f32(o) + f32(0.5)) * inv_scale
        if sample < 0 or sample > in_size:
            continue
        start = min(max(math.ceil(sample - reach - f32(0.5)), 0), in_size - 1)
        end = min(max(math.floor(sample + reach - f32(0.5)), 0), in_size - 1) + 1
        pos = (np.arange(start, end).astype(f32) + f32(0.5) - sample).astype(f32)
        weights = kernel(np.abs(pos / kernel_scale))
        total = f32(0)
        for v in weights:  # float32 running sum, as TF
            total = f32(total + v)
        if abs(total) >= f32(1000) * _FLT_MIN:
            weights = weights * (f32(1) / total)
        w[o, start:end] = weights
    return w


@lru_cache(maxsize=256)
def _matrix(in_size: int, out_size: int, method: str, antialias: bool) -> torch.Tensor:
    if method == "bilinear" and antialias:
        w = _scale_and_translate(in_size, out_size, "triangle", True)
    elif method == "bicubic" and antialias:
        w = _scale_and_translate(in_size, out_size, "keyscubic", True)
    elif method == "bilinear":
        w = _bilinear(in_size, out_size)
    elif method == "bicubic":
        w = _bicubic(in_size, out_size)
    elif method == "area":
        w = _area(in_size, out_size)
    else:
        w = _scale_and_translate(in_size, out_size, method, antialias)
    return torch.from_numpy(w)


def _nearest_index(in_size: int, out_size: int) -> torch.Tensor:
    scale = f32(in_size) / f32(out_size)
    src = np.floor((np.arange(out_size, dtype=f32) + f32(0.5)) * scale).astype(np.int64)  # rounds
    return torch.from_numpy(np.clip(src, 0, in_size - 1))


def _symbolic_source(in_size, out_size: int, half_pixel_offset: bool) -> torch.Tensor:
    """``_half_pixel_source`` (without the ``- 0.5``: nearest's ``(o + 0.5) * scale``) at a
    run-time ``in_size`` (``torch.export``'s SymInt), in float32 op by op as numpy does it
    (``in_size`` is exact in float32 below 2**24)."""
    scale = torch.ones((), dtype=torch.float32) * in_size / out_size
    src = (torch.arange(out_size, dtype=torch.float32) + 0.5) * scale
    return src - 0.5 if half_pixel_offset else src


def _symbolic_bilinear(in_size, out_size: int) -> torch.Tensor:
    """``_bilinear``'s matrix at a run-time ``in_size``: the same two weights per row,
    summed where they hit the same column (as ``np.add.at``)."""
    src = _symbolic_source(in_size, out_size, True)
    floor = torch.floor(src)
    lower = torch.clamp(floor, min=0).long()
    upper = torch.minimum(torch.ceil(src).long(), torch.full_like(lower, 1) * (in_size - 1))
    lerp = src - floor
    columns = torch.arange(in_size)[None, :]
    return ((columns == lower[:, None]) * (1 - lerp)[:, None]
            + (columns == upper[:, None]) * lerp[:, None])


def _symbolic_nearest(in_size, out_size: int) -> torch.Tensor:
    src = torch.floor(_symbolic_source(in_size, out_size, False)).long()
    return torch.minimum(torch.clamp(src, min=0), torch.full_like(src, 1) * (in_size - 1))


def _resize_symbolic(x: torch.Tensor, method: str, antialias: bool, out: tuple) -> torch.Tensor:
    """``tf_resize`` with a run-time height or width (``torch.export`` with dynamic shapes):
    ``nearest`` and ``bilinear`` build their indices / matrices in torch ops; the other
    methods' matrices are built in Python per size, so the dim cannot stay dynamic."""
    h, w = x.shape[-2], x.shape[-1]
    if method == "nearest":
        x = x.index_select(-2, _symbolic_nearest(h, out[0]).to(x.device))
        return x.index_select(-1, _symbolic_nearest(w, out[1]).to(x.device))
    if method != "bilinear" or antialias:
        raise ExportError(
            f"tf.image.resize / Resizing method {method!r}"
            f"{' with antialias' if antialias else ''} at a run-time input height/width: its "
            "weights are built per input size in Python, so torch.export cannot keep that "
            "dim dynamic; export with that dim static (Dim.STATIC / no dynamic_shapes entry) "
            "or use interpolation 'bilinear' or 'nearest'")
    dtype = x.dtype if x.is_floating_point() else torch.float32
    wh = _symbolic_bilinear(h, out[0]).to(device=x.device, dtype=dtype)
    ww = _symbolic_bilinear(w, out[1]).to(device=x.device, dtype=dtype)
    return torch.matmul(torch.matmul(wh, x.to(dtype)), ww.T)


def tf_resize(
    x: torch.Tensor, size: Sequence[int], method: str = "bilinear", antialias: bool = False
) -> torch.Tensor:
    """``tf.image.resize(x, size, method, antialias)`` on ``[..., H, W]`` (channels-first).

    Args:
        x: images, spatial dims last.
        size: ``(new_height, new_width)``.
        method: one of :data:`METHODS`.
        antialias: TF's flag (ignored by ``nearest`` and ``area``, as in TF).

    Returns:
        Resized images; ``nearest`` keeps the dtype, other methods return float32 (or the
        input's floating dtype; TF always returns float32).

    Example:
        >>> import torch
        >>> tf_resize(torch.arange(4.0).view(1, 1, 1, 4), (1, 3), "nearest").flatten().tolist()
        [0.0, 2.0, 3.0]
    """
    method = method.lower()
    if method not in METHODS:
        raise InputError(f"method must be one of {METHODS}, got {method!r}")
    (h, w), (oh, ow) = x.shape[-2:], (int(size[0]), int(size[1]))
    if not (isinstance(h, int) and isinstance(w, int)):  # torch.export's SymInt
        return _resize_symbolic(x, method, antialias, (oh, ow))
    if method == "nearest":
        x = x.index_select(-2, _nearest_index(h, oh).to(x.device))
        return x.index_select(-1, _nearest_index(w, ow).to(x.device))
    dtype = x.dtype if x.is_floating_point() else torch.float32
    wh = _matrix(h, oh, method, antialias).to(device=x.device, dtype=dtype)
    ww = _matrix(w, ow, method, antialias).to(device=x.device, dtype=dtype)
    return torch.matmul(torch.matmul(wh, x.to(dtype)), ww.T)


class TFResize(nn.Module):
    """``tf.image.resize`` (TF2) / ``keras.layers.Resizing`` on channels-first images.

    Args:
        size: ``(new_height, new_width)``.
        method: ``bilinear``, ``nearest``, ``bicubic``, ``area``, ``lanczos3``, ``lanczos5``,
            ``gaussian`` or ``mitchellcubic``.
        antialias: TF's ``antialias`` (widens the kernel when downsampling).
        crop_to_aspect_ratio: Keras' centred crop to the target aspect ratio first.
        pad_to_aspect_ratio: Keras' centred pad to it first, with ``fill_value``.
        fill_value: the padding value.

    Keras' box (``keras.src.backend.tensorflow.image.resize``): the wanted height is
    ``int(float32(w * th) / tw)``, clamped to ``[1, h]`` (crop) or ``>= h`` (pad), likewise
    the width; the crop starts at ``int((h - crop) / 2)``; the pad adds ``int((pad - h) / 2)``
    rows on *both* sides (an odd difference pads one row less than asked, as Keras does).

    Example:
        >>> import torch
        >>> TFResize((3, 5), "bicubic")(torch.randn(2, 3, 6, 4)).shape
        torch.Size([2, 3, 3, 5])
        >>> TFResize((4, 4), pad_to_aspect_ratio=True)(torch.randn(1, 1, 2, 4)).shape
        torch.Size([1, 1, 4, 4])
    """

    def __init__(
        self, size: Sequence[int], method: str = "bilinear", antialias: bool = False,
        crop_to_aspect_ratio: bool = False, pad_to_aspect_ratio: bool = False,
        fill_value: float = 0.0,
    ) -> None:
        super().__init__()
        self.size = (int(size[0]), int(size[1]))
        self.method = method.lower()
        if self.method not in METHODS:
            raise InputError(f"method must be one of {METHODS}, got {method!r}")
        if crop_to_aspect_ratio and pad_to_aspect_ratio:
            raise InputError("only one of crop_to_aspect_ratio and pad_to_aspect_ratio")
        self.antialias = antialias
        self.crop_to_aspect_ratio = crop_to_aspect_ratio
        self.pad_to_aspect_ratio = pad_to_aspect_ratio
        self.fill_value = float(fill_value)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.crop_to_aspect_ratio or self.pad_to_aspect_ratio:
            x = self._to_aspect_ratio(x)
        return tf_resize(x, self.size, self.method, self.antialias)

    def _to_aspect_ratio(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2], x.shape[-1]
        th, tw = self.size
        want_h, want_w = _f32_quotient(w * th, tw), _f32_quotient(h * tw, th)
        # torch.sym_min / sym_max: builtin min / max would make torch.export guard on the
        # example's comparison (plain ints: the same as min / max)
        if self.crop_to_aspect_ratio:
            ch = torch.sym_max(torch.sym_min(h, want_h), 1)
            cw = torch.sym_max(torch.sym_min(w, want_w), 1)
            top, left = _f32_quotient(h - ch, 2), _f32_quotient(w - cw, 2)
            if isinstance(ch, int) and isinstance(cw, int):
                return x[..., top:top + ch, left:left + cw]
            # at run-time sizes (torch.export), gathered rows and columns: a slice's view
            # makes export guard on the example's strides (whether the crop is whole)
            x = x.index_select(-2, torch.arange(ch, device=x.device) + top)
            return x.index_select(-1, torch.arange(cw, device=x.device) + left)
        top = _f32_quotient(torch.sym_max(h, want_h) - h, 2)
        left = _f32_quotient(torch.sym_max(w, want_w) - w, 2)
        if isinstance(top, int) and isinstance(left, int) and not top and not left:
            return x
        return nn.functional.pad(x, (left, left, top, top), value=self.fill_value)

    @classmethod
    def from_keras(cls, layer) -> TFResize:
        """From ``keras.layers.Resizing``."""
        cfg = layer.get_config()
        if cfg.get("fill_mode", "constant") != "constant":
            raise InputError(f"{layer.name}: fill_mode {cfg['fill_mode']!r} (Keras' TF backend "
                             "pads with a constant only)")
        return cls(
            (cfg["height"], cfg["width"]), cfg["interpolation"], bool(cfg.get("antialias", False)),
            bool(cfg.get("crop_to_aspect_ratio")), bool(cfg.get("pad_to_aspect_ratio")),
            float(cfg.get("fill_value", 0.0)),
        )

    def extra_repr(self) -> str:
        box = (f", crop_to_aspect_ratio={self.crop_to_aspect_ratio}, pad_to_aspect_ratio="
               f"{self.pad_to_aspect_ratio}, fill_value={self.fill_value}"
               if self.crop_to_aspect_ratio or self.pad_to_aspect_ratio else "")
        return f"size={self.size}, method={self.method!r}, antialias={self.antialias}{box}"


def _f32_quotient(a, b: int):
    """``int(float32(a) / b)`` as Keras computes box sizes (float32 division, truncated); a
    run-time size (``torch.export``'s SymInt) uses exact floor division, which agrees while
    ``a < 2**24`` (the float32 quotient of such ints cannot round across an integer)."""
    if isinstance(a, int):
        return int(f32(a) / f32(b))
    return a // b


class KerasUpSampling2D(nn.Module):
    """``keras.layers.UpSampling2D`` on NCHW: ``nearest`` repeats, others use ``tf.image.resize``.

    Args:
        size: integer factors ``(height, width)``.
        interpolation: ``nearest`` (exact repeat, same as torch's ``'nearest'`` for integer
            factors), or a :data:`METHODS` name (``bilinear`` = TF half-pixel bilinear).

    Example:
        >>> import torch
        >>> KerasUpSampling2D(2, "bilinear")(torch.randn(1, 3, 4, 5)).shape
        torch.Size([1, 3, 8, 10])
    """

    def __init__(self, size: int | Sequence[int] = (2, 2), interpolation: str = "nearest") -> None:
        super().__init__()
        self.size = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
        self.interpolation = interpolation.lower()
        if self.interpolation not in METHODS:
            raise InputError(f"interpolation must be one of {METHODS}, got {interpolation!r}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sh, sw = self.size
        if self.interpolation == "nearest":
            return x.repeat_interleave(sh, dim=-2).repeat_interleave(sw, dim=-1)
        return tf_resize(x, (x.shape[-2] * sh, x.shape[-1] * sw), self.interpolation)

    @classmethod
    def from_keras(cls, layer) -> KerasUpSampling2D:
        cfg = layer.get_config()
        return cls(cfg["size"], cfg["interpolation"])

    def extra_repr(self) -> str:
        return f"size={self.size}, interpolation={self.interpolation!r}"
