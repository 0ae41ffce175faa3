"""Keras' audio front ends -> torch: STFTSpectrogram, MelSpectrogram, keras.ops.stft/istft.

Real Keras models over the layers' configurations, converted and compared with Keras' own
output on random audio-like signals, at every signal length a ``None`` time axis promises
(frame counts that change, signals shorter than one frame), silence (log of 0 floored at
epsilon / min_power) and a batch whose loudest sample sets MelSpectrogram's top_db floor.
scipy is not installed here: STFTSpectrogram's named windows need it, so its cases pass the
window as an array (the kernels are the layer's weights either way; one named-window case
runs where scipy is).
"""

import copy

import keras
import numpy as np
import pytest
import torch

import crossport
from crossport.parity.metrics import normalized_error
from tests.to_torch.harness import assert_to_torch, chain, load_written

L = keras.layers
HANN64 = np.hanning(66)[1:-1]  # a symmetric window given as an array (scipy-free)


def _audio(shape, seed):
    """A few tones plus noise, the loudness varying per sample."""
    rng = np.random.default_rng(seed)
    t = np.arange(shape[1])[None, :] / 8000.0
    batch = [sum(np.sin(2 * np.pi * rng.uniform(50, 3500) * t + rng.uniform(0, 6))
                 for _ in range(3))[0] * rng.uniform(0.1, 2.0) for _ in range(shape[0])]
    signal = np.stack(batch).reshape(shape[:2] + (1,) * (len(shape) - 2))
    signal = signal + 0.05 * rng.standard_normal(shape)
    return signal.astype("float32")


def _compare(model, conv, x, atol):
    ref = [np.asarray(o) for o in keras.tree.flatten(model(x, training=False))]
    with torch.no_grad():
        got = [t.numpy() for t in keras.tree.flatten(conv.module(torch.from_numpy(x)))]
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        assert r.shape == g.shape, (x.shape, r.shape, g.shape)
        assert r.dtype == g.dtype
        err = normalized_error(r, g)
        assert err <= atol, f"length {x.shape}: normalized error {err:.2e} > {atol:.0e}"


def assert_lengths(model, shapes, atol=1e-4, inputs=_audio):
    """Convert at the first shape, then compare Keras and torch at every shape."""
    conv = crossport.to_torch_with_report(model, torch.from_numpy(inputs(shapes[0], 0)),
                                          atol=atol)
    assert "keras" not in conv.module.code and "tensorflow" not in conv.module.code
    for i, shape in enumerate(shapes):
        _compare(model, conv, inputs(shape, i + 1), atol)
    return conv


def _stft(**kw):
    kw = {"frame_length": 64, "frame_step": 16, "window": HANN64, **kw}
    return L.STFTSpectrogram(**kw)


STFT_LAYERS = {
    "log-valid": _stft(),
    "log-same": _stft(padding="same"),
    "magnitude-same": _stft(mode="magnitude", padding="same"),
    "psd": _stft(mode="psd"),
    "real": _stft(mode="real"),
    "imag": _stft(mode="imag", padding="same"),
    "angle": _stft(mode="angle"),
    "stft-pairs": _stft(mode="stft", padding="same"),
    "fft-length-padded": _stft(fft_length=100, frame_step=20),
    "odd-frame-length": _stft(frame_length=45, window=np.hanning(45), padding="same"),
    "default-step-half-frame": _stft(frame_step=None),
    "no-window": _stft(window=None, mode="magnitude"),
    "scaling-spectrum": _stft(scaling="spectrum", mode="magnitude"),
    "scaling-none": _stft(scaling=None, mode="psd"),
    "expand-dims": _stft(expand_dims=True, padding="same"),
    "channels-first": _stft(data_format="channels_first", padding="same"),
    "channels-first-expand": _stft(data_format="channels_first", expand_dims=True),
    "step-equals-frame": _stft(frame_step=64, padding="same"),
}


@pytest.mark.parametrize("layer", STFT_LAYERS.values(), ids=STFT_LAYERS.keys())
def test_stft_spectrogram_every_length(layer):
    first = layer.data_format == "channels_first"
    model = chain((3, None) if first else (None, 3), layer)

    def inputs(shape, seed):
        x = _audio((shape[0], shape[1], 3), seed)
        return np.ascontiguousarray(np.moveaxis(x, 1, 2)) if first else x

    # lengths: one frame exactly, one sample more, odd, long; 'same' also below one frame
    lengths = [64, 65, 333, 1000] + ([7] if layer.padding == "same" else [])
    assert_lengths(model, [(2, n) for n in lengths], inputs=inputs)


