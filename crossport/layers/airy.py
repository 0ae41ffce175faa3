"""``torch.special.airy_ai`` as ATen's kernel computes it
(``airy_ai_forward`` in ``aten/src/ATen/native/Math.h``, Cephes' ``airy``), in keras.ops:

- +-inf: NaN; x > 103.892: 0 (in float32 the exponential form underflows to 0 past 25.77);
- x < -2.09: the asymptotic form, rational functions of ``1 / zeta`` times sin/cos;
- x >= 2.09: the exponentially decaying form;
- else the power series, whose loop runs while ``|m / f| > epsilon``: here a fixed number
  of steps, past ATen's largest count, in which an element freezes (keeps its ``f``, ``g``)
  once it would have stopped; NaN stops after one step, as ``NaN > eps`` is false.

The Horner steps and the final ``a * b - c * d`` are rounded once, as the FMA ATen's
compiler makes of them (:func:`crossport.layers.polynomial.fused_multiply_subtract`).
Measured against torch 2.13 (tests/ops/test_airy.py): the power series bit-equal; the
other two within TF's sin/cos/exp against the C library's (an ulp or so).
"""

from __future__ import annotations

import math
from typing import Any

import keras
import torch
from keras import ops

from crossport.layers.polynomial import fused_multiply_subtract

_AN = (3.46538101525629032477e-01, 1.20075952739645805542e+01, 7.62796053615234516538e+01,
       1.68089224934630576269e+02, 1.59756391350164413639e+02, 7.05360906840444183113e+01,
       1.40264691163389668864e+01, 9.99999999999999995305e-01)
_AD = (5.67594532638770212846e-01, 1.47562562584847203173e+01, 8.45138970141474626562e+01,
       1.77318088145400459522e+02, 1.64234692871529701831e+02, 7.14778400825575695274e+01,
       1.40959135607834029598e+01, 1.00000000000000000470e+00)
_AFN = (-1.31696323418331795333e-01, -6.26456544431912369773e-01, -6.93158036036933542233e-01,
        -2.79779981545119124951e-01, -4.91900132609500318020e-02, -4.06265923594885404393e-03,
        -1.59276496239262096340e-04, -2.77649108155232920844e-06, -1.67787698489114633780e-08)
_AFD = (1.33560420706553243746e+01, 3.26825032795224613948e+01, 2.67367040941499554804e+01,
        9.18707402907259625840e+00, 1.47529146771666414581e+00, 1.15687173795188044134e-01,
        4.40291641615211203805e-03, 7.54720348287414296618e-05, 4.51850092970580378464e-07)
_AGN = (1.97339932091685679179e-02, 3.91103029615688277255e-01, 1.06579897599595591108e+00,
        9.39169229816650230044e-01, 3.51465656105547619242e-01, 6.33888919628925490927e-02,
        5.85804113048388458567e-03, 2.82851600836737019778e-04, 6.98793669997260967291e-06,
        8.11789239554389293311e-08, 3.41551784765923618484e-10)
_AGD = (9.30892908077441974853e+00, 1.98352928718312140417e+01, 1.55646628932864612953e+01,
        5.47686069422975497931e+00, 9.54293611618961883998e-01, 8.64580826352392193095e-02,
        4.12656523824222607191e-03, 1.01259085116509135510e-04, 1.17166733214413521882e-06,
        4.91834570062930015649e-09)
_ONE_OVER_SQRT_PI = 5.64189583547756286948e-01
_C1, _C2 = 0.355028053887817239260, 0.258819403792806798405
# the series' steps: ATen's loop stops after at most 10 (float32) / 14 (float64) on
# [-2.09, 2.09] (a scan of 10**6 points); frozen elements make extra steps harmless
_SERIES_STEPS = {"float32": 16, "float64": 22}


def _divisor(x: Any, value: float) -> Any:
    """``value`` (NaN where ``x`` is NaN, where the result is NaN anyway) as a tensor that
    is no graph constant: Grappler's constant folding turns a division by a constant into a
    multiplication by its rounded reciprocal (ReduceDivToReciprocalMul), an ulp off ATen's
    division."""
    return ops.where(ops.isnan(x), x, value)


def _horner(t: Any, coefficients: tuple[float, ...]) -> Any:
    """ATen's ``p = p * t + c`` from ``p = 0``, each step one FMA."""
    p = ops.zeros_like(t)
    for c in coefficients:
        p = fused_multiply_subtract(p, t, ops.full_like(t, -c))
    return p


