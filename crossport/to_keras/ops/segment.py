"""Reductions into targets an index names: scatter_reduce and index_reduce.

Both become :class:`crossport.layers.scatter.ScatterReduce`: every element is sent to a flat
position of ``self`` and each position reduces what it receives with one unsorted segment
op (TFLite builtins), sizes read at run time.
"""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.layers.scatter import REDUCTIONS, ScatterReduce
from crossport.to_keras.registry import Policy, register

aten = torch.ops.aten
ops = keras.ops


def _reduce_supports(node, reduce, **_):
    if reduce not in REDUCTIONS:
        return f"reduce={reduce!r} (torch takes {', '.join(REDUCTIONS)})"
    return None


def _as_keras(ctx, value):
    """A Keras tensor for a layer input: numpy constants (a zeros ``self``) as constants."""
    if isinstance(value, np.ndarray):
        return ctx.constant(value)
    return value


@register(aten.scatter_reduce.two, policy=Policy.CANONICAL, supports=_reduce_supports,
          dynamic=True)
def aten_scatter_reduce_two(ctx, self, dim, index, src, reduce, include_self=True):
    """scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor

    sum, prod, mean (integers divide rounding down), amax, amin (NaN propagates);
    ``include_self=False`` leaves ``self`` out of the targets that receive a value.
    """
    layer = ScatterReduce(dim, reduce, include_self, name=ctx.name())
    return layer(*(_as_keras(ctx, v) for v in (self, index, src)))


@register(aten.index_reduce.default, policy=Policy.CANONICAL, supports=_reduce_supports,
          dynamic=True)
def aten_index_reduce_default(ctx, self, dim, index, source, reduce, include_self=True):
    """index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True) -> Tensor

    The slice ``i`` of ``source`` along ``dim`` reduces into slice ``index[i]`` of ``self``
    (prod, mean, amax, amin), as scatter_reduce with the index spread over each slice.
    """
    layer = ScatterReduce(dim, reduce, include_self, index_along_dim=True, name=ctx.name())
    return layer(*(_as_keras(ctx, v) for v in (self, index, source)))
