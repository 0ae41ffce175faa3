"""Consumers and producers of complex values besides the FFTs (docs/architecture.md,
"Complex values").

A complex tensor is held as two real tensors in one layout (``ComplexValue``). These
converters run when a node reads or produces one (``register_complex``):

- ``view_as_real`` (``.real``/``.imag`` are ``view_as_real`` + ``select``) stacks the parts
  on a new last dim, ``view_as_complex`` splits one;
- ``abs`` (torch: ``hypot(re, im)``), ``angle`` (``atan2(im, re)``), ``_conj``, ``neg``;
- ``add``/``sub``/``mul`` by a complex or real tensor or number, ``div`` by a real one, in
  torch's formulas (``(a + bi)(c + di) = (ac - bd) + (ad + bc)i``);
- ``_to_copy`` to a complex dtype (``x.to(torch.complex64)``, ``fft2`` of a real tensor),
  ``torch.complex(re, im)``, ``torch.polar(abs, angle)``;
- shape ops (view, permute, slice, select, cat, clone ...) and the linear reductions
  ``sum``/``mean``: each part through the real converter, which states the dims as usual
  (torch sums complex numbers part by part too).

Anything else that touches a complex value is refused by the pre-flight check.
"""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.layout import after_insert, after_reduce, physical_axis
from crossport.to_keras import slicing
from crossport.to_keras.ops.elementwise import keras_add, keras_multiply
from crossport.to_keras.ops.float_math import hypot
from crossport.to_keras.registry import Policy, lookup, register_complex
from crossport.to_keras.values import ComplexParts, ComplexValue, keras_dtype

aten = torch.ops.aten
ops = keras.ops


# -- the parts of an operand ---------------------------------------------------------------
def _parts(value):
    """``(real, imag)`` of an operand as the emitter laid it out; ``imag`` is None for a
    real operand (a tensor, a constant or a number), so no zeros are computed with."""
    if isinstance(value, ComplexParts):
        return value.real, value.imag
    if isinstance(value, complex):
        return value.real, value.imag
    if isinstance(value, np.ndarray) and np.iscomplexobj(value):
        return np.ascontiguousarray(value.real), np.ascontiguousarray(value.imag)
    return value, None


def _neg(x):
    return -x if isinstance(x, (int, float, np.ndarray)) else ops.negative(x)


def _add(x, y):
    """``x + y`` where either may be missing (None: a zero imaginary part)."""
    if x is None or y is None:
        return y if x is None else x
    return keras_add(x, y)


def _mul(x, y):
    if x is None or y is None:
        return None
    return keras_multiply(x, y)


def _alpha(x, alpha):
    return x if x is None or alpha == 1 else _mul(x, alpha)


def _complex_result(ctx, real, imag) -> ComplexParts:
    """The parts of a complex result as Keras tensors of one shape: a missing imaginary
    part is zeros; a part that is a constant, or smaller than the other (``z[:, :1] + x``:
    only the real part met the larger operand), is broadcast exactly, as ``part * 1``."""
    if imag is None:
        imag = ops.zeros_like(real)
    return ComplexParts(_like(real, imag), _like(imag, real))


def _like(x, other):
    """``x`` broadcast against ``other`` (no-op when it is a tensor of the same shape)."""
    if isinstance(x, keras.KerasTensor) and isinstance(other, keras.KerasTensor) and tuple(
            x.shape) == tuple(other.shape):
        return x
    return keras_multiply(x, ops.ones_like(other))


