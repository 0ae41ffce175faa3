"""The dim-remapping contract: reference dims named by an op -> axes of the held tensor.

A converter states *what* its op does to the reference (source framework) dims: it reduces
dims 2 and 3, concatenates along dim 1, permutes by ``(0, 2, 1, 3)``, pads the last two
dims, inserts a dim at 1. These functions say *how* that reads on the tensor as it is held
(``held == reference.permute(layout.perm)``, see layout.py) and which layout the result
takes, so no converter does perm arithmetic of its own. Both directions use them; nothing
here knows a framework.

Dims follow torch's conventions once, here:

- a dim may be negative and counts from the end: ``-1`` is the last dim; a dim outside
  ``[-rank, rank)`` is an error (``ValueError``), never silently wrapped;
- a reduction's dims ``None`` or ``[]`` mean every dim (``sum(x)``, ``amax(x, [])``);
- a dim that inserts a new one (``stack``, ``unsqueeze``) counts in the *result's* rank;
- a flat-permuted layout (``FlatOrder``: the features of ``flatten(x, 1)`` of a permuted
  block) keeps the reference dims and permutes the elements *inside* the last dim. Its axes
  map like any other, but only an op that treats the features symmetrically (a reduction or
  a softmax over that dim) may run on it as held; every other op asks for a plain layout
  first (:func:`order_free`).

Example:
    >>> from crossport.layout import channels_last
    >>> nhwc = channels_last(4)                    # an NCHW tensor held N, H, W, C
    >>> physical_axis(nhwc, 1), physical_axes(nhwc, (-2, -1))
    (3, (1, 2))
    >>> after_reduce(nhwc, (2, 3), keepdim=False)  # mean over H, W: [N, C], canonical
    Layout(perm=(0, 1), flat=None)
    >>> after_permute(nhwc, (0, 2, 3, 1))          # NCHW -> NHWC is free: canonical result
    Layout(perm=(0, 1, 2, 3), flat=None)
    >>> physical_pad(nhwc, (1, 2))                 # F.pad of W by (1, 2)
    [(0, 0), (0, 0), (1, 2), (0, 0)]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from crossport.layout.layout import Layout, canonical, normalize_dim

__all__ = [
    "after_insert",
    "after_permute",
    "after_reduce",
    "after_unfold",
    "normalize_dim",
    "normalize_dims",
    "order_free",
    "physical_array",
    "physical_axes",
    "physical_axis",
    "physical_broadcast",
    "physical_index",
    "physical_order",
    "physical_pad",
    "reduction_dims",
    "shared_layout",
    "transpose_perm",
]


def normalize_dims(dims: int | Iterable[int], rank: int) -> tuple[int, ...]:
    """:func:`normalize_dim` of one dim or of each of several, in the order given."""
    if isinstance(dims, int):
        return (normalize_dim(dims, rank),)
    return tuple(normalize_dim(d, rank) for d in dims)


def reduction_dims(dim: int | Sequence[int] | None, rank: int) -> tuple[int, ...]:
    """The dims a reduction's ``dim`` argument names: ``None`` or ``[]`` is every dim.

    A 0-dim tensor has none: torch accepts ``dim`` 0 or -1 there (a scalar reads as one
    element) and reduces nothing."""
    if dim is None or (not isinstance(dim, int) and len(dim) == 0):
        return tuple(range(rank))
    if rank == 0:
        normalize_dims(dim, 1)  # 0 or -1, else the usual ValueError
        return ()
    return normalize_dims(dim, rank)


def physical_axis(layout: Layout, dim: int) -> int:
    """The held axis of reference ``dim`` (negative dims count from the end)."""
    return layout.perm.index(normalize_dim(dim, layout.rank))


def physical_axes(layout: Layout, dims: int | Iterable[int]) -> tuple[int, ...]:
    """:func:`physical_axis` of each of ``dims``, in the order given."""
    return tuple(physical_axis(layout, d) for d in normalize_dims(dims, layout.rank))


def physical_order(layout: Layout, per_dim: Sequence) -> tuple:
    """Items listed per reference dim (sizes, slices, pad pairs), listed per held axis."""
    if len(per_dim) != layout.rank:
        raise ValueError(f"{len(per_dim)} items for a rank-{layout.rank} layout")
    return tuple(per_dim[p] for p in layout.perm)


def physical_index(layout: Layout, dim: int, item) -> tuple:
    """An indexing tuple applying ``item`` (an int or a slice) to reference ``dim``.

    ``held[physical_index(layout, 1, slice(0, 2))]`` is ``reference[:, 0:2]`` held.
    """
    index: list = [slice(None)] * layout.rank
    index[physical_axis(layout, dim)] = item
    return tuple(index)


def physical_array(array, layout: Layout) -> np.ndarray:
    """A reference-order numpy array of the layout's rank, held in ``layout``."""
    return np.ascontiguousarray(np.transpose(np.asarray(array), layout.perm))


