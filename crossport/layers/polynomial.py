"""torch.special's orthogonal polynomials (Chebyshev T/U/V/W and their shifted forms,
Hermite H/He, Laguerre L, Legendre P) as ATen's kernels compute them.

ATen (``aten/src/ATen/native/Math.h``, ``*_polynomial_*_forward``) reads the degree ``n``
of each element as ``static_cast<int64_t>(n)`` (a non-integer truncates toward zero; NaN,
+-inf and ``|n| >= 2**63`` become INT64_MIN on x86, so 0), returns early at ``n < 0``, the
interval's ends and (Chebyshev, ``|x| < 1`` and ``n`` past a small bound) a trigonometric
closed form, and otherwise runs the three-term recurrence ``n - 1`` times, stopping early
once it is NaN. Here every rule is a ``where`` in ATen's order and the recurrence is one
vectorized ``while`` loop: an element steps while its own count lasts, and the loop ends
when no element still steps with a number (NaN stays NaN, so stopping it early changes
nothing). Its trip count is the largest count among the elements that reach the recurrence,
as torch's work per element, including Legendre and Laguerre at a huge ``n`` (no closed
form: torch also loops ``n`` times) and Chebyshev past ``|x| = 1`` (growth to inf, then
``inf - inf`` = NaN ends it). Each step's ``a * b - c`` is rounded once, as the FMA the
compiler makes of it (:func:`fused_multiply_subtract`): the recurrences are bit-equal to
torch's.

Every op is a TFLite builtin (WHILE, ATAN2 for ``acos``, SIN, COS, SELECT): the float32
model exports.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

# kind -> the degree past which |y| < 1 takes the closed form (Chebyshev only; y is x, or
# 2x - 1 for the shifted ones)
_CLOSED_FORM_FROM = {
    "chebyshev_polynomial_t": 6, "chebyshev_polynomial_u": 8, "chebyshev_polynomial_v": 8,
    "chebyshev_polynomial_w": 8, "shifted_chebyshev_polynomial_t": 6,
    "shifted_chebyshev_polynomial_u": 6, "shifted_chebyshev_polynomial_v": 6,
    "shifted_chebyshev_polynomial_w": 4,
}
KINDS = (*_CLOSED_FORM_FROM, "hermite_polynomial_h", "hermite_polynomial_he",
         "laguerre_polynomial_l", "legendre_polynomial_p")
# Hermite's degree past which ATen returns NaN (getHermitianLimit)
_HERMITE_LIMIT = {"float32": 128, "float64": 512}
_INT64_RANGE = 2.0**63


def _acos(x: Any) -> Any:
    """``atan2(sqrt((1 - x)(1 + x)), x)``: ACOS has no TFLite builtin (as the acos
    converter, ``to_keras/ops/hyperbolic.py``)."""
    return ops.arctan2(ops.sqrt(ops.multiply(1.0 - x, 1.0 + x)), x)


def degree(n: Any) -> Any:
    """ATen's ``static_cast<int64_t>(n)`` as int64: truncated toward zero, -1 (any negative
    degree gives 0) for NaN, +-inf and past the int64 range."""
    valid = ops.less(ops.abs(n), _INT64_RANGE)  # False for NaN and +-inf
    return ops.cast(ops.where(valid, n, -1.0), "int64")


# per float dtype: Veltkamp's splitting constant 2**ceil(p / 2) + 1 (p: mantissa bits), and
# the magnitude past which ``a * constant`` could overflow, where a is split scaled down
_SPLITTER = {"float32": (4097.0, 2.0**100, 2.0**16), "float64": (134217729.0, 2.0**900,
                                                                 2.0**64)}


def _split(a: Any) -> tuple[Any, Any]:
    """``a = hi + lo`` exactly, each with half of the mantissa (Veltkamp); a huge ``a`` is
    split scaled by a power of two (exact)."""
    dtype = keras.backend.standardize_dtype(a.dtype)
    constant, huge, scale = (ops.convert_to_tensor(v, dtype) for v in _SPLITTER[dtype])
    big = ops.greater(ops.abs(a), huge)  # (2**900 is out of float32's range: typed)
    a = ops.where(big, a / scale, a)
    scaled = a * constant
    hi = scaled - (scaled - a)
    lo = a - hi
    return ops.where(big, hi * scale, hi), ops.where(big, lo * scale, lo)


def _fused(a: Any, b: Any, c: Any) -> tuple[Any, Any]:
    """``(a * b - c`` rounded once (not finite where the plain product overflows), ``a * b -
    c`` rounded twice)``: Dekker's exact product error and Knuth's two-sum."""
    product = a * b
    (a_hi, a_lo), (b_hi, b_lo) = _split(a), _split(b)
    # subtractions of exact negatives, not a chain of adds: Grappler's arithmetic optimizer
    # turns such a chain into one AddN, which sums in another order (99.99% -> 100% exact)
    product_error = (((a_hi * b_hi - product) - a_hi * -b_lo) - a_lo * -b_hi) - a_lo * -b_lo
    total = product - c
    bent = total - product
    negative_sum_error = (c + bent) - (product - (total - bent))
    return total - (negative_sum_error - product_error), total


def fused_multiply_subtract(a: Any, b: Any, c: Any) -> Any:
    """``a * b - c`` rounded once, as the FMA instruction the compiler makes of ATen's
    ``a * b - c`` (x86-64's AVX2/AVX-512 builds and aarch64 contract it; a plain multiply
    and subtract round twice, which a recurrence amplifies, and overflow to inf - inf = NaN
    where the FMA gives +-inf). Computed in the float dtype itself (no float64: TFLite's
    MUL has no float64 kernel); where ``a * b`` overflows, on ``a / 2`` and ``c / 2`` (the
    FMA's exact product may still give a finite result); past that the plain result, with
    ``-c`` where only ``c`` is infinite."""
    fused, total = _fused(a, b, c)
    halved, _ = _fused(a * 0.5, b, c * 0.5)
    finite_operands = ops.logical_and(ops.isfinite(a), ops.isfinite(b))
    plain = ops.where(ops.logical_and(ops.isinf(c), finite_operands), -c, total)
    fallback = ops.where(ops.isfinite(halved), halved * 2.0, plain)
    return ops.where(ops.isfinite(fused), fused, fallback)


def _parity_sign(d: Any, x: Any) -> Any:
    """+1 for an even degree, -1 for an odd one, in ``x``'s dtype."""
    odd = ops.equal(ops.mod(d, 2), 1)
    return ops.where(odd, -ops.ones_like(x), ops.ones_like(x))


def _cascade(default: Any, *rules: tuple[Any, Any]) -> Any:
    """``default`` where no rule holds, else the value of the first rule that does (the
    order of ATen's early returns)."""
    y = default
    for condition, value in reversed(rules):
        y = ops.where(condition, value, y)
    return y


class _Kind:
    """One polynomial: its first two terms, its recurrence step and its early returns."""

    def __init__(self, kind: str):
        self.kind = kind
        self.shifted = kind.startswith("shifted_")
        self.family = kind.removeprefix("shifted_").split("_polynomial_")
        self.letter = self.family[1]

    def argument(self, x):
        """The Chebyshev argument: ``x``, or ``x + x - 1`` for the shifted ones, rounded
        as torch rounds it. Grappler's constant push-down reassociates a sum with two
        constants, ``(x + x) - 1`` to ``x + (x - 1)`` (one ulp off) and ``1 + ((x + x) -
        1)`` in ``acos`` to ``x + x``: hence ``x * 2`` (exact, as ``x + x``) and the
        ``where``, which it does not look through."""
        return ops.where(ops.isnan(x), x, x * 2.0 - 1.0) if self.shifted else x

    def first(self, x):
        """The degree-1 term (the recurrence's ``q`` before its first step)."""
        family, letter = self.family
        if family == "chebyshev":
            y = self.argument(x)
            return {"t": y, "u": y + y, "v": y * 2.0 - 1.0, "w": y * 2.0 + 1.0}[letter]
        return {"h": x + x, "he": x, "l": 1.0 - x, "p": x}[letter]

    def step(self, j, x, p, q):
        """The term after ``q`` (and ``p`` before it) at step ``j`` = 1, 2, ...; ATen's
        int64 ``k`` converted to the float dtype where its code mixes them."""
        letter = self.letter

        def k(multiple, offset=0):
            return ops.cast(j * multiple + offset, x.dtype)

        if self.family[0] == "chebyshev":
            y = self.argument(x)
            return fused_multiply_subtract(y + y, q, p)
        if letter == "h":  # k = 2, 4, ..., 2n - 2
            return fused_multiply_subtract(x + x, q, k(2) * p)
        if letter == "he":
            return fused_multiply_subtract(x, q, k(1) * p)
        if letter == "l":
            return fused_multiply_subtract(k(2) + (1.0 - x), q, k(1) * p) / k(1, 1)
        return fused_multiply_subtract(k(2, 1) * x, q, k(1) * p) / k(1, 1)  # Legendre

    def rules(self, x, d):
        """ATen's early returns before the recurrence, in order, as (condition, value);
        and whether an element that passes them all reaches the recurrence (n >= 2)."""
        one = ops.ones_like(x)
        nf = ops.cast(d, x.dtype)
        rules = [(ops.less(d, 0), ops.zeros_like(x))]
        if self.family[0] == "chebyshev":
            rules += self._chebyshev_rules(x, d, nf)
        elif self.letter == "l":
            rules.append((ops.equal(ops.abs(x), 0.0), one))
        elif self.letter == "p":
            rules.append((ops.equal(ops.abs(x), 1.0),
                          ops.where(ops.greater(x, 0.0), one, _parity_sign(d, x))))
        rules += [(ops.equal(d, 0), one), (ops.equal(d, 1), self.first(x))]
        if self.letter in ("h", "he"):
            limit = _HERMITE_LIMIT[keras.backend.standardize_dtype(x.dtype)]
            zero = ops.zeros_like(x)  # NaN computed: no NaN constant in the graph
            rules.append((ops.greater(d, limit), zero / zero))
        return rules

    def _chebyshev_rules(self, x, d, nf):
        """The interval's ends, then the closed form for |y| < 1 past the bound."""
        letter, one, sign = self.letter, ops.ones_like(x), _parity_sign(d, x)
        y = self.argument(x)
        odd_number = nf * 2.0 + 1.0  # ATen's int64 n + n + 1
        if self.shifted:  # ends at x == 1 and x == 0
            upper, lower = ops.equal(x, 1.0), ops.equal(x, 0.0)
        else:
            upper = ops.logical_and(ops.equal(ops.abs(x), 1.0), ops.greater(x, 0.0))
            lower = ops.logical_and(ops.equal(ops.abs(x), 1.0), ops.less(x, 0.0))
        at_end = {"t": (one, sign), "u": (nf + 1.0, sign * (nf + 1.0)),
                  "v": (one, sign * odd_number), "w": (odd_number, sign)}[letter]
        theta = _acos(y)
        closed = self._closed_form(letter, y, nf, theta, at_end, sign)
        inside = ops.logical_and(ops.greater(d, _CLOSED_FORM_FROM[self.kind]),
                                 ops.less(ops.abs(y), 1.0))
        return [(upper, at_end[0]), (lower, at_end[1]), (inside, closed)]

    def _closed_form(self, letter, y, nf, theta, at_end, sign):
        """ATen's trigonometric forms, with its fallbacks where the denominator is 0 (or 1)."""
        if letter == "t":
            return ops.cos(nf * theta)
        if letter == "u":
            s = ops.sin(theta)
            fallback = (nf + 1.0) * ops.cos((nf + 1.0) * theta) / y
            return ops.where(ops.not_equal(s, 0.0), ops.sin((nf + 1.0) * theta) / s, fallback)
        half = theta / 2.0
        if letter == "v":
            return ops.where(ops.not_equal(ops.sin(half), 1.0),
                             ops.cos((nf + 0.5) * theta) / ops.cos(half), at_end[1])
        # W: its fallback is the value at x = 1 for Chebyshev's (2n + 1 for x > 0), the
        # parity sign for the shifted one
        fallback = sign if self.shifted else ops.where(ops.greater(y, 0.0), at_end[0], sign)
        return ops.where(ops.not_equal(ops.cos(half), 1.0),
                         ops.sin((nf + 0.5) * theta) / ops.sin(half), fallback)


def polynomial(kind: str, x: Any, n: Any) -> Any:
    """torch.special.<kind>(x, n) on float tensors of one dtype (they broadcast)."""
    spec = _Kind(kind)
    shape = ops.shape(ops.add(x, n))
    x, n = ops.broadcast_to(x, shape), ops.broadcast_to(n, shape)
    d = degree(n)
    rules = spec.rules(x, d)
    returned = rules[0][0]
    for condition, _ in rules[1:]:
        returned = ops.logical_or(returned, condition)
    # the recurrence's step count per element (n - 1 for those that reach it, else 0)
    steps = ops.where(returned, ops.zeros_like(d), d - 1)

    def stepping(j, q):
        return ops.logical_and(ops.less_equal(j, steps), ops.logical_not(ops.isnan(q)))

    def cond(j, p, q):
        return ops.any(stepping(j, q))

    def body(j, p, q):
        active = stepping(j, q)
        r = spec.step(j, x, p, q)
        return j + 1, ops.where(active, q, p), ops.where(active, r, q)

    start = (ops.convert_to_tensor(1, "int64"), ops.ones_like(x), spec.first(x))
    _, _, q = ops.while_loop(cond, body, start)
    return _cascade(q, *rules)


def _broadcast_shape(a: tuple, b: tuple) -> tuple:
    """NumPy's broadcast of two static shapes (``None``: known at run time only)."""
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
    return tuple(m if n == 1 else n if m == 1 else (m if m is not None else n)
                 for m, n in zip(a, b))


_TRACED: dict = {}  # signature -> polynomial as a tf.function (module-level: no layer
# tracks it)


def _traced(kind: str, x: Any, n: Any):
    """``polynomial(kind, ...)`` as one TF graph, traced once per kind, ranks and dtypes
    (every dim ``None``: one trace serves every size)."""
    import tensorflow as tf

    specs = tuple(tf.TensorSpec([None] * len(v.shape), v.dtype) for v in (x, n))
    key = (kind, *((s.shape.rank, s.dtype) for s in specs))
    if key not in _TRACED:
        _TRACED[key] = tf.function(lambda x, n: polynomial(kind, x, n), input_signature=specs)
    return _TRACED[key]


@keras.saving.register_keras_serializable(package="crossport")
class OrthogonalPolynomial(keras.layers.Layer):
    """``torch.special.<kind>(x, n)``: ``kind`` is one of :data:`KINDS`
    (``chebyshev_polynomial_t`` ... ``legendre_polynomial_p``); inputs ``[x, n]``, floats of
    the layer's dtype that broadcast, ``n`` read as ATen reads it (see the module docstring).

    Example:
        >>> import numpy as np
        >>> layer = OrthogonalPolynomial("chebyshev_polynomial_t")
        >>> x, n = np.array([0.5, 2.0, 0.5], "float32"), np.array([2.0, 3.0, -1.0], "float32")
        >>> keras.ops.convert_to_numpy(layer([x, n])).tolist()
        [-0.5, 26.0, 0.0]
    """

    def __init__(self, kind: str, **kwargs: Any):
        super().__init__(**kwargs)
        if kind not in KINDS:
            raise ValueError(f"unknown polynomial {kind!r}; one of {list(KINDS)}")
        self.kind = kind

    def call(self, inputs):
        x, n = inputs
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            if tf.executing_eagerly():  # an eager while loop dispatches each op: 12x slower
                return _traced(self.kind, x, n)(x, n)
        return polynomial(self.kind, x, n)

    def compute_output_spec(self, inputs):
        x, n = inputs
        return keras.KerasTensor(_broadcast_shape(x.shape, n.shape), dtype=x.dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "kind": self.kind}
