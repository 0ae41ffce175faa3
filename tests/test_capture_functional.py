"""The decomposition shortcut: a graph is used as exported only when that is safe, and the
conversion of either kind matches torch."""

import operator

import numpy as np
import pytest
import torch

import crossport
from crossport.capture.functional import as_functional
from crossport.to_keras.registry import registered_ops

aten = torch.ops.aten


def _exported(module, *args):
    return torch.export.export(module.eval(), args, strict=False)


def _targets(ep):
    return {n.target for n in ep.graph.nodes if n.op == "call_function"}


class InplaceChain(torch.nn.Module):
    """relu_/add_ on fresh conv outputs, as torchvision's ResNet blocks write them."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        y = self.bn(self.conv(x))
        y = torch.relu_(y)
        y += self.conv(x)
        return torch.nn.functional.hardswish(y, inplace=True)


class InplaceOnView(torch.nn.Module):
    """relu_ on a view writes through to the base, which is read afterwards."""

    def forward(self, x):
        y = x * 2
        y[:, :2].relu_()
        return y + 1


class InplaceOnReadValue(torch.nn.Module):
    """The overwritten value is read again after the in-place op."""

    def forward(self, x):
        y = x * 2
        z = y.clone()
        torch.relu_(y)
        return y + z, y.sum()


class InplaceThatKeepsItsDtype(torch.nn.Module):
    """``add_`` of a float64 tensor to a float32 one stays float32; ``add`` would promote."""

    def forward(self, x):
        y = x * 2
        y.add_(x.to(torch.float64))
        return y


class EvalDropoutOnAView(torch.nn.Module):
    """torchvision's EfficientNet head: flatten (a view), then Dropout(inplace=True)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.drop = torch.nn.Dropout(0.2, inplace=True)
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        y = torch.flatten(self.conv(x).mean((2, 3), keepdim=True), 1)
        return self.fc(self.drop(y))


class MutatesItsInput(torch.nn.Module):
    def forward(self, x):
        x.add_(1)
        return x * 2


def test_inplace_ops_on_fresh_values_become_out_of_place_without_decomposing():
    ep = _exported(InplaceChain(), torch.randn(1, 3, 8, 8))
    assert aten.relu_.default in _targets(ep)
    got = as_functional(ep, set(registered_ops()))
    assert got is not None
    targets = _targets(got)
    assert not any(t._schema.is_mutable for t in targets if hasattr(t, "_schema"))
    assert {aten.relu.default, aten.add.Tensor, aten.hardswish.default} <= targets
    assert aten.batch_norm.default in targets  # left whole: it has a converter


def test_an_eval_in_place_dropout_is_removed_even_on_a_view():
    """It writes nothing; the full decomposition it used to force cost EfficientNet-B0's
    capture 2.7x torch.export."""
    ep = _exported(EvalDropoutOnAView(), torch.randn(1, 3, 8, 8))
    assert aten.dropout_.default in _targets(ep)
    got = as_functional(ep, set(registered_ops()))
    assert got is not None and aten.dropout_.default not in _targets(got)


@pytest.mark.parametrize("module, args", [
    (InplaceOnView(), (torch.randn(2, 4),)),
    (InplaceOnReadValue(), (torch.randn(2, 4),)),
    (InplaceThatKeepsItsDtype(), (torch.randn(2, 4),)),
    (MutatesItsInput(), (torch.randn(2, 4),)),
])
def test_unsafe_graphs_keep_the_full_decomposition(module, args):
    ep = _exported(module, *(a.clone() for a in args))
    assert as_functional(ep, set(registered_ops())) is None


@pytest.mark.parametrize("missing", [aten.batch_norm.default, aten.relu.default])
def test_an_op_without_converter_keeps_the_full_decomposition(missing):
    """Also when only the out-of-place twin of an in-place op lacks one."""
    ep = _exported(InplaceChain(), torch.randn(1, 3, 8, 8))
    assert as_functional(ep, set(registered_ops()) - {missing}) is None


@pytest.mark.parametrize("module, shape", [
    (InplaceChain(), (1, 3, 8, 8)),
    (InplaceOnView(), (2, 4)),
    (InplaceOnReadValue(), (2, 4)),
    (InplaceThatKeepsItsDtype(), (2, 4)),
    (EvalDropoutOnAView(), (1, 3, 8, 8)),
])
def test_both_paths_convert_at_parity(module, shape):
    torch.manual_seed(0)
    module = module.eval()
    x = torch.randn(*shape) * 3
    model = crossport.convert(module, (x,))
    with torch.no_grad():
        want = module(x.clone())
    want = want if isinstance(want, tuple) else (want,)
    got = model(x.numpy())
    got = got if isinstance(got, (list, tuple)) else (got,)
    for w, g in zip(want, got):
        g = np.asarray(g)
        assert g.dtype == w.numpy().dtype
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)


def test_getitem_of_an_aliasing_split_is_not_fresh():
    class SplitInplace(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            a, b = y.split(2, dim=1)
            a.relu_()
            return y * 2, b

    ep = _exported(SplitInplace(), torch.randn(2, 4))
    assert operator.getitem in _targets(ep)
    assert as_functional(ep, set(registered_ops())) is None