def test_stft_spectrogram_trained_kernels_and_graph():
    """Kernels changed by training are copied, not recomputed from the config; the layer
    sits between a Conv1D and a Dense (the conv's channels-first output is reordered)."""
    stft = _stft(mode="log", padding="same")
    model = chain((256, 2), L.Conv1D(2, 5, padding="same"), stft, L.Dense(4))
    rng = np.random.default_rng(3)
    for kernel in (stft.real_kernel, stft.imag_kernel):
        kernel.assign(np.asarray(kernel.numpy()) + rng.normal(0, 0.01, kernel.shape))
    conv = assert_to_torch(model)
    assert {p.requires_grad for p in conv.module.parameters()} == {True}


def test_stft_spectrogram_non_trainable_and_source(tmp_path):
    layer = _stft(mode="psd", trainable=False)
    model = chain((512, 1), layer)
    conv = assert_to_torch(model, live=False)
    assert not any(p.requires_grad for p in conv.module.parameters())
    written = load_written(crossport.to_torch_source(conv, tmp_path / "stft.py")).build_model()
    x = torch.from_numpy(_audio((2, 512, 1), 5))
    torch.testing.assert_close(written(x), conv.module(x), rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["log", "magnitude", "angle", "psd"])
def test_stft_spectrogram_silence(mode):
    """Silence: log/magnitude floored at epsilon, angle of +0 + 0j, psd exactly 0."""
    model = chain((None, 2), _stft(mode=mode, padding="same"))
    assert_lengths(model, [(2, 300), (1, 64), (2, 65)],
                   inputs=lambda shape, seed: np.zeros((*shape, 2), "float32"))


def test_stft_spectrogram_named_window():
    pytest.importorskip("scipy")  # Keras builds named windows with scipy.signal
    model = chain((None, 1), L.STFTSpectrogram(frame_length=128, frame_step=32,
                                               window="hamming", periodic=True))
    assert_lengths(model, [(2, 400), (2, 999)], inputs=lambda s, seed: _audio((*s, 1), seed))


def _mel(**kw):
    kw = {"fft_length": 256, "sequence_stride": 64, "num_mel_bins": 40,
          "sampling_rate": 8000, **kw}
    return L.MelSpectrogram(**kw)


MEL_LAYERS = {
    "defaults-db": _mel(),
    "hamming": _mel(window="hamming"),
    "no-window": _mel(window=None),
    "array-window": _mel(window=np.hanning(256).astype("float32")),
    "sequence-shorter-than-fft": _mel(sequence_length=201),
    "power-spectrum-linear": _mel(power_to_db=False),
    "magnitude-exp-1": _mel(mag_exp=1.0),
    "fractional-exp": _mel(mag_exp=1.5, power_to_db=False),
    "small-top-db": _mel(top_db=20.0),
    "ref-and-min-power": _mel(ref_power=-3.0, min_power=1e-4),
    "band-edges": _mel(min_freq=300.0, max_freq=3000, num_mel_bins=24),
    "fft-512-many-bins": _mel(fft_length=512, sequence_stride=160, num_mel_bins=128,
                              sampling_rate=16000),
    "odd-fft": _mel(fft_length=255, sequence_stride=50),
}


