"""What a converter sees of the conversion: names, shapes, layouts, constants."""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.capture import describe, module_path
from crossport.errors import UnsupportedOpError
from crossport.layout import Layout, canonical
from crossport.to_keras.values import TensorValue, Transposes, concrete


class LayerNames:
    """Unique Keras layer names derived from torch module paths (``layer1.0.conv1``)."""

    def __init__(self):
        self._used: set[str] = set()

    def reserve(self, name: str) -> None:
        """Keep ``name`` (a model input's) from every layer: Keras needs them distinct."""
        self._used.add(name)

    def unique(self, base: str) -> str:
        name, k = base, 1
        while name in self._used:
            name = f"{base}_{k}"
            k += 1
        self._used.add(name)
        return name


class NodeContext:
    """Passed as ``ctx`` to the converter of one fx node."""

    def __init__(self, node: torch.fx.Node, names: LayerNames, transposes: Transposes,
                 constants: dict, sizes=None):
        self.node = node
        self.sizes = sizes  # RuntimeSizes: dynamic dims as Keras scalars
        self._names = names
        self._transposes = transposes
        self._constants = constants
        self.out_layout: Layout | tuple | None = None  # CUSTOM converters set this

    # -- naming ---------------------------------------------------------------------------
    def name(self, suffix: str | None = None) -> str:
        """A unique layer name: the torch module path, else the op name, plus ``suffix``.

        Leading underscores of an op name are dropped: TF takes a layer name as the scope
        of its weights, and a scope cannot start with one (``_embedding_bag/embeddings``
        failed the SavedModel/TFLite export)."""
        base = module_path(self.node) or self.op_name.lstrip("_")
        if suffix:
            base = f"{base}.{suffix}"
        return self._names.unique(base)

    @property
    def op_name(self) -> str:
        target = self.node.target
        return getattr(target, "__name__", str(target)).split(".")[0]

    # -- shapes ---------------------------------------------------------------------------
    @property
    def out_shape(self) -> tuple[int, ...]:
        """Torch-order static shape of the (first) output (dynamic dims at example size)."""
        val = self.node.meta["val"]
        if isinstance(val, (tuple, list)):
            val = val[0]
        return tuple(concrete(d) for d in val.shape)

    @property
    def out_dtype(self) -> torch.dtype:
        val = self.node.meta["val"]
        return (val[0] if isinstance(val, (tuple, list)) else val).dtype

    def arg_shape(self, index: int = 0) -> tuple[int, ...]:
        """Torch-order static shape of the node's ``index``-th positional tensor argument."""
        arg = self.node.args[index]
        return tuple(concrete(d) for d in arg.meta["val"].shape)

    # -- run-time sizes (dynamic dims) -----------------------------------------------------
    def size(self, dim):
        """An int for a static torch size, else its Keras int32 scalar at run time."""
        return self.sizes.value(dim) if self.sizes is not None else concrete(dim)

    def is_dynamic(self, dim) -> bool:
        return self.sizes is not None and self.sizes.is_dynamic(dim)

    def reshape(self, x, sizes):
        """``reshape(x, sizes)`` (Keras order; SymInts allowed): -1 for one dynamic size,
        a ``DynamicReshape`` fed with run-time sizes for several."""
        dynamic = [self.is_dynamic(d) for d in sizes]
        if sum(dynamic) <= 1:
            return keras.ops.reshape(x, [-1 if dyn else int(concrete(d))
                                         for d, dyn in zip(sizes, dynamic)])
        from crossport.layers.dynamic import DynamicReshape

        target = [None if dyn else int(concrete(d)) for d, dyn in zip(sizes, dynamic)]
        scalars = [self.size(d) for d, dyn in zip(sizes, dynamic) if dyn]
        return DynamicReshape(target, name=self.name("reshape"))(x, *scalars)

    # -- layouts and constants -------------------------------------------------------------
    def to_layout(self, value: TensorValue, layout: Layout):
        """``value``'s Keras tensor in ``layout`` (counts a transpose when one is needed)."""
        return self._transposes.to_layout(value, layout)

    def canonical(self, value: TensorValue):
        return self.to_layout(value, canonical(value.rank))

    def plain(self, value: TensorValue) -> TensorValue:
        """``value`` in a plain permutation layout, for ops that see the feature order: a
        flat-permuted ``[N, F]`` (``flatten(1)`` of an NHWC block) is put in torch order
        (one transpose), any other value is returned as it is."""
        if value.layout.flat is None:
            return value
        return TensorValue(self.canonical(value), canonical(value.rank), value.shape,
                           value.dtype)

    def constant(self, array: np.ndarray, suffix: str = "const"):
        """A Keras tensor holding ``array`` (a weight of a ``crossport.layers.Constant``)."""
        from crossport.layers import Constant

        # Keyed by identity so a parameter used twice is stored once; the array is kept in
        # the entry so its id cannot be reused by another array while the cache lives.
        key = id(array)
        if key not in self._constants:
            anchor = self._constants["__anchor__"]
            tensor = Constant(np.asarray(array), name=self.name(suffix))(anchor)
            self._constants[key] = (array, tensor)
        return self._constants[key][1]

    # -- errors ---------------------------------------------------------------------------
    def unsupported(self, reason: str) -> UnsupportedOpError:
        """An error for the user naming this op, its module path and source line."""
        return UnsupportedOpError(f"{self.node.target} {describe(self.node)}: {reason}")
