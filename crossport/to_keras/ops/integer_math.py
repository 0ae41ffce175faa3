"""Integer number theory: gcd and lcm with torch's C semantics, exactly.

torch runs Euclid's algorithm on ``abs(a)``, ``abs(b)`` with C's truncated remainder, so
``abs`` of the type's minimum stays negative and the sign of a result involving it follows
the algorithm (``gcd(-2**63, 6)`` is -2). Here Euclid runs on ``-|x|`` (every value,
the minimum included, is representable there, and the floor modulo of non-positive numbers
is C's remainder) for a fixed number of steps that Lamé's theorem proves enough for the
dtype; the step count's parity gives the sign torch's algorithm ends with.
"""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.to_keras.registry import Policy, register
from crossport.to_keras.scalars import in_dtype
from crossport.to_keras.values import keras_dtype

aten = torch.ops.aten
ops = keras.ops


def euclid_steps(largest: int) -> int:
    """Steps after which Euclid's algorithm has ended for magnitudes up to ``largest``.

    Lamé: ``n`` division steps on ``u > v`` need ``u >= F(n + 2)``, so ``n`` is below the
    count of Fibonacci numbers up to ``largest``; one more step swaps ``u < v``.

    Example:
        >>> euclid_steps(2**63), euclid_steps(2**31), euclid_steps(255)
        (92, 46, 13)
    """
    count, (f, g) = 0, (1, 2)  # F(2), F(3), ...: F(1) = F(2) counted once
    while f <= largest:
        count, (f, g) = count + 1, (g, f + g)
    return count + 1


def _work_dtype(dtype: str) -> str:
    """C promotes narrow integers to int: they compute in int32; int32/int64 in their own."""
    return "int64" if dtype == "int64" else "int32"


def _wrapped_abs_is_negative(x, dtype: str):
    """Where C's ``abs`` of ``x`` (stored back in ``dtype``) is negative: the minimum."""
    if dtype == "uint8":
        return ops.zeros_like(x, dtype="bool")
    return ops.equal(x, np.iinfo(dtype).min)


def torch_gcd(a, b, dtype: str):
    """``torch.gcd`` of two integer tensors of ``dtype``, in the work dtype."""
    work = _work_dtype(dtype)
    a, b = (ops.cast(ops.cast(v, dtype), work) for v in (a, b))  # torch's promotion first
    negative_a = _wrapped_abs_is_negative(a, dtype)
    negative_b = _wrapped_abs_is_negative(b, dtype)
    x = ops.where(ops.greater(a, 0), ops.negative(a), a)  # -|a|, exact for the minimum
    y = ops.where(ops.greater(b, 0), ops.negative(b), b)
    odd = ops.zeros_like(x, dtype="bool")  # whether an odd number of steps ran
    for _ in range(euclid_steps(-int(np.iinfo(dtype).min) if dtype != "uint8" else 255)):
        running = ops.not_equal(x, 0)
        # y mod 0 ends the loop and y mod -1 is 0: neither divides (min mod -1 traps in C)
        trivial = ops.greater_equal(x, -1)
        remainder = ops.mod(y, ops.where(trivial, ops.full_like(x, -2), x))
        x, y = ops.where(trivial, ops.zeros_like(x), remainder), ops.where(running, x, y)
        odd = ops.logical_xor(odd, running)
    # the result is the last divisor: a's sign after an odd number of steps, else b's
    negative = ops.where(odd, negative_a, negative_b)
    return ops.where(negative, y, ops.negative(y))


def torch_lcm(a, b, dtype: str):
    """``torch.lcm``: ``abs(a / gcd * b)`` (0 where the gcd is 0), wrapping as C does."""
    work = _work_dtype(dtype)
    g = ops.cast(ops.cast(torch_gcd(a, b, dtype), dtype), work)  # torch's gcd is a dtype
    a, b = (ops.cast(ops.cast(v, dtype), work) for v in (a, b))
    minus_one = ops.equal(g, -1)  # a / -1 negates (the minimum wraps); no trapping divide
    safe = ops.where(ops.logical_or(ops.equal(g, 0), minus_one), ops.ones_like(g), g)
    quotient = ops.where(minus_one, ops.negative(a), ops.floor_divide(a, safe))  # exact
    out = ops.abs(ops.multiply(quotient, b))
    return ops.where(ops.equal(g, 0), ops.zeros_like(out), out)


@register(aten.gcd.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_gcd_default(ctx, self, other):
    """gcd(Tensor self, Tensor other) -> Tensor"""
    want = keras_dtype(ctx.out_dtype)
    return in_dtype(torch_gcd(self, other, want), want)


@register(aten.lcm.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_lcm_default(ctx, self, other):
    """lcm(Tensor self, Tensor other) -> Tensor"""
    want = keras_dtype(ctx.out_dtype)
    return in_dtype(torch_lcm(self, other, want), want)
