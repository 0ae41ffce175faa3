"""The parity doctor on hand-written Keras twins: it names the first diverging layer and the
pitfall, and after the suggested fix the pair agrees (issue 5's scenarios)."""

import keras
import numpy as np
import pytest
import torch
from torch import nn

import crossport
from crossport.parity.doctor import check
from crossport.weights import conv_weight_to_keras

L = keras.layers
FIXED_TOL = 1e-5  # normalized, worst over normal / uniform(+-100) / near-zero inputs


def _calibrate(net: nn.Module, shape, batches: int = 4) -> nn.Module:
    """Realistic BN running statistics (parity.md: random init hides bugs)."""
    gen = torch.Generator().manual_seed(1)
    bns = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in bns:
        m.momentum = None  # cumulative average: the statistics of these batches
    net.train()
    with torch.no_grad():
        for _ in range(batches):
            net(torch.randn(shape, generator=gen) * 2 + 0.5)
    for m in bns:
        m.momentum = 0.1
    return net.eval()


def _x(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(7))


def _assert_agrees(report, tol=FIXED_TOL):
    assert report.passed, report.summary()
    assert report.output_error < tol, report.summary()
    assert max(r.error for r in report.rows) < tol
    assert all(r.verdict == "rounding" for r in report.rows), report.summary()


def _pitfalls(report):
    return [p.name for p in report.diagnosis]


# --- conv + BN + LeakyReLU with Keras' default BN eps -------------------------------------

def _block():
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.LeakyReLU(0.01))
    return _calibrate(net, (4, 3, 16, 16))


def _block_twin(eps=None):
    bn = L.BatchNormalization(name="bn") if eps is None else L.BatchNormalization(
        epsilon=eps, momentum=0.9, name="bn")
    return keras.Sequential([keras.Input((16, 16, 3)), L.Conv2D(8, 3, padding="same"), bn,
                             L.LeakyReLU(negative_slope=0.01)])


def test_bn_default_eps_is_named():
    net, twin = _block(), _block_twin()
    crossport.transfer_weights(net, twin, verbose=False)
    report = check(net, twin, _x(2, 3, 16, 16))
    first = report.first_divergent
    assert first is not None and first.keras_name == "bn" and first.torch_name == "1"
    assert first.verdict == "semantic"
    assert _pitfalls(report)[0] == "norm-eps"
    assert "1e-05" in report.diagnosis[0].fix
    assert report.rows[0].verdict == "rounding" and not report.rows[0].exceeds  # the conv
    assert "bn-momentum" in [p.name for _, p in report.warnings]  # 0.99 vs torch 0.1


def test_bn_fixed_eps_agrees():
    net, twin = _block(), _block_twin(eps=1e-5)
    crossport.transfer_weights(net, twin, verbose=False)
    report = check(net, twin, _x(2, 3, 16, 16))
    _assert_agrees(report)
    assert not report.warnings  # momentum 0.9 = 1 - 0.1


# --- stride-2 conv with 'same' padding ----------------------------------------------------

def _strided():
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU()).eval()


def test_same_padding_stride2_is_named():
    net = _strided()
    twin = keras.Sequential([keras.Input((16, 16, 3)),
                             L.Conv2D(8, 3, strides=2, padding="same", name="down"), L.ReLU()])
    crossport.transfer_weights(net, twin, verbose=False)
    report = check(net, twin, _x(2, 3, 16, 16))
    assert report.first_divergent.keras_name == "down"
    assert _pitfalls(report) == ["same-padding"]
    assert "ZeroPadding2D(((1, 1), (1, 1)))" in report.diagnosis[0].fix


def test_same_padding_fixed_agrees():
    net = _strided()
    twin = keras.Sequential([keras.Input((16, 16, 3)), L.ZeroPadding2D(((1, 1), (1, 1))),
                             L.Conv2D(8, 3, strides=2, padding="valid", name="down"), L.ReLU()])
    crossport.transfer_weights(net, twin, verbose=False)
    report = check(net, twin, _x(2, 3, 16, 16))
    _assert_agrees(report)
    assert report.unmatched_keras == ["zero_padding2d"] or report.unmatched_keras


# --- GlobalAveragePooling2D without keepdims ----------------------------------------------

class _Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.ReLU(inplace=True)  # overwrites the conv output the hook captured
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Conv2d(8, 5, 1)  # a 1x1-conv head (SqueezeNet, MobileNetV3)
        self.flatten = nn.Flatten()

    def forward(self, x):
        return self.flatten(self.classifier(self.pool(self.act(self.conv(x)))))


