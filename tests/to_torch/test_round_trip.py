"""torch -> Keras (crossport.convert) -> torch (crossport.to_torch) reproduces the original
function, and weights of layers that map 1:1 come back bit for bit."""

import pytest
import torch
from torch import nn

import crossport
from crossport.compat import import_torchvision
from tests.ops.opcases import Fn


def _round_trip(net: nn.Module, x: torch.Tensor):
    net = net.eval()
    kmodel = crossport.convert(net, (x,))
    back = crossport.to_torch_with_report(kmodel, (x,))  # the Keras model takes NCHW
    with torch.no_grad():
        for seed in (1, 2):
            fresh = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
            torch.testing.assert_close(back.module(fresh), net(fresh), atol=1e-4, rtol=1e-4)
    return back


def _assert_weights_bit_exact(net: nn.Module, module: nn.Module) -> int:
    mine = {name.replace(".", "_"): t for name, t in net.state_dict().items()}
    theirs = {}
    for name, t in module.state_dict().items():
        owner, _, leaf = name.rpartition(".")
        # Keras names "layer1.0.conv1" come back as layer1_0_conv1 ("0" as "_0")
        theirs[f"{owner.replace('.', '_').lstrip('_')}_{leaf}"] = t
    compared = 0
    for name, t in mine.items():
        if "num_batches_tracked" in name:
            continue
        assert name in theirs, f"{name} missing from {sorted(theirs)[:8]}..."
        assert torch.equal(theirs[name], t), name
        compared += 1
    return compared


def test_small_cnn_round_trip_is_exact():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Conv2d(8, 4, 3, stride=2, padding=1), nn.ReLU(),
                        nn.Flatten(), nn.Linear(4 * 4 * 4, 5))
    with torch.no_grad():
        net[1].running_mean.normal_()
        net[1].running_var.uniform_(0.5, 1.5)
    back = _round_trip(net, torch.randn(2, 3, 16, 16))
    assert back.report.passed and back.permutes == 0
    assert _assert_weights_bit_exact(net, back.module) == 10


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_torchvision_round_trip(name):
    torch.manual_seed(0)
    net = getattr(import_torchvision().models, name)()
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.normal_(0, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    back = _round_trip(net, torch.randn(1, 3, 64, 64))
    assert back.permutes == 0
    assert _assert_weights_bit_exact(net, back.module) > 50


def test_layer_norm_round_trip_is_exact():
    """The converter's StableLayerNormalization (Keras' layer with torch's arithmetic) comes
    back as nn.LayerNorm with its weights."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Linear(8, 3))
    with torch.no_grad():
        net[1].weight.normal_()
        net[1].bias.normal_()
    back = _round_trip(net, torch.randn(2, 5, 6))
    assert back.report.passed
    assert any(isinstance(m, nn.LayerNorm) for m in back.module.modules())
    assert _assert_weights_bit_exact(net, back.module) == 6


def test_erf_round_trip():
    """crossport.layers.Erf (torch.erf from TFLite builtin ops) comes back as torch.erf."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 8), Erf())
    back = _round_trip(net, torch.randn(2, 5, 6))
    assert back.report.passed


class Erf(nn.Module):
    def forward(self, x):
        return torch.erf(x)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_round_trip_keeps_its_approximation(approximate):
    """The converter's crossport.layers.GELU comes back as nn.GELU with its approximation."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.GELU(approximate), nn.Flatten(), nn.Linear(64, 3),
                        nn.GELU(approximate))
    back = _round_trip(net, torch.randn(2, 3, 6, 6))
    gelus = [m.approximate for m in back.module.modules() if isinstance(m, nn.GELU)]
    assert back.report.passed and gelus == [approximate] * 2


class _LastStep(nn.Module):
    """A bidirectional 2-layer LSTM with proj_size and its (h_n, c_n)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, proj_size=3, num_layers=2, bidirectional=True,
                            batch_first=True)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return out, h, c


def test_lstm_with_proj_size_round_trip():
    """nn.LSTM(proj_size) -> ProjectedLSTM layers -> one nn.LSTM(proj_size) per layer and
    direction, with torch's values (output, h_n with P features, c_n with H)."""
    torch.manual_seed(0)
    net, x = _LastStep().eval(), torch.randn(2, 5, 4)
    kmodel = crossport.convert(net, (x,))
    assert sum(type(layer).__name__ == "ProjectedLSTM" for layer in kmodel.layers) == 4
    back = crossport.to_torch_with_report(kmodel, (x,))
    projected = [m for m in back.module.modules() if isinstance(m, nn.LSTM)]
    assert len(projected) == 4 and all(m.proj_size == 3 for m in projected)
    with torch.no_grad():
        fresh = torch.randn(3, 7, 4, generator=torch.Generator().manual_seed(1))[:2, :5]
        for got, want in zip(back.module(fresh), net(fresh)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "conv-transpose"])
def test_modulated_conv_round_trip(transposed):
    """StyleGAN2's modulated convs -> FunctionalConv(Transpose) -> F.conv2d /
    F.conv_transpose2d on the run-time weight, groups=batch kept."""
    from tests.ops.test_conv import Modulated

    torch.manual_seed(0)
    net = Modulated(transposed).eval()
    args = (torch.randn(2, 4, 5, 6), torch.randn(2, 5))
    kmodel = crossport.convert(net, args)
    layer = "FunctionalConvTranspose" if transposed else "FunctionalConv"
    assert layer in {type(layer).__name__ for layer in kmodel.layers}
    back = crossport.to_torch_with_report(kmodel, args)
    assert back.report.passed
    with torch.no_grad():
        fresh = (torch.randn(2, 4, 5, 6), torch.randn(2, 5))
        torch.testing.assert_close(back.module(*fresh), net(*fresh), atol=1e-4, rtol=1e-4)


def test_functional_conv_with_uneven_pads_round_trip():
    """torch's padding='same' with an even kernel pads one more after: F.pad, then conv."""
    from tests.ops.test_conv import _gated

    torch.manual_seed(0)
    net = Fn(_gated(lambda x, w, b: torch.nn.functional.conv2d(x, w, b, padding="same",
                                                                dilation=(1, 2))),
             w=torch.randn(4, 3, 4, 3), b=torch.randn(4)).eval()
    x = torch.randn(1, 3, 7, 8)
    back = crossport.to_torch_with_report(crossport.convert(net, (x,)), (x,))
    assert back.report.passed
    fresh = torch.randn(1, 3, 7, 8)
    with torch.no_grad():
        torch.testing.assert_close(back.module(fresh), net(fresh), atol=1e-4, rtol=1e-4)
