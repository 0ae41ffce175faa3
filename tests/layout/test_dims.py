"""The dim-remapping contract (crossport/layout/dims.py) checked against torch itself.

Every case holds a real torch tensor in a layout (``held = ref.permute(layout.perm)``),
applies an op to the reference with torch dims and to the held tensor with the axes the
contract names, and requires the held result to be the reference result in the layout the
contract says.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from crossport.layout import (
    FlatOrder,
    Layout,
    after_insert,
    after_permute,
    after_reduce,
    after_unfold,
    canonical,
    channels_first,
    channels_last,
    normalize_dim,
    order_free,
    physical_array,
    physical_axes,
    physical_axis,
    physical_broadcast,
    physical_index,
    physical_order,
    physical_pad,
    reduction_dims,
    shared_layout,
    transpose_perm,
)

SHAPE = (2, 3, 4, 5)  # distinct sizes: a wrong axis changes the shape
LAYOUTS = [canonical(4), channels_last(4), channels_first(4), Layout((2, 0, 3, 1))]
IDS = [str(lay) for lay in LAYOUTS]


def reference() -> torch.Tensor:
    return torch.randn(SHAPE, generator=torch.Generator().manual_seed(0))


def held(ref: torch.Tensor, layout: Layout) -> torch.Tensor:
    return ref.permute(layout.perm)


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
@pytest.mark.parametrize("dim", range(-4, 4))
def test_physical_axis_selects_the_reference_dim(layout, dim):
    ref = reference()
    out = after_reduce(layout, [dim], keepdim=False)
    got = held(ref, layout).select(physical_axis(layout, dim), 1)
    torch.testing.assert_close(got, ref.select(dim, 1).permute(out.perm), rtol=0, atol=0)


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
@pytest.mark.parametrize("dims", [None, [], [1], [-1, 0], (2, 3), (0, 1, 2, 3)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduction_axes_and_result_layout(layout, dims, keepdim):
    ref = reference()
    names = reduction_dims(dims, 4)
    out = after_reduce(layout, names, keepdim)
    got = held(ref, layout).sum(physical_axes(layout, names), keepdim=keepdim)
    want = ref.sum(names, keepdim=keepdim).permute(out.perm)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
@pytest.mark.parametrize("perm", [(0, 2, 3, 1), (3, 2, 1, 0), (-1, 0, -2, 1)])
def test_permute_only_relabels(layout, perm):
    ref = reference()
    out = after_permute(layout, perm)
    torch.testing.assert_close(held(ref, layout), ref.permute(perm).permute(out.perm),
                               rtol=0, atol=0)


@pytest.mark.parametrize("dims", [(1, 2), (-1, 0), (3, -3), (None, None)])
def test_transpose_perm_is_torchs(dims):
    ref = reference()
    want = ref.transpose(*dims) if dims[0] is not None else ref.permute(3, 2, 1, 0)
    torch.testing.assert_close(ref.permute(transpose_perm(4, *dims)), want, rtol=0, atol=0)


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
@pytest.mark.parametrize("dim", range(-5, 5))
def test_insert_a_dim(layout, dim):
    ref = reference()
    out = after_insert(layout, dim)
    stacked = torch.stack([held(ref, layout), held(ref, layout) + 1], physical_axis(out, dim))
    want = torch.stack([ref, ref + 1], dim).permute(out.perm)
    torch.testing.assert_close(stacked, want, rtol=0, atol=0)
    if layout.is_canonical:
        assert out.is_canonical  # torch order stays torch order
    else:
        assert physical_axis(out, dim) == 4  # a permuted layout gets the new axis last


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
@pytest.mark.parametrize("dim", range(-4, 4))
def test_unfold_by_one_gather(layout, dim):
    ref = reference()
    size, step = 2, 1
    out = after_unfold(layout, dim)
    windows = (SHAPE[dim] - size) // step + 1
    index = torch.arange(windows)[:, None] * step + torch.arange(size)[None, :]
    axis = physical_axis(layout, dim)
    x = held(ref, layout)
    gathered = x.index_select(axis, index.flatten()).unflatten(axis, (windows, size))
    want = ref.unfold(dim, size, step).permute(out.perm)
    torch.testing.assert_close(gathered, want, rtol=0, atol=0)


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
@pytest.mark.parametrize("pad", [(1, 2), (1, 0, 0, 3), (0, 1, 2, 0, 1, 1), (1, 1, 2, 2, 3, 3, 1, 0)])
def test_physical_pad_is_f_pad(layout, pad):
    ref = reference()
    got = np.pad(held(ref, layout).numpy(), physical_pad(layout, pad))
    want = F.pad(ref, pad).permute(layout.perm).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
@pytest.mark.parametrize("dim", [1, -1, 2])
def test_physical_index_slices_the_reference_dim(layout, dim):
    ref = reference()
    index = [slice(None)] * 4
    index[dim] = slice(1, 3)
    got = held(ref, layout)[physical_index(layout, dim, slice(1, 3))]
    torch.testing.assert_close(got, ref[tuple(index)].permute(layout.perm), rtol=0, atol=0)


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
def test_physical_order_and_array(layout):
    ref = reference()
    assert physical_order(layout, SHAPE) == tuple(held(ref, layout).shape)
    np.testing.assert_array_equal(physical_array(ref.numpy(), layout), held(ref, layout).numpy())


@pytest.mark.parametrize("layout", LAYOUTS, ids=IDS)
@pytest.mark.parametrize("trailing", [0, 1, 2, 3])
def test_physical_broadcast_broadcasts_like_the_reference_constant(layout, trailing):
    ref = reference()
    constant = torch.randn(SHAPE[4 - trailing:], generator=torch.Generator().manual_seed(1))
    got = held(ref, layout) * torch.from_numpy(physical_broadcast(constant.numpy(), layout))
    torch.testing.assert_close(got, held(ref * constant, layout), rtol=0, atol=0)
    with pytest.raises(ValueError):
        physical_broadcast(np.ones((1,) * 5), layout)


def test_negative_dims_count_from_the_end_and_out_of_range_is_an_error():
    assert [normalize_dim(d, 4) for d in (-4, -1, 0, 3)] == [0, 3, 0, 3]
    for bad in (4, -5):
        with pytest.raises(ValueError, match="out of range"):
            normalize_dim(bad, 4)
        with pytest.raises(ValueError, match="out of range"):
            physical_axis(channels_last(4), bad)
    assert reduction_dims(None, 3) == reduction_dims([], 3) == (0, 1, 2)
    assert reduction_dims(-1, 3) == (2,)


def test_bad_arguments_are_errors():
    with pytest.raises(ValueError, match="not a permutation"):
        after_permute(canonical(3), (0, 0, 1))
    with pytest.raises(ValueError, match="pairs"):
        physical_pad(canonical(2), (1, 2, 3))
    with pytest.raises(ValueError, match="pairs"):
        physical_pad(canonical(1), (1, 2, 3, 4))


FLAT = Layout((0, 1), FlatOrder((3, 2, 2), (1, 2, 0)))  # flatten(1) of an NHWC [N, 3, 2, 2]


def test_flat_layouts_run_only_order_free_ops_as_held():
    assert order_free(canonical(2), [0])
    assert order_free(FLAT, [1]) and order_free(FLAT, [-1]) and order_free(FLAT, [0, 1])
    assert not order_free(FLAT, [0])
    assert after_reduce(FLAT, [1], keepdim=True) == canonical(2)
    assert after_reduce(FLAT, [0, 1], keepdim=False) == canonical(0)
    for make_plain_first in (lambda: after_reduce(FLAT, [0], keepdim=False),
                             lambda: after_permute(FLAT, (1, 0)),
                             lambda: after_insert(FLAT, 0)):
        with pytest.raises(ValueError, match="plain"):
            make_plain_first()


def test_shared_layout_is_the_first_plain_one():
    nhwc = channels_last(4)
    assert shared_layout([nhwc, canonical(4)]) == nhwc
    assert shared_layout([FLAT, canonical(2)]) == canonical(2)
    assert shared_layout([FLAT, FLAT]) == canonical(2)


def test_every_layout_of_rank_3_round_trips():
    """after_permute and physical_axis agree for every plain rank-3 layout and perm."""
    ref = torch.arange(24.0).reshape(2, 3, 4)
    for perm, op in itertools.product(itertools.permutations(range(3)), repeat=2):
        layout = Layout(perm)
        out = after_permute(layout, op)
        torch.testing.assert_close(held(ref, layout), ref.permute(op).permute(out.perm))
        assert [physical_axis(out, d) for d in range(3)] == [
            physical_axis(layout, op[d]) for d in range(3)]


def test_module_example_runs():
    import doctest

    from crossport.layout import dims

    result = doctest.testmod(dims)
    assert result.attempted > 0 and result.failed == 0
