"""scatter_reduce, index_reduce, Tensor.scatter(reduce=) and embedding_bag (were "no
converter").

scatter_reduce/index_reduce: every reduction with and without ``include_self``, along each
dim, with indices computed in the graph (so the fresh random inputs scatter elsewhere) or
held in a buffer, integers (mean divides rounding down), bools (or / and), float64,
GNN-style aggregation into zeros, and NaN/+-inf: amax/amin propagate NaN and an all -inf
target stays -inf (TF's segment max starts at the lowest finite value).
``Tensor.scatter(..., reduce='add' | 'multiply')`` (aten.scatter.reduce/value_reduce):
tensor and scalar sources, integers near their limits (add and multiply wrap, a float
scalar is cast toward zero), bools, float64, a channels-last conv output, special values.

embedding_bag: 2-D input and offsets (empty bags), sum/mean/max, padding_idx,
per_sample_weights, include_last_offset (and a last offset short of the end, where torch's
kernels disagree with each other), a table computed in the graph, float64, and max's NaN
rule (NaN only where the bag's first entry is NaN).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
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


SCATTER_OLD = ("aten_scatter_reduce",)  # Tensor.scatter(..., reduce='add' | 'multiply')


def scatter_add_multiply(dim, size, value=2.5):
    """``x.scatter(dim, ..., reduce=...)`` with a tensor and with a scalar, add and multiply."""
    def fn(x, src):
        index = _targets(src, size)
        return tuple(op for r in ("add", "multiply") for op in (
            x.scatter(dim, index, src, reduce=r), x.scatter(dim, index, value, reduce=r)))
    return Fn(fn)


def near_limits_scatter(dtype):
    """Integers near ``dtype``'s limits scattered with add (wraps as torch's) and multiply;
    a float value is cast toward zero as torch casts it."""
    info = torch.iinfo(dtype)
    x = torch.tensor([[info.min, info.max, -1, 0], [3, -7, info.max, info.min + 1]],
                     dtype=dtype)
    src = torch.tensor([[info.max, 1, info.min, 2], [-2, 3, 5, info.max]], dtype=dtype)

    def fn(x, src):
        index = torch.tensor([[1, 0, 0, 1], [1, 1, 0, 1]])
        return (x.scatter(0, index, src, reduce="add"), x.scatter(0, index, src, reduce="multiply"),
                x.scatter(0, index, -2.7, reduce="multiply"), x.scatter(1, index, 3, reduce="add"))
    return Fn(fn), lambda: (x, src)


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
    # Tensor.scatter(..., reduce=) (was "no converter"): scatter_reduce's sum/prod with self
    case("scatter-add-multiply-dim0", scatter_add_multiply(0, 4), [(4, 5), (6, 5)],
         expect_converters=SCATTER_OLD),
    case("scatter-add-multiply-last-dim-src-larger",
         Fn(lambda x, src: tuple(x.scatter(-1, _targets(src[:, :, :4], 7), src, reduce=r)
                                 for r in ("add", "multiply"))),
         [(3, 2, 7), (3, 2, 9)], expect_converters=SCATTER_OLD),
    case("scatter-add-multiply-after-conv",
         nn.Sequential(nn.Conv2d(3, 4, 3), Fn(lambda y: (
             y.scatter(1, _targets(y, 4), y * 2, reduce="add"),
             y.scatter(1, _targets(y[:, :2], 4), -0.5, reduce="multiply")))),
         (2, 3, 6, 6), expect_converters=("aten_conv_nd", *SCATTER_OLD)),
    case("scatter-add-multiply-int64-near-limits", *near_limits_scatter(torch.int64),
         expect_converters=SCATTER_OLD),
    case("scatter-add-multiply-int32-near-limits", *near_limits_scatter(torch.int32),
         expect_converters=SCATTER_OLD),
    case("scatter-add-multiply-int8-near-limits", *near_limits_scatter(torch.int8),
         expect_converters=SCATTER_OLD),
    case("scatter-add-multiply-bools", Fn(lambda x, src: tuple(
        op for r in ("add", "multiply") for op in (
            (x > 0).scatter(0, _targets(src, 4), src > 0.3, reduce=r),
            (x > 0).scatter(0, _targets(src, 4), 0.5, reduce=r),
            (x > 0).scatter(0, _targets(src, 4), 0, reduce=r)))), [(4, 5), (6, 5)],
         expect_converters=SCATTER_OLD),
    case("scatter-add-multiply-float64", Fn(lambda x, s: tuple(
        x.double().scatter(0, _targets(s, 4), v, reduce=r)
        for r in ("add", "multiply") for v in (s.double(), 1.0 / 3))), [(4, 5), (6, 5)],
         expect_converters=SCATTER_OLD),
    case("scatter-value-reduce-dynamic-rows", Fn(lambda x, src: tuple(
        x.scatter(0, _targets(src, 4), 1.5, reduce=r) for r in ("add", "multiply"))),
         [(4, 5), (6, 5)], dynamic_dims={1: {0: "rows"}}, expect_converters=SCATTER_OLD),
    case("gnn-mean-aggregation", MessagePassing(), (5, 4), expect_converters=SCATTER),
    case("gnn-max-aggregation", MessagePassing(reduce="amax"), (5, 4), expect_converters=SCATTER),
    case("index-reduce-dim0", every_index_reduction(0), [(4, 5), (6, 5)],
         expect_converters=INDEX),
    case("index-reduce-dim1", every_index_reduction(1), [(3, 4), (3, 6)],
         expect_converters=INDEX),
    case("scatter-index-reduce-float64", Fn(lambda x, s: (
        x.double().scatter_reduce(0, _targets(s, 4), s.double(), "mean"),
        x.double().index_reduce(0, torch.tensor([0, 3, 0, 1, 3, 3]), s.double(), "amax"))),
         [(4, 5), (6, 5)], expect_converters=SCATTER + INDEX),
    case("index-reduce-integers", Fn(lambda x, s: tuple(
        (x * 4).long().index_reduce(0, torch.tensor([2, 0, 2]), (s * 4).long(), r)
        for r in ("prod", "mean", "amax", "amin"))), [(4, 3), (3, 3)], expect_converters=INDEX),
]


BAG = ("aten__embedding_bag_default",)


def ids(*shape, high=10):
    return lambda: (torch.randint(0, high, shape, generator=torch.Generator().manual_seed(0)),)


class Bags(nn.Module):
    """nn.EmbeddingBag over fixed offsets (an empty bag among them) or a 2-D input."""

    def __init__(self, offsets=(0, 3, 3, 7), **kwargs):
        super().__init__()
        torch.manual_seed(0)
        self.bag = nn.EmbeddingBag(10, 4, **kwargs)
        self.register_buffer("offsets", torch.tensor(offsets))

    def forward(self, indices, *weights):
        if indices.dim() == 2:
            return self.bag(indices, per_sample_weights=weights[0] if weights else None)
        return self.bag(indices, self.offsets, per_sample_weights=weights[0] if weights else None)


def every_mode(**kwargs):
    """sum, mean and max of the same bags (a float64 table when ``dtype`` is given)."""
    dtype = kwargs.pop("dtype", torch.float32)

    class Modes(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.weight = nn.Parameter(torch.randn(10, 3, dtype=dtype))
            self.register_buffer("offsets", torch.tensor([0, 3, 3, 7, 10]))

        def forward(self, indices):
            return tuple(F.embedding_bag(indices, self.weight, self.offsets, mode=m, **kwargs)
                         for m in ("sum", "mean", "max"))
    return Modes()


class ComputedTable(nn.Module):
    """The table is an activation (rows from a Linear), gathered with ops.take."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(3, 4)

    def forward(self, table, indices):
        return F.embedding_bag(indices, self.proj(table), torch.tensor([0, 2, 5]), mode="max")


