"""Resize / interpolate: nearest, nearest-exact, (bi/tri)linear, bicubic, antialias (pitfall 12).

Every torch mode is separable: along each spatial axis the output is ``W @ x`` for an
``[out, in]`` matrix ``W`` with a few non-zeros per row. Rather than re-deriving torch's index
rules (nearest picks ``floor(i*in/out)`` or ``floor(i/scale)`` when a scale_factor is given,
half-pixel vs align_corners mappings, clamped cubic taps, antialias filters), ``W`` is
obtained by running the very same ATen op on an identity matrix, so the conversion follows
torch by construction. The Keras model gathers the non-zero taps of each row
(``keras.ops.take``) and sums them with their weights; integer nearest scales use
``keras.layers.UpSamplingND`` (checked against ``W``, not assumed).
"""

from __future__ import annotations

import math

import keras
import numpy as np
import sympy
import torch
from torch.utils._sympy import functions as symfn

from crossport import layers as torch_semantics
from crossport.to_keras.dynamic_dims import is_dynamic_size, static_dims
from crossport.to_keras.registry import Policy, register

aten = torch.ops.aten
ops = keras.ops

_UPSAMPLING = {1: keras.layers.UpSampling1D, 2: keras.layers.UpSampling2D,
               3: keras.layers.UpSampling3D}

# mode -> the ATen op (.default overload) per number of spatial dims, and whether it takes
# align_corners
_NEAREST = {1: aten.upsample_nearest1d.default, 2: aten.upsample_nearest2d.default,
            3: aten.upsample_nearest3d.default}
_NEAREST_EXACT = {1: aten._upsample_nearest_exact1d.default,
                  2: aten._upsample_nearest_exact2d.default,
                  3: aten._upsample_nearest_exact3d.default}
_LINEAR = {1: aten.upsample_linear1d.default, 2: aten.upsample_bilinear2d.default,
           3: aten.upsample_trilinear3d.default}
_BICUBIC = {2: aten.upsample_bicubic2d.default}
_BILINEAR_AA = {2: aten._upsample_bilinear2d_aa.default}
_BICUBIC_AA = {2: aten._upsample_bicubic2d_aa.default}


def _scale_names(n: int) -> list[str]:
    return {1: ["scales"], 2: ["scales_h", "scales_w"],
            3: ["scales_d", "scales_h", "scales_w"]}[n]


def interpolation_matrix(op, n: int, axis: int, size_in: int, size_out: int, scale,
                         align_corners=None, fill: float = 1.0) -> np.ndarray:
    """``W [out, in]`` of ``op`` along spatial ``axis``: torch's op applied to an identity.

    The other spatial dims are 2 -> 2 (the identity for every mode; torch's antialias
    kernels mishandle size-1 dims) and only their first element is read. With
    ``fill=nan`` the identity's diagonal is NaN: the NaN entries of the result are the
    pixels torch reads for each output, weight 0 included (0 * NaN is NaN in torch too).
    """
    shape = [size_in, 1] + [2] * n
    shape[2 + axis] = size_in
    eye = torch.where(torch.eye(size_in, dtype=torch.bool), fill, 0.0)
    view = [size_in, 1] + [1] * n
    view[2 + axis] = size_in
    eye = eye.reshape(view).expand(shape).contiguous()
    out_size = [2] * n
    out_size[axis] = size_out
    scales = {name: (scale if i == axis else None) for i, name in enumerate(_scale_names(n))}
    args = (eye, out_size) if align_corners is None else (eye, out_size, bool(align_corners))
    with torch.no_grad():
        result = op(*args, **scales)
    index = [slice(None), 0] + [0] * n
    index[2 + axis] = slice(None)
    return result[tuple(index)].T.numpy()


