"""The layout of one tensor: how the Keras value's axes relate to the torch value's dims.

A ``Layout`` is a permutation ``perm`` with ``keras_value == torch_value.permute(perm)``:
identity for torch order, ``(0, 2, 3, 1)`` for an NCHW tensor held channels-last. A 2-D tensor
made by flattening a permuted block (``flatten(x, 1)`` of an NHWC activation, pitfalls.md
item 9) also records ``flat``: the torch block shape and the order Keras holds it in, so that
a following Dense permutes its kernel rows instead of the activations being transposed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FlatOrder:
    """Features of the last dim are ``block.permute(block_perm).flatten()`` of a torch block."""

    block_shape: tuple[int, ...]
    block_perm: tuple[int, ...]


@dataclass(frozen=True)
class Layout:
    """``keras_value == torch_value.permute(perm)``; see the module docstring."""

    perm: tuple[int, ...]
    flat: FlatOrder | None = None

    @property
    def rank(self) -> int:
        return len(self.perm)

    @property
    def is_canonical(self) -> bool:
        return self.flat is None and self.perm == tuple(range(self.rank))

    def axis(self, torch_dim: int) -> int:
        """The Keras axis holding torch dim ``torch_dim`` (negative dims allowed); the
        contract's spelling is ``layout.dims.physical_axis``."""
        return self.perm.index(normalize_dim(torch_dim, self.rank))

    def axes(self, torch_dims) -> list[int]:
        return [self.axis(d) for d in torch_dims]

    def without(self, torch_dims) -> Layout:
        """The layout after the given torch dims are removed (reductions without keepdim)."""
        dropped = {normalize_dim(d, self.rank) for d in torch_dims}
        kept = [p for p in self.perm if p not in dropped]
        return Layout(tuple(sorted(kept).index(p) for p in kept))

    def with_inserted(self, torch_dim: int) -> Layout:
        """The layout after a new size-1 torch dim at ``torch_dim``; Keras puts it last."""
        shifted = tuple(p + 1 if p >= torch_dim else p for p in self.perm)
        return Layout((*shifted, torch_dim))

    def __str__(self) -> str:
        if self.flat is not None:
            return f"flat{self.flat.block_perm}"
        return "canonical" if self.is_canonical else str(self.perm)


def normalize_dim(dim: int, rank: int) -> int:
    """``dim`` in ``[0, rank)``: negative dims count from the end, as in torch.

    Raises:
        ValueError: ``dim`` is outside ``[-rank, rank)``.
    """
    if not -rank <= dim < rank:
        raise ValueError(f"dim {dim} is out of range for a rank-{rank} tensor "
                         f"(expected one in [{-rank}, {rank}))")
    return dim % rank


def canonical(rank: int) -> Layout:
    """Torch order."""
    return Layout(tuple(range(rank)))


def channels_last(rank: int) -> Layout:
    """``(0, 2, ..., rank-1, 1)``: N, spatial..., C. Rank < 3 tensors stay canonical."""
    if rank < 3:
        return canonical(rank)
    return Layout((0, *range(2, rank), 1))


def keras_kernel(rank: int) -> Layout:
    """``(2, ..., rank-1, 1, 0)``: a convolution weight computed in the graph, held as Keras'
    kernel (torch's ``[out, in/groups, *k]`` as ``[*k, in/groups, out]``; a transposed conv's
    ``[in, out/groups, *k]`` as ``[*k, out/groups, in]``)."""
    return Layout((*range(2, rank), 1, 0))


def torch_kernel(rank: int) -> Layout:
    """``(rank-1, rank-2, 0, ..., rank-3)``: Keras' kernel computed at run time, held as
    torch's conv weight (Keras -> PyTorch; the inverse of :func:`keras_kernel`)."""
    return Layout((rank - 1, rank - 2, *range(rank - 2)))


def io_layout(rank: int, channels_last_io: bool) -> Layout:
    """The layout of a converted model's inputs and outputs: channels-last with
    ``channels_last_io=True``, else torch order."""
    return channels_last(rank) if channels_last_io else canonical(rank)


def transpose_between(src: Layout, dst: Layout) -> tuple[int, ...]:
    """Axes ``t`` with ``keras_dst == keras_src.transpose(t)`` (both plain perms)."""
    inverse = [0] * src.rank
    for keras_axis, torch_dim in enumerate(src.perm):
        inverse[torch_dim] = keras_axis
    return tuple(inverse[d] for d in dst.perm)


def permuted_shape(torch_shape, layout: Layout) -> tuple:
    """The Keras shape of a torch-shaped value held in ``layout`` (plain perms only)."""
    return tuple(torch_shape[p] for p in layout.perm)


def channels_first(rank: int) -> Layout:
    """``(0, rank-1, 1, ..., rank-2)``: a channels-last reference held N, C, spatial...

    The Keras -> PyTorch direction holds NHWC Keras activations this way. Rank < 3 tensors
    stay canonical.
    """
    if rank < 3:
        return canonical(rank)
    return Layout((0, rank - 1, *range(1, rank - 1)))
