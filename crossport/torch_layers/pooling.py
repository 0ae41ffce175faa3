"""Keras/TF pooling as torch modules (pitfalls 4, 11).

``SAME`` pads TF's asymmetric way; max pooling pads with ``-inf`` and average pooling divides
by the number of **valid** elements in each window (torch's default ``count_include_pad=True``
divides by the full window, and torch's symmetric ``padding`` cannot be asymmetric anyway).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from crossport.errors import InputError
from crossport.torch_layers.padding import same_paddings

__all__ = [
    "TFAvgPool1d",
    "TFAvgPool2d",
    "TFAvgPool3d",
    "TFMaxPool1d",
    "TFMaxPool2d",
    "TFMaxPool3d",
]

_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _tuple(value: int | Sequence[int], rank: int) -> tuple[int, ...]:
    out = (int(value),) * rank if isinstance(value, int) else tuple(int(v) for v in value)
    if len(out) != rank:
        raise InputError(f"expected {rank} values, got {value!r}")
    return out


def _empty_valid_pool(x: torch.Tensor, k: tuple, s: tuple) -> torch.Tensor:
    """TF's VALID pool of an axis shorter than its window: an empty result (torch raises)."""
    sizes = [max(0, (n - w) // st + 1) for n, w, st in zip(x.shape[2:], k, s)]
    return x.new_empty((*x.shape[:2], *sizes))


class _TFPoolNd(nn.Module):
    _rank = 2
    _max = True

    def __init__(
        self,
        pool_size: int | Sequence[int] = 2,
        strides: int | Sequence[int] | None = None,
        padding: str = "valid",
    ) -> None:
        super().__init__()
        self.pool_size = _tuple(pool_size, self._rank)
        self.strides = (
            self.pool_size if strides is None else _tuple(strides, self._rank)
        )  # Keras default
        self.padding = padding.lower()
        if self.padding not in ("valid", "same"):
            raise InputError(f"padding must be 'valid' or 'same', got {padding!r}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, s = self.pool_size, self.strides
        if self.padding == "valid":
            if not torch.compiler.is_compiling() and any(
                    n < w for n, w in zip(x.shape[2:], k)):
                return _empty_valid_pool(x, k, s)
            pool = _MAX[self._rank] if self._max else _AVG[self._rank]
            return pool(x, k, s)
        pads = same_paddings(x.shape[2:], k, s, (1,) * self._rank)
        if self._max:
            return _MAX[self._rank](F.pad(x, pads, value=-torch.inf), k, s)
        # Mean of the valid elements only: window sum / number of real elements in it.
        total = _AVG[self._rank](F.pad(x, pads), k, s)
        ones = torch.ones((1, 1, *x.shape[2:]), dtype=x.dtype, device=x.device)
        count = _AVG[self._rank](F.pad(ones, pads), k, s)
        return total / count

    @classmethod
    def from_keras(cls, layer):
        """Build from ``keras.layers.{Max,Average}Pooling{1,2,3}D`` (any data_format)."""
        cfg = layer.get_config()
        return cls(cfg["pool_size"], cfg["strides"], cfg["padding"])

    def extra_repr(self) -> str:
        return f"pool_size={self.pool_size}, strides={self.strides}, padding={self.padding!r}"


class TFMaxPool1d(_TFPoolNd):
    """``keras.layers.MaxPooling1D`` on ``[N, C, L]`` (``strides`` defaults to ``pool_size``).

    Example:
        >>> import torch
        >>> TFMaxPool1d(2, padding="same")(torch.randn(1, 2, 5)).shape
        torch.Size([1, 2, 3])
    """

    _rank, _max = 1, True


class TFMaxPool2d(_TFPoolNd):
    """``keras.layers.MaxPooling2D`` on NCHW; ``same`` pads ``-inf`` TF's asymmetric way.

    Args:
        pool_size: window size.
        strides: stride; ``None`` means ``pool_size`` (Keras default).
        padding: ``"valid"`` or ``"same"``.

    Example:
        >>> import torch
        >>> TFMaxPool2d(3, 2, padding="same")(torch.randn(1, 2, 6, 6)).shape
        torch.Size([1, 2, 3, 3])
    """

    _rank, _max = 2, True


class TFMaxPool3d(_TFPoolNd):
    """``keras.layers.MaxPooling3D`` on NCDHW (see :class:`TFMaxPool2d`).

    Example:
        >>> import torch
        >>> TFMaxPool3d(2)(torch.randn(1, 2, 4, 4, 4)).shape
        torch.Size([1, 2, 2, 2, 2])
    """

    _rank, _max = 3, True


class TFAvgPool1d(_TFPoolNd):
    """``keras.layers.AveragePooling1D`` on ``[N, C, L]`` (see :class:`TFAvgPool2d`).

    Example:
        >>> import torch
        >>> TFAvgPool1d(3, 1, padding="same")(torch.ones(1, 1, 4)).flatten().tolist()
        [1.0, 1.0, 1.0, 1.0]
    """

    _rank, _max = 1, False


class TFAvgPool2d(_TFPoolNd):
    """``keras.layers.AveragePooling2D`` on NCHW; ``same`` averages only the real elements.

    Equivalent torch for symmetric cases is ``AvgPool2d(count_include_pad=False)``, but TF's
    padding can be asymmetric, so this module pads explicitly and divides by the valid count.

    Args:
        pool_size: window size.
        strides: stride; ``None`` means ``pool_size``.
        padding: ``"valid"`` or ``"same"``.

    Example:
        >>> import torch
        >>> TFAvgPool2d(3, 1, padding="same")(torch.ones(1, 1, 4, 4)).unique().tolist()
        [1.0]
    """

    _rank, _max = 2, False


class TFAvgPool3d(_TFPoolNd):
    """``keras.layers.AveragePooling3D`` on NCDHW (see :class:`TFAvgPool2d`).

    Example:
        >>> import torch
        >>> TFAvgPool3d(2, padding="same")(torch.randn(1, 2, 3, 3, 3)).shape
        torch.Size([1, 2, 2, 2, 2])
    """

    _rank, _max = 3, False
