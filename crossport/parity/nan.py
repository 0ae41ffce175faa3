"""Where NaN handling differs between torch and the converted model (docs/parity.md).

torch propagates NaN through max pooling; TF's max pool skips it. Matching torch would cost
a second pool over an isnan mask on every call (measured ~2x the pool's time on a
8x56x56x64 3x3/2 pool), so crossport keeps TF's kernel and says so: when an input set holds
a NaN or inf and the graph has a max pool, the parity report carries a note. relu, clamp,
maximum, minimum, amax and amin propagate NaN in both; argmax/argmin/max(dim)/min(dim)
point at the first NaN like torch (a cheap isnan/any, see ops/reduce.py); sort, argsort and
topk order NaN above +inf like torch (an integer sort key, layers/ordering.py). Half-pixel
bilinear resizing keeps tf.image.resize (3.5x faster than the exact tap gathers on a
1x56x56x64 2x upsample), which makes NaN of an inf beside a finite pixel. Measured against
torch in tests/ops/test_nan.py and tests/ops/test_resize.py.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

NAN_SKIPPING_OPS = {
    "max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices",
    "max_pool3d_with_indices", "adaptive_max_pool1d", "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    # a softmax row holding NaN is all NaN in torch; TF's keeps the finite entries' share
    "_softmax", "softmax",
    # half-pixel bilinear resizes run tf.image.resize: top + (bottom - top) * t makes NaN of
    # an inf beside a finite pixel (torch sums w0 * x0 + w1 * x1 and keeps inf)
    "upsample_bilinear2d",
}


def _op_name(target) -> str:
    name = getattr(target, "__name__", str(target))  # "max_pool2d.default"
    packet, _, _ = name.partition(".")
    return packet


def has_nonfinite(args: tuple) -> bool:
    return any(isinstance(a, torch.Tensor) and a.is_floating_point()
               and not bool(torch.isfinite(a).all()) for a in args)


def nan_notes(exported, input_sets: list[tuple]) -> list[str]:
    """A note naming the NaN-skipping ops in the graph when an input holds NaN or inf."""
    if not any(has_nonfinite(args) for args in input_sets):
        return []
    found = sorted({_op_name(n.target) for n in exported.graph_module.graph.nodes
                    if n.op == "call_function" and _op_name(n.target) in NAN_SKIPPING_OPS})
    if not found:
        return []
    return [(f"an input holds NaN/inf and the model has {', '.join(found)}: TF's kernels "
             "handle NaN there differently from torch (max pooling skips it, softmax keeps "
             "the other entries, bilinear resizing makes NaN of inf); see docs/parity.md")]