def physical_broadcast(array, layout: Layout) -> np.ndarray:
    """A reference-order constant that broadcasts from the right (a per-channel vector, a
    ``[H, W, C]`` block), given the layout's rank with leading 1s and held in ``layout``: it
    broadcasts against the held tensor as the constant did against the reference.

    ``physical_broadcast(np.ones(3), channels_first(4)).shape == (1, 3, 1, 1)``.
    """
    array = np.asarray(array)
    if array.ndim > layout.rank:
        raise ValueError(f"a rank-{array.ndim} constant does not broadcast to rank {layout.rank}")
    return physical_array(array.reshape((1,) * (layout.rank - array.ndim) + array.shape), layout)


def physical_pad(layout: Layout, pad: Sequence[int]) -> list[tuple[int, int]]:
    """``F.pad``'s flat list (``(before, after)`` from the *last* reference dim on, pitfalls
    item 7) as one ``(before, after)`` pair per held axis, first axis first."""
    if len(pad) % 2 or len(pad) // 2 > layout.rank:
        raise ValueError(f"pad {tuple(pad)}: expected pairs for at most {layout.rank} dims")
    pairs = [(0, 0)] * layout.rank
    for k in range(len(pad) // 2):
        pairs[layout.rank - 1 - k] = (_amount(pad[2 * k]), _amount(pad[2 * k + 1]))
    return list(physical_order(layout, pairs))


def _amount(value):
    """An int as an int; anything else (a run-time size) passed through as it is."""
    return int(value) if isinstance(value, (int, np.integer)) else value


def after_reduce(layout: Layout, dims: Iterable[int], keepdim: bool) -> Layout:
    """The layout of a reduction over ``dims`` (the held tensor reduced over their axes).

    ``keepdim`` keeps the layout; otherwise the dims are dropped and the others keep their
    held order. Reducing a flat-permuted layout over its feature dim gives torch order.
    """
    dims = set(normalize_dims(dims, layout.rank))
    rank = layout.rank if keepdim else layout.rank - len(dims)
    if layout.flat is not None:
        if layout.rank - 1 not in dims:
            raise ValueError("a flat-permuted layout must be made plain before reducing "
                             "other dims than its features")
        return canonical(rank)
    return layout if keepdim else layout.without(dims)


def after_permute(layout: Layout, perm: Sequence[int]) -> Layout:
    """The layout that makes ``reference.permute(perm)`` the held tensor as it is (a permute
    costs no op, only this relabelling). ``layout`` must be plain."""
    perm = normalize_dims(perm, layout.rank)
    if sorted(perm) != list(range(layout.rank)):
        raise ValueError(f"{perm} is not a permutation of {layout.rank} dims")
    if layout.flat is not None:
        raise ValueError("a flat-permuted layout must be made plain before a permute")
    new_dim = {old: new for new, old in enumerate(perm)}
    return Layout(tuple(new_dim[p] for p in layout.perm))


def transpose_perm(rank: int, dim0: int | None = None, dim1: int | None = None) -> tuple:
    """The permutation of ``transpose(dim0, dim1)``; without dims, all of them reversed
    (``.t()``, ``.T``)."""
    if dim0 is None:
        return tuple(reversed(range(rank)))
    perm = list(range(rank))
    a, b = normalize_dim(dim0, rank), normalize_dim(dim1, rank)
    perm[a], perm[b] = perm[b], perm[a]
    return tuple(perm)


def after_insert(layout: Layout, dim: int) -> Layout:
    """The layout after a new dim at reference ``dim`` (counted in the result's rank).

    Torch order stays torch order (the new axis at ``dim``); a permuted layout gets the new
    axis last, leaving the held tensor's other axes where they are.
    """
    dim = normalize_dim(dim, layout.rank + 1)
    if layout.is_canonical:
        return canonical(layout.rank + 1)
    if layout.flat is not None:
        raise ValueError("a flat-permuted layout must be made plain before inserting a dim")
    return layout.with_inserted(dim)


def after_unfold(layout: Layout, dim: int) -> Layout:
    """The layout of ``unfold(dim, size, step)`` taken on the held tensor by one gather along
    ``dim``'s axis with ``[windows, size]`` indices: the windows stay at that axis and the
    new reference dim (the result's last) is held right after it.

    Example:
        >>> after_unfold(canonical(3), -1).perm        # [B, C, L] -> [B, C, windows, size]
        (0, 1, 2, 3)
        >>> after_unfold(Layout((0, 2, 1)), 1).perm    # [B, C, L] held [B, L, C], unfold C
        (0, 2, 1, 3)
    """
    dim = normalize_dim(dim, layout.rank)
    if layout.flat is not None:
        raise ValueError("a flat-permuted layout must be made plain before an unfold")
    perm = list(layout.perm)
    perm.insert(perm.index(dim) + 1, layout.rank)
    return Layout(tuple(perm))


def shared_layout(layouts: Sequence[Layout]) -> Layout:
    """The one layout several same-rank inputs (cat, stack) are brought to: the first plain
    one (the first input's, usually), else torch order."""
    return next((lay for lay in layouts if lay.flat is None), canonical(layouts[0].rank))


def order_free(layout: Layout, dims: Iterable[int]) -> bool:
    """Whether an op that treats ``dims`` symmetrically (a reduction, a softmax over them)
    may run on ``layout`` as held: always for a plain layout; for a flat-permuted one only
    when ``dims`` include its feature dim, whose element order the op does not see."""
    if layout.flat is None:
        return True
    return layout.rank - 1 in normalize_dims(dims, layout.rank)


def dims_last(layout: Layout, dims: Sequence[int], held_order: bool = True) -> Layout:
    """``layout`` with ``dims`` held last: where a module over trailing dims (a LayerNorm, an
    RMSNorm) can run on the tensor. The other dims keep their held order; ``dims`` keep
    theirs too, or, with ``held_order=False``, come in the order given (the order of the
    module's weight).

    Example:
        >>> dims_last(Layout((0, 2, 3, 1)), [1]).perm
        (0, 2, 3, 1)
        >>> dims_last(Layout((0, 3, 1, 2)), [2, 3]).perm
        (0, 1, 3, 2)
        >>> dims_last(Layout((0, 3, 1, 2)), [2, 3], held_order=False).perm
        (0, 1, 2, 3)
    """
    moved = normalize_dims(dims, layout.rank)
    last = [d for d in layout.perm if d in moved] if held_order else list(moved)
    return Layout(tuple([d for d in layout.perm if d not in moved] + last))


def dims_at(layout: Layout, placed: dict[int, int]) -> Layout:
    """``layout`` with dim ``placed[p]`` held at axis ``p``, the other dims filling the
    remaining axes in their held order: where a module built for fixed axes (a shared
    LayerNorm's first call) can run on another call's tensor.

    Example:
        >>> dims_at(Layout((0, 1, 2)), {1: 2}).perm
        (0, 2, 1)
    """
    rest = iter(d for d in layout.perm if d not in placed.values())
    return Layout(tuple(placed[p] if p in placed else next(rest) for p in range(layout.rank)))
