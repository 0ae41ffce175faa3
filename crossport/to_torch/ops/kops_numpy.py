"""keras.ops numpy math whose Keras value is not torch's function of the same name: Keras'
TF-backend formulas (``keras/src/backend/tensorflow/numpy.py``) step for step, so NaN,
infinities and signed zeros land where TF puts them:

* ``hypot``: ``max * sqrt(1 + divide_no_nan(min, max)^2)`` of the magnitudes (two
  infinities give NaN; torch.hypot gives inf);
* ``fmod``: ``sign(x1) * floormod(|x1|, |x2|)`` (``fmod(-0.0, y)`` is +0.0); the
  floor-mod of a float32 (``floor_mod``, ``keras.ops.mod`` too) is computed in float64, where
  the remainder is exact: torch's vectorised float kernel gives NaN once ``|x1 / x2|``
  overflows, so float64 fmod inputs are refused;
* ``fmax`` / ``fmin``: maximum / minimum, the other operand where exactly one is NaN;
* ``heaviside``: 0 below 0, 1 above, ``x2`` at 0 and at NaN (torch.heaviside: NaN);
* ``isclose`` / ``allclose``: ``|x1 - x2| <= atol + rtol * |x2|``, so ``isclose(inf, inf)``
  is False and ``isclose(inf, -inf)`` True (allclose also takes equal values, and finite
  ones only for the tolerance);
* ``logaddexp2``: ``max + log1p(exp(-|d| ln2)) / ln2`` with float32's ln 2, ``x1 + x2``
  where ``d = x1 - x2`` is NaN;
* ``sinc``: ``sin(pi x) / (pi x)``, 1 at 0; ``angle`` of a real: pi below 0, else 0 (NaN:
  0); ``real`` / ``conj`` of a real: itself, ``imag``: zeros; ``fabs``, ``i0``;
* ``ldexp``: ``x1 * 2.0^x2`` (``x1`` where it is 0 or infinite); ``nextafter``: in float64,
  cast back (so a float32 comes back unchanged but at a zero);
* ``gcd`` / ``lcm``: TF's Euclid loop on the magnitudes with floor-mod, unrolled to the most
  steps a value of the dtype needs (Lamé's bound): the dtype's lowest value, whose magnitude
  wraps, gives TF's result (``gcd(6, -128)`` is -2 in int8; torch.gcd gives 2);
* ``isin`` (NaN is in nothing), ``select`` (the first true condition picks; NaN is true)
  and ``unravel_index`` (floor-mod / floor-division; Keras' own order for indices of rank
  other than 1).

Operands are converted as the TF backend converts them (a Python float is float32, an int
int32, numpy keeps its dtype), then cast to the result dtype; ``fmax`` / ``fmin`` take a
Python number in the result dtype directly. Subnormal results are not flushed to zero as
TF's CPU kernels do (true of every converted op).
"""

from __future__ import annotations

import math
import operator

import keras
import numpy as np
import torch

from crossport.errors import UnsupportedLayerError
from crossport.layout.policy import Policy
from crossport.to_torch.context import Context, Held
from crossport.to_torch.registry import register_op

# -- operands as Keras' TF backend converts them ------------------------------------------


def _recorded_args(ctx: Context, op) -> tuple:
    """The op's call arguments as Keras recorded them: their dtypes decide the promotion
    (the converter sees a 0-d numpy operand as a Python number)."""
    nodes = getattr(op, "_inbound_nodes", ())
    if not nodes:
        raise _refused(ctx, op, "Keras recorded no call of it (its operand dtypes decide)")
    signatures = {tuple(_tf_dtype(a) for a in node.arguments.args) for node in nodes}
    if len(signatures) != 1:
        raise _refused(ctx, op, "its calls differ in operand dtypes (one op object called "
                                "on several); call the keras.ops function once per use")
    return tuple(nodes[0].arguments.args)


