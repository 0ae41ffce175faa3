"""Torch-exact adaptive max/average pooling (pitfall 11: ``AdaptiveAvgPool2d(1)`` keeps its
dims, Keras' ``GlobalAveragePooling2D`` drops them).

Windows follow torch's rule ``[floor(i*size/out), ceil((i+1)*size/out))``: as constant window
matrices for static sizes, computed from the run-time shape for dynamic ones. Split from
``pooling.py`` (fixed-window pools) by family.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from crossport.errors import InputError
from crossport.layers.base import (
    SpatialLayer,
    contract_axis,
    dynamic_shape,
)


def adaptive_windows(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """Torch's adaptive windows ``[floor(i*size/out), ceil((i+1)*size/out))``."""
    i = np.arange(out)
    return (i * size) // out, ((i + 1) * size + out - 1) // out


def adaptive_membership(x: Any, axis: int, out: int) -> tuple[Any, Any]:
    """For a run-time length of ``axis``: ``mask[size, out]`` (position in window) and counts.

    The same window rule as :func:`adaptive_windows`, computed from the tensor's shape so a
    dynamic spatial dim keeps torch's windows at every size.
    """
    size = ops.shape(x)[axis]
    position = ops.expand_dims(ops.arange(size, dtype="int32"), 1)
    window = ops.expand_dims(ops.arange(out, dtype="int32"), 0)
    start = (window * size) // out
    end = ((window + 1) * size + out - 1) // out
    mask = ops.logical_and(position >= start, position < end)
    return mask, end - start


def contract_dynamic_axis(x: Any, matrix: Any, axis: int) -> Any:
    """:func:`contract_axis` for a run-time ``matrix[size, out]`` and any dynamic sizes."""
    shape = dynamic_shape(x)
    outer, inner = shape[:axis], shape[axis + 1 :]

    def prod(parts):
        return ops.prod(ops.stack([ops.cast(p, "int32") for p in parts])) if parts else 1

    flat = ops.reshape(x, ops.stack([prod(outer), ops.cast(shape[axis], "int32"), prod(inner)]))
    y = ops.matmul(ops.transpose(ops.cast(matrix, x.dtype)), flat)
    return ops.reshape(y, ops.stack([ops.cast(s, "int32") for s in
                                     [*outer, matrix.shape[1], *inner]]))


