"""torch.fft: the three ATen FFT kernels every ``torch.fft`` function lowers to.

``torch.fft.rfft/rfft2/rfftn`` and the real-input ``fft*`` are ``_fft_r2c``, ``fft/ifft/
fft2/fftn`` of complex input are ``_fft_c2c``, ``irfft/irfft2/irfftn`` are ``_fft_c2r``
(``n=`` pads or slices the input first, ``norm=`` is the ``normalization`` code: 0 none,
1 ``1/sqrt(n)``, 2 ``1/n``, n the product of the signal sizes). ``torch.stft`` decomposes
to ``unfold`` + window multiply + ``_fft_r2c`` + transpose.

Keras' FFT ops act on the last axis and take/return ``(real, imag)`` pairs, so each
transformed dim is held last (``dims_last``, the layout contract) and the result keeps that
layout: a consumer moves it only if it needs another order. A complex value travels as a
``ComplexValue`` (values.py). TF's inverse FFTs divide by the length; an unnormalized
inverse is ``conj(fft(conj(z)))`` (negations are exact) and the normalization is applied as
torch applies it, one multiply by the factor computed in double.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import torch

from crossport.layout import dims_last
from crossport.layout.dims import normalize_dims
from crossport.to_keras.dynamic_dims import static_dims
from crossport.to_keras.registry import Policy, register_complex
from crossport.to_keras.values import ComplexParts, ComplexValue, TensorValue

aten = torch.ops.aten
ops = keras.ops


def _held_last(ctx, value, dim: int):
    """``value`` (a TensorValue or ComplexValue) with torch ``dim`` held last: its Keras
    tensor(s) and the layout they are in."""
    layout = dims_last(value.layout, [dim], held_order=False)
    if isinstance(value, ComplexValue):
        return ComplexParts(ctx.to_layout(value.real, layout),
                            ctx.to_layout(value.imag, layout)), layout
    return ctx.to_layout(value, layout), layout


def _as_value(parts: ComplexParts, layout, shape, dtype) -> ComplexValue:
    """Parts in ``layout`` as a ComplexValue (torch ``shape``), to move again."""
    return ComplexValue(TensorValue(parts.real, layout, shape, dtype),
                        TensorValue(parts.imag, layout, shape, dtype))


def _fft_last(parts: ComplexParts, inverse: bool) -> ComplexParts:
    """The unnormalized DFT over the last axis; the inverse as ``conj(fft(conj(z)))``."""
    if not inverse:
        return ComplexParts(*ops.fft((parts.real, parts.imag)))
    real, imag = ops.fft((parts.real, ops.negative(parts.imag)))
    return ComplexParts(real, ops.negative(imag))


def _c2c_dims(ctx, value: ComplexValue, dims, inverse: bool, sizes) -> tuple:
    """Unnormalized DFTs over ``dims`` (separable: one dim after another). Two dims are
    held last in the order they are already held and take one 2-D FFT (no transpose for
    ``fft2`` over the last two dims); any further dim is held last in turn for a 1-D FFT.
    Returns the parts and their layout."""
    dims = list(dims)
    if len(dims) >= 2:
        layout = dims_last(value.layout, dims[-2:])  # in their held order: maybe no move
        parts = ComplexParts(ctx.to_layout(value.real, layout), ctx.to_layout(value.imag, layout))
        parts = _fft2_last(parts, inverse)
        value = _as_value(parts, layout, sizes, value.real.dtype)
        dims = dims[:-2]
    for dim in dims:
        parts, layout = _held_last(ctx, value, dim)
        parts = _fft_last(parts, inverse)
        value = _as_value(parts, layout, sizes, value.real.dtype)
    return ComplexParts(value.real.tensor, value.imag.tensor), value.layout


def _fft2_last(parts: ComplexParts, inverse: bool) -> ComplexParts:
    """The unnormalized 2-D DFT over the last two axes (TF's FFT2D)."""
    if not inverse:
        return ComplexParts(*ops.fft2((parts.real, parts.imag)))
    real, imag = ops.fft2((parts.real, ops.negative(parts.imag)))
    return ComplexParts(real, ops.negative(imag))


def _factor(normalization: int, n: int) -> float:
    """torch's ``norm`` factor for signal size ``n`` (computed in double, as torch does)."""
    return {0: 1.0, 1: 1.0 / math.sqrt(n), 2: 1.0 / n}[normalization]


def _scaled(parts: ComplexParts, factor: float) -> ComplexParts:
    if factor == 1.0:
        return parts
    return ComplexParts(ops.multiply(parts.real, factor), ops.multiply(parts.imag, factor))


def _signal_size(shape, dims) -> int:
    return int(np.prod([int(shape[d]) for d in dims]))


def _fft_dims_static(argument: str):
    """The transformed dims need static sizes (the normalization and the onesided or
    ``last_dim_size`` length are read from them); other dims may be dynamic."""
    return static_dims(argument, lambda node: node.args[1],
                       "an FFT (its length and normalization)")


def _fft_supports(node, self, dim, normalization, **_) -> str | None:
    if normalization not in (0, 1, 2):
        return f"normalization code {normalization} (torch uses 0, 1, 2)"
    if node.meta["val"].dtype == torch.complex32 or self.meta["val"].dtype in (
            torch.float16, torch.complex32):
        return "half-precision FFT (TF's FFT kernels take float32/float64 only)"
    if not dim:
        return "an FFT over no dims"
    return None


@register_complex(aten._fft_r2c.default, policy=Policy.CUSTOM, supports=_fft_supports,
                  dynamic=_fft_dims_static("self"))
def aten__fft_r2c_default(ctx, self, dim, normalization, onesided):
    """_fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor

    ``rfft*`` (onesided: the last dim in ``dim`` keeps n//2+1 bins) and ``fft*`` of a
    real tensor (full spectrum: the DFT of ``self + 0i``). The other dims get complex
    DFTs after the last one, as pocketfft does.
    """
    self = ctx.plain(self)
    dims = normalize_dims(dim, self.rank)
    n = _signal_size(self.shape, dims)
    x, layout = _held_last(ctx, self, dims[-1])
    if onesided:
        parts = ComplexParts(*ops.rfft(x))
    else:
        parts = ComplexParts(*ops.fft((x, ops.zeros_like(x))))
    if len(dims) > 1:
        value = _as_value(parts, layout, ctx.node.meta["val"].shape, self.dtype)
        parts, layout = _c2c_dims(ctx, value, dims[:-1], False, value.shape)
    ctx.out_layout = layout
    return _scaled(parts, _factor(normalization, n))


@register_complex(aten._fft_c2c.default, policy=Policy.CUSTOM, supports=_fft_supports,
                  dynamic=_fft_dims_static("self"))
def aten__fft_c2c_default(ctx, self, dim, normalization, forward):
    """_fft_c2c(Tensor self, SymInt[] dim, int normalization, bool forward) -> Tensor

    ``fft``/``ifft``/``fft2``/``ifftn`` of a complex tensor: unnormalized DFTs over each
    dim (the inverse by conjugation), then torch's normalization factor.
    """
    dims = normalize_dims(dim, self.rank)
    parts, layout = _c2c_dims(ctx, self, dims, not forward, self.shape)
    ctx.out_layout = layout
    return _scaled(parts, _factor(normalization, _signal_size(self.shape, dims)))


@register_complex(aten._fft_c2r.default, policy=Policy.CUSTOM, supports=_fft_supports,
                  dynamic=_fft_dims_static("self"))
def aten__fft_c2r_default(ctx, self, dim, normalization, last_dim_size):
    """_fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size) -> Tensor

    ``irfft*``: unnormalized inverse DFTs over all dims but the last, then TF's ``irfft``
    over the last with ``fft_length=last_dim_size`` (like torch it reads n//2+1 bins and
    ignores the imaginary parts of the DC and Nyquist bins). TF's irfft divides by
    ``last_dim_size``; the multiply that follows makes the factor torch's.
    """
    dims = normalize_dims(dim, self.rank)
    length = int(last_dim_size)
    value = self
    if len(dims) > 1:
        parts, layout = _c2c_dims(ctx, self, dims[:-1], True, self.shape)
        value = _as_value(parts, layout, self.shape, self.real.dtype)
    parts, layout = _held_last(ctx, value, dims[-1])
    out = ops.irfft((parts.real, parts.imag), fft_length=length)
    out_shape = ctx.node.meta["val"].shape
    n = _signal_size(out_shape, dims)
    # torch's factor times length, which TF's irfft already divided by (exact ratios of
    # integers, so a 1-D irfft with the default norm multiplies by nothing)
    factor = {0: float(length), 1: length / math.sqrt(n), 2: length / n}[normalization]
    if factor != 1.0:
        out = ops.multiply(out, factor)
    ctx.out_layout = layout
    return out