def _head_twin(keepdims):
    x = keras.Input((16, 16, 3))
    y = L.ReLU(name="act")(L.Conv2D(8, 3, padding="same", name="conv")(x))
    y = L.GlobalAveragePooling2D(keepdims=keepdims, name="pool")(y)
    if keepdims:
        y = L.Flatten(name="flatten")(L.Conv2D(5, 1, name="classifier")(y))
    else:  # the port that "fixed" the shape error by turning the 1x1 conv into a Dense
        y = L.Dense(5, name="classifier_dense")(y)
    return keras.Model(x, y)


def test_global_pool_keepdims_is_named():
    net = _Head().eval()
    twin = _head_twin(keepdims=False)
    twin.get_layer("conv").set_weights([conv_weight_to_keras(net.conv.weight.detach().numpy()),
                                        net.conv.bias.detach().numpy()])
    report = check(net, twin, _x(2, 3, 16, 16))
    first = report.first_divergent
    assert first.keras_name == "pool" and first.layout == "squeezed"
    assert first.torch_shape == (2, 8, 1, 1) and first.keras_shape == (2, 8)
    assert _pitfalls(report) == ["global-pool-keepdims"]
    assert "keepdims=True" in report.diagnosis[0].fix


def test_global_pool_keepdims_fixed_agrees():
    net = _Head().eval()
    twin = _head_twin(keepdims=True)
    crossport.transfer_weights(net, twin, verbose=False)
    report = check(net, twin, _x(2, 3, 16, 16))
    _assert_agrees(report)
    assert [r.matched_by for r in report.rows].count("name") == 5  # names match here


# --- Keras LayerNormalization for nn.LayerNorm([C, H, W]) ---------------------------------

def _ln_net():
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.LayerNorm([8, 8, 8]), nn.ReLU())
    with torch.no_grad():
        net[1].weight.uniform_(0.5, 1.5)
        net[1].bias.uniform_(-0.5, 0.5)
    return net.eval()


def test_layernorm_axes_is_named():
    net = _ln_net()
    twin = keras.Sequential([keras.Input((8, 8, 3)), L.Conv2D(8, 3, padding="same"),
                             L.LayerNormalization(name="ln"), L.ReLU()])
    with pytest.raises(crossport.InputError, match="gamma needs shape"):  # affine won't fit
        crossport.transfer_weights(net, twin, verbose=False)
    twin.layers[0].set_weights([conv_weight_to_keras(net[0].weight.detach().numpy()),
                                net[0].bias.detach().numpy()])
    report = check(net, twin, _x(2, 3, 8, 8))
    assert report.first_divergent.keras_name == "ln"
    names = _pitfalls(report)
    assert names[:1] == ["norm-eps"] or "layernorm-axes" in names
    assert "layernorm-axes" in names
    fix = next(p.fix for p in report.diagnosis if p.name == "layernorm-axes")
    assert "axis=[1, 2, 3]" in fix and "epsilon=1e-05" in fix


def test_layernorm_axes_fixed_agrees():
    net = _ln_net()
    twin = keras.Sequential([keras.Input((8, 8, 3)), L.Conv2D(8, 3, padding="same"),
                             L.LayerNormalization(axis=[1, 2, 3], epsilon=1e-5, name="ln"),
                             L.ReLU()])
    records = crossport.transfer_weights(net, twin, verbose=False)
    assert records[1].rule == "affine (channels-last)"
    report = check(net, twin, _x(2, 3, 8, 8))
    _assert_agrees(report)


# --- a ~70-layer network with one wrong BN eps --------------------------------------------

BLOCKS, BAD = 23, 11


def _deep():
    layers = [nn.Conv2d(3, 8, 3, padding=1)]
    for i in range(BLOCKS):
        if i:
            layers.append(nn.Conv2d(8, 8, 3, padding=1))
        layers += [nn.BatchNorm2d(8), nn.ReLU()]
    layers += [nn.Flatten(), nn.Linear(8 * 8 * 8, 10)]
    return _calibrate(nn.Sequential(*layers), (4, 3, 8, 8))


def _deep_twin(bad_eps):
    layers = [keras.Input((8, 8, 3))]
    for i in range(BLOCKS):
        eps = bad_eps if i == BAD else 1e-5
        layers += [L.Conv2D(8, 3, padding="same", name=f"conv{i}"),
                   L.BatchNormalization(epsilon=eps, momentum=0.9, name=f"bn{i}"),
                   L.ReLU(name=f"relu{i}")]
    layers += [L.Flatten(), L.Dense(10, name="fc")]
    return keras.Sequential(layers)


