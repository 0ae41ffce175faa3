"""Example inputs made from a Keras model's own ``Input`` specs, when the user gives none.

A saved Keras model states its input shapes and dtypes, so ``crossport to-torch model.keras``
needs no ``--input`` when they say enough: a ``None`` batch becomes 2 (a batch of one would
hide an op that mixes samples), float and bool inputs are drawn at random. What the specs
do not say is refused with the flag to give: another ``None`` dim (how large must an image
be for this model?) and integer inputs, unless each feeds ``Embedding`` layers, whose
vocabulary bounds the ids.
"""

from __future__ import annotations

import torch

from crossport.errors import InputError

BATCH = 2  # a None batch dim in the example (two samples: an op mixing them shows)


def examples_from_inputs(kmodel, *, channels_first_io: bool = False, seed: int = 0) -> tuple:
    """One random example per ``kmodel.inputs`` tensor, in the module's argument layout.

    Example:
        >>> import keras
        >>> kmodel = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3)])
        >>> [tuple(a.shape) for a in examples_from_inputs(kmodel)]
        [(2, 8, 8, 3)]
    """
    generator = torch.Generator().manual_seed(seed)
    examples = []
    for tensor in kmodel.inputs:
        id_bound = _id_bound(kmodel, tensor)
        shape = _example_shape(tensor, id_bound)
        example = _random(tensor, shape, id_bound, generator)
        if channels_first_io and example.dim() >= 3:
            example = example.movedim(-1, 1)
        examples.append(example)
    return tuple(examples)


def _example_shape(tensor, id_bound: int | None) -> tuple[int, ...]:
    shape = tuple(tensor.shape)
    if any(size is None for size in shape[1:]):
        raise InputError(
            f"input {tensor.name!r} has the run-time shape {shape}: give an example of each "
            f"input, as large as the model needs (CLI: --input {_spec(tensor, id_bound)}; "
            "Python: example_args)")
    return (BATCH if shape and shape[0] is None else shape[0], *shape[1:]) if shape else ()


def _random(tensor, shape: tuple[int, ...], id_bound: int | None, generator) -> torch.Tensor:
    from crossport.parity.verify import drawn_from_range, random_tensor

    dtype = getattr(torch, str(tensor.dtype))
    if drawn_from_range(dtype) and id_bound is None:
        raise InputError(
            f"input {tensor.name!r} is {tensor.dtype} and feeds no Embedding, so the range of "
            f"its values is unknown: give an example (CLI: --input {_spec(tensor, id_bound)}, "
            "values drawn from [0, HIGH); Python: example_args)")
    return random_tensor(shape, dtype, None if id_bound is None else (0, id_bound), generator)


def _id_bound(kmodel, tensor) -> int | None:
    """The smallest vocabulary of the ``Embedding`` layers ``tensor`` feeds, if it feeds only
    those (an id the smallest one holds is valid in each)."""
    import keras

    consumers = [layer for layer in kmodel.layers if any(
        any(t is tensor for t in node.input_tensors) for node in layer._inbound_nodes)]
    if consumers and all(isinstance(layer, keras.layers.Embedding) for layer in consumers):
        return min(layer.input_dim for layer in consumers)
    return None


def _spec(tensor, id_bound: int | None) -> str:
    """The ``--input`` spec to give for ``tensor``: ``(None, None, 3)`` float32 as
    ``1xNx3``, an int32 ``(None, 128)`` as ``int32:1x128:HIGH`` (HIGH the vocabulary when
    known)."""
    sizes = "x".join("1" if axis == 0 and size is None else "N" if size is None else str(size)
                     for axis, size in enumerate(tensor.shape))
    dtype = str(tensor.dtype)
    if dtype == "float32":
        return sizes
    if dtype.startswith(("int", "uint")):
        return f"{dtype}:{sizes}:{id_bound or 'HIGH'}"
    return f"{dtype}:{sizes}"
