"""Why an op has no converter: the reason in the pre-flight refusal, for ops of a known kind
(a value of the data as an output size, a tensor read as a number, random numbers, a size
torch.export derives from data) and the way out a known model setting gives."""

from __future__ import annotations

import torch

# Ops a known model setting avoids: the way out, in the error when they are refused
_WAY_OUT = {
    "transformers.grouped_mm_fallback.default": "HF mixture-of-experts",
}
_MOE_WAY_OUT = "build it with experts_implementation='batched_mm' in its config, which converts"


def with_way_out(node: torch.fx.Node, reason: str) -> str:
    what = _WAY_OUT.get(str(node.target))
    return f"{reason} ({what}: {_MOE_WAY_OUT})" if what else reason


# Ops whose output size is a value of the data (torch.export gives it an unbacked size):
# a Keras graph fixes output sizes when it is built. What to write instead, per op.
_DATA_SIZED = {
    "aten.nonzero.default": "torch.nonzero_static(x, size=k) (padded to k rows, converted), "
                            "or keep the mask and use torch.where(mask, x, other)",
    "aten.masked_select.default": "torch.where(mask, x, fill) keeps the shape (converted)",
    "aten._unique2.default": "compare sorted neighbours (torch.sort, then x[1:] != x[:-1]) "
                             "and keep the shape",
    "aten.unique_dim.default": "compare sorted neighbours and keep the shape",
    "aten.unique_consecutive.default": "mark the run starts (x[1:] != x[:-1]) and keep the "
                                      "shape",
    "aten.bincount.default": "count into a fixed number of bins k: torch.zeros(k)."
                             "scatter_add(0, x, torch.ones_like(x)) (converted)",
}


def _data_sized(node: torch.fx.Node) -> str | None:
    """Why ``node`` has no converter when its output size depends on the data, or None."""
    instead = _DATA_SIZED.get(str(node.target))
    if instead is None:
        return None
    return ("no converter: its output size depends on the data (the values, not the "
            f"shapes), which a Keras graph fixes when it is built; instead: {instead}")


def _reads_unbacked(node: torch.fx.Node) -> bool:
    """A size, or a check on sizes (``u0 >= 0``, a view's storage offset), that torch.export
    derives from a data-dependent value."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    val = node.meta.get("val")
    return isinstance(val, (torch.SymInt, torch.SymBool)) and bool(free_unbacked_symbols(val))


def no_converter(node: torch.fx.Node) -> str:
    """"no converter", with why no converter can exist for ops of a known kind."""
    if (reason := _data_sized(node)) is not None:
        return reason
    if node.target is torch.ops.aten._local_scalar_dense.default:
        return ("no converter: a tensor's value read as a Python number (.item(), .tolist(), "
                "int(t)) and used to compute the graph (a size, a slice bound, a branch): a "
                "Keras graph fixes those when it is built; compute it from shapes, or keep "
                "the value a tensor")
    if torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
        return ("no converter: random numbers drawn in forward (torch's generator has no "
                "Keras twin, and the outputs could not be compared); pass them in as an "
                "input of forward")
    if _reads_unbacked(node):
        return ("a size or a check torch.export derives from a data-dependent value (the op "
                "making that value is listed too): converted with it, or not at all")
    return with_way_out(node, "no converter")
