"""torch.fft, torch.stft and complex values (docs/architecture.md, "Complex values").

Every row is a real torch module converted and compared on seeded random inputs by the
harness (its own compare) and by crossport's parity check. Complex values never reach a
model input or output: the rows end in ``.real``/``.imag``/``.abs()``/``view_as_real``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import crossport
from crossport.errors import DynamicDimError, UnsupportedOpError
from tests.harness import assert_converts, assert_matches_at_sizes
from tests.ops.opcases import Fn, case, inputs

fft = torch.fft
R2C, C2C, C2R = "aten__fft_r2c_default", "aten__fft_c2c_default", "aten__fft_c2r_default"
HANN = torch.hann_window(16)


def _spectral_filter():
    """GFNet-style global filter: a learned complex weight (a real parameter viewed as
    complex, folded to a complex constant) multiplies the spectrum."""
    torch.manual_seed(0)
    return Fn(lambda m, x: fft.irfft(fft.rfft(x, dim=1) * torch.view_as_complex(m.w),
                                     n=x.shape[1], dim=1), w=torch.randn(7, 5, 2))


class ComplexBuffer(nn.Module):
    """A complex64 buffer (a frequency response): a constant split into its parts."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(1)
        self.register_buffer("h", torch.randn(9, generator=gen, dtype=torch.cfloat))

    def forward(self, x):
        return fft.irfft(fft.rfft(x) * self.h - self.h.conj(), n=16)


class MelFrontEnd(nn.Module):
    """A log-mel front end inside the model: stft -> |.|**2 -> mel matrix -> log."""

    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(32))
        torch.manual_seed(0)
        self.mel = nn.Linear(17, 8, bias=False)
        with torch.no_grad():  # a filterbank's weights are non-negative
            self.mel.weight.abs_()

    def forward(self, audio):
        spec = torch.stft(audio, 32, hop_length=8, window=self.window, center=True,
                          pad_mode="reflect", return_complex=True)
        power = spec.abs() ** 2
        return torch.log(self.mel(power.transpose(1, 2)) + 1e-6)


def _fft_conv(x):
    """FFT convolution of the two halves of the channels (circular, zero-padded to n)."""
    a, b = x[:, :2], x[:, 2:]
    n = 2 * x.shape[-1]
    return fft.irfft(fft.rfft(a, n=n) * fft.rfft(b, n=n), n=n)