def _tf_dtype(value) -> str | None:
    """The dtype Keras' TF backend converts an operand to (a Python float is float32, an int
    int32, numpy keeps its own); None for what is not a tensor operand."""
    if isinstance(value, (keras.KerasTensor, keras.Variable)):
        return keras.backend.standardize_dtype(value.dtype)
    if isinstance(value, (bool, int, float, np.ndarray, np.generic, list, tuple)):
        return keras.backend.standardize_dtype(keras.ops.convert_to_tensor(value).dtype)
    return None


def _refused(ctx: Context, op, reason: str) -> UnsupportedLayerError:
    name = type(op).__name__
    return UnsupportedLayerError(f"keras.ops.{name.lower()} {ctx.path!r}: {reason}; not "
                                 "converted", [(ctx.path, name, reason)])


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _cast_operands(ctx: Context, op, values, dtype: torch.dtype, weak: bool = False) -> list:
    """``values`` (the converter's first arguments) as tensors of ``dtype``: a tensor cast
    where its dtype differs, a number first made a tensor of the dtype TF converts it to
    (``weak``: of ``dtype`` itself, as fmax / fmin do)."""
    out = []
    for value, original in zip(values, _recorded_args(ctx, op)):
        if isinstance(value, torch.fx.Node):
            if not isinstance(original, keras.KerasTensor) or _tf_dtype(
                    original) != _dtype_name(dtype):
                value = ctx.call_method("to", value, dtype)
        else:
            first = dtype if weak else getattr(torch, _tf_dtype(original))
            value = ctx.call_function(torch.scalar_tensor, value, dtype=first)
            if first != dtype:
                value = ctx.call_method("to", value, dtype)
        out.append(value)
    return out


def _tf_result(ctx: Context, op, *extra) -> torch.dtype:
    """Keras' result dtype of the two operands as the TF backend converts them (and of
    ``extra``: ``float`` for a float op): what it computes in and returns, which may differ
    from the dtype Keras declares (``gcd(int32_tensor, 12)`` is declared int64, is int32)."""
    dtypes = [_tf_dtype(a) for a in _recorded_args(ctx, op)[:2]]
    return getattr(torch, keras.backend.result_type(*dtypes, *extra))


def _float_result(ctx: Context, op) -> torch.dtype:
    """hypot's and heaviside's dtype: the result dtype, an int one as float32 (int64: 64)."""
    dtype = _tf_result(ctx, op)
    if dtype.is_floating_point:
        return dtype
    return torch.float64 if dtype == torch.int64 else torch.float32


def _as_output(ctx: Context, x):
    """A unary op's tensor in its (float) output dtype: Keras computes an int in float."""
    if ctx.input_dtype != ctx.output_dtypes[0]:
        return ctx.call_method("to", x, ctx.output_dtype())
    return x


# -- binary arithmetic ---------------------------------------------------------------------


@register_op(policy=Policy.AGNOSTIC)
def Hypot(ctx: Context, op, x1, x2):
    """keras.ops.hypot(x1, x2): TF's ``max * sqrt(1 + divide_no_nan(min, max)^2)`` of the
    magnitudes, in Keras' float dtype (two infinities give NaN, not inf)."""
    call = ctx.call_function
    a, b = (call(torch.abs, v) for v in _cast_operands(ctx, op, (x1, x2), _float_result(ctx, op)))
    high, low = call(torch.maximum, a, b), call(torch.minimum, a, b)
    ratio = call(torch.where, call(operator.eq, high, 0), 0.0, call(operator.truediv, low, high))
    root = call(torch.sqrt, call(operator.add, 1.0, call(torch.square, ratio)))
    return call(operator.mul, high, root)


def _fmod_supported(op) -> str | None:
    for node in getattr(op, "_inbound_nodes", ()):
        if "float64" in (_tf_dtype(a) for a in node.arguments.args):
            return ("keras.ops.fmod of float64: torch's vectorised fmod gives NaN where "
                    "|x1 / x2| overflows float64, TF's remainder is exact; cast to float32")
    return None