class _AdaptivePoolNd(SpatialLayer):
    reduce_name = ""

    def __init__(
        self, output_size: int | None | Sequence[int | None], data_format: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(data_format=data_format, **kwargs)
        n = self.n_spatial
        if output_size is None or isinstance(output_size, int):
            sizes = (output_size,) * n
        else:
            sizes = tuple(output_size)
            if len(sizes) == 1:
                sizes = sizes * n
        if len(sizes) != n or any(s is not None and int(s) < 1 for s in sizes):
            raise InputError(
                f"{type(self).__name__}: output_size must be a positive int, None, or a "
                f"sequence of {n} of those; got {output_size!r}."
            )
        self.output_size = tuple(None if s is None else int(s) for s in sizes)

    def _reduce(self, x: Any, axis: Any) -> Any:
        raise NotImplementedError

    def _pool(self, x: Any, window: Sequence[int]) -> Any:
        raise NotImplementedError

    def _axis(self, x: Any, axis: int, size: int, out: int) -> Any:
        raise NotImplementedError

    def _dynamic_axis(self, x: Any, axis: int, out: int) -> Any:
        raise NotImplementedError

    def forward_channels_last(self, x: Any, training: bool | None = None) -> Any:
        spatial = tuple(range(1, self.n_spatial + 1))
        if all(o == 1 for o in self.output_size):  # global pool, spatial dims kept as 1
            return self._reduce(x, spatial, keepdims=True)
        sizes = list(x.shape[1:-1])
        targets = [size if o is None else o for size, o in zip(sizes, self.output_size)]
        todo = [i for i, (size, o) in enumerate(zip(sizes, targets)) if size != o]
        if any(sizes[i] is None for i in todo):  # windows from the run-time sizes
            for i in todo:
                x = self._dynamic_axis(x, i + 1, targets[i])
            return x
        if all(sizes[i] % targets[i] == 0 for i in todo):  # fixed windows
            window = [size // o for size, o in zip(sizes, targets)]
            return self._pool(x, window)
        for i in todo:  # separable: a box max/mean is the max/mean over each axis in turn
            x = self._axis(x, i + 1, sizes[i], targets[i])
        return x

    def get_config(self) -> dict:
        config = super().get_config()
        config["output_size"] = list(self.output_size)
        return config

    @classmethod
    def from_torch(cls, module: Any, data_format: str | None = None) -> _AdaptivePoolNd:
        """The layer computing what ``module`` (an ``nn.Adaptive*Pool{n}d``) computes."""
        if getattr(module, "return_indices", False):
            raise InputError(f"{cls.__name__}: return_indices=True is not supported.")
        return cls(module.output_size, data_format=data_format)


class _AdaptiveAvgPoolNd(_AdaptivePoolNd):
    def _reduce(self, x: Any, axis: Any, keepdims: bool = False) -> Any:
        return ops.mean(x, axis=axis, keepdims=keepdims)

    def _pool(self, x: Any, window: Sequence[int]) -> Any:
        return ops.average_pool(x, window, window, padding="valid")

    def _dynamic_axis(self, x: Any, axis: int, out: int) -> Any:
        mask, counts = adaptive_membership(x, axis, out)
        matrix = ops.cast(mask, x.dtype) / ops.cast(counts, x.dtype)
        return contract_dynamic_axis(x, matrix, axis)

    def _axis(self, x: Any, axis: int, size: int, out: int) -> Any:
        start, end = adaptive_windows(size, out)
        matrix = np.zeros((size, out), np.float32)
        for i, (a, b) in enumerate(zip(start, end)):
            matrix[a:b, i] = 1.0 / (b - a)
        return contract_axis(x, matrix, axis)


class _AdaptiveMaxPoolNd(_AdaptivePoolNd):
    def __init__(
        self, output_size: int | None | Sequence[int | None], data_format: str | None = None,
        *, return_indices: bool = False, **kwargs: Any,
    ):
        if return_indices:
            raise InputError(f"{type(self).__name__}: return_indices=True is not supported.")
        super().__init__(output_size, data_format=data_format, **kwargs)

    def _reduce(self, x: Any, axis: Any, keepdims: bool = False) -> Any:
        return ops.max(x, axis=axis, keepdims=keepdims)

    def _pool(self, x: Any, window: Sequence[int]) -> Any:
        return ops.max_pool(x, window, window, padding="valid")

    def _dynamic_axis(self, x: Any, axis: int, out: int) -> Any:
        # Every window as a masked copy of the axis: a max over positions outside it sees -inf.
        mask, _counts = adaptive_membership(x, axis, out)
        rank = len(x.shape)
        mask = ops.reshape(mask, [1] * axis + [-1, out] + [1] * (rank - axis - 1))
        expanded = ops.expand_dims(x, axis + 1)
        lowest = ops.full_like(expanded, float("-inf"))
        return ops.max(ops.where(mask, expanded, lowest), axis=axis)

    def _axis(self, x: Any, axis: int, size: int, out: int) -> Any:
        # Gather every window padded to the widest one by repeating its last index (which
        # leaves the max unchanged), then reduce the window axis.
        start, end = adaptive_windows(size, out)
        width = int((end - start).max())
        index = np.minimum(start[:, None] + np.arange(width)[None, :], end[:, None] - 1)
        y = ops.take(x, ops.convert_to_tensor(index.reshape(-1).astype(np.int32)), axis=axis)
        shape = dynamic_shape(y)
        y = ops.reshape(y, [*shape[:axis], out, width, *shape[axis + 1 :]])
        return ops.max(y, axis=axis + 1)


_ADAPTIVE_EXAMPLE = """
    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size={shape}).astype("float32")  # channels-last
        >>> {name}({arg})(x).shape
        TensorShape({out})
"""


@keras.saving.register_keras_serializable(package="crossport")
class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    n_spatial = 1
    __doc__ = "``torch.nn.AdaptiveAvgPool1d``: windows ``[floor(i*L/k), ceil((i+1)*L/k))``.\n" + (
        _ADAPTIVE_EXAMPLE.format(shape=(2, 10, 3), name="AdaptiveAvgPool1d", arg=4, out=[2, 4, 3])
    )


@keras.saving.register_keras_serializable(package="crossport")
class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    n_spatial = 2
    __doc__ = (
        "``torch.nn.AdaptiveAvgPool2d``; ``output_size`` entries may be None (keep that dim).\n"
        "``AdaptiveAvgPool2d(1)`` keeps the ``1x1`` spatial dims, like torch.\n"
        + _ADAPTIVE_EXAMPLE.format(
            shape=(2, 7, 9, 3), name="AdaptiveAvgPool2d", arg="(3, None)", out=[2, 3, 9, 3]
        )
    )


@keras.saving.register_keras_serializable(package="crossport")
class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    n_spatial = 3
    __doc__ = "``torch.nn.AdaptiveAvgPool3d``.\n" + _ADAPTIVE_EXAMPLE.format(
        shape=(1, 5, 6, 7, 2), name="AdaptiveAvgPool3d", arg=2, out=[1, 2, 2, 2, 2]
    )


@keras.saving.register_keras_serializable(package="crossport")
class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    n_spatial = 1
    __doc__ = "``torch.nn.AdaptiveMaxPool1d`` (``return_indices`` must be False).\n" + (
        _ADAPTIVE_EXAMPLE.format(shape=(2, 10, 3), name="AdaptiveMaxPool1d", arg=4, out=[2, 4, 3])
    )


@keras.saving.register_keras_serializable(package="crossport")
class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    n_spatial = 2
    __doc__ = "``torch.nn.AdaptiveMaxPool2d`` (``return_indices`` must be False).\n" + (
        _ADAPTIVE_EXAMPLE.format(
            shape=(2, 7, 9, 3), name="AdaptiveMaxPool2d", arg="(3, 4)", out=[2, 3, 4, 3]
        )
    )


@keras.saving.register_keras_serializable(package="crossport")
class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    n_spatial = 3
    __doc__ = "``torch.nn.AdaptiveMaxPool3d`` (``return_indices`` must be False).\n" + (
        _ADAPTIVE_EXAMPLE.format(
            shape=(1, 5, 6, 7, 2), name="AdaptiveMaxPool3d", arg=2, out=[1, 2, 2, 2, 2]
        )
    )
