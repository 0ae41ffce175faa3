"""torch.ao's ``FakeQuantize`` modules, captured with their switches as they are set.

``FakeQuantize.forward`` branches on the values of its ``observer_enabled`` and
``fake_quant_enabled`` buffers, which ``torch.export`` cannot do (a data-dependent guard).
Those switches are the model's configuration, not its data: while capturing, each module's
forward takes the branch its switches select (read from the module before capture). With
its observer on it would update its statistics on every call, state a converted model does
not keep: refused, pointing at ``disable_observer``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.ao.quantization.fake_quantize import FakeQuantize

from crossport.errors import UnsupportedOpError

# the refusal of a fake-quantize still observing (the fused QAT op's converter says it too)
OBSERVER_ON = ("has its observer on: it updates its statistics on every call, state a "
               "converted model does not keep: call "
               "model.apply(torch.ao.quantization.disable_observer) before converting")


@contextlib.contextmanager
def fixed_fake_quantize_switches(module: torch.nn.Module) -> Iterator[None]:
    """Within the block, ``module``'s ``FakeQuantize`` submodules branch on their switches
    as read now (the fused QAT variant has no Python branch and is left alone)."""
    switches = {id(m): (bool(m.observer_enabled[0]), bool(m.fake_quant_enabled[0]))
                for m in module.modules() if type(m).forward is FakeQuantize.forward}
    if not switches:
        yield
        return
    original = FakeQuantize.forward

    def forward(self, X):
        if id(self) not in switches:
            return original(self, X)
        observe, quantize = switches[id(self)]
        if observe:
            raise UnsupportedOpError(f"a FakeQuantize {OBSERVER_ON}")
        if not quantize:
            return X
        observer = self.activation_post_process
        if self.is_per_channel:
            return torch.fake_quantize_per_channel_affine(
                X, self.scale, self.zero_point, self.ch_axis, observer.quant_min,
                observer.quant_max)
        return torch.fake_quantize_per_tensor_affine(
            X, self.scale, self.zero_point, observer.quant_min, observer.quant_max)

    FakeQuantize.forward = forward
    try:
        yield
    finally:
        FakeQuantize.forward = original
