"""What the emitter holds for each fx node, and how a value moves between layouts."""

from __future__ import annotations

from dataclasses import dataclass

import keras
import numpy as np
import torch

from crossport.layout import FlatOrder, Layout, canonical, transpose_between
from crossport.weights import flat_feature_order

_TORCH_TO_KERAS_DTYPE = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
    torch.int64: "int64", torch.int32: "int32", torch.int8: "int8", torch.bool: "bool",
    torch.uint8: "uint8", torch.int16: "int16",
}


def unsupported_dtype(dtype) -> str | None:
    """Why a tensor of ``dtype`` cannot be converted, or None."""
    if not isinstance(dtype, torch.dtype) or dtype in _TORCH_TO_KERAS_DTYPE:
        return None
    if dtype in (torch.complex64, torch.complex128):
        return (f"{dtype} tensors reach an op without a complex converter (complex values "
                "are held as real/imag pairs: FFTs, view_as_real/view_as_complex, .real, "
                ".imag, abs, angle, conj, add/sub/mul and shape ops take them)")
    if dtype == torch.bfloat16:
        return ("bfloat16 tensors: TF rounds bfloat16 intermediates differently from torch, "
                "so parity cannot be proven; convert the module in float32 (module.float()) "
                "and use reduced precision at export (format tflite-fp16)")
    return (f"{dtype} tensors (supported: "
            f"{', '.join(str(d).removeprefix('torch.') for d in _TORCH_TO_KERAS_DTYPE)})")


def keras_dtype(dtype: torch.dtype) -> str:
    """The Keras dtype name of a torch dtype."""
    return _TORCH_TO_KERAS_DTYPE[dtype]


def concrete(dim) -> int:
    """An int for a (possibly symbolic) torch dim: the example's size for a SymInt."""
    if isinstance(dim, int):
        return dim
    return int(dim.node.hint)


def is_symbolic(dim) -> bool:
    return not isinstance(dim, int)


@dataclass
class TensorValue:
    """A Keras tensor standing for a torch tensor of ``shape`` (torch order) in ``layout``."""

    tensor: object  # KerasTensor
    layout: Layout
    shape: tuple  # torch-order sizes; SymInts for dynamic dims
    dtype: torch.dtype

    @property
    def rank(self) -> int:
        return len(self.shape)

    def static_shape(self) -> tuple[int, ...]:
        return tuple(concrete(d) for d in self.shape)

    def keras_shape_for_reshape(self, torch_shape) -> list[int]:
        """Sizes for ``keras.ops.reshape``: -1 stands for the one dynamic dim."""
        sizes = [-1 if is_symbolic(d) else int(d) for d in torch_shape]
        if sizes.count(-1) > 1:
            raise NotImplementedError("reshape with more than one dynamic dim")
        return sizes


@dataclass
class ComplexValue:
    """A complex torch tensor as two real ``TensorValue``s in the same layout.

    Keras has no complex tensors in a functional model (its FFT ops take and return
    ``(real, imag)`` pairs), so the emitter holds the parts. Only converters registered
    with ``register_complex`` receive one; any other consumer is refused before building.
    """

    real: TensorValue
    imag: TensorValue

    @property
    def layout(self) -> Layout:
        return self.real.layout

    @property
    def shape(self) -> tuple:
        return self.real.shape

    @property
    def rank(self) -> int:
        return self.real.rank

    @property
    def dtype(self) -> torch.dtype:
        """The torch complex dtype (complex64 for float32 parts)."""
        return torch.complex128 if self.real.dtype == torch.float64 else torch.complex64


@dataclass
class ComplexParts:
    """The real and imaginary parts of a complex value as a converter gets or returns them
    (Keras tensors or numpy arrays, already laid out); not a tuple, which would read as
    several outputs."""

    real: object
    imag: object


def complex_parts(array: np.ndarray) -> ComplexParts:
    """A complex numpy constant (a folded ``view_as_complex`` of a parameter) as its parts."""
    return ComplexParts(np.ascontiguousarray(array.real), np.ascontiguousarray(array.imag))


class Transposes:
    """Counts and names the transposes the emitter has to insert (layout changes)."""

    def __init__(self, name_fn):
        self.count = 0
        self._name = name_fn

    def to_layout(self, value: TensorValue, target: Layout) -> object:
        """The Keras tensor of ``value`` laid out as ``target``."""
        src = value.layout
        if src == target:
            return value.tensor
        x = value.tensor
        if src.flat is not None:  # [N, F] features in block order -> canonical [N, F]
            x = self._unflatten(value, src.flat)
            src = canonical(value.rank)
        if target.flat is not None:
            raise ValueError("no converter asks for a flat-permuted layout")
        axes = transpose_between(src, target)
        if axes == tuple(range(len(axes))):
            return x
        if _moves_only_unit_dims(value.static_shape(), src, target) and not _dyn_moved(value, src, axes):
            sizes = [value.shape[d] for d in target.perm]
            return keras.ops.reshape(x, value.keras_shape_for_reshape(sizes))
        self.count += 1
        return keras.ops.transpose(x, axes)

    def _unflatten(self, value: TensorValue, flat: FlatOrder):
        block = tuple(flat.block_shape[p] for p in flat.block_perm)
        lead = [-1 if is_symbolic(d) else int(d) for d in value.shape[:-1]]
        x = keras.ops.reshape(value.tensor, [*lead, *block])
        inverse = tuple(int(i) for i in np.argsort(flat.block_perm))
        n = len(lead)
        self.count += 1
        x = keras.ops.transpose(x, (*range(n), *(n + i for i in inverse)))
        return keras.ops.reshape(x, [*lead, int(np.prod(flat.block_shape))])


def _moves_only_unit_dims(shape, src: Layout, dst: Layout) -> bool:
    non_unit_src = [d for d in src.perm if shape[d] != 1]
    non_unit_dst = [d for d in dst.perm if shape[d] != 1]
    return non_unit_src == non_unit_dst


def _dyn_moved(value: TensorValue, src: Layout, axes) -> bool:
    """A reshape needs at most one dynamic dim; a transpose is safe with any."""
    return sum(is_symbolic(d) for d in value.shape) > 1


def constant_in_layout(array: np.ndarray, layout: Layout, rank: int) -> np.ndarray:
    """A broadcastable constant, padded to ``rank`` like torch broadcasting, then laid out."""
    if array.ndim == 0:
        return array
    if layout.flat is not None:
        if array.ndim >= 1 and array.shape[-1] > 1:
            order = flat_feature_order(layout.flat.block_shape, layout.flat.block_perm)
            array = array[..., order]
        return array
    expanded = array.reshape((1,) * (rank - array.ndim) + array.shape)
    return np.ascontiguousarray(np.transpose(expanded, layout.perm))
