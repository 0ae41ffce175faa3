"""torch's total order for sorting: NaN above +inf, -0.0 equal to +0.0.

TF's ``top_k`` compares floats with ``>``, so a NaN lands anywhere (every comparison with it
is false), while torch's ``sort``/``topk``/``argsort`` order NaN above +inf. Sorting an
integer key that encodes torch's order gives torch's result for every input: a float's bits
read as a signed integer are ordered like the float for positives and reversed for
negatives, so flipping all but the sign bit of the negatives makes the integer order the
float order, and a single positive NaN bit pattern is above +inf's. Every op has a TFLite
builtin (BITCAST, BITWISE_XOR, SUB, SELECT_V2, TOPK_V2). TF's ``top_k`` keeps
equal keys in index order, as torch's stable sort does.
"""

from __future__ import annotations

import keras
from keras import ops


def same_width_view(x, dtype: str):
    """``keras.ops.view(x, dtype)`` for a dtype of the same width (float32 <-> int32,
    float64 <-> int64): a bitcast at every size. Keras' TF ``view`` tests the last dim's
    byte count in Python, which raised while tracing a run-time (``None``) last dim, so
    SavedModel and TFLite exports of such models failed; then the view is of a size-1 axis
    (a static last dim keeps the plain view: no RESHAPE pinning the size in a TFLite file).
    """
    if _run_time_last_dim(x):
        return ops.squeeze(ops.view(ops.expand_dims(x, -1), dtype), -1)
    return ops.view(x, dtype)


def _run_time_last_dim(x) -> bool:
    """Whether ``x`` has a last dim and its size is unknown while tracing. ``x.shape`` is
    a tuple for a KerasTensor or array but a TF ``TensorShape`` in a layer's call, and a 0-d
    ``TensorShape`` is truthy, so the test must go by the rank (``x.shape and
    x.shape[-1]`` raised IndexError on ldexp's 0-d OpInfo samples)."""
    shape = x.shape
    rank = len(shape) if isinstance(shape, tuple) else shape.rank
    return bool(rank) and shape[-1] is None


# float dtype -> (integer dtype of the same width, bits below the sign bit)
_KEY_WIDTH = {"float32": ("int32", 31), "float64": ("int64", 63)}


def order_key(x):
    """An integer tensor whose order along any axis is torch's order of ``x``.

    Integers are their own key (widened to int32, which TF's ``top_k`` takes); floats are
    keyed through their bits (half precision through float32, exactly).

    Example:
        >>> import numpy as np
        >>> key = order_key(np.array([1.0, np.nan, -np.inf, -0.0, 0.0, np.inf], "float32"))
        >>> np.argsort(np.asarray(key), kind="stable").tolist()
        [2, 3, 4, 0, 5, 1]
    """
    dtype = keras.backend.standardize_dtype(x.dtype)
    if dtype in ("float16", "bfloat16"):
        x, dtype = ops.cast(x, "float32"), "float32"
    if dtype not in _KEY_WIDTH:
        return x if dtype in ("int32", "int64") else ops.cast(x, "int32")
    int_dtype, shift = _KEY_WIDTH[dtype]
    bits = same_width_view(ops.where(ops.isnan(x), ops.cast(float("nan"), dtype), x),
                           int_dtype)
    # -0.0 (the sign bit alone) -> +0.0, compared as bits: TF's CPU kernels flush subnormals
    # to zero in float comparisons, torch does not, so x == 0 would tie -1e-40 with 0
    zero = ops.zeros_like(bits)
    bits = ops.where(ops.equal(bits, ops.cast(-(1 << shift), int_dtype)), zero, bits)
    # select + xor: TFLite has builtins for both (not for BitwiseAnd or BitwiseNot)
    magnitude = ops.cast((1 << shift) - 1, int_dtype)
    return ops.where(ops.less(bits, zero), ops.bitwise_xor(bits, magnitude), bits)


def top_k_torch_order(x, k, largest: bool = True):
    """``(values, indices)`` of the ``k`` largest (or smallest) entries along the last axis,
    in torch's order: NaN counts as the largest value, ties keep index order. ``k`` may be
    a tensor (a run-time size)."""
    key = order_key(x)
    if not largest:
        # ~key reverses the order and, unlike negation, never overflows; written -1 - key
        # (the same bits): TFLite's XOR takes 32-bit integers only, its SUB int64 too
        key = ops.subtract(ops.cast(-1, key.dtype), key)
    _, indices = ops.top_k(key, k, sorted=True)
    return ops.take_along_axis(x, indices, axis=-1), indices