CASES += [
    case("embedding-bag-2d-mean", Bags(offsets=()), ids(4, 5), expect_converters=BAG),
    case("embedding-bag-2d-max-int32-ids", Bags(offsets=(), mode="max"),
         lambda: (ids(3, 6)()[0].int(),), expect_converters=BAG),
    case("embedding-bag-offsets-every-mode", every_mode(), ids(12), expect_converters=BAG),
    case("embedding-bag-padding-idx", every_mode(padding_idx=2), ids(12, high=4),
         expect_converters=BAG),
    case("embedding-bag-include-last-offset", every_mode(include_last_offset=True), ids(10),
         expect_converters=BAG),
    case("embedding-bag-last-offset-short-of-the-end", every_mode(include_last_offset=True),
         ids(13), expect_converters=BAG),
    case("embedding-bag-last-offset-short-padding", every_mode(include_last_offset=True,
                                                               padding_idx=1),
         ids(13, high=4), expect_converters=BAG),
    case("embedding-bag-last-offset-short-float64", every_mode(include_last_offset=True,
                                                               dtype=torch.float64),
         ids(13), expect_converters=BAG),
    case("embedding-bag-per-sample-weights", Bags(mode="sum"),
         lambda: (*ids(9)(), torch.randn(9)), expect_converters=BAG),
    case("embedding-bag-2d-per-sample-weights-padding", Bags(offsets=(), mode="sum",
                                                             padding_idx=0),
         lambda: (*ids(3, 4, high=3)(), torch.randn(3, 4)), expect_converters=BAG),
    case("embedding-bag-computed-table", ComputedTable(),
         lambda: (torch.randn(6, 3), ids(7, high=6)()[0]), expect_converters=BAG),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_segment_reductions(module, shapes, kwargs):
    args = shapes() if callable(shapes) else inputs(shapes)
    assert_converts(module, args, max_transposes=None, **kwargs)


def test_embedding_bag_max_takes_nan_from_the_first_entry_only():
    """torch's max starts from the bag's first (non-padding) entry and replaces it only
    where a later one is greater: a NaN first entry stays, a later NaN is skipped; a bag of
    -inf rows is -inf; +inf wins."""
    weight = torch.tensor([[np.nan, 1.0], [2.0, np.nan], [3.0, 4.0], [-np.inf, -np.inf],
                           [0.0, np.inf]])
    offsets = torch.tensor([0, 2, 4, 6, 8, 11])
    module = Fn(lambda i: tuple(F.embedding_bag(i, weight, offsets, mode="max", padding_idx=p)
                                for p in (None, 4)))
    indices = torch.tensor([0, 2, 2, 0, 1, 2, 3, 3, 4, 0, 2, 1, 1])
    assert_converts(module, (indices,), max_transposes=None, expect_converters=BAG)


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


def test_scatter_add_multiply_special_values_match_torch():
    """NaN, +-inf, -0.0 and inf * 0 through Tensor.scatter(reduce='add' | 'multiply'),
    tensor and scalar (-0.0, inf) sources."""
    src = torch.tensor(SPECIAL)
    module = Fn(lambda x, s: tuple(op for r in ("add", "multiply") for op in (
        x.scatter(0, special_index(), s, reduce=r),
        x.scatter(0, special_index(), -0.0, reduce=r),
        x.scatter(0, special_index(), float("inf"), reduce=r))))
    assert_converts(module, (src.flip(0), src), max_transposes=None,
                    expect_converters=SCATTER_OLD)