def floor_mod(ctx: Context, x1, x2, dtype: torch.dtype):
    """TF's FloorMod of ``x1``, ``x2`` in ``dtype`` (tensors, or Python numbers Keras makes
    constants of ``dtype``): integers and float64 as torch.remainder; a narrower float is
    ``r = fmod(x1, x2)``, computed in float64 where it is exact (torch's vectorised float
    remainder and fmod give NaN once ``|x1 / x2|`` overflows: mod(3e38, 0.1)), plus ``x2``
    where ``r`` is non-zero and its sign differs from ``x2``'s, summed in ``dtype`` as TF's."""
    call = ctx.call_function
    if not dtype.is_floating_point or dtype == torch.float64:
        return call(torch.remainder, x1, x2)
    x1, x2 = (v if isinstance(v, torch.fx.Node) else call(torch.scalar_tensor, v, dtype=dtype)
              for v in (x1, x2))  # a Python number as Keras' constant (0.1 as float32)
    wide = (ctx.call_method("to", v, torch.float64) for v in (x1, x2))
    r = ctx.call_method("to", call(torch.fmod, *wide), dtype)
    flips = call(torch.logical_and, call(operator.ne, r, 0),
                 call(operator.ne, call(operator.lt, x2, 0), call(operator.lt, r, 0)))
    return call(torch.where, flips, call(operator.add, r, x2), r)


@register_op(policy=Policy.AGNOSTIC, supports=_fmod_supported)
def Fmod(ctx: Context, op, x1, x2):
    """keras.ops.fmod(x1, x2): TF's ``sign(x1) * floormod(|x1|, |x2|)`` (a zero ``x1`` gives
    +0.0; bools as int32, unsigned ints computed in int32); the floor-mod of floats exact
    (:func:`floor_mod`)."""
    call = ctx.call_function
    want = _tf_result(ctx, op)
    if want == torch.bool:
        want = torch.int32
    compute = want if want.is_signed else torch.int32  # (floormod takes no unsigned ints)
    a, b = _cast_operands(ctx, op, (x1, x2), compute)
    magnitude = floor_mod(ctx, call(torch.abs, a), call(torch.abs, b), compute)
    sign = call(torch.sign, a)
    if compute.is_floating_point:
        sign = call(operator.add, sign, 0.0)  # tf.sign(-0.0) is +0.0
    result = call(operator.mul, sign, magnitude)
    return result if compute == want else ctx.call_method("to", result, want)


@register_op("Fmax", "Fmin", policy=Policy.AGNOSTIC)
def Fmax(ctx: Context, op, x1, x2):
    """keras.ops.fmax / fmin(x1, x2): torch.maximum / minimum in Keras' dtype, then the
    other operand where exactly one is NaN (both NaN: NaN)."""
    call = ctx.call_function
    fn = torch.maximum if type(op).__name__ == "Fmax" else torch.minimum
    want = ctx.output_dtype()
    a, b = _cast_operands(ctx, op, (x1, x2), want, weak=True)
    result = call(fn, a, b)
    if not want.is_floating_point:
        return result
    nan_a, nan_b = call(torch.isnan, a), call(torch.isnan, b)
    result = call(torch.where, call(torch.logical_and, nan_a, call(torch.logical_not, nan_b)),
                  b, result)
    return call(torch.where, call(torch.logical_and, nan_b, call(torch.logical_not, nan_a)),
                a, result)


@register_op(policy=Policy.AGNOSTIC)
def Heaviside(ctx: Context, op, x1, x2):
    """keras.ops.heaviside(x1, x2): TF's ``where(x1 < 0, 0, where(x1 > 0, 1, x2))`` in
    Keras' float dtype (a NaN ``x1`` gives ``x2``)."""
    call = ctx.call_function
    a, b = _cast_operands(ctx, op, (x1, x2), _float_result(ctx, op))
    inner = call(torch.where, call(operator.gt, a, 0), call(torch.ones_like, a), b)
    return call(torch.where, call(operator.lt, a, 0), call(torch.zeros_like, a), inner)


_LN2 = float(np.float32(np.log(2.0)))  # TF's log(2.0) in float32, cast to the dtype after


