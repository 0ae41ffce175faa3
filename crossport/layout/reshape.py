"""Reshapes under a layout: when can a torch ``view`` run on the Keras tensor as it is?

A torch reshape merges and splits runs of adjacent dims. If each run appears in the Keras
order in the same relative order (size-1 dims may sit anywhere), the Keras tensor can be
reshaped directly and the output gets the induced layout: no transpose. ``flatten(x, 2)``
of an NHWC activation, for example, is a reshape to ``[N, H*W, C]`` with layout ``(0, 2, 1)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from crossport.layout.layout import FlatOrder, Layout


def reshape_groups(in_shape: Sequence[int], out_shape: Sequence[int]):
    """Pairs ``(in_dims, out_dims)`` of non-unit dims with equal products, or None."""
    ins = [d for d, s in enumerate(in_shape) if s != 1]
    outs = [d for d, s in enumerate(out_shape) if s != 1]
    groups, i, o = [], 0, 0
    while i < len(ins) or o < len(outs):
        if i >= len(ins) or o >= len(outs):
            return None
        gi, go = [ins[i]], [outs[o]]
        pi, po = in_shape[ins[i]], out_shape[outs[o]]
        i, o = i + 1, o + 1
        while pi != po:
            if pi < po and i < len(ins):
                gi.append(ins[i])
                pi *= in_shape[ins[i]]
                i += 1
            elif po < pi and o < len(outs):
                go.append(outs[o])
                po *= out_shape[outs[o]]
                o += 1
            else:
                return None
        groups.append((gi, go))
    return groups


def layout_after_reshape(layout: Layout, in_shape, out_shape) -> Layout | None:
    """The output layout if the Keras tensor can simply be reshaped, else None."""
    if layout.flat is not None:
        return None
    groups = reshape_groups(in_shape, out_shape)
    if groups is None:
        return None
    group_of = {d: g for g, (gi, _go) in enumerate(groups) for d in gi}
    keras_order = [d for d in layout.perm if in_shape[d] != 1]
    out_perm: list[int] = []
    seen = 0
    pos = 0
    while pos < len(keras_order):
        g = group_of[keras_order[pos]]
        gi, go = groups[g]
        if keras_order[pos:pos + len(gi)] != gi:  # the run is split or reordered in Keras
            return None
        out_perm.extend(go)
        pos += len(gi)
        seen += 1
    unit_outs = [d for d, s in enumerate(out_shape) if s == 1]
    for d in unit_outs:  # size-1 dims go next to their torch predecessor
        before = [p for p in out_perm if p < d]
        at = out_perm.index(max(before)) + 1 if before else 0
        out_perm.insert(at, d)
    return Layout(tuple(out_perm))


def flat_layout(layout: Layout, in_shape, out_shape) -> Layout | None:
    """``[N, *block] -> [N, prod(block)]`` on a permuted block: a flat-permuted layout."""
    if layout.flat is not None or len(out_shape) != 2 or len(in_shape) < 3:
        return None
    if layout.perm[0] != 0 or out_shape[0] != in_shape[0]:
        return None
    if out_shape[1] != math.prod(in_shape[1:]):
        return None
    block_perm = tuple(p - 1 for p in layout.perm[1:])
    return Layout((0, 1), FlatOrder(tuple(in_shape[1:]), block_perm))
