"""Example arguments that are not all tensors: lists, tuples and dicts of tensors become one
Keras input per tensor, and Python numbers, bools, strings and None are fixed at conversion.

A Keras model takes tensors; ``torch.export`` itself specializes non-tensor arguments to
their example values. :func:`bind_example_args` returns a *view* of the module whose
``forward`` takes the tensor leaves in order (named after the argument and its keys:
``images_0``, ``batch_pixels``) and rebuilds the user's structure around them before
calling the module's own ``forward``. The view shares the module's ``__dict__`` (its
submodules, parameters, buffers and hooks), so module paths, layer names and the restore
of :func:`~crossport.capture.borrow.borrowed` are the module's own; its class is a subclass
named as the module's. The module itself is not changed. (Hooks on the root module itself
see the tensor leaves as its arguments; hooks on submodules are unaffected.)
"""

from __future__ import annotations

import inspect
import re

import torch
from torch.utils import _pytree as pytree

from crossport.errors import InputError

_CONTAINERS = (list, tuple, dict)


def bind_example_args(module: torch.nn.Module, args: tuple) -> tuple[torch.nn.Module, tuple]:
    """``(module, args)`` as the converter takes them: tensor arguments only.

    Unchanged when every argument is a tensor. Otherwise a view of ``module`` taking the
    tensor leaves of ``args`` (non-tensor leaves fixed at their example values).

    Example:
        >>> import torch
        >>> class Pair(torch.nn.Module):
        ...     def forward(self, xs, scale: float):
        ...         return (xs[0] + xs[1]) * scale
        >>> view, leaves = bind_example_args(Pair(), ([torch.ones(2), torch.ones(2)], 3.0))
        >>> len(leaves), list(inspect.signature(view.forward).parameters), view(*leaves)
        (2, ['xs_0', 'xs_1'], tensor([6., 6.]))
    """
    if all(isinstance(a, torch.Tensor) for a in args) or not isinstance(module, torch.nn.Module):
        return module, args  # (a non-module is refused by name later)
    if "forward" in module.__dict__:
        raise InputError(_not_tensors(args))
    leaves, spec = pytree.tree_flatten(list(args))
    tensor_at = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    if not tensor_at:
        raise InputError("example_args hold no tensor: a converted model needs at least one "
                         "tensor input")
    for i, leaf in enumerate(leaves):
        if i not in tensor_at and not isinstance(leaf, (bool, int, float, str, type(None))):
            raise InputError(f"example_args hold a {type(leaf).__name__}: crossport takes "
                             "tensors (in lists, tuples and dicts) and fixes Python numbers, "
                             "bools, strings and None at conversion")
    names = _leaf_names(module, args, tensor_at)
    return _view(module, leaves, spec, tensor_at, names), tuple(leaves[i] for i in tensor_at)


def _view(module, leaves: list, spec, tensor_at: list[int], names: list[str]):
    cls = type(module)
    fixed = list(leaves)

    def forward(self, *tensors):
        values = list(fixed)
        for i, tensor in zip(tensor_at, tensors):
            values[i] = tensor
        return cls.forward(self, *pytree.tree_unflatten(values, spec))

    forward.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
    try:
        bound = type(cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__,
                                            "__qualname__": cls.__qualname__})
    except TypeError as exc:  # a class that refuses subclasses (__init_subclass__, a metaclass)
        raise InputError(_not_tensors(tuple(leaves)) + f" ({exc})") from exc
    view = bound.__new__(bound)
    view.__dict__ = module.__dict__  # the same dict: submodules, parameters, hooks, state
    return view


def _leaf_names(module, args: tuple, tensor_at: list[int]) -> list[str]:
    """``name`` of a tensor argument, ``name_key`` (``_0``, ``_pixels``) of one inside a
    container, after ``forward``'s parameter names; unique, valid Keras input names."""
    try:
        params = [p.name for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    paths = []
    for index, arg in enumerate(args):
        base = params[index] if index < len(params) else f"input_{index}"
        for path, _ in pytree.tree_flatten_with_path(arg)[0]:
            paths.append("_".join([base, *(_key(k) for k in path)]))
    names, seen = [], set()
    for i in tensor_at:
        name = re.sub(r"\W", "_", paths[i])
        while name in seen:
            name += "_"
        seen.add(name)
        names.append(name)
    return names


def _key(entry) -> str:
    for attribute in ("key", "idx", "name"):
        if hasattr(entry, attribute):
            return str(getattr(entry, attribute))
    return str(entry)


def _not_tensors(args: tuple) -> str:
    kinds = ", ".join(type(a).__name__ for a in args if not isinstance(a, torch.Tensor))
    return (f"example_args hold {kinds} besides tensors, and crossport cannot bind them "
            "around this module's forward (an instance attribute, or a class that cannot be "
            "subclassed); pass tensors in "
            "forward's argument order (numpy arrays: torch.from_numpy(a)), or wrap the module "
            "so that forward takes tensors only")
