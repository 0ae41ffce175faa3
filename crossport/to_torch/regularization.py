"""Keras' regularization losses on a converted module: ``module.regularization_loss()``.

Keras adds two kinds of terms to ``model.losses`` (keras/src/layers/layer.py, Keras 3.15):

- a weight penalty ``variable.regularizer(variable)`` for every trainable variable with a
  regularizer (``kernel_regularizer``, ``bias_regularizer``, ``recurrent_regularizer``,
  ``depthwise_``/``pointwise_regularizer``, ``embeddings_regularizer``, ``gamma``/``beta``
  ...), computed from the variable's current value;
- an activity penalty ``activity_regularizer(output) / batch_size`` (``divide_no_nan``; a
  scalar output is not divided) for every tensor output of every call of a layer with an
  ``activity_regularizer`` (``ActivityRegularization`` is such a layer), in training and at
  inference alike, cleared when the model is called again.

:class:`KerasWeightPenalties` reads each regularized Keras variable from the module's own
parameters, in the Keras layout (a gather through an index buffer built at conversion), so
a penalty on rows or columns (``OrthogonalRegularizer``) sees Keras' kernel; a
:class:`KerasActivityPenalty` node after a layer keeps the penalty of the last forward.
:func:`regularization_loss` sums both: a differentiable scalar equal to Keras'
``sum(model.losses)`` after the same forward. Torch only: nothing here imports Keras.
"""

from __future__ import annotations

import torch
from torch import nn

# A penalty as data (written into generated source as is):
# ("l1", l1) | ("l2", l2) | ("l1l2", l1, l2) | ("orthogonal", factor, "rows" | "columns")
Penalty = tuple


def penalty(spec: Penalty, x: torch.Tensor) -> torch.Tensor:
    """Keras' regularizer ``spec`` of ``x`` (``keras/src/regularizers/regularizers.py``).

    Example:
        >>> import torch
        >>> penalty(("l1l2", 0.5, 0.25), torch.tensor([1.0, -2.0]))
        tensor(2.7500)
    """
    kind = spec[0]
    if not x.is_floating_point() and kind != "orthogonal":
        return _integer_penalty(spec, x)
    if kind == "l1":
        return spec[1] * x.abs().sum()
    if kind == "l2":
        return spec[1] * x.square().sum()
    if kind == "l1l2":
        total = torch.zeros((), dtype=x.dtype, device=x.device)
        if spec[1] != 0.0:  # (Keras skips a zero factor: no 0 * inf = NaN)
            total = total + spec[1] * x.abs().sum()
        if spec[2] != 0.0:
            total = total + spec[2] * x.square().sum()
        return total
    if kind == "orthogonal":
        return _orthogonal(spec[1], spec[2], x)
    raise ValueError(f"unknown penalty {spec!r}")


def _integer_penalty(spec: Penalty, x: torch.Tensor) -> torch.Tensor:
    """An L1/L2 penalty of an integer tensor (an ActivityRegularization fed ids): Keras casts
    the factors to the tensor's dtype (``int(0.1) == 0``) and its loss is float32."""
    factors = spec[1:] if spec[0] == "l1l2" else (
        (spec[1], 0.0) if spec[0] == "l1" else (0.0, spec[1]))
    l1, l2 = (int(f) for f in factors)
    total = l1 * x.abs().sum() + l2 * x.square().sum()
    return total.to(torch.float32)


def _orthogonal(factor: float, mode: str, x: torch.Tensor) -> torch.Tensor:
    """``OrthogonalRegularizer``: rows (or columns) L2-normalised as ``ops.normalize`` does
    (``x * min(rsqrt(sum x^2), 1 / 1e-7)``), the mean of the off-diagonal |cosines| over
    ``size * (size - 1) / 2`` pairs, times ``factor / 2``."""
    axis = 1 if mode == "rows" else 0
    inv_norm = torch.clamp(torch.rsqrt(x.square().sum(axis, keepdim=True)), max=1.0 / 1e-7)
    x = x * inv_norm
    product = x @ x.T if mode == "rows" else x.T @ x
    size = product.shape[0]
    off_diagonal = product * (1.0 - torch.eye(size, dtype=x.dtype, device=x.device))
    num_pairs = size * (size - 1.0) / 2.0
    return factor * 0.5 * off_diagonal.abs().sum() / num_pairs


class KerasActivityPenalty(nn.Module):
    """A Keras layer's ``activity_regularizer`` on its outputs: called after the layer in
    the graph, it keeps ``loss`` = the sum over its outputs of ``penalty / batch`` (the held
    ``batch_axes``; ``None`` for a scalar output, not divided) of the last forward.

    Example:
        >>> import torch
        >>> term = KerasActivityPenalty("dense", ("l2", 0.5), (0,))
        >>> term(torch.ones(4, 3))
        >>> term.loss
        tensor(1.5000)
    """

    _is_impure = True  # (fx dead-code elimination keeps the call: its result is unused)

    def __init__(self, layer: str, spec: Penalty, batch_axes: tuple) -> None:
        super().__init__()
        self.layer, self.spec, self.batch_axes = layer, tuple(spec), tuple(batch_axes)
        self._loss: torch.Tensor | None = None

    @property
    def loss(self) -> torch.Tensor | None:
        """The penalty of the last forward (``None`` before the first)."""
        return self._loss

    def forward(self, *outputs: torch.Tensor) -> None:
        if torch.compiler.is_exporting():  # (an exported program is inference: no loss)
            return None
        total = None
        for output, axis in zip(outputs, self.batch_axes):
            term = penalty(self.spec, output)
            if axis is not None:  # ops.divide_no_nan(loss, batch): 0 for an empty batch
                batch = output.shape[axis]
                term = term / batch if batch else torch.zeros_like(term)
            total = term if total is None else total + term
        self._loss = total
        return None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_loss": None}  # (a pickle or copy keeps no autograd graph)