def _oscillating(x: Any) -> Any:
    """x < -2.09: ``1/sqrt(pi) / (-x)**0.25 * (sin(t)(1 + z^2 f(z^2)) - cos(t) z g(z^2))``,
    ``zeta = -2 x sqrt(-x) / 3``, ``z = 1 / zeta``, ``t = zeta + pi / 4``."""
    root = ops.sqrt(-x)
    zeta = -2.0 * x * root / _divisor(x, 3.0)
    z = 1.0 / zeta
    zz = z * z
    ratio_f = zz * _horner(zz, _AFN) / _horner(zz, _AFD)
    ratio_g = z * _horner(zz, _AGN) / _horner(zz, _AGD)
    t = zeta + math.pi / 4
    mix = fused_multiply_subtract(ops.sin(t), 1.0 + ratio_f, ops.cos(t) * ratio_g)
    return _ONE_OVER_SQRT_PI / ops.sqrt(root) * mix


def _decaying(x: Any) -> Any:
    """x >= 2.09: ``1/sqrt(pi) * (an / ad)(1 / zeta) / (2 x**0.25 exp(zeta))``."""
    root = ops.sqrt(x)
    zeta = 2.0 * x * root / _divisor(x, 3.0)
    inverse = 1.0 / zeta
    quotient = _horner(inverse, _AN) / _horner(inverse, _AD)
    return _ONE_OVER_SQRT_PI * quotient / (2.0 * ops.sqrt(root) * ops.exp(zeta))


def _series(x: Any, dtype: str) -> Any:
    """The Maclaurin series ``c1 f(x) - c2 g(x)``, step by step as ATen's loop, each
    element frozen once ``|m / f| <= epsilon`` (or NaN) would have ended its loop."""
    epsilon = ops.convert_to_tensor(torch.finfo(getattr(torch, dtype)).eps, dtype)
    f, g, m, n = ops.ones_like(x), x, ops.ones_like(x), x
    z = x * x * x
    running = ops.ones_like(x, dtype="bool")
    k = 1.0
    for _ in range(_SERIES_STEPS[dtype]):
        m_next = m * z / _divisor(x, k + 1.0) / _divisor(x, k + 2.0)
        n_next = n * z / _divisor(x, k + 2.0) / _divisor(x, k + 3.0)
        k += 3.0
        f_next, g_next = f + m_next, g + n_next
        m, n = ops.where(running, m_next, m), ops.where(running, n_next, n)
        f, g = ops.where(running, f_next, f), ops.where(running, g_next, g)
        running = ops.logical_and(running, ops.greater(ops.abs(m_next / f_next), epsilon))
    return fused_multiply_subtract(ops.full_like(x, _C1), f, _C2 * g)


def airy_ai(x: Any) -> Any:
    """ATen's ``airy_ai_forward`` on a float tensor (its dtype's arithmetic)."""
    dtype = keras.backend.standardize_dtype(x.dtype)
    # the bounds typed: keras.ops compares with a Python float rounded to float32 first
    low, high, zero_from = (ops.convert_to_tensor(v, dtype) for v in (-2.09, 2.09, 103.892))
    negative = ops.less(x, low)
    positive = ops.greater_equal(x, high)
    # each branch on inputs it is defined for, so no NaN leaks through an untaken branch
    y = ops.where(negative, _oscillating(ops.where(negative, x, -3.0)),
                  ops.where(positive, _decaying(ops.where(positive, x, 3.0)),
                            _series(ops.where(ops.logical_or(negative, positive), 0.0, x),
                                    dtype)))
    y = ops.where(ops.greater(x, zero_from), ops.zeros_like(x), y)
    return ops.where(ops.isinf(x), ops.full_like(x, float("nan")), y)


@keras.saving.register_keras_serializable(package="crossport")
class AiryAi(keras.layers.Layer):
    """``torch.special.airy_ai`` on a float tensor, in its dtype's arithmetic.

    One layer, not its ~6000 ops spelled out in the functional graph: Keras builds, runs
    and writes (``to_source``) a graph node per op, which made a converted airy_ai take
    seconds to build and its generated source thousands of lines.

    Example:
        >>> import numpy as np
        >>> [round(float(v), 6) for v in AiryAi()(np.array([-1.0, 0.0, 1.0], "float32"))]
        [0.535561, 0.355028, 0.135292]
    """

    def call(self, x):
        return airy_ai(x)

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, dtype=x.dtype)
