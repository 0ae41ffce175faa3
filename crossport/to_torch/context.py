"""What a reverse converter works with: held values, submodule registration, layout moves.

A :class:`Held` is one Keras tensor as the torch module holds it: an fx node, its
:class:`~crossport.layout.Layout` (``torch_value == keras_value.permute(perm)``) and the Keras
shape (batch ``None``). Converters create plain torch modules and call them through the
context, which names them after the Keras layer (``ctx.call_module(nn.Conv2d(...), x)``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import keras
import numpy as np
import torch
from torch import nn

from crossport.errors import UnsupportedLayerError
from crossport.layout import FlatOrder, Layout, canonical, physical_axis, transpose_between
from crossport.parity.compare import from_numpy
from crossport.to_torch.trainable import carry_trainable


@dataclass(frozen=True)
class Held:
    node: torch.fx.Node
    layout: Layout
    shape: tuple            # Keras shape, None for unknown sizes

    @property
    def rank(self) -> int:
        return len(self.shape)


class Context:
    """Per-conversion state; converters see the current layer through it."""

    def __init__(self) -> None:
        self.graph = torch.fx.Graph()
        self.root = nn.Module()
        self.layer = None       # the Keras layer being converted
        self.path = ""          # its module path
        self.input_shape: tuple = ()  # Keras shape of the layer's first tensor input
        self.input_dtype: str = ""    # and its Keras dtype
        self.input_dtypes: list[str] = []  # Keras dtypes of all its tensor inputs, in order
        self.tensor_shapes: list[tuple] = []  # and their Keras shapes
        self.output_dtypes: list[str] = []  # Keras dtypes of the layer's outputs
        self.output_shapes: list[tuple] = []  # and their Keras shapes (batch None)
        self.permutes = 0       # permutes inside the model (boundary ones not counted)
        self._modules: dict[tuple[int, str], str] = {}
        self._variants: dict[tuple[int, str], list[str]] = {}  # a shared layer's extra modules
        self._constants: list[str] = []
        self._variables: dict[int, str] = {}  # id(keras.Variable) -> its root attribute
        self.calls: dict[int, list] = {}  # id(Keras layer) -> the graph's KNodes calling it
        self.first_layouts: dict[int, dict[int, Layout]] = {}  # a shared layer's first call
        self.memo: dict = {}      # what a converter keeps across a shared layer's calls
        self.held: dict[int, Held] = {}   # id(KerasTensor) -> Held, as emitted so far
        self.size_nodes: dict[int, tuple] = {}  # id(RunSize) -> (it, its fx node)
        self._float_dtype: torch.fx.Node | None = None

    # -- modules and nodes ----------------------------------------------------------------
    def add_module(self, module: nn.Module, suffix: str = "") -> str:
        """Register ``module`` under the current layer's path (once per shared layer).

        A shared layer's later call reuses the module of its first call, which must then be
        the same function: a module with other parameters (its weights laid out for another
        rank or layout) is refused by name, never applied to a tensor it was not built for;
        a different parameter-free one (a softmax over another held dim, constants laid out
        for another rank) is registered beside it.
        """
        key = (id(self.layer), suffix)
        if key in self._modules:
            for path in [self._modules[key], *self._variants.get(key, [])]:
                if same_module(self.root.get_submodule(path), module):
                    return path
            if any(True for _ in module.parameters()):
                raise UnsupportedLayerError(
                    f"Keras layer {self.path!r} ({type(self.layer).__name__}) is shared by "
                    f"calls its weights cannot serve as one torch module ({type(module).__name__} "
                    "built for one call's rank or layout differs from the first call's); "
                    "use one layer per call (copying the weights), or register a converter "
                    "that handles it", [(self.path, type(self.layer).__name__, "shared call")])
            variants = self._variants.setdefault(key, [])
            path = f"{self._modules[key]}_call{len(variants) + 1}"
            carry_trainable(self.layer, module, suffix)
            self._register(path, module)
            variants.append(path)
            return path
        path = self.path + suffix
        carry_trainable(self.layer, module, suffix)
        self._register(path, module)
        self._modules[key] = path
        return path

    def masked_call(self, layer) -> bool:
        """Whether some call of ``layer`` in the graph is fed a Keras mask (a layer shared by
        a masked and an unmasked tensor needs a module serving both)."""
        return any(node.kwargs.get("mask") is not None for node in self.calls.get(id(layer), ()))

    def registered(self, suffix: str = "") -> nn.Module | None:
        """The module an earlier call of the current (shared) layer registered, or None."""
        path = self._modules.get((id(self.layer), suffix))
        return None if path is None else self.root.get_submodule(path)

    def _register(self, path: str, module: nn.Module) -> None:
        parent = self.root
        *parents, leaf = path.split(".")
        for name in parents:
            if not hasattr(parent, name):
                parent.add_module(name, nn.Module())
            parent = getattr(parent, name)
        parent.add_module(leaf, module)

    def constant(self, array: np.ndarray) -> Held:
        """``array`` as a buffer of the root module (named after the current layer), held
        in Keras order."""
        name = f"{self.path.replace('.', '_')}_constant_{len(self._constants)}"
        self._constants.append(name)
        # (ascontiguousarray makes a 0-d array 1-d: the reshape keeps its rank)
        tensor = from_numpy(np.ascontiguousarray(array).reshape(array.shape))
        self.root.register_buffer(name, tensor)
        return Held(self._tag(self.graph.get_attr(name)), canonical(array.ndim), array.shape)

    def variable(self, variable) -> Held:
        """A Keras variable a traced layer's ``call`` passes to a keras.ops op
        (``ops.take(self.embeddings, ids)``) as a parameter of the root module (a buffer if
        not trainable), held in Keras order; one per variable however often it is read."""
        name = self._variables.get(id(variable))
        array = np.asarray(keras.ops.convert_to_numpy(variable))
        if name is None:
            name = re.sub(r"\W", "_", variable.path)
            while hasattr(self.root, name):
                name += "_"
            tensor = from_numpy(np.ascontiguousarray(array).reshape(array.shape))
            if variable.trainable and tensor.is_floating_point():
                self.root.register_parameter(name, nn.Parameter(tensor))
            else:
                self.root.register_buffer(name, tensor)
            self._variables[id(variable)] = name
        return Held(self._tag(self.graph.get_attr(name)), canonical(array.ndim), array.shape)

    def as_module_float(self, node: torch.fx.Node) -> torch.fx.Node:
        """``node`` cast to float32, Keras' compute dtype, or to the module's float dtype once
        the user moves it (``.double()``, ``.half()``): the dtype of the root's empty
        non-persistent buffer ``float_dtype``, which ``Module.to`` converts with the weights.
        """
        if self._float_dtype is None:
            self.root.register_buffer("float_dtype", torch.empty(0), persistent=False)
            self._float_dtype = self.graph.call_function(
                getattr, (self.graph.get_attr("float_dtype"), "dtype"))
        return self.call_method("to", node, self._float_dtype)

    @property
    def float_dtype_used(self) -> bool:
        return self._float_dtype is not None

    def call_module(self, module: nn.Module, *args, suffix: str = "", **kwargs) -> torch.fx.Node:
        target = self.add_module(module, suffix)
        return self._tag(self.graph.call_module(target, args, kwargs))

    def call_function(self, fn, *args, **kwargs) -> torch.fx.Node:
        return self._tag(self.graph.call_function(fn, args, kwargs))

    def call_method(self, name: str, *args, **kwargs) -> torch.fx.Node:
        return self._tag(self.graph.call_method(name, args, kwargs))

    def size_of(self, tensor, axis: int) -> torch.fx.Node:
        """The run-time size of Keras dim ``axis`` of ``tensor`` (emitted already):
        ``x.size(d)`` at the held axis."""
        value = self.plain(self.held[id(tensor)])
        return self.call_method("size", value.node, physical_axis(value.layout, axis))

    def size(self, value):
        """``value`` (an int, a RunSize, or tuples / lists / slices of them) in the torch
        graph: RunSizes as the nodes computing them at run time (``sizes.emit_size``)."""
        from crossport.to_torch.sizes import emit_sizes

        return emit_sizes(self, value)

    def output_dtype(self, index: int = 0) -> torch.dtype:
        """The torch dtype of the current layer's Keras output ``index`` (Keras' promotion
        rules differ from torch's: an int32 sum stays int32, a mean of ints is float32)."""
        return getattr(torch, self.output_dtypes[index])

    def _tag(self, node: torch.fx.Node) -> torch.fx.Node:
        node.meta["keras_layer"] = self.path
        return node

    # -- layouts --------------------------------------------------------------------------
    def to_layout(self, value: Held, layout: Layout, boundary: bool = False) -> Held:
        """``value`` held in ``layout`` (a permute only when the layouts differ)."""
        if value.layout == layout:
            return value
        if value.layout.flat is not None:
            value = self._unflatten(value)
            if value.layout == layout:
                return value
        if layout.flat is not None:
            return self._flatten_to(value, layout)
        perm = transpose_between(value.layout, layout)
        if not boundary:
            self.permutes += 1
        node = self.call_method("permute", value.node, *perm)
        return Held(node, layout, value.shape)

    def canonical(self, value: Held, boundary: bool = False) -> Held:
        return self.to_layout(value, canonical(value.rank), boundary)

    def plain(self, value: Held) -> Held:
        """``value`` in a plain permutation layout, for ops that see the feature order: a
        flat-permuted ``[N, F]`` is put back in Keras order, any other value is returned
        as it is."""
        return value if value.layout.flat is None else self.canonical(value)

    def _unflatten(self, value: Held) -> Held:
        """A flat-permuted ``[N, F]`` back to Keras feature order (reshape, permute, flatten)."""
        flat: FlatOrder = value.layout.flat
        held_block = [flat.block_shape[p] for p in flat.block_perm]
        x = self.call_method("reshape", value.node, -1, *held_block)
        back = [0] + [1 + int(i) for i in np.argsort(flat.block_perm)]
        x = self.call_method("permute", x, *back)
        self.permutes += 1
        x = self.call_method("flatten", x, 1)
        return Held(x, canonical(2), value.shape)

    def _flatten_to(self, value: Held, layout: Layout) -> Held:
        """A Keras-order ``[N, F]`` as the flat-permuted ``layout`` (``_unflatten`` reversed):
        a shared Dense whose first call came from a flatten of an NCHW block."""
        flat: FlatOrder = layout.flat
        if value.rank != 2 or value.layout.perm != (0, 1) or value.shape[1] != math.prod(
                flat.block_shape):
            raise ValueError(f"cannot lay out a value of shape {value.shape} as {layout}")
        x = self.call_method("reshape", value.node, -1, *flat.block_shape)
        x = self.call_method("permute", x, 0, *(1 + int(p) for p in flat.block_perm))
        self.permutes += 1
        x = self.call_method("flatten", x, 1)
        return Held(x, layout, value.shape)

    def broadcast_to(self, value: Held, layout: Layout) -> torch.fx.Node:
        """A lower-rank operand of an elementwise op, held to broadcast against ``layout``.

        Keras broadcasts from the right; the held tensor's axes are permuted, so the operand
        is given the full rank (leading 1s) and then permuted like its partner.
        """
        missing = layout.rank - value.rank
        value = self.canonical(value)
        node = value.node
        for _ in range(missing):  # (a reshape could infer one unknown size, not two)
            node = self.call_method("unsqueeze", node, 0)
        perm = layout.perm
        if perm != tuple(range(len(perm))):
            node = self.call_method("permute", node, *perm)
        return node