class KerasWeightPenalties(nn.Module):
    """The weight penalties of a converted model: entry ``i`` is ``(keras_path, spec,
    parameter names, keras_shape)``, and buffer ``index_i`` gathers the Keras variable, in
    its Keras layout, from the named parameters of the root module (flattened, concatenated).

    Example:
        >>> import torch
        >>> root = torch.nn.Linear(2, 1, bias=False)
        >>> terms = KerasWeightPenalties([("dense/kernel", ("l1", 1.0), ("weight",), (2, 1))])
        >>> _ = terms.index_0.copy_(torch.tensor([0, 1]))
        >>> with torch.no_grad():
        ...     _ = root.weight.copy_(torch.tensor([[3.0, -4.0]]))
        ...     terms(root)
        tensor(7.)
    """

    def __init__(self, entries: list) -> None:
        super().__init__()
        self.entries = [(path, tuple(spec), tuple(params), tuple(shape))
                        for path, spec, params, shape in entries]
        for i, (*_, shape) in enumerate(self.entries):
            numel = 1
            for size in shape:
                numel *= size
            self.register_buffer(f"index_{i}", torch.zeros(numel, dtype=torch.int64))

    def keras_value(self, root: nn.Module, i: int) -> torch.Tensor:
        """Entry ``i``'s Keras variable as ``root``'s parameters hold it (Keras layout)."""
        _path, _spec, params, shape = self.entries[i]
        flat = torch.cat([root.get_parameter(name).reshape(-1) for name in params])
        return flat[getattr(self, f"index_{i}")].reshape(shape)

    def forward(self, root: nn.Module) -> torch.Tensor:
        total = _zero(root)
        for i, (_path, spec, _params, _shape) in enumerate(self.entries):
            total = total + penalty(spec, self.keras_value(root, i))
        return total


def _zero(root: nn.Module) -> torch.Tensor:
    """A 0 in the module's float dtype and device (its float_dtype buffer, else a weight)."""
    like = getattr(root, "float_dtype", None)
    if not isinstance(like, torch.Tensor):
        like = next((p for p in root.parameters() if p.is_floating_point()), None)
    if like is None:
        return torch.zeros(())
    return torch.zeros((), dtype=like.dtype, device=like.device)


def regularization_loss(root: nn.Module) -> torch.Tensor:
    """Keras' ``sum(model.losses)`` for the converted ``root`` after its last forward: its
    weight penalties from the current parameters plus the activity penalties that forward
    kept (a scalar, 0 without regularizers)."""
    total = _zero(root)
    for module in root.modules():
        if isinstance(module, KerasWeightPenalties):
            total = total + module(root)
        elif isinstance(module, KerasActivityPenalty) and module.loss is not None:
            total = total + module.loss
    return total


def _rebuild(body: dict, import_block: str) -> KerasGraphModule:
    """``torch.fx``'s unpickling of a GraphModule, into a :class:`KerasGraphModule`."""
    from torch.fx.graph_module import _deserialize_graph_module, _forward_from_src

    modules = dict(body.get("_modules", {}))
    forward = _forward_from_src(import_block + (body.get("_code") or body["code"]), {})
    module = _deserialize_graph_module(forward, body, graph_module_cls=KerasGraphModule)
    return _keep_unreferenced(module, modules)


def _keep_unreferenced(module: torch.fx.GraphModule, modules: dict) -> torch.fx.GraphModule:
    """Put back the submodules the graph does not call (``keras_weight_penalties``), which
    ``GraphModule``'s constructor drops when fx rebuilds a module."""
    for name, sub in modules.items():
        if name not in module._modules and isinstance(sub, KerasWeightPenalties):
            module.add_module(name, sub)
    return module


class KerasGraphModule(torch.fx.GraphModule):
    """The module ``crossport.to_torch`` returns: a ``torch.fx.GraphModule`` with Keras'
    regularization losses (:meth:`regularization_loss`); pickles, copies and deep-copies as one."""

    def regularization_loss(self) -> torch.Tensor:
        """Keras' ``sum(model.losses)`` after this module's last forward: the weight
        regularizers' penalties on the current parameters plus the activity regularizers'
        penalties of that forward (train or eval, as Keras adds them at inference too), a
        differentiable scalar; add it to your loss to train as Keras does."""
        return regularization_loss(self)

    def __reduce__(self):
        _fn, args = super().__reduce__()
        return (_rebuild, args)

    def __copy__(self) -> KerasGraphModule:
        # fx's __copy__ rebuilds a plain GraphModule: without this method (and the
        # penalties, which no graph node calls)
        copied = KerasGraphModule(self, self.graph, class_name=type(self).__name__)
        copied.meta = getattr(self, "meta", {})
        copied.training = self.training
        return _keep_unreferenced(copied, dict(self._modules))

    def __deepcopy__(self, memo: dict) -> KerasGraphModule:
        import copy

        copied = super().__deepcopy__(memo)
        return _keep_unreferenced(copied, copy.deepcopy(dict(self._modules), memo))
