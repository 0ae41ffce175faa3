"""Pooling (pitfalls.md items 2 and 11).

Plain windows become Keras pooling layers; padding, ceil_mode, count_include_pad,
divisor_override, dilation and uneven adaptive windows, which Keras' layers cannot
express exactly, become the ``crossport.layers`` pooling layers (torch semantics).
"""

from __future__ import annotations

import keras
import torch

from crossport import layers as torch_semantics
from crossport.layers.pooling import adaptive_max_pool_with_indices, max_pool_with_indices
from crossport.to_keras.dynamic_dims import is_dynamic_size
from crossport.to_keras.registry import Policy, bind_arguments, register

aten = torch.ops.aten

_ZERO_PAD = {1: keras.layers.ZeroPadding1D, 2: keras.layers.ZeroPadding2D,
             3: keras.layers.ZeroPadding3D}
_MAX = {1: keras.layers.MaxPooling1D, 2: keras.layers.MaxPooling2D, 3: keras.layers.MaxPooling3D}
_AVG = {1: keras.layers.AveragePooling1D, 2: keras.layers.AveragePooling2D,
        3: keras.layers.AveragePooling3D}
_GLOBAL_AVG = {1: keras.layers.GlobalAveragePooling1D, 2: keras.layers.GlobalAveragePooling2D,
               3: keras.layers.GlobalAveragePooling3D}
_GLOBAL_MAX = {1: keras.layers.GlobalMaxPooling1D, 2: keras.layers.GlobalMaxPooling2D,
               3: keras.layers.GlobalMaxPooling3D}


def _nd(op) -> int:
    return int(str(op).split("pool")[1][0])


def input_reason(node: torch.fx.Node, nd: int, floating: bool = False) -> str | None:
    """Why the input of an ``nd``-D conv/pool node cannot be converted, or ``None``: an
    unbatched input (Keras' layers read dim 0 as the batch: the model failed to build or
    pooled the wrong dims), or for ``floating`` ops an integer input (TF's convolution and
    average-pooling kernels are floating point only: the model failed at run time)."""
    val = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    if val.dim() == nd + 1:
        return (f"unbatched input of shape {tuple(val.shape)} (Keras' {nd}-D layers need a "
                "batch dim: pass x.unsqueeze(0) and squeeze(0) the result)")
    if floating and not val.dtype.is_floating_point:
        return (f"{str(val.dtype).replace('torch.', '')} input (TF computes convolutions and "
                "average pooling in floating point only: cast the input to float)")
    return None


def _pool_supports(floating: bool, also=None):
    def supports(node):
        return input_reason(node, _nd(node.target), floating) or (also(node) if also else None)
    return supports


def _tuple(value, n) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * n
    value = tuple(value)
    return value * n if len(value) == 1 else value


def _window(kernel_size, stride, padding, dilation, n):
    kernel = _tuple(kernel_size, n)
    stride = _tuple(stride, n) if stride not in (None, [], ()) else kernel
    return kernel, stride, _tuple(padding, n), _tuple(dilation, n)


def _exact_without_ceil(in_shape, kernel, stride) -> bool:
    """ceil_mode changes nothing when every window already fits exactly."""
    return all((size - k) % s == 0 for size, k, s in zip(in_shape, kernel, stride))


def _ceil_adds_no_window(ctx, kernel, stride, padding, ceil_mode) -> bool:
    """ceil_mode is off, or every window fits the padded input exactly (static sizes only:
    a dynamic size may leave a partial window)."""
    if not ceil_mode:
        return True
    if any(ctx.is_dynamic(s) for s in ctx.node.args[0].meta["val"].shape[2:]):
        return False
    padded = [s + 2 * p for s, p in zip(ctx.arg_shape(0)[2:], padding)]
    return _exact_without_ceil(padded, kernel, stride)


