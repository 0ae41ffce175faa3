"""Replay the exported graph node by node, recording every value (float32 or float64).

The float64 replay is the evidence that explains a failed check, so it must never crash on
a graph that runs fine in float32: ``_assert_tensor_metadata`` nodes (which pin float32) are
skipped, floating dtype arguments (``x.float()``, ``full(..., dtype=float32)``) become
float64 while integer casts (``.to(torch.uint8)``, ``.int()``) stay as they are, and a node
that still fails in float64 runs on float32 inputs (or takes the float32 replay's value)
and is promoted back.
"""

from __future__ import annotations

import copy

import torch
from torch.utils import _pytree as pytree

_FLOATING = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class _Recorder(torch.fx.Interpreter):
    """Runs the graph and keeps each node's value; in ``dtype`` when one is given."""

    def __init__(self, gm, dtype: torch.dtype | None = None, fallback: dict | None = None):
        super().__init__(gm)
        self.values: dict[str, object] = {}
        self.dtype = dtype
        self.fallback = fallback or {}

    def run_node(self, n):
        if self.dtype is None or n.op != "call_function":
            result = super().run_node(n)
        else:
            result = self._run_promoted(n)
        self.values[n.name] = result
        return result

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
        """Floating dtype arguments and tensors in ``self.dtype``; integer ones unchanged."""
        return pytree.tree_map(
            lambda v: self.dtype if isinstance(v, torch.dtype) and v in _FLOATING else v, tree)

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
           fallback: dict | None = None) -> dict[str, object]:
    """Every node's value when the exported graph runs on ``args`` (optionally in ``dtype``).

    ``fallback`` (the float32 replay's values) stands in for a node that cannot run in
    ``dtype`` at all.
    """
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
        flat.append(value)
    if dtype is not None:
        gm = copy.deepcopy(gm).to(dtype)
    recorder = _Recorder(gm, dtype, fallback)
    with torch.no_grad():
        recorder.run(*flat)
    return recorder.values