@register_op(policy=Policy.AGNOSTIC)
def Logaddexp2(ctx: Context, op, x1, x2):
    """keras.ops.logaddexp2(x1, x2): TF's ``max + log1p(exp(-|d| ln2)) / ln2`` with float32's
    ln 2, and ``x1 + x2`` where ``d = x1 - x2`` is NaN (two infinities of one sign)."""
    call = ctx.call_function
    want = _tf_result(ctx, op, float)
    a, b = _cast_operands(ctx, op, (x1, x2), want)
    ln2 = call(torch.scalar_tensor, _LN2, dtype=want)
    delta = call(operator.sub, a, b)
    tail = call(torch.log1p, call(torch.exp, call(operator.mul, call(torch.neg, call(
        torch.abs, delta)), ln2)))
    value = call(operator.add, call(torch.maximum, a, b), call(operator.truediv, tail, ln2))
    return call(torch.where, call(torch.isnan, delta), call(operator.add, a, b), value)


def _close(ctx: Context, a, b, rtol, atol, dtype: torch.dtype):
    """TF's ``|a - b| <= atol + rtol * |b|`` with the tolerances in ``dtype``."""
    call = ctx.call_function
    rtol, atol = (v if isinstance(v, torch.fx.Node) else call(torch.scalar_tensor, float(v),
                                                              dtype=dtype)
                  for v in (rtol, atol))
    bound = call(operator.add, atol, call(operator.mul, rtol, call(torch.abs, b)))
    return call(operator.le, call(torch.abs, call(operator.sub, a, b)), bound)


def _both_nan(ctx: Context, a, b):
    call = ctx.call_function
    return call(torch.logical_and, call(torch.isnan, a), call(torch.isnan, b))


@register_op(policy=Policy.AGNOSTIC)
def Isclose(ctx: Context, op, x1, x2, rtol=1e-5, atol=1e-8):
    """keras.ops.isclose(x1, x2, rtol, atol, equal_nan): TF's ``|x1 - x2| <= atol + rtol *
    |x2|`` in the operands' result dtype (isclose(inf, inf) is False, (inf, -inf) True;
    equal_nan adds both NaN); ints and bools: equal."""
    dtype = _tf_result(ctx, op)
    a, b = _cast_operands(ctx, op, (x1, x2), dtype)
    if not dtype.is_floating_point:
        return ctx.call_function(torch.eq, a, b)
    result = _close(ctx, a, b, rtol, atol, dtype)
    if op.equal_nan:
        result = ctx.call_function(torch.logical_or, result, _both_nan(ctx, a, b))
    return result


@register_op(policy=Policy.AGNOSTIC)
def AllClose(ctx: Context, op, x1, x2):
    """keras.ops.allclose(x1, x2, rtol, atol, equal_nan): TF's ``all((finite and close) or
    equal)`` over every element, batch included (equal_nan adds both NaN)."""
    call = ctx.call_function
    dtype = _tf_result(ctx, op)
    a, b = _cast_operands(ctx, op, (x1, x2), dtype)
    result = call(torch.eq, a, b)
    if dtype.is_floating_point:
        finite = call(torch.logical_and, call(torch.isfinite, a), call(torch.isfinite, b))
        close = call(torch.logical_and, finite, _close(ctx, a, b, op.rtol, op.atol, dtype))
        result = call(torch.logical_or, close, result)
        if op.equal_nan:
            result = call(torch.logical_or, result, _both_nan(ctx, a, b))
    return call(torch.all, result)


@register_op(policy=Policy.AGNOSTIC)
def Nextafter(ctx: Context, op, x1, x2):
    """keras.ops.nextafter(x1, x2): torch.nextafter in float64, as TF computes it, then
    Keras' dtype (a float32 rounds back to itself but at a zero)."""
    a, b = _cast_operands(ctx, op, (x1, x2), torch.float64)
    result = ctx.call_function(torch.nextafter, a, b)
    return ctx.call_method("to", result, _tf_result(ctx, op, float))