# -- elementwise arithmetic (AGNOSTIC: both parts arrive in one layout) ---------------------
@register_complex(aten.add.Tensor, aten.add.Scalar, policy=Policy.AGNOSTIC, dynamic=True)
def aten_add_complex(ctx, self, other, alpha=1):
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor, complex operands:
    the parts add (a real operand has no imaginary part)."""
    (a, b), (c, d) = _parts(self), _parts(other)
    return _complex_result(ctx, _add(a, _alpha(c, alpha)), _add(b, _alpha(d, alpha)))


@register_complex(aten.sub.Tensor, aten.sub.Scalar, policy=Policy.AGNOSTIC, dynamic=True)
def aten_sub_complex(ctx, self, other, alpha=1):
    """sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor, complex operands."""
    (a, b), (c, d) = _parts(self), _parts(other)
    c, d = _alpha(c, alpha), _alpha(d, alpha)
    real = ops.subtract(a, c)
    imag = None if d is None else (ops.subtract(b, d) if b is not None else _neg(d))
    return _complex_result(ctx, real, b if d is None else imag)


@register_complex(aten.mul.Tensor, aten.mul.Scalar, policy=Policy.AGNOSTIC, dynamic=True)
def aten_mul_complex(ctx, self, other):
    """mul.Tensor(Tensor self, Tensor other) -> Tensor, complex operands:
    ``(a + bi)(c + di) = (ac - bd) + (ad + bc)i`` (c10::complex's formula); by a real
    operand each part is scaled."""
    (a, b), (c, d) = _parts(self), _parts(other)
    if b is None or d is None:  # one side real: no products with zero
        return _complex_result(ctx, _mul(a, c), _mul(b, c) if d is None else _mul(a, d))
    real = ops.subtract(_mul(a, c), _mul(b, d))
    imag = keras_add(_mul(a, d), _mul(b, c))
    return _complex_result(ctx, real, imag)


def _real_divisor(node, self, other, **_) -> str | None:
    other = other.meta["val"] if isinstance(other, torch.fx.Node) else other
    if isinstance(other, complex) or (isinstance(other, torch.Tensor) and other.is_complex()):
        return ("division by a complex value (torch's complex division scales by the larger "
                "part, its vectorized kernel differently; multiply by the conjugate / |z|^2)")
    return None


@register_complex(aten.div.Tensor, aten.div.Scalar, policy=Policy.AGNOSTIC,
                  supports=_real_divisor, dynamic=True)
def aten_div_complex(ctx, self, other):
    """div.Tensor(Tensor self, Tensor other) -> Tensor: a complex value by a real one, each
    part divided."""
    a, b = _parts(self)
    return _complex_result(ctx, ops.true_divide(a, other), ops.true_divide(b, other))


@register_complex(aten.neg.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_neg_complex(ctx, self):
    """neg(Tensor self) -> Tensor: both parts negated."""
    return ComplexParts(ops.negative(self.real), ops.negative(self.imag))


@register_complex(aten._conj.default, aten.conj_physical.default, policy=Policy.AGNOSTIC,
                  dynamic=True)
def aten_conj_complex(ctx, self):
    """_conj(Tensor(a) self) -> Tensor(a): the imaginary part negated (exact)."""
    return ComplexParts(self.real, ops.negative(self.imag))


@register_complex(aten.abs.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_abs_complex(ctx, self):
    """abs(Tensor self) -> Tensor of a complex tensor: ``|z|`` as torch's ``hypot``.

    ``sqrt(a² + b²)`` overflows for parts above ~1.8e19 and flushes below ~1e-19 in
    float32; scaled by the larger part, ``m * sqrt(1 + (s/m)²)``, it does neither (as
    hypot), and an infinite part gives inf even when the other is NaN (C99 hypot).
    Built from real ops only, which TFLite runs as builtins.
    """
    return hypot(self.real, self.imag)


@register_complex(aten.angle.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_angle_complex(ctx, self):
    """angle(Tensor self) -> Tensor of a complex tensor: ``atan2(imag, real)``."""
    return ops.arctan2(self.imag, self.real)


# -- producing and taking apart --------------------------------------------------------------
@register_complex(aten.view_as_real.default, policy=Policy.CUSTOM, dynamic=True)
def aten_view_as_real_default(ctx, self):
    """view_as_real(Tensor(a) self) -> Tensor(a): the parts stacked on a new last dim."""
    self = _plain(ctx, self)
    ctx.out_layout = after_insert(self.layout, self.rank)
    return ops.stack([self.real.tensor, self.imag.tensor], axis=-1)


@register_complex(aten.view_as_complex.default, policy=Policy.CUSTOM, dynamic=True)
def aten_view_as_complex_default(ctx, self):
    """view_as_complex(Tensor(a) self) -> Tensor(a): the last dim (size 2) split into the
    real and imaginary parts."""
    from crossport.to_keras.ops.shape import as_value

    value = ctx.plain(as_value(ctx, self))
    last = value.rank - 1
    real, imag = slicing.unstack(value.tensor, physical_axis(value.layout, last))
    ctx.out_layout = after_reduce(value.layout, [last], keepdim=False)
    return ComplexParts(real, imag)


def _to_complex_supports(node, self, **_) -> str | None:
    if not node.meta["val"].is_complex():
        return ("a complex tensor cast to a real dtype (torch drops the imaginary part with "
                "a warning): take .real explicitly")
    return None


@register_complex(aten._to_copy.default, policy=Policy.CUSTOM, supports=_to_complex_supports,
                  dynamic=True)
def aten_to_copy_complex(ctx, self, *args, **kwargs):
    """_to_copy(Tensor self, *, ScalarType? dtype=None, ...) -> Tensor to a complex dtype:
    a real tensor gets a zero imaginary part, a complex one casts both parts."""
    from crossport.to_keras.ops.shape import as_value

    part_dtype = keras_dtype(ctx.out_dtype.to_real())
    if isinstance(self, ComplexValue):
        ctx.out_layout = self.layout
        return ComplexParts(ops.cast(self.real.tensor, part_dtype),
                            ops.cast(self.imag.tensor, part_dtype))
    value = as_value(ctx, self)
    ctx.out_layout = value.layout
    real = ops.cast(value.tensor, part_dtype)
    return ComplexParts(real, ops.zeros_like(real))


@register_complex(aten.complex.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_complex_default(ctx, real, imag):
    """complex(Tensor real, Tensor imag) -> Tensor: the two real tensors are the parts
    (broadcast against each other, as torch does)."""
    return _complex_result(ctx, real, imag)


@register_complex(aten.polar.default, policy=Policy.AGNOSTIC, dynamic=True)
def aten_polar_default(ctx, abs, angle):
    """polar(Tensor abs, Tensor angle) -> Tensor: ``abs * cos(angle) + abs * sin(angle) i``
    (torch's formula)."""
    return _complex_result(ctx, keras_multiply(abs, ops.cos(angle)),
                           keras_multiply(abs, ops.sin(angle)))


def _plain(ctx, value: ComplexValue) -> ComplexValue:
    """Both parts in a plain permutation layout (see ``NodeContext.plain``)."""
    return ComplexValue(ctx.plain(value.real), ctx.plain(value.imag))


# -- shape ops: the real converter on each part ------------------------------------------
class _PartContext:
    """``ctx`` for a real converter run on one part: the same node, names and layouts, with
    the part's real dtype as the output dtype; ``out_layout`` writes through."""

    def __init__(self, ctx):
        object.__setattr__(self, "_ctx", ctx)

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    def __setattr__(self, name, value):
        setattr(self._ctx, name, value)

    @property
    def out_dtype(self) -> torch.dtype:
        return self._ctx.out_dtype.to_real()


def _part(value, which: str):
    if isinstance(value, (ComplexValue, ComplexParts)):
        return getattr(value, which)
    if isinstance(value, np.ndarray) and np.iscomplexobj(value):
        return np.ascontiguousarray(getattr(value, which))
    if isinstance(value, (list, tuple)):
        return type(value)(_part(v, which) for v in value)
    if isinstance(value, dict):
        return {k: _part(v, which) for k, v in value.items()}
    return value


def _all_complex(node: torch.fx.Node) -> str | None:
    vals = [a.meta.get("val") for a in node.all_input_nodes]
    if any(isinstance(v, torch.Tensor) and not v.is_complex() for v in vals):
        return "real and complex tensors mixed in a shape op (make the real one complex first)"
    return None


def _componentwise(op) -> None:
    """Register ``op``'s real converter, run on each part, as its complex converter: a
    shape op moves the real and imaginary elements alike."""
    real = lookup(op)

    def convert(ctx, *args, **kwargs):
        parts = ComplexParts(*(
            real.fn(_PartContext(ctx), *_part(args, which), **_part(kwargs, which))
            for which in ("real", "imag")))
        return parts

    convert.__name__ = f"{real.fn.__name__}_per_part"
    convert.__doc__ = f"{op}: {real.fn.__name__} on the real and the imaginary part."
    register_complex(op, policy=real.policy, keeps_layout=real.keeps_layout,
                     supports=_all_complex, dynamic=real.dynamic)(convert)


@register_complex(aten.constant_pad_nd.default, policy=Policy.CUSTOM, keeps_layout=True,
                  supports=_all_complex, dynamic=True)
def aten_constant_pad_nd_complex(ctx, self, pad, value=0):
    """constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor of a complex
    tensor (``fft(x, n=...)`` zero-pads to n): each part padded with that part of
    ``value``."""
    real = lookup(aten.constant_pad_nd.default).fn
    value = complex(value)
    part_ctx = _PartContext(ctx)
    return ComplexParts(real(part_ctx, self.real, pad, value.real),
                        real(part_ctx, self.imag, pad, value.imag))


for _op in (aten.view.default, aten._unsafe_view.default, aten.reshape.default,
            aten.flatten.using_ints, aten.unflatten.int, aten.squeeze.dim, aten.squeeze.dims,
            aten.squeeze.default, aten.unsqueeze.default, aten.permute.default,
            aten.transpose.int, aten.t.default, aten.slice.Tensor, aten.select.int,
            aten.cat.default, aten.flip.default, aten.expand.default, aten.clone.default,
            aten.contiguous.default, aten.alias.default, aten.detach.default,
            aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default):
    _componentwise(_op)
