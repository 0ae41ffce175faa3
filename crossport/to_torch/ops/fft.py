"""keras.ops FFTs: ``fft`` / ``fft2`` / ``ifft2`` take and return ``(real, imag)`` pairs;
``rfft`` returns one, ``irfft`` takes one. TF's FFT kernels and torch's pocketfft differ
only in rounding (docs/parity.md "FFTs": the torch -> Keras side's measurements); the
transforms are unnormalized forward, ``1/n`` inverse, as in Keras."""

from __future__ import annotations

import torch

from crossport.layout.policy import Policy
from crossport.to_torch.context import Context
from crossport.to_torch.registry import register_op


def _complex(ctx: Context, pair):
    real, imag = pair
    return ctx.call_function(torch.complex, real, imag)


def _pair(ctx: Context, node) -> list:
    """The real and imaginary parts as contiguous real tensors (Keras' two outputs)."""
    return [ctx.call_method("contiguous", ctx.call_function(part, node))
            for part in (torch.real, torch.imag)]


@register_op(policy=Policy.CANONICAL)
def FFT(ctx: Context, op, x) -> list:
    """keras.ops.fft((real, imag)): the complex FFT over the last axis."""
    return _pair(ctx, ctx.call_function(torch.fft.fft, _complex(ctx, x), dim=-1))


@register_op(policy=Policy.CANONICAL)
def FFT2(ctx: Context, op, x) -> list:
    """keras.ops.fft2((real, imag)): the complex FFT over the last two axes (FNet)."""
    return _pair(ctx, ctx.call_function(torch.fft.fft2, _complex(ctx, x), dim=(-2, -1)))


@register_op(policy=Policy.CANONICAL)
def IFFT2(ctx: Context, op, x) -> list:
    """keras.ops.ifft2((real, imag)): the inverse over the last two axes, ``1/(h w)``
    (Keras writes it as the conjugate's fft2 scaled: the same transform)."""
    return _pair(ctx, ctx.call_function(torch.fft.ifft2, _complex(ctx, x), dim=(-2, -1)))


@register_op(policy=Policy.CANONICAL)
def RFFT(ctx: Context, op, x) -> list:
    """keras.ops.rfft(x, fft_length): the real FFT over the last axis, the input cut or
    zero-padded to ``fft_length`` (tf.signal.rfft's rule, torch's ``n``)."""
    n = None if op.fft_length is None else int(op.fft_length)
    return _pair(ctx, ctx.call_function(torch.fft.rfft, x, n=n, dim=-1))


@register_op(policy=Policy.CANONICAL)
def IRFFT(ctx: Context, op, x) -> object:
    """keras.ops.irfft((real, imag), fft_length): the inverse real FFT over the last axis,
    ``fft_length`` outputs (default ``2 (m - 1)``); the imaginary parts of the zero and
    Nyquist bins are ignored by both kernels."""
    n = None if op.fft_length is None else int(op.fft_length)
    return ctx.call_function(torch.fft.irfft, _complex(ctx, x), n=n, dim=-1)