def _nonnegative(node) -> bool:
    """``node``'s value is >= 0 (or NaN) wherever it is defined: a ReLU or a clamp below at
    0 or more (ReLU6 is ``hardtanh(0, 6)`` in the exported graph)."""
    if not isinstance(node, torch.fx.Node):
        return False
    if node.target in (aten.relu.default, aten.relu_.default):
        return True
    if node.target in (aten.hardtanh.default, aten.hardtanh_.default):
        return bind_arguments(node)["min_val"] >= 0
    if node.target in (aten.clamp.default, aten.clamp_.default):
        low = bind_arguments(node)["min"]
        return isinstance(low, (int, float)) and low >= 0
    return False


@register(aten.max_pool1d.default, aten.max_pool2d.default, aten.max_pool3d.default,
          policy=Policy.CHANNELS_LAST, supports=_pool_supports(False), dynamic=True)
def aten_max_pool2d_default(ctx, self, kernel_size, stride=(), padding=0, dilation=1,
                            ceil_mode=False):
    """max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False)

    torch pads with -inf and ceil_mode adds a last partial window: crossport.layers.MaxPoolNd,
    or zero padding and a Keras pool after a ReLU (ResNet's stem).
    """
    n = _nd(ctx.node.target)
    kernel, stride, padding, dilation = _window(kernel_size, stride, padding, dilation, n)
    keras_pool = (all(d == 1 for d in dilation)
                  and _ceil_adds_no_window(ctx, kernel, stride, padding, ceil_mode))
    if keras_pool and not any(padding):
        return _MAX[n](pool_size=kernel, strides=stride, padding="valid", name=ctx.name())(self)
    if keras_pool and _nonnegative(ctx.node.args[0]):
        # torch's -inf padding can be zeros: every window holds an input element (torch keeps
        # padding <= kernel // 2), all >= 0. One cheap PAD: TF fuses it, int8 calibrates it.
        pads = tuple((p, p) for p in padding)
        x = _ZERO_PAD[n](padding=pads if n > 1 else pads[0], name=ctx.name("pad"))(self)
        return _MAX[n](pool_size=kernel, strides=stride, padding="valid", name=ctx.name())(x)
    layer = getattr(torch_semantics, f"MaxPool{n}d")(
        kernel, stride, padding, dilation, ceil_mode, data_format="channels_last", name=ctx.name())
    return layer(self)


def _indices_read(node: torch.fx.Node) -> bool:
    return any(u.args[1] != 0 for u in node.users)


def _indices_supports(node: torch.fx.Node) -> str | None:
    """The indices are flat positions in the input plane: its spatial sizes must be static."""
    shape = node.args[0].meta["val"].shape
    if _indices_read(node) and any(is_dynamic_size(s) for s in shape[2:]):
        return "max pooling indices of a run-time spatial size"
    return None


@register(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default,
          policy=Policy.CHANNELS_LAST, supports=_pool_supports(False, _indices_supports),
          dynamic=True)
def aten_max_pool2d_with_indices(ctx, self, kernel_size, stride=(), padding=0, dilation=1,
                                 ceil_mode=False):
    """max_pool2d_with_indices(...) -> (Tensor, Tensor): the values, and the indices when
    read (``return_indices=True``, ``MaxUnpool``): torch's flat positions in the input
    plane, first maximum or last NaN (crossport.layers.pooling.max_pool_with_indices)."""
    if not _indices_read(ctx.node):
        return (aten_max_pool2d_default(ctx, self, kernel_size, stride, padding, dilation,
                                        ceil_mode), None)
    n = _nd(ctx.node.target)
    kernel, stride, padding, dilation = _window(kernel_size, stride, padding, dilation, n)
    return max_pool_with_indices(self, kernel, stride, padding, dilation, ceil_mode)


@register(aten.avg_pool1d.default, aten.avg_pool2d.default, aten.avg_pool3d.default,
          policy=Policy.CHANNELS_LAST, supports=_pool_supports(True), dynamic=True)
