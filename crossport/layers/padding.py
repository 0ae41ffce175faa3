"""``Pad``: ``torch.nn.functional.pad`` with its exact argument order and modes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from crossport.errors import InputError
from crossport.layers.base import resolve_perm, slice_axis
from crossport.layout import Layout, physical_pad

PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _index_pad_axis(x: Any, axis: int, before: int, after: int, mode: str) -> Any:
    """Pad (or crop, for negative amounts) one axis by gathering source indices.

    Output element ``i`` of the axis reads input index ``map(i - before)``; a negative
    ``before`` just starts the range later, which is exactly torch's crop.
    """
    size = x.shape[axis]
    if size is None:
        size = ops.shape(x)[axis]
    elif mode == "reflect" and max(before, after) >= size:
        raise InputError(
            f"Pad: reflect padding ({before}, {after}) must be smaller than the dim size {size}."
        )
    elif mode == "circular" and max(before, after) > size:
        raise InputError(
            f"Pad: circular padding ({before}, {after}) must be at most the dim size {size}."
        )
    index = ops.arange(-before, size + after, dtype="int32")
    if mode == "replicate":
        index = ops.clip(index, 0, size - 1)
    elif mode == "circular":
        index = ops.mod(index, size)
    else:  # reflect about the edge elements (not repeating them), one fold as torch allows
        last = size - 1
        index = last - ops.abs(last - ops.abs(index))
    return ops.take(x, index, axis=axis)


def pad_axes(
    x: Any, pads: Sequence[tuple[int, int]], mode: str = "constant", value: float = 0.0
) -> Any:
    """Pad each Keras axis by ``pads[axis] = (before, after)``; negative amounts crop.

    The functional form of :class:`Pad` (already in Keras axis order, like ``np.pad``).
    """
    if mode not in PAD_MODES:
        raise InputError(f"Pad: mode must be one of {PAD_MODES}, got {mode!r}.")
    if mode in ("constant", "circular"):
        # Torch crops first, then pads (circular wraps around the *cropped* tensor), while
        # reflect/replicate index the uncropped one.
        for axis, (before, after) in enumerate(pads):
            if before < 0 or after < 0:
                start = -before if before < 0 else None
                x = slice_axis(x, axis, start, after if after < 0 else None)
        pads = [(max(int(b), 0), max(int(a), 0)) for b, a in pads]
    if mode != "constant":
        for axis, (before, after) in enumerate(pads):
            if before or after:
                x = _index_pad_axis(x, axis, int(before), int(after), mode)
        return x
    if any(b or a for b, a in pads):
        x = ops.pad(x, pads, mode="constant", constant_values=fill_value(value, x.dtype))
    return x


def fill_value(value, dtype) -> Any:
    """The fill value in the tensor's dtype, as torch casts it: an integer tensor's fill
    wraps to its width and a float fill truncates (TF refused a Python float for an integer
    tensor, so ``F.pad`` of an int64 tensor failed to convert); a float64 fill keeps its
    double."""
    # not crossport.to_keras.scalars.bound: layers import no torch (same values where torch
    # accepts the fill)
    return np.asarray(value).astype(keras.backend.standardize_dtype(dtype))[()]


@keras.saving.register_keras_serializable(package="crossport")
class Pad(keras.layers.Layer):
    """``F.pad(x, pad, mode, value)`` on the torch tensor that the Keras tensor holds.

    ``pad`` is always written exactly as for ``F.pad`` on the *torch* tensor: ``(before,
    after)`` pairs starting from the torch tensor's **last** dim. How the Keras tensor holds
    that torch tensor is given by ``perm`` (``keras_tensor = torch_tensor.permute(perm)``) or,
    as a shorthand, ``data_format``: ``"channels_last"`` (the default) for a Keras
    ``N, *spatial, C`` tensor standing for torch ``N, C, *spatial``; ``"channels_first"`` when
    both have the same layout. So ``Pad((1, 2, 3, 4))`` on a Keras NHWC image pads W by (1, 2)
    and H by (3, 4), as ``F.pad`` does on the NCHW image.

    Args:
        pad: ``F.pad``'s pairs, last torch dim first; negative values crop.
        mode: ``"constant"``, ``"reflect"`` (mirror without repeating the edge),
            ``"replicate"`` (repeat the edge) or ``"circular"`` (wrap around).
        value: fill value of ``"constant"`` mode.
        perm: Keras-from-torch dim permutation (wins over ``data_format``).
        data_format: ``"channels_last"`` (default) or ``"channels_first"``; used when
            ``perm`` is None.
        **kwargs: standard Keras layer arguments.

    Example:
        >>> import numpy as np, keras
        >>> x = np.random.default_rng(0).normal(size=(1, 4, 5, 3)).astype("float32")  # NHWC
        >>> Pad((1, 1, 2, 0), mode="reflect")(x).shape  # W += 2, H += 2
        TensorShape([1, 6, 7, 3])
    """

    def __init__(
        self,
        pad: Sequence[int],
        mode: str = "constant",
        value: float | None = 0.0,
        perm: Sequence[int] | None = None,
        data_format: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.pad = tuple(int(p) for p in pad)
        if len(self.pad) % 2:
            raise InputError(f"Pad: pad must have an even length, got {self.pad}.")
        if mode not in PAD_MODES:
            raise InputError(f"Pad: mode must be one of {PAD_MODES}, got {mode!r}.")
        if mode != "constant" and value not in (None, 0, 0.0):
            raise InputError(f"Pad: value={value} is only meaningful in constant mode.")
        self.mode = mode
        # an integer fill stays an integer: a float holds int64 values only up to 2**53
        self.value = 0.0 if value is None else (
            int(value) if isinstance(value, (bool, int)) else float(value))
        self.perm = None if perm is None else tuple(int(p) for p in perm)
        resolve_perm(0, None, data_format)  # validates data_format
        self.data_format = data_format

    def keras_pads(self, rank: int) -> list[tuple[int, int]]:
        """``pad`` as ``(before, after)`` per Keras axis of a rank-``rank`` input."""
        if len(self.pad) // 2 > rank:
            raise InputError(f"Pad: {len(self.pad) // 2} padded dims for a rank-{rank} input.")
        perm = resolve_perm(rank, self.perm, self.data_format)
        return physical_pad(Layout(perm), self.pad)

    def call(self, inputs: Any) -> Any:
        return pad_axes(inputs, self.keras_pads(len(inputs.shape)), self.mode, self.value)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            pad=list(self.pad),
            mode=self.mode,
            value=self.value,
            perm=None if self.perm is None else list(self.perm),
            data_format=self.data_format,
        )
        return config

    @classmethod
    def from_torch(cls, module: Any, data_format: str | None = None) -> Pad:
        """From ``nn.ZeroPad*d`` / ``ConstantPad*d`` / ``ReflectionPad*d`` / ``ReplicationPad*d``
        / ``CircularPad*d``."""
        name = type(module).__name__
        mode = {"Zero": "constant", "Cons": "constant", "Refl": "reflect", "Repl": "replicate",
                "Circ": "circular"}.get(name[:4])
        if mode is None:
            raise InputError(f"Pad.from_torch: {name} is not a torch padding module.")
        value = float(getattr(module, "value", 0.0))
        return cls(tuple(module.padding), mode=mode, value=value, data_format=data_format)