def same_module(a: nn.Module, b: nn.Module) -> bool:
    """Whether two modules compute the same function: same classes, settings and tensors."""
    if type(a) is not type(b):
        return False
    sa, sb = a.state_dict(), b.state_dict()
    if sa.keys() != sb.keys() or any(
            sa[k].shape != sb[k].shape or sa[k].dtype != sb[k].dtype
            or not torch.equal(sa[k], sb[k]) for k in sa):
        return False
    for ma, mb in zip(a.modules(), b.modules()):
        if type(ma) is not type(mb) or _settings(ma).keys() != _settings(mb).keys():
            return False
        for k, va in _settings(ma).items():
            vb = _settings(mb)[k]
            try:
                if isinstance(va, (np.ndarray, torch.Tensor)) or isinstance(
                        vb, (np.ndarray, torch.Tensor)):
                    equal = np.array_equal(np.asarray(va), np.asarray(vb))
                else:
                    equal = bool(va == vb)
            except Exception:  # settings that do not compare: not provably the same
                equal = False
            if not equal:
                return False
    return True


def _settings(module: nn.Module) -> dict:
    """A module's own settings (``dim``, ``eps``, ``axis`` ...), not torch's bookkeeping."""
    return {k: v for k, v in vars(module).items() if not k.startswith("_") and k != "training"}


def static(shape) -> tuple[int, ...]:
    """The non-batch sizes of a Keras shape; all must be known."""
    sizes = tuple(shape[1:])
    if any(s is None for s in sizes):
        raise UnsupportedLayerError(
            f"a flatten over Keras shape {shape} needs static sizes after the batch: give the "
            "model's inputs fixed sizes there (keras.Input(shape=...)) to convert it")
    return sizes


def numel(shape) -> int:
    return math.prod(static(shape))
