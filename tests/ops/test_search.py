"""searchsorted / bucketize (and isin, whose sorting path is a sort and a searchsorted)
against torch: left and right, ``side``, ``sorter``, ``out_int32``, N-D boundaries, scalar
values, mixed dtypes, and NaN / +-inf / -0.0 values and boundaries, where torch's binary
search decides by comparisons that NaN fails.

All three were "no converter" (isin only for test elements past ATen's sorting threshold:
``isin(x[5], y[20])`` decomposes into ``sort`` + ``searchsorted``).
"""

from __future__ import annotations

import pytest
import torch

from tests.harness import assert_converts
from tests.ops.opcases import Fn, case, inputs

SEARCH = ("aten_searchsorted_tensor",)
BUCKETIZE = ("aten_bucketize_tensor",)
NAN, INF = float("nan"), float("inf")
# torch.sort's order: NaN last (a NaN boundary is met by failing comparisons)
SPECIAL_BOUNDARIES = torch.tensor([-INF, -3e38, -1.0, -0.0, 0.0, 0.0, 1e-30, 0.5, 2.0, 3e38,
                                   INF, NAN, NAN])
SPECIAL_VALUES = torch.tensor([NAN, INF, -INF, 0.0, -0.0, 1e-30, 0.5, 0.49999997, 3e38, -3e38,
                               2.0, -1.0, -5.0, 1e30, 1.0])


def _both_sides(boundaries, values):
    return (torch.searchsorted(boundaries, values), torch.searchsorted(boundaries, values,
                                                                       right=True),
            torch.searchsorted(boundaries, values, side="right", out_int32=True),
            torch.bucketize(values, boundaries), torch.bucketize(values, boundaries, right=True))


def _sorted_buffer(n, seed=0):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)).sort().values


def _unsorted_with_sorter():
    boundaries = torch.randn(3, 9, generator=torch.Generator().manual_seed(2))
    return Fn(lambda m, v: (torch.searchsorted(m.b, v, sorter=m.order),
                            torch.searchsorted(m.b, v, sorter=m.order, side="right")),
              b=boundaries, order=boundaries.argsort(-1))


class ConvBuckets(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.register_buffer("b", _sorted_buffer(7))

    def forward(self, x):
        return torch.bucketize(self.conv(x), self.b, right=True)


CASES = [
    case("searchsorted-bucketize-random", Fn(lambda m, v: _both_sides(m.b, v),
                                             b=_sorted_buffer(11)),
         (3, 4, 5), expect_converters=SEARCH + BUCKETIZE),
    # boundaries as an input: ties among them and values equal to them
    case("searchsorted-ties", Fn(lambda b, v: _both_sides(torch.round(b * 2).sort().values,
                                                          torch.round(v * 2))),
         [(16,), (6, 7)], expect_converters=SEARCH + BUCKETIZE),
    # every special value against special boundaries (the random input only moves them)
    case("searchsorted-special-values", Fn(lambda m, v: _both_sides(
        m.b, torch.where(v.abs() > 50, v, m.s)), b=SPECIAL_BOUNDARIES, s=SPECIAL_VALUES),
         (2, 15), expect_converters=SEARCH + BUCKETIZE),
    # NaN boundaries anywhere (unsorted): the search meets them where torch's does
    case("searchsorted-nan-inside-boundaries", Fn(lambda m, v: _both_sides(m.b, v * 2),
                                                  b=torch.tensor([-1.0, NAN, 0.0, 0.5, NAN,
                                                                  1.0, 2.0])),
         (4, 9), expect_converters=SEARCH + BUCKETIZE),
    # each row its own boundaries
    case("searchsorted-n-d", Fn(lambda b, v: (torch.searchsorted(b.sort(-1).values, v),
                                              torch.searchsorted(b.sort(-1).values, v,
                                                                 right=True))),
         [(2, 3, 8), (2, 3, 5)], expect_converters=SEARCH),
    case("searchsorted-sorter", _unsorted_with_sorter(), (3, 6), expect_converters=SEARCH),
    # a length-1 and an empty boundary row; a scalar value
    case("searchsorted-short-boundaries-and-scalars", Fn(lambda b, v: (
        torch.searchsorted(b[:1], v), torch.bucketize(v, b[:0]), torch.searchsorted(b, 0.25),
        torch.bucketize(0.25, b, right=True, out_int32=True))), [(9,), (4, 3)],
         expect_converters=SEARCH + BUCKETIZE),
    # compared in the promoted dtype: int boundaries with float values, int64 with int32
    case("bucketize-mixed-dtypes", Fn(lambda m, v: (
        torch.bucketize(v * 3, m.b), torch.bucketize((v * 3).int(), m.b, right=True),
        torch.searchsorted(m.b, (v * 3).long()), torch.bucketize(v.double(), m.b)),
        b=torch.tensor([-3, -1, 0, 0, 2, 5])), (5, 4), expect_converters=SEARCH + BUCKETIZE),
    # a channels-last activation is searched as held (1-D boundaries: elementwise)
    case("bucketize-after-conv", ConvBuckets(), (2, 3, 6, 6),
         expect_converters=("aten_conv_nd",) + BUCKETIZE),
    # ties, NaN and -0.0 among elements and test elements; invert
    case("isin-sorting-path", Fn(lambda m, x, y: (
        torch.isin(torch.round(x * 2), torch.cat([torch.round(y * 2), m.s])),
        torch.isin(torch.cat([torch.round(x * 2), m.s]), torch.round(y * 2), invert=True)),
        s=torch.tensor([NAN, -0.0, INF])), [(5,), (20,)], expect_converters=SEARCH),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_search_matches_torch(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), max_transposes=None, **kwargs)