def _integer_exponent(op) -> str | None:
    for node in getattr(op, "_inbound_nodes", ()):
        exponent = _tf_dtype(node.arguments.args[1])
        if exponent is None or "int" not in exponent:
            return (f"keras.ops.ldexp with a {exponent} exponent: Keras' TF backend raises "
                    "TypeError (the exponent must be an integer type)")
    return None


@register_op(policy=Policy.AGNOSTIC, supports=_integer_exponent)
def Ldexp(ctx: Context, op, x1, x2):
    """keras.ops.ldexp(x1, x2): TF's ``x1 * 2.0^x2`` in Keras' float dtype, ``x1`` itself
    where it is 0 or infinite (``2^x2`` overflowing to inf times a finite ``x1`` is inf)."""
    call = ctx.call_function
    want = _tf_result(ctx, op, float)
    a, e = _cast_operands(ctx, op, (x1, x2), want)
    power = call(torch.pow, call(torch.scalar_tensor, 2.0, dtype=want), e)
    keep = call(torch.logical_or, call(torch.isinf, a), call(operator.eq, a, 0))
    return call(torch.where, keep, a, call(operator.mul, a, power))


# -- gcd / lcm: TF's Euclid loop -----------------------------------------------------------


def _euclid_steps(dtype: torch.dtype) -> int:
    """An upper bound of the Euclid steps on magnitudes of ``dtype`` (Lamé: ``n`` steps need
    a divisor of at least the (n+1)th Fibonacci number), with two to spare for the lowest
    value, whose magnitude wraps to itself."""
    limit = 2 ** torch.iinfo(dtype).bits
    previous, current, n = 1, 1, 2
    while current <= limit:
        previous, current, n = current, previous + current, n + 1
    return n + 2


def _gcd_supported(op) -> str | None:
    for node in getattr(op, "_inbound_nodes", ()):
        dtypes = [_tf_dtype(a) for a in node.arguments.args[:2]]
        dtype = keras.backend.result_type(*dtypes)
        if dtype not in ("int8", "int16", "int32", "int64", "uint8"):
            return (f"keras.ops.{type(op).__name__.lower()} of {dtype}: Keras' TF backend "
                    "takes integers only (and torch's remainder no wider unsigned ones)")
    return None


def _gcd(ctx: Context, a, b, dtype: torch.dtype):
    """TF's loop: ``(a, b) <- (b, floormod(a, b))`` where ``b != 0``, on the magnitudes."""
    call = ctx.call_function
    pair = call(torch.broadcast_tensors, a, b)  # as TF (a 0-d number keeps no dtype of its own)
    a, b = call(operator.getitem, pair, 0), call(operator.getitem, pair, 1)
    if dtype.is_signed:
        a, b = call(torch.abs, a), call(torch.abs, b)
    for _ in range(_euclid_steps(dtype)):
        nonzero = call(operator.ne, b, 0)
        rest = call(torch.remainder, a, call(torch.where, nonzero, b, 1))
        a, b = call(torch.where, nonzero, b, a), call(torch.where, nonzero, rest, 0)
    return a


@register_op(policy=Policy.AGNOSTIC, supports=_gcd_supported)
def Gcd(ctx: Context, op, x1, x2):
    """keras.ops.gcd(x1, x2): TF's Euclid loop with floor-mod on ``|x1|``, ``|x2|``,
    unrolled to the dtype's most steps (the lowest value wraps as in TF: see the module
    docstring)."""
    want = _tf_result(ctx, op)
    return _gcd(ctx, *_cast_operands(ctx, op, (x1, x2), want), want)


@register_op(policy=Policy.AGNOSTIC, supports=_gcd_supported)
def Lcm(ctx: Context, op, x1, x2):
    """keras.ops.lcm(x1, x2): TF's ``|x1| * (|x2| // gcd)``, 0 where the gcd is 0 (ints wrap
    alike)."""
    call = ctx.call_function
    want = _tf_result(ctx, op)
    a, b = _cast_operands(ctx, op, (x1, x2), want)
    if want.is_signed:
        a, b = call(torch.abs, a), call(torch.abs, b)
    divisor = _gcd(ctx, a, b, want)
    zero = call(operator.eq, divisor, 0)
    quotient = call(torch.div, b, call(torch.where, zero, 1, divisor), rounding_mode="floor")
    return call(torch.where, zero, 0, call(operator.mul, a, quotient))


