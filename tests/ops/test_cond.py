"""torch.cond: both branches computed and selected with where (capture/cond.py).

torch.cond is how data-dependent control flow becomes exportable; each case is checked with
inputs taking either branch, so both branches' conversions are proven.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import crossport
from tests.harness import assert_converts
from tests.ops.opcases import case


class Gate(nn.Module):
    """A branch with a Linear (a lifted parameter) and one without, on the sign of a sum."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: self.linear(x).sin(), lambda x: x.cos() * 2,
                          (x,))


class TwoOutputsNested(nn.Module):
    """Two outputs per branch, and a cond inside a branch."""

    def forward(self, x, y):
        def inner_true(x, y):
            return (x + y, x.mean(-1))

        def inner_false(x, y):
            return torch.cond(y.amax() > 1.0, lambda x, y: (x * y, y.amin(-1)),
                              lambda x, y: (x - y, x.amax(-1)), (x, y))

        return torch.cond(x.mean() > 0, inner_true, inner_false, (x, y))


def positive(shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).abs() + 0.1


CASES = [
    case("cond-true-branch", Gate(), lambda: (positive((3, 4), 0),)),
    case("cond-false-branch", Gate(), lambda: (-positive((3, 4), 1),)),
    case("cond-nested-two-outputs", TwoOutputsNested(),
         lambda: (-positive((2, 5), 2), positive((2, 5), 3) * 3)),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_cond(module, shapes, kwargs):
    assert_converts(module, shapes(), **kwargs)


@pytest.mark.parametrize("module, arg_sets", [
    (Gate(), [(positive((3, 4), 4),), (-positive((3, 4), 5),)]),
    (TwoOutputsNested(), [(positive((2, 5), 6), positive((2, 5), 7)),
                          (-positive((2, 5), 8), positive((2, 5), 9) * 3),
                          (-positive((2, 5), 10), positive((2, 5), 11) * 0.1)]),
])
def test_each_branch_matches_torch(module, arg_sets):
    """One conversion, run on inputs taking each branch (and each inner branch)."""
    conversion = crossport.convert_with_report(module.eval(), arg_sets[0])
    assert conversion.report.passed, conversion.report.summary()
    assert "cond" not in {type(layer).__name__.lower() for layer in conversion.model.layers}
    for args in arg_sets:
        with torch.no_grad():
            want = module(*args)
        got = conversion.model([a.numpy() for a in args] if len(args) > 1 else args[0].numpy())
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, (list, tuple)) else [got]
        for w, g in zip(want, got):
            np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-5, atol=1e-5)


def test_cond_with_a_dynamic_batch():
    module = Gate().eval()
    conversion = crossport.convert_with_report(module, (positive((3, 4), 12),),
                                               dynamic_batch=True)
    for x in (positive((5, 4), 13), -positive((1, 4), 14)):
        with torch.no_grad():
            want = module(x)
        np.testing.assert_allclose(np.asarray(conversion.model(x.numpy())), want.numpy(),
                                   rtol=1e-5, atol=1e-5)
