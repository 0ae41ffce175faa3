"""make_live / check_live: dead random models become testable, live ones pass the check."""

import pytest
import torch

from crossport.parity.live import DeadModelError, check_live, make_live


class _Residual(torch.nn.Module):
    """A residual block whose last BN gain and layer scale start at zero (timm style)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.layer_scale = torch.nn.Parameter(torch.zeros(4, 1, 1))
        self.head = torch.nn.Linear(4, 3)
        self.relative_position_bias_table = torch.nn.Parameter(torch.zeros(5, 2))
        torch.nn.init.zeros_(self.bn.weight)
        torch.nn.init.zeros_(self.head.weight)

    def forward(self, x):
        x = x + self.layer_scale * self.bn(self.conv(x))
        return self.head(x.mean((2, 3))) + self.relative_position_bias_table.sum()


def _inputs():
    return (torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(3)),)


def test_make_live_reinitialises_zero_weights():
    net = _Residual()
    conv_before = net.conv.weight.detach().clone()
    net = make_live(net, _inputs())
    assert not net.training
    assert torch.equal(net.bn.weight, torch.ones(4))  # norm gain -> 1
    assert torch.equal(net.layer_scale, torch.ones(4, 1, 1))  # layer scale -> 1
    assert net.head.weight.count_nonzero() == net.head.weight.numel()  # small normal
    assert net.head.weight.abs().max() < 0.2
    assert net.relative_position_bias_table.count_nonzero() > 0  # not an ordinary bias
    assert torch.equal(net.conv.weight, conv_before)  # non-zero weights untouched


def test_make_live_revives_tiny_layer_scales():
    net = _Residual()
    with torch.no_grad():
        net.layer_scale.fill_(1e-6)  # ConvNeXt's init: the branch is as good as dead
    make_live(net, _inputs())
    assert torch.equal(net.layer_scale, torch.ones(4, 1, 1))


def test_make_live_keeps_ordinary_zero_biases():
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    torch.nn.init.zeros_(net[0].bias)
    make_live(net, (torch.randn(2, 4),))
    assert torch.equal(net[0].bias, torch.zeros(4))


def test_make_live_calibrates_batch_norm_to_unit_scale():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.BatchNorm2d(16))
    with torch.no_grad():
        net[0].weight.mul_(1000.0)  # pre-activations ~1e3 with default running stats
    x = torch.randn(1, 3, 32, 32)
    make_live(net, (x,), calibration_batches=4)
    assert net[1].num_batches_tracked == 4
    assert net[1].momentum == 0.1  # restored after the cumulative calibration
    with torch.no_grad():
        y = net(torch.randn(1, 3, 32, 32))
    assert 0.5 < float(y.std()) < 2.0
    assert abs(float(y.mean())) < 0.5


def test_make_live_is_deterministic():
    a, b = make_live(_Residual(), _inputs(), seed=7), make_live(_Residual(), _inputs(), seed=7)
    # same seed, same re-init (the modules differ in their own default init otherwise)
    assert torch.equal(a.head.weight, b.head.weight)


def test_make_live_handles_batch_norm_after_global_pool():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.BatchNorm2d(8), torch.nn.Flatten())
    make_live(net, (torch.randn(1, 3, 16, 16),))  # batch 1 would fail in train mode
    check_live(net, (torch.randn(1, 3, 16, 16),))


def test_check_live_accepts_a_live_model():
    check_live(make_live(_Residual(), _inputs()), _inputs())


def test_check_live_rejects_an_input_independent_output():
    net = _Residual().eval()  # zero head weight: output is the bias, whatever the input
    with torch.no_grad():
        net.head.bias.fill_(1.0)
    with pytest.raises(DeadModelError, match="does not change"):
        check_live(net, _inputs())


@pytest.mark.parametrize("scale, words", [(1e-6, "max|y|"), (1e7, "max|y|")])
def test_check_live_rejects_tiny_or_huge_outputs(scale, words):
    net = torch.nn.Linear(4, 3).eval()
    with torch.no_grad():
        net.weight.mul_(scale / net.weight.abs().max())
        net.bias.zero_()
    with pytest.raises(DeadModelError, match=words.replace("|", r"\|")):
        check_live(net, (torch.randn(2, 4),))


def test_check_live_rejects_non_finite_outputs():
    net = torch.nn.Linear(4, 3).eval()
    with torch.no_grad():
        net.bias.fill_(float("nan"))
    with pytest.raises(DeadModelError, match="not finite"):
        check_live(net, (torch.randn(2, 4),))


def test_make_live_revives_a_scaled_down_head():
    """A head initialised with a tiny scale gives ~1e-4 logits, where the normalized error
    cannot see a 20% mistake: it is re-initialised, a normal layer is not."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 10))
    with torch.no_grad():
        net[2].weight.mul_(2e-4)  # max|w| 2.5e-5: above the all-but-zero threshold
        net[2].bias.zero_()
    body = net[0].weight.detach().clone()
    x = torch.randn(2, 64)
    with pytest.raises(DeadModelError, match="max"):
        check_live(net.eval(), (x,))
    make_live(net, (x,))
    assert torch.equal(net[0].weight, body)
    check_live(net, (x,))


def test_check_live_varies_token_ids():
    """A text model's output changes with its token ids (integer inputs are redrawn)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Linear(8, 4)).eval()
    check_live(net, (torch.randint(0, 50, (2, 6)),))


def test_make_live_revives_norm_gains_drawn_like_weights():
    # HF EfficientNet draws BatchNorm gains from N(0, 0.02): every block shrinks the signal
    net = torch.nn.Sequential(*[m for _ in range(6) for m in (
        torch.nn.Conv2d(4, 4, 1, bias=False), torch.nn.BatchNorm2d(4), torch.nn.SiLU())])
    with torch.no_grad():
        for bn in net[1::3]:
            bn.weight.normal_(0, 0.02, generator=torch.Generator().manual_seed(1))
    make_live(net, _inputs())
    assert all(torch.equal(bn.weight, torch.ones(4)) for bn in net[1::3])
    check_live(net, _inputs())


def test_make_live_keeps_small_but_usual_norm_gains():
    net = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 1), torch.nn.BatchNorm2d(4))
    with torch.no_grad():
        net[1].weight.copy_(torch.tensor([0.5, 0.05, 1.0, 2.0]))  # a trained model's
    make_live(net, _inputs())
    assert torch.equal(net[1].weight, torch.tensor([0.5, 0.05, 1.0, 2.0]))