@pytest.fixture(scope="module")
def deep():
    torch.manual_seed(3)
    return _deep()


def test_deep_net_one_wrong_eps_is_named(deep):
    twin = _deep_twin(bad_eps=1e-3)
    crossport.transfer_weights(deep, twin, verbose=False)
    report = check(deep, twin, _x(2, 3, 8, 8))
    assert len(report.rows) == 3 * BLOCKS + 2 == 71
    first = report.first_divergent
    assert first.keras_name == f"bn{BAD}", report.summary()
    assert _pitfalls(report) == ["norm-eps"]
    before = [r for r in report.rows if r.index < first.index]
    assert all(not r.exceeds for r in before)  # upstream: rounding only
    assert report.output_error > 1e-3  # and it matters at the output


def test_deep_net_fixed_agrees(deep):
    twin = _deep_twin(bad_eps=1e-5)
    crossport.transfer_weights(deep, twin, verbose=False)
    report = check(deep, twin, _x(2, 3, 8, 8))
    _assert_agrees(report, tol=5e-5)  # 71 layers of TF float32 rounding (parity.md)


# --- alignment -----------------------------------------------------------------------------

def test_explicit_mapping_and_converted_model():
    net = _Head().eval()
    x = _x(2, 3, 16, 16)
    model = crossport.convert(net, (x,))
    report = check(net, model, x)
    assert report.passed, report.summary()
    assert {"conv", "classifier"} <= {r.keras_name for r in report.rows}
    twin = _head_twin(keepdims=True)
    crossport.transfer_weights(net, twin, verbose=False)
    mapped = check(net, twin, x, mapping={"act": "act", "conv": "conv"},
                   distributions=("normal",))
    assert {r.matched_by for r in mapped.rows if r.keras_name in ("act", "conv")} == {"mapping"}
    with pytest.raises(crossport.InputError, match="no such Keras layer"):
        check(net, twin, x, mapping={"conv": "nope"})


def _gelu_tanh(t):
    return keras.activations.gelu(t, approximate=True)


@pytest.mark.slow
def test_converted_resnet18_passes_by_name(torchvision):
    net = torchvision.models.resnet18(weights=None).eval()
    x = _x(1, 3, 64, 64)
    report = check(net, crossport.convert(net, (x,)), x)
    assert report.passed, report.summary()
    assert len(report.rows) >= 40 and {r.matched_by for r in report.rows} == {"name"}
    assert all(r.verdict == "rounding" for r in report.rows)


def test_fused_activation_and_rounding_verdict():
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.GELU(approximate="tanh")).eval()
    twin = keras.Sequential([keras.Input((8, 8, 3)),
                             L.Conv2D(4, 3, padding="same", activation="gelu", name="c")])
    crossport.transfer_weights(net, twin, verbose=False)
    report = check(net, twin, _x(1, 3, 8, 8))
    assert report.rows[0].torch_name == "0+1"  # conv + the activation Keras fused
    assert report.first_divergent is not None and report.first_divergent.verdict == "semantic"
    exact = keras.Sequential([keras.Input((8, 8, 3)), L.Conv2D(4, 3, padding="same", name="c"),
                              L.Activation(_gelu_tanh)])
    crossport.transfer_weights(net, exact, verbose=False)
    ok = check(net, exact, _x(1, 3, 8, 8))
    _assert_agrees(ok)
    assert all(r.verdict == "rounding" for r in ok.rows)
    wrong = keras.Sequential([keras.Input((8, 8, 3)), L.Conv2D(4, 3, padding="same", name="c"),
                              L.Activation("gelu", name="gelu")])
    crossport.transfer_weights(net, wrong, verbose=False)
    bad = check(net, wrong, _x(1, 3, 8, 8))
    assert bad.first_divergent.keras_name == "gelu"
    assert _pitfalls(bad) == ["gelu-approximation"]


@pytest.mark.parametrize("case", ["count_include_pad", "ceil_mode", "leaky", "weight_layout",
                                  "flatten_order", "align_corners", "conv_transpose",
                                  "contrib_affine", "nearest", "groupnorm_eps"])
