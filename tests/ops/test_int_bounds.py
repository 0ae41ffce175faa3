"""Bounds on integer values that sizes prove (crossport/to_keras/int_bounds.py), read from
real exported graphs: what they prove lets int64 index arithmetic run in int32."""

from __future__ import annotations

import pytest
import torch

from crossport.to_keras.int_bounds import fits_int32, int_bounds


def _bounds(fn, x, dynamic_shapes=None) -> dict[str, tuple | None]:
    class Module(torch.nn.Module):
        def forward(self, x):
            return fn(x)

    ep = torch.export.export(Module(), (x,), dynamic_shapes=dynamic_shapes)
    outputs = next(n for n in ep.graph.nodes if n.op == "output").args[0]
    return [int_bounds(n) for n in outputs]


def test_indices_aranges_and_arithmetic_by_constants():
    x = torch.randn(4, 10)
    got = _bounds(lambda x: (torch.sort(x).indices,            # below numel (40)
                             x.argmax(1) * 3 + 1,
                             torch.topk(x, 2).indices.flatten() // 2,
                             torch.arange(5, 50, 5) % 7,
                             torch.arange(10) - x.argmin(),
                             x.max(1).indices.clone()), x)
    assert got == [(0, 39), (1, 118), (0, 19), (0, 6), (-39, 9), (0, 39)]


def test_values_nothing_bounds_give_none():
    x = torch.randn(4, 10)
    got = _bounds(lambda x: ((x * 1e6).long(),                      # data
                             torch.sort(x).indices * (x.sum() * 1e6).long(),  # times data
                             torch.sort(x).values.long(),           # the values, not indices
                             torch.maximum(x.argmax(1), x.argmin(1))), x)  # not tracked
    assert got == [None, None, None, None]


def test_narrow_dtypes_are_their_range():
    x = torch.randint(0, 9, (3,), dtype=torch.int32)
    assert _bounds(lambda x: (x, x.to(torch.int8)), x) == [(-2**31, 2**31 - 1), (-128, 127)]


@pytest.mark.parametrize("dim, expected", [(torch.export.Dim("rows", max=100), (0, 999)),
                                           (torch.export.Dim.DYNAMIC, None)])
def test_run_time_sizes_bound_by_their_range_only(dim, expected):
    got = _bounds(lambda x: torch.sort(x.flatten()).indices, torch.randn(6, 10),
                  dynamic_shapes=({0: dim},))
    assert got == [expected]


def test_fits_int32_reads_numbers_and_nodes():
    assert fits_int32(7) and not fits_int32(2**31) and not fits_int32(None)
