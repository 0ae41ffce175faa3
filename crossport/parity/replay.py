"""Replay the exported graph node by node (float32 or float64), one value at a time.

:func:`stream` yields each node's value in graph order and keeps only the values later
nodes still read (as ``torch.fx.Interpreter`` does), so a node-by-node comparison needs
about one forward's live activations, not every intermediate of the graph at once.

The float64 replay is the evidence that explains a failed check, so it must never crash on
a graph that runs fine in float32: ``_assert_tensor_metadata`` nodes (which pin float32) are
skipped, floating dtype arguments (``x.float()``, ``full(..., dtype=float32)``) become
float64 while integer casts (``.to(torch.uint8)``, ``.int()``) stay as they are, and a node
that still fails in float64 runs on float32 inputs (or takes the float32 replay's value)
and is promoted back.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping

import torch
from torch.utils import _pytree as pytree

_FLOATING = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_COMPLEX_OF = {torch.float64: torch.complex128, torch.float32: torch.complex64}


def widened(module: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """``module`` (in place) with floating parameters/buffers in ``dtype`` and complex ones
    in its complex twin. ``module.to(torch.float64)`` casts a complex buffer to float64,
    dropping its imaginary part (torch only warns), which made the float64 reference of a
    model with a complex filter wrong."""
    complex_dtype = _COMPLEX_OF.get(dtype)

    def convert(t: torch.Tensor) -> torch.Tensor:
        if t.is_complex():
            return t.to(complex_dtype) if complex_dtype is not None else t
        return t.to(dtype) if t.is_floating_point() else t

    return module._apply(convert)


class _Recorder(torch.fx.Interpreter):
    """Runs the graph's nodes; in ``dtype`` when one is given."""

    def __init__(self, gm, dtype: torch.dtype | None = None, fallback: Mapping | None = None):
        super().__init__(gm)
        self.dtype = dtype
        self.fallback = fallback if fallback is not None else {}

    def run_node(self, n):
        if self.dtype is None or n.op != "call_function":
            return super().run_node(n)
        return self._run_promoted(n)

    def _run_promoted(self, n):
        if getattr(n.target, "__name__", "").startswith("_assert_tensor_metadata"):
            return None  # pins float32 metadata: meaningless in a float64 replay
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        try:
            return n.target(*self._promote(args), **self._promote(kwargs))
        except Exception:  # an op with a fixed float32 contract: run it as the graph did
            return pytree.tree_map(self._to_dtype, self._run_as_float32(n, args, kwargs))

    def _run_as_float32(self, n, args, kwargs):
        try:
            return n.target(*self._demote(args), **self._demote(kwargs))
        except Exception:  # still failing: the float32 replay's value, when there is one
            if n.name not in self.fallback:
                raise
            return self.fallback[n.name]

    def _promote(self, tree):
        """Floating dtype arguments in ``self.dtype`` and complex ones in its complex twin
        (``x.to(torch.complex64)`` before an FFT); integer ones unchanged."""
        def promote(v):
            if isinstance(v, torch.dtype) and v in _FLOATING:
                return self.dtype
            if isinstance(v, torch.dtype) and v.is_complex and self.dtype in _COMPLEX_OF:
                return _COMPLEX_OF[self.dtype]
            return v

        return pytree.tree_map(promote, tree)

    @staticmethod
    def _demote(tree):
        return pytree.tree_map(
            lambda v: v.to(torch.float32) if isinstance(v, torch.Tensor)
            and v.dtype == torch.float64 else v, tree)

    def _to_dtype(self, v):
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v.to(self.dtype)
        return v


def replay(exported, args: tuple, dtype: torch.dtype | None = None,
           fallback: Mapping | None = None) -> dict[str, object]:
    """Every node's value when the exported graph runs on ``args`` (optionally in ``dtype``).

    Holds every intermediate at once: :func:`stream` is the bounded-memory form.
    """
    return dict(stream(exported, args, dtype, fallback))


def stream(exported, args: tuple, dtype: torch.dtype | None = None,
           fallback: Mapping | None = None) -> Iterator[tuple[str, object]]:
    """``(node name, value)`` for each node of the exported graph run on ``args``, in order.

    A value is dropped once the last node reading it has run (and the caller has let go of
    it). A value sent back (``generator.send(value)``) replaces the node's own for the nodes
    after it (the tie check goes on with Keras' decision that way). ``fallback`` (node name -> the float32 value; it may be filled as the float32
    stream advances) stands in for a node that cannot run in ``dtype`` at all.

    Example:
        >>> import torch
        >>> ep = torch.export.export(torch.nn.ReLU(), (torch.randn(2),))
        >>> [name for name, _ in stream(ep, (torch.randn(2),))]
        ['input', 'relu']
    """
    gm, flat = _placeholder_values(exported, args, dtype)
    recorder = _Recorder(gm, dtype, fallback)
    recorder.args_iter = iter(flat)
    nodes = list(gm.graph.nodes)
    release = _last_uses(nodes)
    for node in nodes:
        if node.op == "output":
            return
        with torch.no_grad():  # per node: a generator must not hold grad mode across yields
            recorder.env[node] = recorder.run_node(node)
        replacement = yield node.name, recorder.env[node]
        if replacement is not None:  # the caller's value goes on instead (``send``)
            recorder.env[node] = replacement
        for done in release.get(node, ()):
            recorder.env.pop(done, None)


def _last_uses(nodes: list) -> dict:
    """node -> the nodes whose values are no longer read once it has run (itself if unread)."""
    last: dict = {}
    for node in nodes:
        for used in node.all_input_nodes:
            last[used] = node
    release: dict = {}
    for node in nodes:
        release.setdefault(last.get(node, node), []).append(node)
    return release


def _placeholder_values(exported, args: tuple, dtype: torch.dtype | None):
    """The graph module (moved to ``dtype``) and the values of its placeholders, in order."""
    signature = exported.graph_signature
    lifted = {**signature.inputs_to_parameters, **signature.inputs_to_buffers,
              **signature.inputs_to_lifted_tensor_constants}
    state = {**exported.state_dict, **exported.constants}
    user = iter(args)
    flat = []
    gm = exported.graph_module
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        value = state[lifted[node.name]] if node.name in lifted else next(user)
        if dtype is not None and isinstance(value, torch.Tensor) and value.is_floating_point():
            value = value.detach().to(dtype)
        elif dtype in _COMPLEX_OF and isinstance(value, torch.Tensor) and value.is_complex():
            value = value.detach().to(_COMPLEX_OF[dtype])
        flat.append(value)
    if dtype is not None:
        gm = widened(copy.deepcopy(gm), dtype)
    return gm, flat
