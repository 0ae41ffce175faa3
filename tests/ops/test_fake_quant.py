"""Fake quantization (QAT models) -> the same float32 steps as ATen's CPU kernels
(to_keras/ops/fake_quant.py): bit for bit, NaN/inf and half-way values included."""

from __future__ import annotations

import pytest
import torch
import torch.ao.quantization as tq
from torch import nn

import crossport
from crossport.errors import UnsupportedOpError
from tests.harness import assert_converts
from tests.ops.opcases import Fn, case

# half-way values (x * 10 = k + 0.5: half to even), the grid's ends, NaN, +-inf, beyond 2**63
SPECIAL = [float("nan"), float("inf"), -float("inf"), 1e30, -1e30, 0.25, 0.35, -0.25, -0.0,
           12.7, -12.9, 3.05]


def with_specials(shape, seed=0):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 6
    flat = x.reshape(-1)
    flat[:len(SPECIAL)] = torch.tensor(SPECIAL)
    return x


def qat_model(observer_off=True):
    """A QAT-prepared conv block (FusedMovingAvgObsFakeQuantize on weights and
    activations), calibrated on two batches, observers then switched off."""
    torch.manual_seed(0)
    model = nn.Sequential(tq.QuantStub(), nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 1),
                          tq.DeQuantStub())
    model.qconfig = tq.get_default_qat_qconfig("x86")
    model.train()
    tq.prepare_qat(model, inplace=True)
    for seed in (1, 2):
        model(torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(seed)))
    if observer_off:
        model.apply(tq.disable_observer)
    return model.eval()


def fake_quant_module(enabled=True):
    fq = tq.FakeQuantize(observer=tq.MovingAverageMinMaxObserver, quant_min=0, quant_max=255)
    fq(torch.randn(64, generator=torch.Generator().manual_seed(3)) * 4)  # calibrate
    fq.disable_observer()
    if not enabled:
        fq.disable_fake_quant()
    return fq.eval()


CASES = [
    case("fake-quantize-per-tensor",
         Fn(lambda x: torch.fake_quantize_per_tensor_affine(x, 0.1, 3, -128, 127)),
         lambda: (with_specials((4, 16)),),
         expect_converters=("aten_fake_quantize_per_tensor_affine_cachemask",)),
    case("fake-quantize-per-channel",
         Fn(lambda x: torch.fake_quantize_per_channel_affine(
             x, torch.tensor([0.1, 0.05, 0.2]), torch.tensor([0, 1, -2], dtype=torch.int32), 1,
             -128, 127)),
         lambda: (with_specials((2, 3, 4, 4)),),
         expect_converters=("aten_fake_quantize_per_channel_affine_cachemask",)),
    case("fake-quantize-module", fake_quant_module(), lambda: (with_specials((4, 16)),),
         expect_converters=("aten_fake_quantize_tensor_qparams",)),
    case("fake-quantize-module-disabled", fake_quant_module(enabled=False),
         lambda: (with_specials((4, 16)),)),
    case("qat-conv-block-observers-off", qat_model(),
         lambda: (torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(4)),),
         # the layout pass looks through the input's fake quantization (output, mask):
         # the input is laid out channels-last at the boundary, no transpose inside
         expect_converters=("aten_fused_moving_avg_obs_fake_quantize",), max_transposes=0),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_fake_quantize(module, shapes, kwargs):
    assert_converts(module, shapes(), atol=0.0, **kwargs)


@pytest.mark.parametrize("make", [lambda: qat_model(observer_off=False),
                                  lambda: _observing(fake_quant_module())],
                         ids=["fused-qat", "fake-quantize"])
def test_a_model_with_its_observers_on_is_refused_by_name(make):
    model = make()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(UnsupportedOpError, match=r"observer on.*disable_observer"):
        crossport.convert(model, (torch.randn(1, 3, 8, 8),))
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())  # untouched


def _observing(module):
    module.enable_observer()
    return module
