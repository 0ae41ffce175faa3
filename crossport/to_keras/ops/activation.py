"""Activations (pitfalls.md item 14: GELU approximation, hard_sigmoid, softplus beta)."""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.layers.activation import GELU
from crossport.layers.special import Erf
from crossport.to_keras.fold import is_constant
from crossport.to_keras.ops.elementwise import exp, nan_kept
from crossport.to_keras.registry import Policy, bind_arguments, register
from crossport.to_keras.scalars import bound, dtype_name, float_operand, in_float32
from crossport.to_keras.values import keras_dtype

aten = torch.ops.aten
ops = keras.ops


def _activation(ctx, x, fn):
    """A named ``Activation`` layer for Keras' own activations (serialisable by name);
    ``fn`` is otherwise a ``keras.ops`` formula or a crossport layer (``GELU``), both of
    which ``.keras`` files keep.
    An integer input is cast to the float result dtype first (torch promotes
    ``sigmoid(int64)`` to float32; TF has no integer kernel)."""
    if ctx.out_dtype.is_floating_point:
        x = float_operand(x, keras_dtype(ctx.out_dtype))
    if isinstance(fn, str):
        return keras.layers.Activation(fn, name=ctx.name())(x)
    return fn(x)


@register(aten.relu.default, aten.relu_.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_relu_default(ctx, self):
    """relu(Tensor self) -> Tensor"""
    return keras.layers.ReLU(name=ctx.name())(self)


@register(aten.hardtanh.default, aten.hardtanh_.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_hardtanh_default(ctx, self, min_val=-1.0, max_val=1.0):
    """hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor (relu6 is (0, 6))

    Of integers: bounds truncated to the tensor's dtype as torch casts them (Keras' Clip
    and ReLU reject integer tensors)."""
    if not ctx.out_dtype.is_floating_point:
        dtype = keras_dtype(ctx.out_dtype)
        low, high = bound(min_val, dtype), bound(max_val, dtype)
        return ops.minimum(ops.maximum(self, low), high)
    if min_val == 0.0 and max_val == 6.0:
        return keras.layers.ReLU(max_value=6.0, name=ctx.name())(self)
    return _activation(ctx, self, lambda x: ops.clip(x, min_val, max_val))


@register(aten.leaky_relu.default, aten.leaky_relu_.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_leaky_relu_default(ctx, self, negative_slope=0.01):
    """leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor

    float64: ``x > 0 ? x : x * slope`` with the slope a double (TF's LeakyRelu holds its
    alpha as a float32 attribute: 0.1 became 0.10000000149); float16: the same in float32,
    rounded once, as torch's kernel computes it (TF's rounds the slope to float16)."""
    if ctx.out_dtype == torch.float32:
        return keras.layers.LeakyReLU(negative_slope=negative_slope, name=ctx.name())(self)
    return in_float32(self, lambda x: ops.where(
        ops.greater(x, 0.0), x, ops.multiply(x, bound(negative_slope, dtype_name(x)))))



def _rrelu_supports(node):
    if bind_arguments(node).get("training"):
        return ("rrelu in training draws a random slope per negative element (torch's "
                "generator has no Keras twin); convert the module in eval(), where the "
                "slope is (lower + upper) / 2")
    return None


@register(aten.rrelu.default, policy=Policy.AGNOSTIC, supports=_rrelu_supports, dynamic=True)
def aten_rrelu_default(ctx, self, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    """rrelu(Tensor self, Scalar lower=0.125, Scalar upper=0.333, bool training=False,
    Generator? generator=None) -> Tensor

    In eval (``nn.RReLU().eval()``, ``F.rrelu(x)``) no random number is drawn: ATen's
    ``leaky_relu`` with the mean slope, computed in double."""
    return aten_leaky_relu_default(ctx, self, (float(lower) + float(upper)) / 2)

def _prelu_supports(node):
    weight = node.args[1]
    return None if is_constant(weight) else "prelu weight computed in the graph"


@register(aten.prelu.default, policy=Policy.CHANNELS_LAST, supports=_prelu_supports, dynamic=True)
def aten_prelu_default(ctx, self, weight):
    """prelu(Tensor self, Tensor weight) -> Tensor

    torch's weight has 1 or C entries for channel dim 1; channels-last puts C last. An input
    of rank 0 or 1 has one weight (Keras' PReLU would want a weight of shape ()).
    """
    rank = len(ctx.out_shape)
    if rank < 2:
        alpha = float(np.asarray(weight).reshape(-1)[0])
        return ops.where(ops.greater(self, 0), self, ops.multiply(self, alpha))
    channels = ctx.out_shape[1] if rank >= 2 else 1
    alpha = np.broadcast_to(weight.reshape(-1), (channels,)).astype(np.float32)
    shared = list(range(1, rank - 1)) if rank > 2 else None
    layer = keras.layers.PReLU(shared_axes=shared, name=ctx.name())
    y = layer(self)
    layer.set_weights([alpha.reshape((1,) * max(rank - 2, 0) + (channels,))])
    return y


@register(aten.elu.default, aten.elu_.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_elu_default(ctx, self, alpha=1.0, scale=1.0, input_scale=1.0):
    """elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor (also celu, selu)"""
    return _activation(ctx, self, lambda x: in_float32(x, lambda v: _elu(v, alpha, scale,
                                                                          input_scale)))


def _elu(x, alpha, scale=1.0, input_scale=1.0):
    """torch's kernel: ``x * scale`` where ``x > 0``, else ``(e^(x * input_scale) - 1) *
    (alpha * scale)`` with the coefficient's product rounded in ``x``'s dtype (the positive
    side is not scaled by ``input_scale``: it was, so ``aten.elu(x, 0.1, 0.3, 0.7)`` gave
    0.021 for 0.1 where torch gives 0.03); NaN at NaN in .tflite files too (:func:`exp`)."""
    dtype = dtype_name(x)

    def scaled(v, factor):  # factors of 1 add no op (elu's defaults)
        return v if factor == 1 else ops.multiply(v, factor)

    xs = ops.minimum(scaled(x, bound(input_scale, dtype)), 0.0)
    negative = scaled(exp(xs) - 1.0, bound(alpha, dtype) * bound(scale, dtype))
    return ops.where(ops.greater(x, 0.0), scaled(x, bound(scale, dtype)), negative)


@register(aten.celu.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_celu_default(ctx, self, alpha=1.0):
    """celu(Tensor self, Scalar alpha=1.0) -> Tensor (float16 in float32, as torch's kernel)"""
    return _activation(ctx, self, lambda x: in_float32(x, lambda v: ops.maximum(v, 0.0) + ops.minimum(
        0.0, alpha * (exp(ops.minimum(v, 0.0) / alpha) - 1.0))))


@register(aten.selu.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_selu_default(ctx, self):
    """selu(Tensor self) -> Tensor: elu with torch's constants (Keras' selu lowers to an
    ``EXP`` that maps NaN to 0 in a .tflite file)"""
    return _activation(ctx, self, lambda x: in_float32(x, lambda v: _elu(v, _SELU_ALPHA,
                                                                          _SELU_SCALE)))


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


@register(aten.gelu.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_gelu_default(ctx, self, approximate="none"):
    """gelu(Tensor self, *, str approximate='none') -> Tensor

    crossport.layers.GELU: torch's formula (Keras' own gelu defaults to tanh, and its exact
    form runs TF's slower Erfc kernel).
    """
    return _activation(ctx, self, GELU(approximate, name=ctx.name()))


@register(aten.silu.default, aten.silu_.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_silu_default(ctx, self):
    """silu(Tensor self) -> Tensor"""
    return _activation(ctx, self, "silu")


@register(aten.mish.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_mish_default(ctx, self):
    """mish(Tensor self) -> Tensor"""
    return _activation(ctx, self, "mish")


@register(aten.hardswish.default, aten.hardswish_.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_hardswish_default(ctx, self):
    """hardswish(Tensor self) -> Tensor = x * relu6(x + 3) / 6 (Keras 3 hard_silu)"""
    return _activation(ctx, self, "hard_silu")


@register(aten.hardsigmoid.default, aten.hardsigmoid_.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_hardsigmoid_default(ctx, self):
    """hardsigmoid(Tensor self) -> Tensor = relu6(x + 3) / 6 (Keras 2 used 0.2x + 0.5)"""
    return _activation(ctx, self, "hard_sigmoid")


@register(aten.sigmoid.default, aten.sigmoid_.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_sigmoid_default(ctx, self):
    """sigmoid(Tensor self) -> Tensor"""
    return _activation(ctx, self, "sigmoid")


@register(aten.tanh.default, aten.tanh_.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_tanh_default(ctx, self):
    """tanh(Tensor self) -> Tensor"""
    return _activation(ctx, self, "tanh")


@register(aten.softplus.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_softplus_default(ctx, self, beta=1.0, threshold=20.0):
    """softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor

    torch returns x unchanged where beta*x > threshold (compared in the computation dtype:
    a float64 model's threshold 0.33 is not 0.33000001311). TF's Softplus lowers to an
    ``EXP`` that maps NaN to 0 in a .tflite file: NaN is put back (:func:`nan_kept`).
    float16 is computed in float32, as torch's kernel does.
    """
    def softplus(x):
        bx = x * beta
        above = ops.greater(bx, bound(threshold, dtype_name(x)))
        return ops.where(above, x, nan_kept(bx, ops.softplus(bx)) / beta)
    return _activation(ctx, self, lambda x: in_float32(x, softplus))


@register(aten.erf.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_erf_default(ctx, self):
    """erf(Tensor self) -> Tensor

    TF's Erf has no TFLite builtin (Flex only): crossport.layers.Erf, a float32-accurate
    rational approximation from builtin ops (~7 ulps, tests/layers/test_special.py).
    """
    dtype = keras_dtype(ctx.out_dtype)
    x = self if self.dtype == dtype else ops.cast(self, dtype)  # erf of integers is float
    if ctx.out_dtype == torch.float64:  # the approximation is float32-accurate only
        return ops.erf(x)
    return Erf(dtype=dtype, name=ctx.name())(x)