@pytest.mark.parametrize("layer", MEL_LAYERS.values(), ids=MEL_LAYERS.keys())
def test_mel_spectrogram_every_length(layer):
    model = chain((None,), layer)
    # lengths: a frame count change, odd, long; one just above half a frame (reflect pad)
    lengths = [1000, 1063, 4000, layer.fft_length // 2 + 1]
    assert_lengths(model, [(2, n) for n in lengths], atol=1e-4)


def test_mel_spectrogram_batch_sets_top_db_floor():
    """Keras floors at top_db below the maximum of the whole batch: a quiet sample next
    to a loud one is floored by the loud one's level."""
    def inputs(shape, seed):
        x = _audio(shape, seed)
        x[0] *= 100.0
        x[1] *= 0.001
        return x

    assert_lengths(chain((None,), _mel(top_db=40.0)), [(2, 2000), (2, 700)], inputs=inputs)


def test_mel_spectrogram_silence():
    """Silence: every power floored at min_power (-100 dB), the top_db floor not binding."""
    assert_lengths(chain((None,), _mel(ref_power=2.0)), [(2, 1000), (1, 300)],
                   inputs=lambda shape, seed: np.zeros(shape, "float32"))


def test_mel_spectrogram_too_short_for_reflect_pad_fails_in_both():
    """A signal no longer than fft_length // 2 cannot be reflect-padded: Keras (TF) raises,
    and so does the torch module (never a silently made-up frame)."""
    model = chain((None,), _mel())
    conv = crossport.to_torch_with_report(model, torch.from_numpy(_audio((2, 1000), 0)))
    x = _audio((2, 128), 1)
    with pytest.raises(Exception):
        model(x)
    with pytest.raises(RuntimeError):
        conv.module(torch.from_numpy(x))


def test_mel_spectrogram_in_a_model(tmp_path):
    x = keras.Input((None,))
    y = _mel(num_mel_bins=32)(x)
    y = L.Conv1D(8, 3, padding="same", data_format="channels_first")(y)
    y = L.GlobalAveragePooling1D(data_format="channels_first")(y)
    model = keras.Model(x, L.Dense(3)(y))
    conv = assert_lengths(model, [(2, 1200), (2, 3000)])
    written = load_written(crossport.to_torch_source(conv, tmp_path / "mel.py")).build_model()
    signal = torch.from_numpy(_audio((2, 1500), 9))
    torch.testing.assert_close(written(signal), conv.module(signal), rtol=0, atol=0)


OPS_STFT = {
    "hann-center": dict(sequence_length=128, sequence_stride=32, fft_length=128),
    "hamming-no-center": dict(sequence_length=100, sequence_stride=25, fft_length=128,
                              window="hamming", center=False),
    "no-window": dict(sequence_length=64, sequence_stride=16, fft_length=64, window=None),
    "array-window": dict(sequence_length=60, sequence_stride=20, fft_length=64,
                         window=np.hanning(60).astype("float32")),
    "odd-fft": dict(sequence_length=63, sequence_stride=17, fft_length=63),
}


@pytest.mark.parametrize("kw", OPS_STFT.values(), ids=OPS_STFT.keys())
def test_ops_stft_every_length(kw):
    x = keras.Input((3, None))
    model = keras.Model(x, list(keras.ops.stft(x, **kw)))
    # without center, a signal shorter than fft_length has no frame in Keras
    lengths = [500, 533, 2 * kw["fft_length"]] + ([40] if kw.get("center") is False else [])
    assert_lengths(model, [(2, n) for n in lengths],
                   inputs=lambda shape, seed: _audio((shape[0], 3, shape[1]), seed))


OPS_ISTFT = {
    "hann-center": (dict(sequence_length=128, sequence_stride=32, fft_length=128), {}),
    "length": (dict(sequence_length=128, sequence_stride=32, fft_length=128), {"length": 300}),
    "hamming-no-center": (dict(sequence_length=100, sequence_stride=25, fft_length=128,
                               window="hamming", center=False), {}),
    "no-window": (dict(sequence_length=64, sequence_stride=64, fft_length=64, window=None),
                  {}),
}


def test_ops_istft_other_window_name_is_hamming():
    """Keras' TF istft reads any window name but 'hann' as 'hamming' (its stft raises)."""
    x = keras.Input((None,))
    spectrum = keras.ops.stft(x, 100, 25, 128, window="hamming")
    model = keras.Model(x, keras.ops.istft(spectrum, 100, 25, 128, window="blackman"))
    assert_lengths(model, [(2, 600), (2, 901)])


@pytest.mark.parametrize("kw, extra", OPS_ISTFT.values(), ids=OPS_ISTFT.keys())
def test_ops_istft_round_trip(kw, extra):
    x = keras.Input((None,))
    spectrum = keras.ops.stft(x, **kw)
    model = keras.Model(x, keras.ops.istft(spectrum, **kw, **extra))
    assert_lengths(model, [(2, 600), (2, 777), (2, 1024)])


def test_ops_istft_of_given_spectrum():
    real, imag = keras.Input((None, 65)), keras.Input((None, 65))
    model = keras.Model([real, imag], keras.ops.istft((real, imag), 128, 32, 128))
    rng = np.random.default_rng(0)
    example = [torch.from_numpy(rng.standard_normal((2, 9, 65)).astype("float32"))
               for _ in range(2)]
    conv = crossport.to_torch_with_report(model, tuple(example))
    for frames in (9, 4, 20):
        args = [rng.standard_normal((2, frames, 65)).astype("float32") for _ in range(2)]
        ref = np.asarray(model(args))
        got = conv.module(*map(torch.from_numpy, args)).numpy()
        assert ref.shape == got.shape
        assert normalized_error(ref, got) <= 1e-4


def test_unsupported_window_is_refused():
    model = chain((1000,), _mel(window="blackman"))
    with pytest.raises(crossport.UnsupportedLayerError, match="blackman"):
        crossport.to_torch(model, torch.from_numpy(_audio((2, 1000), 0)))


@pytest.mark.parametrize("window", ["hann", "hamming", None])
def test_ops_stft_istft_float64(window):
    """Keras' TF stft computes in the signal's dtype (its window too): float64 stays float64
    (the module cast it to float32 before, and failed its own dtype check)."""
    x = keras.Input((None,), dtype="float64")
    spectrum = keras.ops.stft(x, 100, 25, 128, window=window)
    model = keras.Model(x, [*spectrum, keras.ops.istft(spectrum, 100, 25, 128, window=window)])
    assert_lengths(model, [(2, 600), (2, 901)], atol=1e-6,
                   inputs=lambda shape, seed: _audio(shape, seed).astype("float64"))


def test_ops_stft_of_ints_is_refused():
    x = keras.Input((None,), dtype="int32")
    model = keras.Model(x, keras.ops.stft(x, 64, 16, 64)[0])
    with pytest.raises(crossport.UnsupportedLayerError, match="float32 or float64"):
        crossport.to_torch(model, torch.zeros((2, 300), dtype=torch.int32))


@pytest.mark.parametrize("length, stride", [(64, 16), (50, 50), (7, 3)])
def test_ops_extract_sequences(length, stride, tmp_path):
    """tf.signal.frame: frames at every length, none (an empty axis) below one frame."""
    x = keras.Input((2, None))
    model = keras.Model(x, keras.ops.extract_sequences(x, length, stride) * 2.0)
    conv = assert_lengths(model, [(2, n) for n in (300, 301, length, length - 1, 1)],
                          inputs=lambda shape, seed: _audio((shape[0], 2, shape[1]), seed))
    written = load_written(crossport.to_torch_source(conv, tmp_path / "f.py")).build_model()
    signal = torch.from_numpy(_audio((2, 2, 333), 4))
    torch.testing.assert_close(written(signal), conv.module(signal), rtol=0, atol=0)


def _with_nan_and_inf(shape, seed):
    x = _audio(shape, seed)
    x[0, shape[1] // 2] = np.nan
    x[-1, shape[1] // 3] = np.inf
    return x


@pytest.mark.parametrize("layer", [_stft(mode=m) for m in ("log", "psd", "angle", "stft")] +
                         [_mel(), _mel(power_to_db=False)],
                         ids=["stft-log", "stft-psd", "stft-angle", "stft-pairs", "mel-db",
                              "mel-linear"])
def test_nan_and_inf_positions(layer):
    """NaN/inf reach the frames holding them (inf - inf in the DFT: NaN); in dB the batch
    maximum is NaN, so every value is (Keras' maximum propagates it, as torch's)."""
    stft = isinstance(layer, L.STFTSpectrogram)
    model = chain((None, 1) if stft else (None,), layer)

    def inputs(shape, seed):
        return _with_nan_and_inf(shape, seed)[..., None] if stft else \
            _with_nan_and_inf(shape, seed)

    conv = crossport.to_torch_with_report(model, torch.from_numpy(_audio((2, 600), 0)[
        ..., None] if stft else _audio((2, 600), 0)))
    for i, shape in enumerate([(2, 600), (3, 1000)]):
        _compare(model, conv, inputs(shape, i), 1e-4)


def test_mel_spectrogram_module_half_computes_in_float32_as_keras():
    """Keras' MelSpectrogram computes its STFT in float32 unless its compute dtype is
    float32/float64 and casts the result to that dtype. The converted module moved with
    ``.half()`` (the converted modules follow ``.double()`` / ``.half()``) raised a dtype
    mismatch (a float32 spectrum times the half mel matrix); it now runs Keras' float32
    computation and rounds once to float16 at the end."""
    model = chain((None,), _mel())
    conv = crossport.to_torch_with_report(model, torch.from_numpy(_audio((2, 1000), 0)))
    assert conv.report.passed  # the float32 module computes Keras' function
    float32_module = copy.deepcopy(conv.module)
    x = torch.from_numpy(_audio((2, 1000), 1).astype("float16"))
    got = conv.module.half()(x).detach().numpy()
    assert got.dtype == np.float16
    # exactly the float32 computation rounded once (against Keras itself the float32
    # spectra differ by rounding, which a cancellation can carry across a float16 ulp)
    want = float32_module(x.float()).detach().half().numpy()
    np.testing.assert_array_equal(got, want)
