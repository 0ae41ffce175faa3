"""Keras' audio front ends: ``STFTSpectrogram``, ``MelSpectrogram``, ``keras.ops.stft`` and
``keras.ops.istft`` (and ``extract_sequences``, their framing) -> ``crossport.to_torch.spectral``
modules.

Each module follows Keras' TF backend step by step (framing, reflect padding, TF ``SAME``,
window, scaling and mode arithmetic); the constants Keras derives from the config (windows,
the HTK mel filterbank, ``ref_power`` in dB) are computed here by Keras/TF itself, so the
torch buffers hold TF's float32 values. STFTSpectrogram's kernels are the layer's weights
(trained or not), not recomputed.
"""

from __future__ import annotations

import operator

import keras
import numpy as np
import torch
from torch import nn

from crossport.errors import UnsupportedLayerError
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context
from crossport.to_torch.registry import channels_first_layer, register_layer, register_op
from crossport.to_torch.spectral import (
    KerasFrames,
    KerasISTFT,
    KerasMelSpectrogram,
    KerasSTFT,
    KerasSTFTSpectrogram,
)

_WINDOWS = ("hann", "hamming")


def _window_unsupported(window) -> str | None:
    if isinstance(window, str) and window not in _WINDOWS:
        return (f"window={window!r}: Keras' TF stft takes 'hann', 'hamming', an array or "
                "None (its own call raises)")
    return None


def tf_window(window, sequence_length: int, dtype: str = "float32") -> np.ndarray | None:
    """The window Keras' TF ``stft`` applies (periodic ``tf.signal`` Hann/Hamming computed
    in the signal's dtype, or the array cast to it), before its zero padding to
    ``fft_length``."""
    import tensorflow as tf

    if window is None:
        return None
    if isinstance(window, str) and window == "hann":
        return tf.signal.hann_window(sequence_length, True, tf.as_dtype(dtype)).numpy()
    if isinstance(window, str) and window == "hamming":
        return tf.signal.hamming_window(sequence_length, True, tf.as_dtype(dtype)).numpy()
    return np.asarray(keras.ops.convert_to_numpy(window), dtype=dtype)


def padded_window(window, sequence_length: int, fft_length: int,
                  dtype: str = "float32") -> torch.Tensor | None:
    """``tf_window`` zero-padded to ``fft_length`` as Keras pads it (the odd zero after)."""
    array = tf_window(window, sequence_length, dtype)
    if array is None:
        return None
    left = (fft_length - sequence_length) // 2
    return torch.from_numpy(np.pad(array, (left, fft_length - sequence_length - left)))


def _signal_dtype(ctx: Context, name: str) -> str:
    """The float dtype Keras' TF stft/istft computes in (the input's); others raise there."""
    if ctx.input_dtype not in ("float32", "float64"):
        raise UnsupportedLayerError(
            f"keras.ops.{name.lower()} {ctx.path!r} on a {ctx.input_dtype} tensor: Keras' TF "
            "backend takes float32 or float64 only (its call raises); cast the signal first",
            [(ctx.path, name, f"{ctx.input_dtype} input")])
    return ctx.input_dtype


def _pair(ctx: Context, node) -> list:
    return [ctx.call_function(operator.getitem, node, i) for i in (0, 1)]


@register_op(policy=Policy.CANONICAL, supports=lambda op: _window_unsupported(op.window))
def STFT(ctx: Context, op, x) -> list:
    """keras.ops.stft(x, sequence_length, sequence_stride, fft_length, window, center):
    ``(real, imag)`` over the last axis (reflect pad when ``center``; no frame when the
    signal is shorter than ``fft_length``, as tf.signal.frame)."""
    dtype = _signal_dtype(ctx, "STFT")
    window = padded_window(op.window, op.sequence_length, op.fft_length, dtype)
    module = KerasSTFT(op.fft_length, op.sequence_stride, window, bool(op.center))
    return _pair(ctx, ctx.call_module(module, x))


@register_op(policy=Policy.CANONICAL)
def ExtractSequences(ctx: Context, op, x) -> object:
    """keras.ops.extract_sequences(x, sequence_length, sequence_stride): tf.signal.frame
    over the last axis (an empty frame axis, not an error, for a shorter signal)."""
    module = KerasFrames(int(op.sequence_length), int(op.sequence_stride))
    return ctx.call_module(module, x)