# -- unary -----------------------------------------------------------------------------------


@register_op(policy=Policy.AGNOSTIC)
def Sinc(ctx: Context, op, x):
    """keras.ops.sinc(x): TF's ``where(x == 0, 1, sin(pi x) / (pi x))`` with pi in Keras'
    float dtype (ints in float32)."""
    call = ctx.call_function
    x = _as_output(ctx, x)
    pi_x = call(operator.mul, x, call(torch.scalar_tensor, math.pi, dtype=ctx.output_dtype()))
    return call(torch.where, call(operator.eq, x, 0), call(torch.ones_like, x),
                call(operator.truediv, call(torch.sin, pi_x), pi_x))


@register_op(policy=Policy.AGNOSTIC)
def Fabs(ctx: Context, op, x):
    """keras.ops.fabs(x): torch.abs in Keras' float dtype (ints and bools in float32)."""
    return ctx.call_function(torch.abs, _as_output(ctx, x))


@register_op(policy=Policy.AGNOSTIC)
def I0(ctx: Context, op, x):
    """keras.ops.i0(x): torch.special.i0 (TF's bessel_i0: the same Cephes series, within an
    ulp) in Keras' float dtype."""
    return ctx.call_function(torch.special.i0, _as_output(ctx, x))


def _complex(ctx: Context) -> bool:
    return ctx.input_dtype.startswith("complex")


@register_op("Real", "Imag", policy=Policy.AGNOSTIC)
def Real(ctx: Context, op, x):
    """keras.ops.real / imag(x): torch.real / imag of a complex tensor; a real one is its
    own real part, its imaginary part zeros (tf.math.real / imag)."""
    name = type(op).__name__
    if _complex(ctx):
        return ctx.call_function(torch.real if name == "Real" else torch.imag, x)
    return x if name == "Real" else ctx.call_function(torch.zeros_like, x)


@register_op("Conjugate", "Conj", policy=Policy.AGNOSTIC)
def Conjugate(ctx: Context, op, x):
    """keras.ops.conjugate / conj(x): torch.conj_physical of a complex tensor; a real one
    unchanged."""
    return ctx.call_function(torch.conj_physical, x) if _complex(ctx) else x


@register_op(policy=Policy.AGNOSTIC)
def Angle(ctx: Context, op, x):
    """keras.ops.angle(x): torch.angle of a complex tensor; of a real one tf.math.angle's
    ``where(x < 0, pi, 0)`` in Keras' float dtype (NaN gives 0; torch.angle NaN)."""
    call = ctx.call_function
    if _complex(ctx):
        return call(torch.angle, x)
    x = _as_output(ctx, x)
    return call(torch.where, call(operator.lt, x, 0),
                call(torch.full_like, x, math.pi), call(torch.zeros_like, x))


@register_op(policy=Policy.AGNOSTIC)
def Isreal(ctx: Context, op, x):
    """keras.ops.isreal(x): ``imag(x) == 0`` for a complex tensor, all True for a real one."""
    call = ctx.call_function
    if _complex(ctx):
        return call(operator.eq, call(torch.imag, x), 0)
    return call(torch.ones_like, x, dtype=torch.bool)


