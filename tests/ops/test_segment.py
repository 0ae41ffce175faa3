"""scatter_reduce and index_reduce (were "no converter"): every reduction with and without
``include_self``, along each dim, with indices computed in the graph (so the fresh random
inputs scatter elsewhere) or held in a buffer, integers (mean divides rounding down), bools
(or / and), GNN-style aggregation into zeros, and NaN/+-inf: amax/amin propagate NaN and an
all -inf target stays -inf (TF's segment max starts at the lowest finite value)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from tests.harness import assert_converts
from tests.ops.opcases import Fn, case, inputs

SCATTER = ("aten_scatter_reduce_two",)
INDEX = ("aten_index_reduce_default",)
REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _targets(x, size):
    """An index in ``[0, size)`` computed from ``x`` (ties and empty targets included)."""
    return (x.abs() * size / 2).long().clamp(max=size - 1)


def every_reduction(dim, size):
    """``x.scatter_reduce(dim, ...)`` for each reduction, with and without self."""
    def fn(x, src):
        index = _targets(src, size)
        return tuple(x.scatter_reduce(dim, index, src, r, include_self=s)
                     for r in REDUCTIONS for s in (True, False))
    return Fn(fn)


def every_index_reduction(dim):
    def fn(x, src):
        index = torch.tensor([0, 3, 0, 1, 3, 3])
        return tuple(x.index_reduce(dim, index, src, r, include_self=s)
                     for r in ("prod", "mean", "amax", "amin") for s in (True, False))
    return Fn(fn)


class MessagePassing(nn.Module):
    """GNN aggregation: per-edge messages reduced into destination nodes (PyG's
    ``scatter(..., reduce=...)``), nodes without an edge keep zeros."""

    def __init__(self, nodes=6, features=4, reduce="mean"):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(features, features)
        self.register_buffer("src", torch.tensor([0, 1, 1, 2, 3, 3, 3, 4]))
        self.register_buffer("dst", torch.tensor([1, 0, 2, 1, 1, 2, 4, 4]))
        self.nodes, self.reduce = nodes, reduce

    def forward(self, x):
        messages = self.lin(x)[self.src]
        index = self.dst[:, None].expand_as(messages)
        out = torch.zeros(self.nodes, x.shape[1])
        return out.scatter_reduce(0, index, messages, self.reduce, include_self=False)


def integers(x, src):
    a, b = (x * 4).long(), (src * 4).int()
    index = _targets(src, 4)
    return tuple(op for r in REDUCTIONS for op in (
        a.scatter_reduce(0, index, b.long(), r), b.scatter_reduce(0, index, b, r,
                                                                  include_self=False)))


def bools(x, src):
    a, b, index = x > 0, src > 0.3, _targets(src, 4)
    return tuple(a.scatter_reduce(0, index, b, r, include_self=s)
                 for r in ("sum", "prod", "amax", "amin") for s in (True, False))


CASES = [
    case("scatter-reduce-dim0", every_reduction(0, 4), [(4, 5), (6, 5)],
         expect_converters=SCATTER),
    case("scatter-reduce-last-dim-index-smaller", every_reduction(-1, 7),
         [(3, 2, 7), (2, 2, 9)], expect_converters=SCATTER),
    case("scatter-reduce-src-larger-than-index",
         Fn(lambda x, src: x.scatter_reduce(1, _targets(src[:3, :3], 5), src, "amax")),
         [(3, 5), (4, 6)], expect_converters=SCATTER),
    case("scatter-reduce-after-conv",
         nn.Sequential(nn.Conv2d(3, 4, 3), Fn(lambda y: y.scatter_reduce(
             1, _targets(y, 4), y * 2, "mean", include_self=False))),
         (2, 3, 6, 6), expect_converters=("aten_conv_nd", *SCATTER)),
    case("scatter-reduce-integers", Fn(integers), [(4, 5), (6, 5)], expect_converters=SCATTER),
    case("scatter-reduce-bools", Fn(bools), [(4, 5), (6, 5)], expect_converters=SCATTER),
    case("scatter-reduce-0-dim", Fn(lambda x, s: tuple(
        x.scatter_reduce(0, torch.tensor(0), s, r) for r in REDUCTIONS)), [(), ()],
         expect_converters=SCATTER),
    case("gnn-mean-aggregation", MessagePassing(), (5, 4), expect_converters=SCATTER),
    case("gnn-max-aggregation", MessagePassing(reduce="amax"), (5, 4), expect_converters=SCATTER),
    case("index-reduce-dim0", every_index_reduction(0), [(4, 5), (6, 5)],
         expect_converters=INDEX),
    case("index-reduce-dim1", every_index_reduction(1), [(3, 4), (3, 6)],
         expect_converters=INDEX),
    case("index-reduce-integers", Fn(lambda x, s: tuple(
        (x * 4).long().index_reduce(0, torch.tensor([2, 0, 2]), (s * 4).long(), r)
        for r in ("prod", "mean", "amax", "amin"))), [(4, 3), (3, 3)], expect_converters=INDEX),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_segment_reductions(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), max_transposes=None, **kwargs)


SPECIAL = [[np.nan, np.inf, -np.inf, 0.0, np.inf, -0.0], [-np.inf, -np.inf, -np.inf, np.nan, np.inf, 3.0],
           [1.0, 2.0, 3.0, 4.0, 5.0, -np.inf], [np.inf, -1.0, -np.inf, np.inf, 0.0, np.nan]]


def special_index():
    """Targets receiving only -inf, only +inf, NaN among finite values, or nothing."""
    return torch.tensor([[0, 1, 1, 2, 2, 0], [0, 1, 1, 2, 2, 0], [0, 0, 3, 3, 3, 1],
                         [0, 1, 3, 3, 3, 1]])


def test_special_values_match_torch():
    src = torch.tensor(SPECIAL)
    module = Fn(lambda x, s: tuple(x.scatter_reduce(0, special_index(), s, r, include_self=i)
                                   for r in REDUCTIONS for i in (True, False))
                + tuple(x.index_reduce(1, torch.tensor([0, 2, 2, 5, 0, 5]), s, r)
                        for r in ("prod", "mean", "amax", "amin")))
    assert_converts(module, (src.flip(0), src), max_transposes=None,
                    expect_converters=SCATTER + INDEX)
