"""Fake quantization (quantization-aware-trained models): values rounded to the integer grid
and back, as ATen's CPU kernels compute them.

Per tensor (``fake_quantize_tensor_cachemask_kernel``): ``inv = 1.0f / scale`` in float32,
``q = zero_point + nearbyint(x * inv)`` (half to even), clamped with ``fmin``/``fmax`` (a
NaN becomes ``quant_min``, +-inf the nearest bound), ``out = (q - zero_point) * scale``;
``mask`` is ``quant_min <= q <= quant_max`` before the clamp. Per channel
(``fake_quant_per_channel_cachemask_cpu``) ``q`` is cast to int64 before the clamp: NaN,
+-inf and values past +-2**63 cast to INT64_MIN on x86, so they all become ``quant_min``.
The same float32 steps give torch's values bit for bit. Where a rounding difference of the
input moves ``x * inv`` across a half, the result steps by ``scale``: a tie of the check
(``parity/ties.py``).

QAT modules (``FusedMovingAvgObsFakeQuantize``) convert when their observer is off (a
converted model keeps no statistics): ``torch.ao.quantization.disable_observer``.
"""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.capture import describe
from crossport.capture.fake_quant import OBSERVER_ON
from crossport.errors import UnsupportedOpError
from crossport.layout import canonical
from crossport.to_keras.fold import is_constant
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register

aten = torch.ops.aten
ops = keras.ops


def _fake_quantize(x, scale, zero_point, quant_min: int, quant_max: int, axis=None):
    """``(output, mask)`` of ATen's kernels; ``scale``/``zero_point`` per ``axis`` when given."""
    scale = np.asarray(scale, dtype=np.float32)
    zero_point = np.asarray(zero_point).astype(np.float32)
    if axis is not None:  # [C] -> broadcast along axis of the canonical (torch-order) input
        shape = [1] * len(x.shape)
        shape[axis] = scale.size
        scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
    inv = np.float32(1.0) / scale
    q = ops.add(ops.round(ops.multiply(x, inv)), zero_point)
    low, high = np.float32(quant_min), np.float32(quant_max)
    mask = ops.logical_and(ops.greater_equal(q, low), ops.less_equal(q, high))
    if axis is None:  # fmax/fmin: NaN -> quant_min, inf -> its bound
        q = ops.where(ops.isnan(q), low, ops.clip(q, low, high))
    else:  # int64 cast first: NaN, inf and |q| >= 2**63 are INT64_MIN -> quant_min
        cast_fails = ops.logical_not(ops.less(ops.abs(q), np.float32(2.0**63)))
        q = ops.where(cast_fails, low, ops.clip(q, low, high))
    return ops.multiply(ops.subtract(q, zero_point), scale), mask


def _scalar(buffer):
    """A one-element quantization buffer's value (a switch, a per-tensor scale)."""
    return np.asarray(buffer).reshape(-1)[0]


def _held(ctx, self, outputs: int):
    """``self`` as Keras holds it; the node's ``outputs`` tensors keep that layout."""
    value = as_value(ctx, self)
    ctx.out_layout = (value.layout,) * outputs
    return value.tensor


def _float32_input(node, **arguments):
    if node.args[0].meta["val"].dtype != torch.float32:
        return "fake quantization of a non-float32 tensor (torch's kernels compute in float32)"
    return None


def _constant_qparams(*names: str):
    """``supports``: float32 input, and the named tensor arguments constants (buffers)."""

    def supports(node, **arguments):
        varying = [name for name in names if not is_constant(arguments.get(name))]
        if varying:
            return (f"fake quantization with {', '.join(varying)} computed in the graph "
                    "(only buffers: a trained model's fixed quantization parameters)")
        return _float32_input(node)

    return supports


@register(aten.fake_quantize_per_tensor_affine_cachemask.default, policy=Policy.CUSTOM,
          keeps_layout=True, supports=_float32_input, dynamic=True)
def aten_fake_quantize_per_tensor_affine_cachemask(ctx, self, scale, zero_point, quant_min,
                                                   quant_max):
    """fake_quantize_per_tensor_affine_cachemask(Tensor self, float scale, int zero_point, int quant_min, int quant_max) -> (Tensor output, Tensor mask)"""
    x = _held(ctx, self, outputs=2)  # elementwise: kept in the input's layout
    return _fake_quantize(x, np.float32(scale), zero_point, quant_min, quant_max)