@register_op(policy=Policy.CUSTOM, keeps_layout=True)
def IsIn(ctx: Context, op, x1, x2) -> Held:
    """keras.ops.isin(x1, x2, assume_unique, invert): whether each ``x1`` equals some
    element of ``x2`` (any order: flattened as held), both in their result dtype (NaN is
    in nothing); an empty ``x2`` gives all False, inverted too, as TF."""
    if not isinstance(x1, Held):
        raise _refused(ctx, op, "a constant x1 with a tensor x2")
    call = ctx.call_function
    dtype = _tf_result(ctx, op)
    x1 = ctx.plain(x1)
    a = _cast_operands(ctx, op, (x1.node,), dtype)[0]
    if isinstance(x2, Held):
        values = ctx.call_method("to", ctx.call_method("reshape", x2.node, -1), dtype)
        empty = None if None in x2.shape else math.prod(x2.shape) == 0
    else:
        array = np.asarray(keras.ops.convert_to_numpy(keras.ops.convert_to_tensor(x2)))
        values = ctx.constant(array.reshape(-1).astype(_dtype_name(dtype))).node
        empty = array.size == 0
    if empty:
        return Held(call(torch.zeros_like, a, dtype=torch.bool), x1.layout, x1.shape)
    found = call(torch.any, call(operator.eq, call(torch.unsqueeze, a, -1), values), -1)
    if op.invert:
        found = call(torch.logical_not, found)
        if empty is None:  # a run-time empty x2: False, as TF
            found = call(operator.and_, found, call(operator.gt, ctx.call_method(
                "numel", values), 0))
    return Held(found, x1.layout, x1.shape)


# -- select and unravel_index: elementwise ----------------------------------------------------


def _select_supported(op) -> str | None:
    for node in getattr(op, "_inbound_nodes", ()):
        choices = list(node.arguments.args[1])
        default = node.arguments.args[2] if len(node.arguments.args) > 2 else 0
        dtypes = {keras.backend.standardize_dtype(getattr(c, "dtype", type(c)))
                  for c in choices}
        reason = _select_dtype_reason(dtypes, default)
        if reason:
            return f"keras.ops.select with {reason}: TF's numpy select promotes to another " \
                   "dtype than the one Keras declares (the first choice's); cast them alike"
    return None


def _select_dtype_reason(dtypes: set, default) -> str | None:
    if len(dtypes) != 1:
        return f"choices of dtypes {sorted(dtypes)}"
    dtype = dtypes.pop()
    if isinstance(default, keras.KerasTensor):
        ok = keras.backend.standardize_dtype(default.dtype) == dtype
    elif dtype == "bool":
        ok = isinstance(default, bool)
    elif "int" in dtype:
        ok = isinstance(default, int)
    else:
        ok = isinstance(default, (bool, int, float))
    return None if ok else f"{dtype} choices and a default {default!r}"


@register_op(policy=Policy.AGNOSTIC, supports=_select_supported)
def Select(ctx: Context, op, condlist, choicelist, default=0):
    """keras.ops.select(condlist, choicelist, default): torch.where from the last condition
    to the first, so the first true one picks (a condition cast to bool: NaN and nonzero
    are true); the default a tensor of the choices' dtype (a Python int wraps as TF's)."""
    call = ctx.call_function
    want = ctx.output_dtype()
    if isinstance(default, torch.fx.Node):
        result = ctx.call_method("to", default, want)
    else:
        wrapped = np.asarray(default).astype(ctx.output_dtypes[0]).item()  # 1000 in int8: -24
        result = call(torch.scalar_tensor, wrapped, dtype=want)
    for condition, choice in zip(reversed(list(condlist)), reversed(list(choicelist))):
        result = call(torch.where, ctx.call_method("to", condition, torch.bool), choice, result)
    return result


def _unravel_supported(op) -> str | None:
    if None in tuple(op.shape):
        return "keras.ops.unravel_index with a None in shape (Keras raises)"
    return None


@register_op(policy=Policy.AGNOSTIC, supports=_unravel_supported)
def UnravelIndex(ctx: Context, op, indices):
    """keras.ops.unravel_index(indices, shape): floor-mod and floor-division by each size
    (negative indices wrap as TF's ``%`` and ``//``); for indices of rank other than 1 Keras'
    TF backend divides by the sizes first to last and reverses the coordinates, which
    differs from numpy: computed as it does."""
    call = ctx.call_function
    sizes = [int(s) for s in op.shape]
    vector = len(ctx.input_shape) == 1
    coordinates = []
    for size in (reversed(sizes) if vector else sizes):
        coordinates.append(call(torch.remainder, indices, size))
        indices = call(torch.div, indices, size, rounding_mode="floor")
    return list(reversed(coordinates))