def inverse_window(window, sequence_length: int, fft_length: int, step: int,
                   dtype: str) -> torch.Tensor | None:
    """The window Keras' TF ``istft`` multiplies each frame by:
    ``tf.signal.inverse_stft_window_fn(step)`` of its zero-padded forward window. Unlike
    its ``stft``, Keras' ``istft`` takes any string but ``'hann'`` as ``'hamming'``."""
    import tensorflow as tf

    if isinstance(window, str) and window != "hann":
        window = "hamming"
    forward = padded_window(window, sequence_length, fft_length, dtype)
    if forward is None:
        return None
    window_fn = tf.signal.inverse_stft_window_fn(
        step, lambda frame_step, dtype: tf.constant(forward.numpy()))
    return torch.from_numpy(window_fn(fft_length, tf.as_dtype(dtype)).numpy())


@register_op(policy=Policy.CANONICAL)
def ISTFT(ctx: Context, op, x) -> object:
    """keras.ops.istft((real, imag), sequence_length, sequence_stride, fft_length, length,
    window, center): TF's inverse_stft (irfft, inverse window, overlap-add) and Keras'
    slice of the result."""
    dtype = _signal_dtype(ctx, "ISTFT")
    window = inverse_window(op.window, op.sequence_length, op.fft_length, op.sequence_stride,
                            dtype)
    length = None if op.length is None else int(op.length)
    module = KerasISTFT(op.fft_length, op.sequence_stride, op.fft_length, window, length,
                        bool(op.center))
    real, imag = x
    return ctx.call_module(module, real, imag)


def _kernel(variable) -> nn.Parameter:
    """A Keras ``[frame_length, 1, bins]`` kernel as torch's conv1d weight."""
    array = np.asarray(keras.ops.convert_to_numpy(variable), dtype=np.float32)
    tensor = torch.from_numpy(np.ascontiguousarray(array.transpose(2, 1, 0)))
    return nn.Parameter(tensor, requires_grad=bool(variable.trainable))


@register_layer(policy=Policy.CANONICAL)
def STFTSpectrogram(ctx: Context, layer, inputs):
    """keras.layers.STFTSpectrogram -> KerasSTFTSpectrogram: the layer's real/imaginary
    kernels as conv1d weights over each channel (stride ``frame_step``, TF ``SAME`` or
    ``valid``), ``mode`` and ``expand_dims`` as Keras computes them, in Keras' order (either
    data_format)."""
    cfg = layer.get_config()
    bins = layer._fft_length // 2 + 1
    module = KerasSTFTSpectrogram(cfg["mode"], cfg["frame_length"], layer._frame_step, bins,
                                  cfg["padding"], cfg["expand_dims"],
                                  not channels_first_layer(layer), keras.config.epsilon())
    for name in ("real_kernel", "imag_kernel"):
        if getattr(module, name) is not None:
            setattr(module, name, _kernel(getattr(layer, name)))
    return ctx.call_module(module, inputs)


def _mel_unsupported(layer) -> str | None:
    if layer.power_to_db and layer.top_db is None:
        return "power_to_db with top_db=None (Keras' own call raises)"
    return _window_unsupported(layer.window)


def mel_matrix(layer) -> torch.Tensor:
    """Keras' HTK filterbank for ``layer`` (its own ``linear_to_mel_weight_matrix``, float32
    on TF), ``[fft_length // 2 + 1, num_mel_bins]``."""
    matrix = layer.linear_to_mel_weight_matrix(
        num_mel_bins=layer.num_mel_bins, num_spectrogram_bins=layer.fft_length // 2 + 1,
        sampling_rate=layer.sampling_rate, lower_edge_hertz=layer.min_freq,
        upper_edge_hertz=layer.max_freq)
    return torch.from_numpy(np.asarray(keras.ops.convert_to_numpy(matrix), dtype=np.float32))


def reference_db(layer) -> float:
    """Keras' ``10 log10(max(|ref_power|, min_power))`` in float32 on TF."""
    ops = keras.ops
    ref = ops.abs(ops.convert_to_tensor(layer.ref_power, "float32"))
    value = 10.0 * ops.log10(ops.maximum(ref, layer.min_power))
    return float(ops.convert_to_numpy(value))


@register_layer(policy=Policy.CANONICAL, supports=_mel_unsupported)
def MelSpectrogram(ctx: Context, layer, inputs):
    """keras.layers.MelSpectrogram -> KerasMelSpectrogram (centered reflect-padded STFT,
    TF's window, Keras' HTK filterbank, power_to_db with the batch-wide ``top_db`` floor)."""
    window = padded_window(layer.window, layer.sequence_length, layer.fft_length)
    module = KerasMelSpectrogram(layer.fft_length, layer.sequence_stride, window,
                                 mel_matrix(layer), bool(layer.power_to_db),
                                 float(layer.top_db or 0.0), float(layer.mag_exp),
                                 float(layer.min_power), reference_db(layer))
    return ctx.call_module(module, inputs)
