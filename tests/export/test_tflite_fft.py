"""torch.fft in TFLite: RFFT2D is the one FFT builtin, for power-of-two lengths only.

An stft front end (rfft of n_fft = 2^k, |.|, real ops) exports builtin-only and passes the
re-check on LiteRT; an rfft of another length, a complex FFT and irfft are refused before
anything is written, naming the torch module and source line.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import crossport
from crossport.export.formats import tflite_op_names
from tests.ops.opcases import Fn, inputs
from tests.ops.test_fft import MelFrontEnd


class Spectral(nn.Module):
    """A named submodule computes the spectrum (the error must name ``spec``)."""

    def __init__(self, fn):
        super().__init__()
        self.spec = Fn(fn)

    def forward(self, x):
        return self.spec(x) * 2.0


def test_stft_front_end_exports_with_builtin_rfft2d(tmp_path):
    conversion = crossport.convert_with_report(MelFrontEnd().eval(), inputs((2, 200)))
    result = crossport.export(conversion, tmp_path / "m.tflite")
    assert result.passed
    ops = tflite_op_names(result.path)
    assert "RFFT2D" in ops and {"REAL", "IMAG"} <= set(ops)
    assert not [op for op in ops if op.startswith("Flex") or op == "CUSTOM"], ops


@pytest.mark.parametrize("fn, match", [
    (lambda x: torch.fft.rfft(x).abs(), r"RFFT2D\) takes power-of-two lengths: "
                                        r"aten\._fft_r2c of length 12 in spec"),
    (lambda x: torch.fft.fft2(x).real, r"no TFLite builtin: FFT2D, Complex \(from "
                                       r"aten\._fft_c2c in spec"),
    (lambda x: torch.fft.irfft(torch.fft.rfft(x, n=16), n=16), r"IRFFT.*aten\._fft_c2r in spec"),
], ids=["rfft-length-12", "fft2", "irfft"])
def test_an_fft_without_a_builtin_is_refused_naming_the_module(tmp_path, fn, match):
    conversion = crossport.convert_with_report(Spectral(fn).eval(), inputs((2, 4, 12)))
    with pytest.raises(crossport.ExportError, match=match) as info:
        crossport.export(conversion, tmp_path / "m.tflite")
    assert "opcases.py" in str(info.value)  # the source line of the fft call
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fn", [lambda x: torch.fft.fft2(x).real,
                                lambda x: torch.fft.irfft(torch.fft.rfft(x) * 2.0, n=12)],
                         ids=["fft2", "irfft"])
def test_keras_and_saved_model_keep_every_fft(tmp_path, fn):
    """.keras and SavedModel run TF's own FFT kernels: every FFT exports and re-checks."""
    conversion = crossport.convert_with_report(Spectral(fn).eval(), inputs((2, 4, 12)))
    assert crossport.export(conversion, tmp_path / "m.keras").passed
    assert crossport.export(conversion, tmp_path / "saved").passed


def test_mel_front_end_with_a_dynamic_batch():
    from tests.harness import assert_matches_at_sizes

    module = MelFrontEnd().eval()
    conversion = crossport.convert_with_report(module, inputs((2, 200)), dynamic_batch=True)
    assert conversion.report.passed
    assert_matches_at_sizes(module, conversion, [(1, 200), (5, 200)])