@register(aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default,
          policy=Policy.CUSTOM, keeps_layout=True, dynamic=True,
          supports=_constant_qparams("scale", "zero_point", "fake_quant_enabled"))
def aten_fake_quantize_tensor_qparams(ctx, self, scale, zero_point, fake_quant_enabled,
                                      quant_min, quant_max):
    """_fake_quantize_per_tensor_affine_cachemask_tensor_qparams(Tensor self, Tensor scale, Tensor zero_point, Tensor fake_quant_enabled, int quant_min, int quant_max) -> (Tensor output, Tensor mask)

    torch.ao's ``FakeQuantize``: with fake quantization disabled, ``x`` and an all-true mask.
    """
    x = _held(ctx, self, outputs=2)
    if not _scalar(fake_quant_enabled):
        return x, ops.ones_like(x, dtype="bool")
    return _fake_quantize(x, _scalar(scale),
                          _scalar(zero_point), quant_min, quant_max)


@register(aten.fake_quantize_per_channel_affine_cachemask.default, policy=Policy.CANONICAL,
          supports=_constant_qparams("scale", "zero_point"), dynamic=True)
def aten_fake_quantize_per_channel_affine_cachemask(ctx, self, scale, zero_point, axis,
                                                    quant_min, quant_max):
    """fake_quantize_per_channel_affine_cachemask(Tensor self, Tensor scale, Tensor zero_point, int axis, int quant_min, int quant_max) -> (Tensor output, Tensor mask)"""
    x = self
    return _fake_quantize(x, scale, zero_point, quant_min, quant_max, axis % len(x.shape))


@register(aten._fused_moving_avg_obs_fq_helper_functional.default, policy=Policy.CUSTOM,
          keeps_layout=True,
          supports=_constant_qparams("observer_on", "fake_quant_on", "running_min",
                                     "running_max", "scale", "zero_point"), dynamic=True)
def aten_fused_moving_avg_obs_fake_quantize(ctx, self, observer_on, fake_quant_on,
                                            running_min, running_max, scale, zero_point,
                                            averaging_const, quant_min, quant_max, ch_axis,
                                            per_row_fake_quant=False, symmetric_quant=False):
    """_fused_moving_avg_obs_fq_helper_functional(Tensor self, Tensor observer_on, Tensor fake_quant_on, Tensor running_min, Tensor running_max, Tensor scale, Tensor zero_point, float averaging_const, int quant_min, int quant_max, int ch_axis, bool per_row_fake_quant=False, bool symmetric_quant=False) -> (Tensor output, Tensor mask, Tensor running_min_out, Tensor running_max_out, Tensor scale_out, Tensor zero_point_out)

    ``FusedMovingAvgObsFakeQuantize`` with its observer off: the statistics and parameters
    come back unchanged, the output is the fake quantization (per tensor, or per channel
    along ``ch_axis``), or ``x`` when fake quantization is off.
    """
    if _scalar(observer_on):
        raise UnsupportedOpError(f"a QAT fake-quantize {describe(ctx.node)} {OBSERVER_ON}")
    # per tensor: elementwise, in the input's layout; per channel: torch's order
    x = (ctx.canonical(as_value(ctx, self)) if per_row_fake_quant
         else _held(ctx, self, outputs=2))
    if per_row_fake_quant:
        ctx.out_layout = (canonical(len(x.shape)),) * 2
    ctx.out_layout = (*ctx.out_layout, *(canonical(1),) * 4)
    kept = tuple(np.asarray(v) for v in (running_min, running_max, scale, zero_point))
    if not _scalar(fake_quant_on):
        return (x, ops.ones_like(x, dtype="bool"), *kept)
    if per_row_fake_quant:
        output, mask = _fake_quantize(x, scale, zero_point, quant_min, quant_max,
                                      ch_axis % len(x.shape))
    else:
        output, mask = _fake_quantize(x, _scalar(scale),
                                      _scalar(zero_point), quant_min,
                                      quant_max)
    return (output, mask, *kept)
