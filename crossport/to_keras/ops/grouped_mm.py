"""transformers 5's grouped matmul of mixture-of-experts layers, with static shapes.

transformers' default experts path sorts the (token, expert) pairs by expert, counts them
per expert (``histc``, ops/histogram.py), takes the running offsets (``cumsum``) and calls
``transformers::grouped_mm_fallback(input, weight, offs)`` under torch.export: for each
expert ``i`` in order, rows ``offs[i - 1]:offs[i]`` (``0:offs[0]`` first, Python slices of
the ``S`` rows) of the ``(S, N)`` zero output become ``input[rows] @ weight[i]``. Only the
values are data-dependent: every shape is static (or follows the token count).

Row ``r`` therefore takes the last expert whose slice holds it (zeros if none), which for
the sorted, non-negative offsets of the MoE path is ``#{i: offs[i] <= r}``; the converter
computes that rule in general (negative offsets count from the end, like the slices) and
then one of two exact products, chosen on the static row count:

- few rows (``2 * S <= E``, a decode step): each row's expert matrix is gathered and
  multiplied (``S`` of the ``E`` matrices are read, the temporary is at most half of them);
- otherwise: every row times every expert in one matmul against the experts' matrices side
  by side (a ``Dense`` kernel ``(K, E * N)``), then each row's own expert's product is taken
  (``E`` times the sparse path's arithmetic and an ``(S, E * N)`` temporary, but one
  static-shaped matmul; a per-row gather would hold ``S`` weight matrices).
"""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.layers.dynamic import DynamicRange
from crossport.to_keras.ops.linear import _dense
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import LibraryOp, Policy, register
from crossport.to_keras.values import concrete

ops = keras.ops

GROUPED_MM_FALLBACK = LibraryOp("transformers::grouped_mm_fallback",
                                "(Tensor input, Tensor weight, Tensor offs) -> Tensor")


def _grouped_mm_supports(node, input, weight, offs):
    for name, value, rank in (("input", input, 2), ("weight", weight, 3), ("offs", offs, 1)):
        val = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
        if val is None or val.dim() != rank:
            return f"grouped_mm_fallback with a {name} that is not a {rank}-D tensor"
    return None


def _rows(ctx, count):
    """``(S, 1)`` int32 row positions; ``count`` an int or a run-time size."""
    if isinstance(count, int):
        return np.arange(count, dtype=np.int32)[:, None]
    return ops.expand_dims(DynamicRange(0, None, 1, dtype_name="int32",
                                        name=ctx.name("rows"))(count), 1)


def _slice_ends(offs, count):
    """Each expert's slice end as a row index: Python's slice bounds of ``count`` rows
    (negative from the end, clipped to ``[0, count]``), int32."""
    if isinstance(offs, np.ndarray) and isinstance(count, int):
        return np.clip(np.where(offs < 0, offs + count, offs), 0, count).astype(np.int32)
    offs = ops.convert_to_tensor(offs)
    count = ops.cast(count, offs.dtype)  # clip in the offsets' own dtype, then narrow
    ends = ops.where(ops.less(offs, 0), offs + count, offs)
    return ops.cast(ops.minimum(ops.maximum(ends, 0), count), "int32")


def _row_expert(rows, offs, count, experts: int):
    """``(S,)`` int32: the expert that writes each row (the last whose slice holds it),
    -1 for rows no slice holds."""
    ends = _slice_ends(offs, count)
    starts = ops.concatenate([ops.zeros((1,), "int32"), ends[:-1, ]], axis=0)  # a tuple key: Keras
    holds = ops.logical_and(ops.less_equal(starts[None, :], rows), ops.less(rows, ends[None, :]))
    ids = np.arange(experts, dtype=np.int32)[None, :]
    return ops.max(ops.where(holds, ids, -1), axis=1)


def _gathered_product(ctx, x, weight, expert):
    """``x[r] @ weight[expert[r]]`` per row, from the gathered expert matrices."""
    matrices = ops.take(ctx.constant(weight, "experts") if isinstance(weight, np.ndarray)
                        else weight, expert, axis=0)  # (S, K, N)
    return ops.squeeze(ops.matmul(ops.expand_dims(x, 1), matrices), 1)


def _every_expert_product(ctx, x, weight, expert, rows, experts: int, out: int):
    """Every row times every expert's matrix, then each row's own (one gather)."""
    if isinstance(weight, np.ndarray):  # (E, K, N) -> a (K, E * N) Dense kernel
        kernel = np.ascontiguousarray(weight.transpose(1, 0, 2).reshape(weight.shape[1], -1))
        every = _dense(ctx, x, kernel)
    else:
        every = ops.einsum("sk,ekn->sen", x, weight)
    every = ops.reshape(every, (-1, out))  # row r, expert e at r * E + e
    flat = ops.squeeze(rows, 1) * experts + expert
    return ops.take(every, flat, axis=0)


@register(GROUPED_MM_FALLBACK, policy=Policy.CANONICAL, supports=_grouped_mm_supports,
          dynamic=True)
def transformers_grouped_mm_fallback(ctx, input, weight, offs):
    """transformers::grouped_mm_fallback(Tensor input, Tensor weight, Tensor offs) -> Tensor

    ``input`` (S, K), ``weight`` (E, K, N), ``offs`` (E,): rows of each expert's slice
    times that expert's matrix, rows outside every slice zero (module docstring).
    """
    x = input if not isinstance(input, np.ndarray) else as_value(ctx, input).tensor
    experts, _, out = (concrete(d) for d in ctx.node.args[1].meta["val"].shape)
    rows = ctx.node.args[0].meta["val"].shape[0]
    count = ctx.size(rows)
    positions = _rows(ctx, count)
    expert = _row_expert(positions, offs, count, experts)
    chosen = ops.maximum(expert, 0)
    if isinstance(count, int) and 2 * count <= experts:
        product = _gathered_product(ctx, x, weight, chosen)
    else:
        product = _every_expert_product(ctx, x, weight, chosen, positions, experts, out)
    return ops.where(ops.greater_equal(expert, 0)[:, None], product, ops.zeros_like(product))
