"""Layout analysis: which tensors should be channels-last before anything consumes them.

Converters declare policies; this backward pass marks a node when some consumer is
channels-last (directly, or through a chain of ops that hand their layout on:
elementwise ops and CUSTOM ops registered with ``keeps_layout``). The emitter then lays
out model inputs channels-last at once, so an elementwise prologue (``x * 2 - 1``) does not
cost a transpose inside the model.
"""

from __future__ import annotations

import operator

import torch

from crossport.to_keras.registry import Policy, lookup


def preferred_channels_last(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    wants: set[torch.fx.Node] = set()
    for node in reversed(list(graph.nodes)):
        if _rank(node) < 3:
            continue
        for user in node.users:
            if user.op != "call_function":
                continue
            if user.target is operator.getitem:
                continue
            converter = lookup(user.target)
            if converter is None:
                continue
            if converter.policy is Policy.CHANNELS_LAST or (
                converter.passes_layout and user in wants
            ):
                wants.add(node)
                break
    return wants


def _rank(node: torch.fx.Node) -> int:
    val = node.meta.get("val")
    return val.dim() if isinstance(val, torch.Tensor) else 0
