"""Keras' audio front ends as torch modules: ``STFTSpectrogram``, ``MelSpectrogram`` and
``keras.ops.stft`` / ``istft`` / ``extract_sequences``, computed as Keras' TF backend computes them.

The constants Keras derives from its config (TF's periodic Hann/Hamming windows, the HTK
mel filterbank, the inverse-STFT window) are computed by Keras/TF at conversion time and
held as buffers, so they are TF's float32 values bit for bit; the run-time arithmetic
follows Keras' order of operations (sqrt then ``pow(mag_exp)``, ``log(x) / log(10)``, the
``top_db`` floor from the maximum of the whole batch). None needs keras or TF at run time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from crossport.torch_layers.padding import same_padding

_LN10 = 2.3025851249694824  # float32(log(10)): TF's log10 is log(x) / log(10.0f)


def reflect_pad_last(x: torch.Tensor, pad: int) -> torch.Tensor:
    """``tf.pad(x, mode="reflect")`` by ``pad`` on both sides of the last axis, any rank
    (torch's reflect pad takes 2-D/3-D inputs; both refuse ``pad >= length``)."""
    if pad == 0:
        return x
    lead = x.shape[:-1]
    flat = F.pad(x.reshape(-1, 1, x.shape[-1]), (pad, pad), mode="reflect")
    return flat.reshape(*lead, flat.shape[-1])


def frames_of(x: torch.Tensor, length: int, step: int) -> torch.Tensor:
    """``tf.signal.frame(x, length, step, pad_end=False)`` over the last axis: no frame
    (an empty axis, not an error) when the signal is shorter than one frame."""
    if x.shape[-1] < length:
        return x.new_zeros((*x.shape[:-1], 0, length))
    return x.unfold(-1, length, step)


class KerasFrames(nn.Module):
    """``keras.ops.extract_sequences(x, sequence_length, sequence_stride)``: TF's
    ``tf.signal.frame`` over the last axis, ``[..., frames, sequence_length]`` (no frame
    when the signal is shorter than one).

    Example:
        >>> import torch
        >>> KerasFrames(4, 2)(torch.arange(9.0)).shape
        torch.Size([3, 4])
    """

    def __init__(self, sequence_length: int, sequence_stride: int) -> None:
        super().__init__()
        self.sequence_length, self.sequence_stride = sequence_length, sequence_stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return frames_of(x, self.sequence_length, self.sequence_stride)


def keras_stft(x: torch.Tensor, window: torch.Tensor | None, step: int, fft_length: int,
               center: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Keras' TF ``stft``: reflect pad ``fft_length // 2`` (``center``), frames of
    ``fft_length`` (the window zero-padded to it; no window: the whole frame), rfft."""
    if center:
        x = reflect_pad_last(x, fft_length // 2)
    frames = frames_of(x, fft_length, step)
    if window is not None:
        frames = frames * window
    if frames.numel() == 0:  # no frame: MKL's FFT refuses an empty batch
        empty = frames.new_zeros((*frames.shape[:-1], fft_length // 2 + 1))
        return empty, empty.clone()
    spectrum = torch.fft.rfft(frames, n=fft_length, dim=-1)
    return spectrum.real.contiguous(), spectrum.imag.contiguous()


class KerasSTFT(nn.Module):
    """``keras.ops.stft(x, sequence_length, sequence_stride, fft_length, window, center)``
    over the last axis: ``(real, imag)``, each ``[..., frames, fft_length // 2 + 1]``.

    ``window``: TF's window zero-padded to ``fft_length`` (or None).

    Example:
        >>> import torch
        >>> real, imag = KerasSTFT(8, 4, torch.ones(8), True)(torch.randn(2, 32))
        >>> real.shape
        torch.Size([2, 9, 5])
    """

    def __init__(self, fft_length: int, sequence_stride: int, window: torch.Tensor | None,
                 center: bool) -> None:
        super().__init__()
        self.fft_length, self.sequence_stride, self.center = fft_length, sequence_stride, center
        self.register_buffer("window", window)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return keras_stft(x, self.window, self.sequence_stride, self.fft_length, self.center)


class KerasISTFT(nn.Module):
    """``keras.ops.istft((real, imag), ...)``: TF's ``inverse_stft`` (irfft of each frame
    cut to the frame length, times the inverse window Keras passes, overlap-add), then
    Keras' slice ``[start:end]`` (``fft_length // 2`` off each end when ``center``, or
    ``length`` samples).

    ``window``: the inverse-STFT window (TF's ``inverse_stft_window_fn``), or None.

    Example:
        >>> import torch
        >>> KerasISTFT(8, 4, 8, torch.ones(8), None, False)(torch.ones(1, 3, 5),
        ...                                                 torch.zeros(1, 3, 5)).shape
        torch.Size([1, 16])
    """

    def __init__(self, fft_length: int, sequence_stride: int, frame_length: int,
                 window: torch.Tensor | None, length: int | None, center: bool) -> None:
        super().__init__()
        self.fft_length, self.sequence_stride = fft_length, sequence_stride
        self.frame_length, self.length, self.center = frame_length, length, center
        self.register_buffer("window", window)

    def forward(self, real: torch.Tensor, imag: torch.Tensor) -> torch.Tensor:
        frames = torch.fft.irfft(torch.complex(real, imag), n=self.fft_length, dim=-1)
        frames = frames[..., :self.frame_length]
        if self.window is not None:
            frames = frames * self.window
        signal = overlap_and_add(frames, self.sequence_stride)
        start = self.fft_length // 2 if self.center else 0
        if self.length is not None:
            return signal[..., start:start + self.length]
        if self.center:
            return signal[..., start:signal.shape[-1] - self.fft_length // 2]
        expected = self.fft_length + self.sequence_stride * (real.shape[-2] - 1)
        return signal[..., :expected]


def overlap_and_add(frames: torch.Tensor, step: int) -> torch.Tensor:
    """``tf.signal.overlap_and_add``: ``[..., n, length]`` frames summed at ``i * step`` into
    ``[..., (n - 1) * step + length]`` (``F.fold`` adds them in frame order)."""
    *lead, count, length = frames.shape
    total = max(count - 1, 0) * step + length
    flat = frames.reshape(-1, count, length).transpose(1, 2)
    out = F.fold(flat, (1, total), (1, length), stride=(1, step))
    return out.reshape(*lead, total)


class KerasSTFTSpectrogram(nn.Module):
    """``keras.layers.STFTSpectrogram`` on Keras-ordered ``[N, T, C]`` (``[N, C, T]`` when
    ``channels_last`` is False): each channel convolved with the layer's real and imaginary
    DFT kernels (parameters, trainable as in Keras; TF ``SAME`` padding), then ``mode``.

    Example:
        >>> import torch
        >>> m = KerasSTFTSpectrogram("log", 16, 8, 9, "same", False, True, 1e-7)
        >>> m(torch.randn(2, 64, 3)).shape
        torch.Size([2, 8, 27])
    """

    def __init__(self, mode: str, frame_length: int, frame_step: int, freq_bins: int,
                 padding: str, expand_dims: bool, channels_last: bool, epsilon: float) -> None:
        super().__init__()
        self.mode, self.frame_length, self.frame_step = mode, frame_length, frame_step
        self.freq_bins, self.padding, self.expand_dims = freq_bins, padding, expand_dims
        self.channels_last, self.epsilon = channels_last, epsilon
        shape = (freq_bins, 1, frame_length)
        self.real_kernel = nn.Parameter(torch.zeros(shape)) if mode != "imag" else None
        self.imag_kernel = nn.Parameter(torch.zeros(shape)) if mode != "real" else None

    def _conv(self, x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
        channels, time = (x.shape[2], x.shape[1]) if self.channels_last else x.shape[1:]
        signal = (x.transpose(1, 2) if self.channels_last else x).reshape(-1, 1, time)
        if self.padding == "same":
            signal = F.pad(signal, same_padding(time, self.frame_length, self.frame_step))
        out = F.conv1d(signal, kernel, stride=self.frame_step)
        return out.reshape(-1, channels, out.shape[1], out.shape[2])  # [N, C, F, T']

    def _adjust(self, out: torch.Tensor) -> torch.Tensor:
        batch, channels, freq, time = out.shape
        if self.expand_dims:
            return out.permute(0, 3, 2, 1) if self.channels_last else out.transpose(2, 3)
        out = out.reshape(batch, channels * freq, time)
        return out.transpose(1, 2) if self.channels_last else out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        real = self._conv(x, self.real_kernel) if self.real_kernel is not None else None
        imag = self._conv(x, self.imag_kernel) if self.imag_kernel is not None else None
        if self.mode == "real":
            return self._adjust(real)
        if self.mode == "imag":
            return self._adjust(imag)
        if self.mode == "angle":
            return self._adjust(torch.atan2(imag, real))
        if self.mode == "stft":
            return self._adjust(torch.cat([real, imag], dim=2))
        power = real.square() + imag.square()
        if self.mode == "psd":
            return self._adjust(power + F.pad(power[:, :, 1:-1, :], (0, 0, 1, 1)))
        magnitude = self._adjust(torch.sqrt(torch.clamp(power, min=self.epsilon)))
        if self.mode == "magnitude":
            return magnitude
        return torch.log(torch.clamp(magnitude, min=self.epsilon))


class KerasMelSpectrogram(nn.Module):
    """``keras.layers.MelSpectrogram``: centered STFT magnitude ``** mag_exp``, the HTK
    filterbank Keras builds (``mel_matrix``, ``[fft_length // 2 + 1, num_mel_bins]``), then
    ``power_to_db`` (``ref_db`` is Keras' ``10 log10(max(|ref_power|, min_power))``; the
    ``top_db`` floor is relative to the maximum over the whole batch, as in Keras), mel bins
    before frames.

    Example:
        >>> import torch
        >>> m = KerasMelSpectrogram(16, 8, torch.ones(16), torch.ones(9, 4), True, 80.0,
        ...                         2.0, 1e-10, 0.0)
        >>> m(torch.randn(2, 64)).shape
        torch.Size([2, 4, 9])
    """

    def __init__(self, fft_length: int, sequence_stride: int, window: torch.Tensor | None,
                 mel_matrix: torch.Tensor, power_to_db: bool, top_db: float, mag_exp: float,
                 min_power: float, ref_db: float) -> None:
        super().__init__()
        self.fft_length, self.sequence_stride = fft_length, sequence_stride
        self.power_to_db, self.top_db, self.mag_exp = power_to_db, top_db, mag_exp
        self.min_power, self.ref_db = min_power, ref_db
        self.register_buffer("window", window)
        self.register_buffer("mel_matrix", mel_matrix)

    def _apply(self, fn, recurse=True):
        """``Module.to`` / ``.half()`` move the window and filterbank but keep them float32
        (or float64): Keras builds and applies them in float32 whatever the policy."""
        kept = {name: b for name, b in self._buffers.items() if b is not None}
        super()._apply(fn, recurse)
        for name, old in kept.items():
            new = self._buffers[name]
            if new.dtype not in (torch.float32, torch.float64):
                self._buffers[name] = old.to(new.device)
        return self

    def _db(self, power: torch.Tensor) -> torch.Tensor:
        floor = torch.tensor(self.min_power, dtype=power.dtype)
        log_spec = 10.0 * (torch.log(torch.maximum(power, floor)) / _LN10) - self.ref_db
        return torch.maximum(log_spec, log_spec.max() - self.top_db)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Keras computes the STFT in float32 unless its compute dtype is float32/float64,
        # then casts to that dtype: after .half(), float32 inside and one rounding at the end
        # (the constants stay float32: _apply)
        dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
        window = None if self.window is None else self.window.to(dtype)
        real, imag = keras_stft(x.to(dtype), window, self.sequence_stride, self.fft_length,
                                True)
        spec = torch.pow(torch.sqrt(real.square() + imag.square()), self.mag_exp)
        mel = torch.matmul(spec, self.mel_matrix.to(dtype))
        if self.power_to_db:
            mel = self._db(mel)
        return mel.transpose(-1, -2).to(x.dtype if x.is_floating_point() else dtype)