def _taps(matrix: np.ndarray, read: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The columns torch reads for each row (``read``, a bool ``[out, in]``): indices,
    weights and whether the tap exists, ``[taps, out]`` (rows with fewer taps padded)."""
    count = max(int(read.sum(1).max()), 1)
    index = np.zeros((count, matrix.shape[0]), dtype=np.int32)
    weight = np.zeros((count, matrix.shape[0]), dtype=np.float32)
    present = np.zeros((count, matrix.shape[0]), dtype=bool)
    for o, row in enumerate(matrix):
        cols = np.flatnonzero(read[o])
        index[: len(cols), o] = cols
        weight[: len(cols), o] = row[cols]
        present[: len(cols), o] = True
    return index, weight, present


def _apply_axis(x, keras_axis: int, rank: int, matrix: np.ndarray, read: np.ndarray):
    """``W @ x`` along ``keras_axis``, as gathers of the taps torch reads. A padded tap
    adds an exact 0, not ``0 * x`` (NaN where x is inf or NaN, which torch never read)."""
    index, weight, present = _taps(matrix, read)
    if index.shape[0] == 1 and np.all(weight == 1.0):  # nearest: a pure gather
        return ops.take(x, index[0], axis=keras_axis)
    shape = [1] * rank
    shape[keras_axis] = matrix.shape[0]
    y = None
    for idx, w, there in zip(index, weight, present):
        term = ops.take(x, idx, axis=keras_axis) * w.reshape(shape)
        if not there.all():
            term = ops.where(there.reshape(shape), term, ops.zeros_like(term))
        y = term if y is None else y + term
    return y


def _integer_repeat(matrix: np.ndarray) -> int | None:
    """k when ``W`` repeats every input element k times in order (UpSampling's rule)."""
    size_out, size_in = matrix.shape
    if size_out % size_in:
        return None
    k = size_out // size_in
    expected = np.zeros_like(matrix)
    expected[np.arange(size_out), np.arange(size_out) // k] = 1.0
    return k if np.array_equal(matrix, expected) else None


_MODES = {id(_NEAREST): "nearest", id(_NEAREST_EXACT): "nearest-exact", id(_BICUBIC): "bicubic"}
_LINEAR_MODES = {1: "linear", 2: "bilinear", 3: "trilinear"}


def _layer_mode(table, n: int) -> str | None:
    """The crossport.layers.Interpolate mode for ``table``; None for antialiased filters."""
    if table is _LINEAR:
        return _LINEAR_MODES[n]
    return _MODES.get(id(table))


def emit_resize(ctx, input, table, scales, align_corners=None, nearest=False):
    """Resize channels-last ``input`` to the node's output shape.

    The converter emits ``crossport.layers.Interpolate`` (torch's index rules, the same layer
    hand-porters use). Antialiased filters, which that layer does not offer, are applied as
    per-axis weight matrices taken from torch's own kernel run on an identity.
    """
    in_shape, out_shape = ctx.arg_shape(0), ctx.out_shape
    n = len(in_shape) - 2
    scales = list(scales) if scales else [None] * n
    if any(ctx.is_dynamic(s) for s in (*_symbolic_shape(ctx.node.args[0]),
                                       *_symbolic_shape(ctx.node))):
        return _emit_run_time_resize(ctx, input, table, scales, align_corners, nearest)
    op = table[n]
    matrices = [
        interpolation_matrix(op, n, a, in_shape[2 + a], out_shape[2 + a], scales[a], align_corners)
        for a in range(n)
    ]
    if nearest:
        repeats = [_integer_repeat(m) for m in matrices]
        if all(r is not None for r in repeats):
            if all(r == 1 for r in repeats):
                return input
            size = repeats[0] if n == 1 else tuple(repeats)
            return _UPSAMPLING[n](size=size, name=ctx.name())(input)
    mode = _layer_mode(table, n)
    if mode is not None and (all(s is None for s in scales) or all(s is not None for s in scales)):
        by_scale = all(s is not None for s in scales)
        layer = torch_semantics.Interpolate(
            size=None if by_scale else tuple(out_shape[2:]),
            scale_factor=tuple(scales) if by_scale else None, mode=mode,
            align_corners=None if nearest or mode == "nearest" else bool(align_corners),
            data_format="channels_last", name=ctx.name())
        return layer(input)
    x = input
    rank = n + 2
    for a, matrix in enumerate(matrices):
        if matrix.shape[0] == matrix.shape[1] and np.array_equal(matrix, np.eye(len(matrix))):
            continue
        read = np.isnan(interpolation_matrix(op, n, a, in_shape[2 + a], out_shape[2 + a],
                                             scales[a], align_corners, fill=float("nan")))
        x = _apply_axis(x, 1 + a, rank, matrix, read | (matrix != 0))
    return x


def _emit_run_time_resize(ctx, input, table, scales, align_corners, nearest):
    """A dynamic H/W: integer nearest upsampling stays an ``UpSampling`` layer; the other
    (non-antialiased) modes compute their taps at run time (``layers.resize_runtime``).

    Output sizes ``floor(in * scale)`` (``F.interpolate(scale_factor=...)``) are an
    ``Interpolate`` by scale; any other output size with explicit scales (a direct
    ``aten.upsample_*(x, size, scales_h, scales_w)``) is an ``InterpolateTo`` of the graph's
    output sizes that samples with the given scales, as torch's kernel does."""
    in_shape, out_shape = _symbolic_shape(ctx.node.args[0]), _symbolic_shape(ctx.node)
    n = len(in_shape) - 2
    pairs = list(zip(in_shape[2:], out_shape[2:]))
    if nearest and all(_integer_multiple(i, o) for i, o in pairs):
        repeats = [int(o.node.expr / i.node.expr) if is_dynamic_size(o) else 1 for i, o in pairs]
        if all(s is None or float(s) == r for s, r in zip(scales, repeats)):
            return _UPSAMPLING[n](size=repeats[0] if n == 1 else tuple(repeats),
                                  name=ctx.name())(input)
    mode = _layer_mode(table, n)
    align = None if nearest or mode == "nearest" else bool(align_corners)
    if all(s is not None and _scaled_size(i, o, s) for (i, o), s in zip(pairs, scales)):
        layer = torch_semantics.Interpolate(scale_factor=[float(s) for s in scales], mode=mode,
                                            align_corners=align, data_format="channels_last",
                                            name=ctx.name())
        return layer(input)
    sizes = [None if is_dynamic_size(o) else int(o) for o in out_shape[2:]]
    scalars = [ctx.size(o) for o in out_shape[2:] if is_dynamic_size(o)]
    sampling = None if all(s is None for s in scales) else [
        None if s is None else float(s) for s in scales]
    layer = torch_semantics.InterpolateTo(size=sizes, mode=mode, align_corners=align,
                                          sampling_scales=sampling,
                                          data_format="channels_last", name=ctx.name())
    return layer(input, *scalars)


def _scaled_size(size_in, size_out, scale) -> bool:
    """Whether ``size_out`` is ``floor(size_in * scale)`` at every size (what
    ``F.interpolate(scale_factor=...)`` traces: ``TruncToInt(scale * ToFloat(in))``)."""
    if not is_dynamic_size(size_in):
        return not is_dynamic_size(size_out) and int(size_out) == math.floor(
            int(size_in) * float(scale))
    if not is_dynamic_size(size_out):
        return False
    expr = size_out.node.expr
    expected = sympy.Float(float(scale)) * symfn.ToFloat(size_in.node.expr)
    return (isinstance(expr, (symfn.TruncToInt, symfn.FloorToInt))
            and sympy.simplify(expr.args[0] - expected) == 0)


def _symbolic_shape(node: torch.fx.Node) -> tuple:
    """The node's sizes as torch.export traced them (SymInts for dynamic dims)."""
    return tuple(node.meta["val"].shape)


def _resize_supports(node: torch.fx.Node) -> str | None:
    val = node.meta.get("val")
    if val is None or val.dim() < 3:
        return "resize of an input without batch and channel dims"
    if not val.dtype.is_floating_point and "nearest" not in str(node.target):
        # torch resamples integer images (uint8) with its own fixed-point kernels: weights
        # rounded to int16 fractions, sums rounded and clamped; they are not reproduced
        return (f"interpolating resize of a {str(val.dtype).replace('torch.', '')} image "
                "(torch's fixed-point integer kernel); resize a float image (x.float()) "
                "and round it back instead")
    return None


def _integer_multiple(size_in, size_out) -> bool:
    """``size_out == k * size_in`` for an integer ``k``, at every size."""
    if not is_dynamic_size(size_in):
        return False
    ratio = (size_out.node.expr if is_dynamic_size(size_out) else size_out) / size_in.node.expr
    return bool(getattr(ratio, "is_Integer", False)) and int(ratio) >= 1


def _resize_dynamic(node: torch.fx.Node) -> str | None:
    """Taps are computed at run time for every mode but the antialiased filters, whose
    matrices are built for the example's sizes."""
    if "_aa" not in str(node.target):
        return None
    shape_in = node.args[0].meta["val"].shape
    dynamic_out = [d for d, size in enumerate(node.meta["val"].shape) if is_dynamic_size(size)]
    if dynamic_out:  # a constant (a position table) resized to a run-time size
        return (f"{node.target.__name__.split('.')[0]} (antialiased resampling) needs a "
                f"static output size in dim {dynamic_out[0]} "
                f"({node.meta['val'].shape[dynamic_out[0]]})")
    return static_dims("input" if "input" in _argument_names(node) else "self",
                       lambda _node: range(2, len(shape_in)),
                       f"{node.target.__name__.split('.')[0]} (antialiased resampling)")(node)


def _argument_names(node: torch.fx.Node) -> list[str]:
    return [a.name for a in node.target._schema.arguments]


def _vec_scales(scale_factors, n):
    return [None] * n if scale_factors is None else [float(s) for s in scale_factors]


def _default_scales(n, scales, scales_d, scales_h, scales_w):
    return {1: [scales], 2: [scales_h, scales_w], 3: [scales_d, scales_h, scales_w]}[n]


def _nd(ctx) -> int:
    return len(ctx.arg_shape(0)) - 2


@register(aten.upsample_nearest1d.vec, aten.upsample_nearest2d.vec,
          aten.upsample_nearest3d.vec, policy=Policy.CHANNELS_LAST, supports=_resize_supports,
          dynamic=_resize_dynamic)
def aten_upsample_nearest2d_vec(ctx, input, output_size, scale_factors):
    """upsample_nearest2d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor

    torch nearest picks floor(i*in/out) (floor(i/scale) with a scale_factor); TF nearest
    uses half-pixel centres, so 4->3 differs (pitfall 12): torch's own index table.
    """
    return emit_resize(ctx, input, _NEAREST, _vec_scales(scale_factors, _nd(ctx)), nearest=True)


@register(aten.upsample_nearest1d.default, aten.upsample_nearest2d.default,
          aten.upsample_nearest3d.default, policy=Policy.CHANNELS_LAST,
          supports=_resize_supports,
          dynamic=_resize_dynamic)
def aten_upsample_nearest2d_default(ctx, self, output_size, scales=None, scales_d=None,
                                    scales_h=None, scales_w=None):
    """upsample_nearest2d(Tensor self, SymInt[2] output_size, float? scales_h=None, float? scales_w=None) -> Tensor"""
    n = _nd(ctx)
    return emit_resize(ctx, self, _NEAREST, _default_scales(n, scales, scales_d, scales_h,
                                                            scales_w), nearest=True)


@register(aten._upsample_nearest_exact1d.vec, aten._upsample_nearest_exact2d.vec,
          aten._upsample_nearest_exact3d.vec, policy=Policy.CHANNELS_LAST,
          supports=_resize_supports,
          dynamic=_resize_dynamic)
def aten_upsample_nearest_exact2d_vec(ctx, input, output_size, scale_factors):
    """_upsample_nearest_exact2d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor

    'nearest-exact' picks floor((i + 0.5) * in/out): torch's own index table.
    """
    return emit_resize(ctx, input, _NEAREST_EXACT, _vec_scales(scale_factors, _nd(ctx)),
                       nearest=True)


@register(aten._upsample_nearest_exact1d.default, aten._upsample_nearest_exact2d.default,
          aten._upsample_nearest_exact3d.default, policy=Policy.CHANNELS_LAST,
          supports=_resize_supports,
          dynamic=_resize_dynamic)
def aten_upsample_nearest_exact2d_default(ctx, self, output_size, scales=None, scales_d=None,
                                          scales_h=None, scales_w=None):
    """_upsample_nearest_exact2d(Tensor self, SymInt[2] output_size, float? scales_h=None, float? scales_w=None) -> Tensor"""
    n = _nd(ctx)
    return emit_resize(ctx, self, _NEAREST_EXACT,
                       _default_scales(n, scales, scales_d, scales_h, scales_w), nearest=True)


_INTERPOLATING_VEC = {
    aten.upsample_linear1d.vec: _LINEAR, aten.upsample_bilinear2d.vec: _LINEAR,
    aten.upsample_trilinear3d.vec: _LINEAR, aten.upsample_bicubic2d.vec: _BICUBIC,
    aten._upsample_bilinear2d_aa.vec: _BILINEAR_AA,
    aten._upsample_bicubic2d_aa.vec: _BICUBIC_AA,
}
_INTERPOLATING_DEFAULT = {
    aten.upsample_linear1d.default: _LINEAR, aten.upsample_bilinear2d.default: _LINEAR,
    aten.upsample_trilinear3d.default: _LINEAR, aten.upsample_bicubic2d.default: _BICUBIC,
    aten._upsample_bilinear2d_aa.default: _BILINEAR_AA,
    aten._upsample_bicubic2d_aa.default: _BICUBIC_AA,
}


@register(*_INTERPOLATING_VEC, policy=Policy.CHANNELS_LAST, supports=_resize_supports,
          dynamic=_resize_dynamic)
def aten_upsample_bilinear2d_vec(ctx, input, output_size, align_corners, scale_factors):
    """upsample_bilinear2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor

    Also linear1d, trilinear3d, bicubic2d and the antialiased variants. align_corners=True
    maps corners to corners (TF's half-pixel bilinear only matches False); bicubic uses
    torch's A=-0.75 with clamped taps; antialias widens the filter when downsampling.
    """
    table = _INTERPOLATING_VEC[ctx.node.target]
    return emit_resize(ctx, input, table, _vec_scales(scale_factors, _nd(ctx)), align_corners)


@register(*_INTERPOLATING_DEFAULT, policy=Policy.CHANNELS_LAST, supports=_resize_supports,
          dynamic=_resize_dynamic)
def aten_upsample_bilinear2d_default(ctx, self, output_size, align_corners, scales=None,
                                     scales_d=None, scales_h=None, scales_w=None):
    """upsample_bilinear2d(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor"""
    n = _nd(ctx)
    table = _INTERPOLATING_DEFAULT[ctx.node.target]
    return emit_resize(ctx, self, table, _default_scales(n, scales, scales_d, scales_h,
                                                         scales_w), align_corners)