def aten_avg_pool2d_default(ctx, self, kernel_size, stride=(), padding=0, ceil_mode=False,
                            count_include_pad=True, divisor_override=None):
    """avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None)

    Keras 'same' averages valid elements only; torch counts padding by default
    (count_include_pad): any padding goes to crossport.layers.AvgPoolNd.
    """
    n = _nd(ctx.node.target)
    kernel, stride, padding, _ = _window(kernel_size, stride, padding, 1, n)
    plain = (not any(padding) and divisor_override is None
             and _ceil_adds_no_window(ctx, kernel, stride, padding, ceil_mode))
    if plain:
        return _AVG[n](pool_size=kernel, strides=stride, padding="valid", name=ctx.name())(self)
    layer = getattr(torch_semantics, f"AvgPool{n}d")(
        kernel, stride, padding, ceil_mode, count_include_pad, divisor_override,
        data_format="channels_last", name=ctx.name())
    return layer(self)


def _adaptive_dynamic(node: torch.fx.Node, output_size, **_arguments) -> str | None:
    """Windows are computed for any input size, but the output size is built into the
    layer: one that depends on a run-time size (``interpolate(mode="area",
    scale_factor=3)`` on a dynamic H) would stay the example's."""
    sizes = [output_size] if not isinstance(output_size, (list, tuple)) else output_size
    sizes = [s.meta.get("val") if isinstance(s, torch.fx.Node) else s for s in sizes]
    dims = [d for d, size in enumerate(sizes, start=2) if is_dynamic_size(size)]
    if not dims:
        return None
    where = ", ".join(f"dim {d} ({sizes[d - 2]})" for d in dims)
    return f"adaptive pooling to a run-time output size needs it static: {where}"


def _adaptive(ctx, self, output_size, kind: str):
    n = len(ctx.arg_shape(0)) - 2
    spatial = ctx.arg_shape(0)[2:]
    out = tuple(s if o is None else o for s, o in zip(spatial, _tuple(output_size, n)))
    if all(o == 1 for o in out):  # AdaptiveAvgPool2d(1) keeps [N, C, 1, 1] (pitfall 2)
        table = _GLOBAL_AVG if kind == "Avg" else _GLOBAL_MAX
        return table[n](keepdims=True, name=ctx.name())(self)
    dynamic = any(ctx.is_dynamic(s) for s in ctx.node.args[0].meta["val"].shape[2:])
    if not dynamic and all(s % o == 0 for s, o in zip(spatial, out)):
        window = tuple(s // o for s, o in zip(spatial, out))
        table = _AVG if kind == "Avg" else _MAX
        return table[n](pool_size=window, strides=window, padding="valid", name=ctx.name())(self)
    layer = getattr(torch_semantics, f"Adaptive{kind}Pool{n}d")(
        out, data_format="channels_last", name=ctx.name())
    return layer(self)


@register(aten.adaptive_avg_pool1d.default, aten.adaptive_avg_pool2d.default,
          aten.adaptive_avg_pool3d.default, aten._adaptive_avg_pool2d.default,
          aten._adaptive_avg_pool3d.default, policy=Policy.CHANNELS_LAST,
          supports=_pool_supports(True), dynamic=_adaptive_dynamic)
def aten_adaptive_avg_pool2d_default(ctx, self, output_size):
    """adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor

    Uneven windows [floor(i*H/k), ceil((i+1)*H/k)) need crossport.layers.AdaptiveAvgPoolNd.
    """
    return _adaptive(ctx, self, output_size, "Avg")


@register(aten.adaptive_max_pool1d.default, aten.adaptive_max_pool2d.default,
          aten.adaptive_max_pool3d.default, policy=Policy.CHANNELS_LAST,
          supports=_pool_supports(False, _indices_supports), dynamic=_adaptive_dynamic)
def aten_adaptive_max_pool2d_default(ctx, self, output_size):
    """adaptive_max_pool2d(Tensor self, int[2] output_size) -> (Tensor, Tensor): the values,
    and the indices when read (crossport.layers.pooling.adaptive_max_pool_with_indices)."""
    if not _indices_read(ctx.node):
        return (_adaptive(ctx, self, output_size, "Max"), None)
    n = _nd(ctx.node.target)
    return adaptive_max_pool_with_indices(self, _tuple(output_size, n))
