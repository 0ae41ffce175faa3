"""Runtime assertions on tensor values (``assert x.max().item() <= n``) convert.

They validate inputs and change no output; torch.export records them as a scalar read
(``_local_scalar_dense``, which has no Keras twin) feeding ``_assert_scalar``. Before, the
read refused the whole model (XLM, FlauBERT: ``assert lengths.max().item() <= slen``).

PYTEST_DONT_REWRITE: the modules' asserts must stay plain Python asserts, as in a model.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.harness import assert_converts


class LengthChecked(nn.Module):
    """XLM's pattern: lengths validated against the sequence, then used as a mask."""

    def forward(self, x, lengths):
        assert lengths.max().item() <= x.shape[1]
        mask = torch.arange(x.shape[1]) < lengths[:, None]
        return x * mask


class ValueChecked(nn.Module):
    """A float value asserted positive (combined through scalar arithmetic) before a log."""

    def forward(self, x):
        assert x.abs().min().item() + 1.0 > 0.5
        return torch.log(x.abs() + 1)


def test_value_assertion_is_dropped_with_its_scalar_read():
    x = torch.randn(2, 6, generator=torch.Generator().manual_seed(0))
    conversion = assert_converts(LengthChecked(), (x, torch.tensor([6, 4])))
    targets = {n.target for n in conversion.exported.graph.nodes}
    if torch.ops.aten._local_scalar_dense.default in targets:
        raise AssertionError("the scalar read stayed in the graph")


def test_float_value_assertion_is_dropped():
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    assert_converts(ValueChecked(), (x,))