def conv_then(fn):
    """A conv first: the FFT receives a channels-last activation (the layout contract)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 1), Fn(fn))


CASES = [
    case("rfft-abs", Fn(lambda x: fft.rfft(x).abs()), (2, 3, 12), expect_converters=(
        R2C, "aten_abs_complex")),
    case("rfft-n-dim-ortho-real", Fn(lambda x: fft.rfft(x, n=10, dim=1, norm="ortho").real),
         (2, 8, 5), max_transposes=1, expect_converters=(R2C, "aten_view_as_real_default")),
    case("rfft-forward-norm-imag", Fn(lambda x: fft.rfft(x, norm="forward").imag), (3, 9),
         expect_converters=(R2C,)),
    case("fft-real-input-full-spectrum", Fn(lambda x: torch.view_as_real(fft.fft(x, dim=-1))),
         (2, 3, 7), expect_converters=(R2C, "aten_view_as_real_default")),
    case("ifft-of-fft-dim1", Fn(lambda x: fft.ifft(fft.fft(x, dim=1), dim=1).real),
         (2, 6, 5), max_transposes=1, expect_converters=(R2C, C2C)),
    case("ifft-ortho-n", Fn(lambda x: fft.ifft(fft.fft(x), n=11, norm="ortho").imag),
         (2, 8), expect_converters=(C2C, "aten_constant_pad_nd_complex")),
    case("fnet-fft2-real", Fn(lambda x: fft.fft2(x).real), (2, 8, 12),
         expect_converters=(C2C, "aten_to_copy_complex")),
    case("fnet-fft-fft-real", Fn(lambda x: fft.fft(fft.fft(x, dim=-1), dim=-2).real),
         (2, 8, 12), max_transposes=2, expect_converters=(R2C, C2C)),
    case("fftn-3d-backward", Fn(lambda x: fft.fftn(x, dim=(0, 1, 2)).abs()), (3, 4, 5),
         max_transposes=2, expect_converters=(C2C,)),
    case("ifft2-of-fft2", Fn(lambda x: fft.ifft2(fft.fft2(x) * 0.5).real), (2, 6, 10),
         expect_converters=(C2C, "aten_mul_complex")),
    case("irfft-of-rfft-scaled", Fn(lambda x: fft.irfft(fft.rfft(x) * 2.0, n=x.shape[-1])),
         (2, 3, 12), expect_converters=(R2C, C2R, "aten_mul_complex")),
    case("irfft-odd-n-ortho", Fn(lambda x: fft.irfft(fft.rfft(x), n=13, norm="ortho")),
         (2, 13), expect_converters=(C2R,)),
    case("irfft-forward-norm", Fn(lambda x: fft.irfft(fft.rfft(x, norm="forward"),
                                                      norm="forward")), (2, 10),
         expect_converters=(C2R,)),
    # irfft reads n//2+1 bins and ignores the imaginary DC (and Nyquist) parts, as torch
    case("irfft-view-as-complex", Fn(lambda x: fft.irfft(torch.view_as_complex(x), n=12)),
         (3, 7, 2), expect_converters=(C2R, "aten_view_as_complex_default")),
    case("rfft2-irfft2", Fn(lambda x: fft.irfft2(fft.rfft2(x) + 1.0, s=x.shape[-2:])),
         (2, 6, 8), max_transposes=4, expect_converters=(R2C, C2R, "aten_add_complex")),
    case("rfftn-real", Fn(lambda x: fft.rfftn(x, dim=(1, 2)).real), (2, 8, 12),
         max_transposes=3, expect_converters=(R2C,)),
    case("angle", Fn(lambda x: fft.rfft(x).angle()), (2, 3, 12),
         expect_converters=("aten_angle_complex",)),
    case("abs-squared", Fn(lambda x: fft.rfft(x).abs() ** 2), (2, 12),
         expect_converters=("aten_abs_complex",)),
    case("power-via-conj", Fn(lambda x: (fft.rfft(x) * fft.rfft(x).conj()).real), (2, 12),
         expect_converters=("aten_conj_complex", "aten_clone_default_per_part")),
    case("complex-add-sub-neg", Fn(lambda x: torch.view_as_real(
        -(fft.rfft(x) + fft.rfft(x * 2) - fft.rfft(x).conj() - 0.5))), (2, 10),
         expect_converters=("aten_add_complex", "aten_sub_complex", "aten_neg_complex")),
    case("complex-times-real-tensor", Fn(lambda x: torch.view_as_real(
        fft.rfft(x) * x[..., :6] / (x[..., 4:] ** 2 + 1))), (2, 3, 10),
         expect_converters=("aten_mul_complex", "aten_div_complex")),
    case("complex-shape-ops", Fn(lambda x: torch.view_as_real(torch.cat(
        [fft.rfft(x).permute(0, 2, 1)[:, 1:4].flip(1), fft.rfft(x).transpose(1, 2)[:, :2]],
        dim=1).reshape(2, -1).unsqueeze(0))), (2, 3, 10), max_transposes=2,
         expect_converters=("aten_cat_default_per_part", "aten_view_default_per_part",
                            "aten_permute_default_per_part", "aten_slice_tensor_per_part",
                            "aten_flip_default_per_part")),
    case("complex-squeeze", Fn(lambda x: torch.view_as_real(fft.rfft(x)[:, :1].squeeze(1))),
         (2, 3, 10), expect_converters=("aten_squeeze_dim_per_part",)),
    case("complex-scalars", Fn(lambda x: torch.view_as_real(fft.rfft(x) * 1j + 2j - 0.5)),
         (2, 10), expect_converters=("aten_mul_complex", "aten_add_complex")),
    case("complex-broadcast-parts", Fn(lambda x: torch.view_as_real(
        fft.rfft(x)[:, :1] + x[:, :, :6] * 2)), (2, 3, 10), expect_converters=(
        "aten_add_complex",)),
    case("torch-complex-and-polar", Fn(lambda x: fft.irfft(
        torch.complex(x, x[:1] * 2) + torch.polar(x.abs(), x), n=12)), (3, 7),
         expect_converters=("aten_complex_default", "aten_polar_default", C2R)),
    case("complex-sum-mean", Fn(lambda x: torch.view_as_real(
        fft.rfft(x).sum(1, keepdim=True) + fft.rfft(x).mean(-1, keepdim=True))), (2, 3, 10),
         expect_converters=("aten_sum_dim_intlist_per_part", "aten_mean_dim_per_part")),
    case("complex-select", Fn(lambda x: torch.view_as_real(fft.rfft(x)[:, 1])), (2, 3, 10),
         expect_converters=("aten_select_int_per_part",)),
    case("complex-expand", Fn(lambda x: torch.view_as_real(fft.rfft(x)[:, :1].expand(2, 3, 6))),
         (2, 1, 10), expect_converters=("aten_expand_default_per_part",)),
    case("spectral-filter-complex-weight", _spectral_filter(), (2, 12, 5), max_transposes=2,
         expect_converters=(R2C, C2R, "aten_mul_complex")),
    case("complex-buffer-and-conj", ComplexBuffer(), (2, 16),
         expect_converters=(R2C, C2R, "aten_mul_complex", "aten_sub_complex")),
    case("fft-conv", Fn(_fft_conv), (2, 4, 9), expect_converters=(R2C, C2R)),
    case("rfft-over-channels-after-conv", conv_then(lambda x: fft.rfft(x, dim=1).abs()),
         (1, 3, 5, 6), max_transposes=1, expect_converters=(R2C, "aten_conv_nd")),
    case("rfft-over-width-after-conv", conv_then(lambda x: fft.rfft(x, dim=-1).abs()),
         (1, 3, 5, 6), max_transposes=1, expect_converters=(R2C, "aten_conv_nd")),
    case("stft-center-reflect-abs", Fn(lambda x: torch.stft(
        x, 16, hop_length=4, window=HANN, center=True, return_complex=True).abs()), (2, 64),
         expect_converters=(R2C, "aten_unfold_default", "aten_permute_default_per_part")),
    case("stft-no-center-power", Fn(lambda x: torch.stft(
        x, 16, hop_length=5, window=HANN, center=False, return_complex=True).abs() ** 2),
         (2, 64), expect_converters=(R2C, "aten_unfold_default")),
    case("stft-short-window-normalized", Fn(lambda x: torch.view_as_real(torch.stft(
        x, 12, hop_length=3, win_length=8, window=torch.hann_window(8), normalized=True,
        return_complex=True))), (3, 50), expect_converters=(R2C, "aten_unfold_default")),
    # the stft's transpose and the one before the mel Linear only relabel the layout
    case("mel-front-end", MelFrontEnd(), (2, 200),
         expect_converters=(R2C, "aten_unfold_default", "aten_abs_complex")),
    case("unfold-middle-dim", Fn(lambda x: x.unfold(1, 3, 2)), (2, 9, 4),
         expect_converters=("aten_unfold_default",)),
    # Llama 4's rotary: a .to() of a complex tensor already of that dtype leaves a dtype
    # assertion on the complex value in the graph (it was refused as 'no converter')
    case("complex-rotary-with-noop-to", Fn(lambda x, f: torch.view_as_real(
        torch.view_as_complex(x.reshape(2, 8, 2, 2)).to(x.device, torch.complex64)
        * torch.view_as_complex(f.reshape(8, 2, 2))).flatten(2)), [(2, 8, 4), (8, 4)],
         expect_converters=("aten_assert_tensor_metadata_complex",)),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_fft(module, shapes, kwargs):
    kwargs = {"max_transposes": 0, **kwargs}
    conversion = assert_converts(module, inputs(shapes), **kwargs)
    # crossport's own check (example + fresh inputs, float64 verdict past atol) agrees
    report = crossport.convert_with_report(module, inputs(shapes)).report
    assert report.passed, report.summary()
    assert conversion.model is not None


def test_complex_abs_is_hypot_at_the_extremes():
    """|z| neither overflows nor flushes where a² + b² would (torch's hypot), and an
    infinite part gives inf even beside a NaN."""
    real = torch.tensor([[3e30, 1e-30, 0.0, float("inf"), float("nan"), 3.0]])
    imag = torch.tensor([[4e30, 1e-30, 0.0, float("nan"), 1.0, -4.0]])
    module = Fn(lambda a, b: torch.view_as_complex(torch.stack([a, b], -1)).abs()).eval()
    model = crossport.convert(module, (real, imag), check=False)
    got = model([real.numpy(), imag.numpy()])
    torch.testing.assert_close(torch.as_tensor(got.numpy()), module(real, imag),
                               rtol=1e-6, atol=0, equal_nan=True)


def test_dynamic_batch_and_other_dims():
    module = Fn(lambda x: fft.irfft(fft.rfft(x, dim=1) * 2.0, n=12, dim=1).abs()).eval()
    conversion = crossport.convert_with_report(module, inputs((2, 12, 5)), dynamic_batch=True,
                                               dynamic_dims={0: {2: "c"}})
    assert conversion.report.passed
    assert_matches_at_sizes(module, conversion, [(1, 12, 3), (4, 12, 7)])


@pytest.mark.parametrize("fn", [lambda x: fft.rfft(x).abs(), lambda x: x.unfold(-1, 4, 2)],
                         ids=["rfft", "unfold"])
def test_a_dynamic_transformed_dim_is_refused(fn):
    with pytest.raises(DynamicDimError, match="needs a static size"):
        crossport.convert(Fn(fn).eval(), inputs((2, 16)), dynamic_dims={0: {1: "n"}})


@pytest.mark.parametrize("fn, shapes, match", [
    (lambda x: fft.rfft(x), (2, 8), "complex model output"),
    (lambda x: (fft.rfft(x) ** 2).real, (2, 8), r"aten.pow.*no converter for complex values"),
    (lambda x: fft.rfft(x).exp().real, (2, 8), r"aten.exp.*no converter for complex"),
    (lambda x: (fft.rfft(x) / fft.rfft(x + 1)).real, (2, 8), "division by a complex value"),
    (lambda x: torch.view_as_complex(x).abs(), (2, 8, 2), None),
], ids=["output", "pow", "exp", "complex-division", "ok-view-as-complex-of-input"])
def test_refusals_name_the_node(fn, shapes, match):
    module = Fn(fn).eval()
    if match is None:
        assert crossport.convert_with_report(module, inputs(shapes)).report.passed
        return
    with pytest.raises(UnsupportedOpError, match=match):
        crossport.convert(module, inputs(shapes))


def test_complex_input_is_refused():
    with pytest.raises(UnsupportedOpError, match="complex model input"):
        crossport.convert(Fn(lambda z: z.abs()).eval(), (torch.randn(2, 4, dtype=torch.cfloat),))


def test_float64_reference_keeps_complex_buffers():
    """The acceptance rule's float64 run: ``module.to(torch.float64)`` cast a complex buffer
    to float64 (dropping its imaginary part); it is complex128 now."""
    from crossport.parity.accept import float64_outputs

    module = ComplexBuffer().eval()
    args = inputs((2, 16))
    (ref64,) = float64_outputs(module, args)
    assert ref64.dtype == "float64"
    with torch.no_grad():
        torch.testing.assert_close(torch.as_tensor(ref64), module(*args).double(), rtol=0,
                                   atol=1e-5)


def test_float64_replay_widens_complex_casts():
    """The node-by-node float64 replay: ``x.to(torch.complex64)`` runs in complex128."""
    from crossport.parity.replay import replay

    module = Fn(lambda x: fft.fft(x.to(torch.complex64)).real).eval()
    conversion = crossport.convert_with_report(module, inputs((2, 8)))
    values = replay(conversion.exported, inputs((2, 8)), torch.float64)
    assert values["_to_copy"].dtype == torch.complex128
    assert values["_fft_c2c"].dtype == torch.complex128


def test_a_float64_module_transforms_in_float64():
    """``module.double()``: the FFTs run in complex128 (TF's float64 kernels)."""
    module = _spectral_filter().double().eval()
    x = torch.randn(2, 12, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    conversion = crossport.convert_with_report(module, (x,))
    assert conversion.report.passed
    got = conversion.model(x.numpy())
    assert got.dtype == "float64"
    torch.testing.assert_close(torch.as_tensor(got.numpy()), module(x), rtol=0, atol=1e-12)