def test_more_pitfalls_are_named(case):
    x = _x(2, 4, 8, 8)
    inp = keras.Input((8, 8, 4))
    if case == "count_include_pad":
        net, k = nn.AvgPool2d(3, 1, padding=1), L.AveragePooling2D(3, 1, padding="same")
    elif case == "ceil_mode":
        net, k = nn.MaxPool2d(3, 2, ceil_mode=True), L.MaxPooling2D(3, 2)
    elif case == "leaky":
        net, k = nn.LeakyReLU(), L.LeakyReLU()
    elif case == "align_corners":
        net = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        k = L.UpSampling2D(interpolation="bilinear")
    elif case == "conv_transpose":
        net = nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1)
        k = L.Conv2DTranspose(4, 3, strides=2, padding="same")
    elif case == "contrib_affine":  # tf.contrib-style port of LayerNorm([C, H, W])
        net, k = nn.LayerNorm([4, 8, 8]), L.GroupNormalization(groups=1, epsilon=1e-5)
        with torch.no_grad():
            net.weight.uniform_(0.5, 1.5)
    elif case == "nearest":  # 8 -> 12: torch floor(i * in / out), TF half-pixel rounding
        net, k = nn.Upsample(size=(12, 12), mode="nearest"), L.Resizing(12, 12, "nearest")
    elif case == "groupnorm_eps":
        net, k = nn.GroupNorm(2, 4), L.GroupNormalization(groups=2)
    else:
        net, k = nn.Conv2d(4, 4, 3, padding=1), L.Conv2D(4, 3, padding="same")
    layers = [inp, k]
    if case == "flatten_order":
        net = nn.Sequential(net, nn.Flatten(), nn.Linear(256, 3))
        layers += [L.Flatten(), L.Dense(3)]
    twin = keras.Sequential(layers)
    net = net.eval()
    if case in ("weight_layout", "flatten_order", "conv_transpose"):
        crossport.transfer_weights(net, twin, verbose=False)
    if case == "weight_layout":  # [out, in, kh, kw] -> [kh, kw, out, in]: a wrong transpose
        w = net.weight.detach().numpy()
        twin.layers[0].set_weights([np.transpose(w, (2, 3, 0, 1)), net.bias.detach().numpy()])
    if case == "flatten_order":  # Dense rows copied in torch's C-major order
        w = net[2].weight.detach().numpy()
        twin.layers[2].set_weights([w.T, net[2].bias.detach().numpy()])
    report = check(net, twin, x)
    expected = {"count_include_pad": "count-include-pad", "ceil_mode": "ceil-mode",
                "leaky": "leaky-relu-slope", "weight_layout": "weight-layout",
                "flatten_order": "flatten-order", "align_corners": "align-corners",
                "conv_transpose": "conv-transpose-crop", "contrib_affine": "contrib-affine",
                "nearest": "nearest-index", "groupnorm_eps": "norm-eps"}[case]
    assert report.first_divergent is not None, report.summary()
    assert expected in _pitfalls(report), report.summary()


# --- documentation ------------------------------------------------------------------------

def test_docstring_examples_run():
    import doctest

    import crossport.parity.doctor
    import crossport.weights.transfer

    for module in (crossport.parity.doctor, crossport.weights.transfer):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_readme_worked_example(tmp_path):
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Parity doctor", 1)[1].split("\n## ", 1)[0]
    code, shown = re.findall(r"```(?:python)?\n(.*?)```", section, re.DOTALL)[:2]
    (tmp_path / "example.py").write_text(code)
    run = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]

    def loose(text):  # values to 3 digits and the worst input set may vary with the CPU
        return re.sub(r"on \w+ inputs", "on _ inputs", re.sub(r"\d\.\d\de-\d\d", "#", text))

    for line in shown.strip().splitlines():
        assert loose(line.strip()) in loose(run.stdout), line


@pytest.mark.parametrize("keras_inputs, given, message", [
    ([(8,)], [(1, 3, 8, 8)], r"expects \(None, 8\)"),            # not this module's twin
    ([(8, 8, 3)], [(1, 3, 8, 8), (1, 4)], "takes 1 input"),     # one input too many
])
def test_inputs_the_keras_model_cannot_take_are_one_clear_error(keras_inputs, given, message):
    """Keras' own error printed the whole input tensor ("internal error" from the CLI)."""
    inputs = [keras.Input(shape) for shape in keras_inputs]
    twin = keras.Model(inputs, L.Dense(2)(inputs[0]))
    net = nn.Sequential(nn.Conv2d(3, 2, 1)).eval()
    with pytest.raises(crossport.InputError, match=message):
        check(net, twin, tuple(_x(*shape) for shape in given))
