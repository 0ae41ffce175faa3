"""Python numbers beside tensors, applied as torch applies them.

torch converts a Python number (a ``Scalar`` argument) to the op's computation dtype, the
common dtype of its tensors and numbers (``torch.result_type``): a float is rounded once
from its double, an integer is cast as C casts it (wrapping: ``int8_tensor % 300`` divides
by 44, ``uint8_tensor == -1`` compares with 255). Keras makes a Python number a float32 or
int32 tensor first wherever it converts it without a dtype (its comparisons, ``mod``,
``abs``, ``where``, the bitwise ops), so a float64 model compared ``x < 0.1`` with
0.10000000149 and an int8 one computed ``x % 300`` in int32.

:func:`bound` gives the number as a numpy scalar of the computation dtype, which every
``keras.ops`` call converts without rounding; :func:`bound_operands` does it for a binary
op's operands and casts a tensor operand whose dtype differs (torch computes in the common
dtype). Only for ``keras.ops`` arguments: a numpy scalar on the *left* of an operator with
a KerasTensor does not dispatch to Keras (``np.float64(0.1) * x`` tries to make ``x`` an
array), so converters write ``ops.multiply(s, x)`` there.

Half precision: torch's CPU kernels of ``mul``, ``div`` (every rounding mode, ``//`` too)
and the activations with a scalar parameter (``elu``, ``celu``, ``leaky_relu``,
``softplus``) upcast a float16 tensor, apply the number as a float32 and round the result
once (``x * 0.1`` multiplies by 0.100000001, not by float16's 0.0999755859);
:func:`in_float32` computes them that way. ``add``/``sub``/``rsub``, ``fmod``,
``remainder``, ``pow`` and comparisons round the number to float16 first, as :func:`bound`
does (with ``alpha``, and in ``remainder``, the bound operands are then combined in float32
and rounded once: :func:`in_float32` with the bound number as an operand).

:func:`in_dtype` is the one cast of an operand to a dtype here: a number bound, a numpy
constant cast by numpy (it stays a constant), a tensor cast unless it already has it.
:func:`promoted`, :func:`promoted_bound`, :func:`in_result_dtype` and :func:`float_operand`
put operands in the op's *result* dtype (``ctx.out_dtype``), for the elementwise, division,
bitwise and float-math converters.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import numpy as np
import torch

from crossport.to_keras.values import keras_dtype

ops = keras.ops

HALF = ("float16", "bfloat16")


def is_number(x) -> bool:
    """A Python ``bool``/``int``/``float`` (not a numpy scalar, which already has a dtype)."""
    return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


def dtype_name(x) -> str:
    """The Keras/numpy dtype name of a tensor, array or numpy scalar."""
    dtype = x.dtype
    return keras.backend.standardize_dtype(getattr(dtype, "name", None) or str(dtype))


def bound(number, dtype: str):
    """``number`` as a numpy scalar of ``dtype``, converted as torch converts a Scalar for a
    kernel computing in ``dtype``: floats rounded once from the double, integers wrapped to
    the width (two's complement), bools as truth values."""
    if not is_number(number):
        return number
    if dtype == "bool":
        return np.bool_(bool(number))
    if dtype.startswith(("int", "uint")):
        bits = np.iinfo(dtype).bits
        unsigned = np.asarray(int(number) & ((1 << bits) - 1), dtype=f"uint{bits}")
        return unsigned.view(dtype)[()]
    if dtype == "bfloat16":
        import ml_dtypes  # TF's own bfloat16 type; numpy has none

        return np.asarray(number, dtype=ml_dtypes.bfloat16)[()]
    return np.asarray(number, dtype=dtype)[()]


def common_dtype(a, b) -> str:
    """torch's computation dtype of two operands (tensors, arrays or Python numbers): a
    0-dim tensor and a number count less than a tensor with dims (``torch.result_type``)."""
    def stand_in(x):
        if is_number(x):
            return x
        rank = len(tuple(x.shape))
        return torch.empty((1,) * rank, dtype=getattr(torch, dtype_name(x)))

    return str(torch.result_type(stand_in(a), stand_in(b))).removeprefix("torch.")


def bound_operands(a, b):
    """``a`` and ``b`` in torch's computation dtype when one is a Python number: the number
    a numpy scalar of it (:func:`bound`), a tensor of another dtype cast to it (torch
    computes ``int64_tensor > 0.5`` in float32). Two tensors or two numbers: unchanged."""
    if is_number(a) == is_number(b):
        return a, b
    dtype = common_dtype(a, b)
    return in_dtype(a, dtype), in_dtype(b, dtype)


def in_dtype(x, dtype: str):
    """``x`` in ``dtype``: a Python number as :func:`bound` gives it, a numpy array or scalar
    cast by numpy (a constant stays a constant, as the emitter's constant rules want), a
    tensor cast unless it already has the dtype."""
    if is_number(x):
        return bound(x, dtype)
    if dtype_name(x) == dtype:
        return x
    if isinstance(x, (np.ndarray, np.generic)):
        return np.asarray(x).astype(dtype)
    return ops.cast(x, dtype)


def in_float32(x, fn: Callable, *others):
    """``fn(x, *others)`` the way torch's CPU kernels compute a half-precision tensor with a
    Python number: ``x`` and the tensor/numpy ``others`` upcast to float32 (exactly),
    ``fn`` applied there (a Python number it is given or closes over becomes a float32
    beside them), the result rounded once to ``x``'s dtype. Other dtypes: ``fn(x,
    *others)`` itself. A number that torch rounds to float16 first is bound before."""
    dtype = dtype_name(x)
    if dtype not in HALF:
        return fn(x, *others)
    others = tuple(other if is_number(other) else in_dtype(other, "float32") for other in others)
    return ops.cast(fn(ops.cast(x, "float32"), *others), dtype)


# The operands of an op in torch's result dtype (``ctx.out_dtype``), for the elementwise,
# division and float-math converters.

def is_tensor(x) -> bool:
    return not isinstance(x, (bool, int, float)) and hasattr(x, "dtype")


def integer_result(ctx) -> bool:
    """Whether torch's result dtype is an integer type (not bool)."""
    return not ctx.out_dtype.is_floating_point and ctx.out_dtype != torch.bool


def promoted(ctx, *operands):
    """The tensor operands in torch's result dtype, where torch computes the op.

    torch promotes first and computes in the result type (``bool + 1`` is int64, ``int8 +
    int64`` is int64, ``int * 1.5`` is float32); Keras' own promotion differs (bool + int
    is int32) and TF refuses mixed operands. Python numbers stay numbers (weak types)."""
    if ctx.out_dtype == torch.bool:
        return operands
    want = keras_dtype(ctx.out_dtype)
    return tuple(in_dtype(x, want) if is_tensor(x) else x for x in operands)


def promoted_bound(ctx, *operands):
    """The operands in torch's result dtype, Python numbers too: numpy scalars of it
    (:func:`bound`), for ``keras.ops`` calls that would make a
    number a float32/int32 tensor first (``mod``, ``where``, ``abs``).

    Not :func:`bound_operands`: that one takes the computation
    dtype from the operands (a comparison's, whose result is bool) and leaves two tensors
    as they are; the ops here compute in their result dtype and TF needs both in it."""
    want = keras_dtype(ctx.out_dtype)
    return tuple(bound(x, want) for x in promoted(ctx, *operands))


def in_result_dtype(ctx, y):
    """``y`` in torch's result dtype (not :func:`in_dtype`, which
    trusts the symbolic dtype). Keras promotes a Python number with a narrow integer
    tensor to int32 (``int8 % -3`` came out int32); computing wider and casting back is
    exact for the integer ops here (their results fit the narrow type, or wrap as torch's
    do). Cast always: Keras' symbolic dtype says int8 there while TF's kernel returns int32
    (tf.cast of a tensor already in the dtype is the tensor itself)."""
    return ops.cast(y, keras_dtype(ctx.out_dtype))


def float_operand(x, dtype: str):
    """An integer/bool operand of a float-valued op in the op's float dtype (torch promotes;
    TF has no float math kernels for integers, e.g. Reciprocal on int64)."""
    if is_tensor(x) and not dtype_name(x).startswith(("float", "bfloat")):
        return in_dtype(x, dtype)
    return x
