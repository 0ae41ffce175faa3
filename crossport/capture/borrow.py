"""Run the user's module without changing it: eval mode inside, everything restored after.

Capture and every eager run (the parity check, export and source re-checks, ``check``) run
``forward``, and ``forward`` may write on ``self``: ultralytics' YOLO head caches
``self.anchors`` / ``self.strides`` / ``self.shape`` the first time it sees a shape, and
under ``torch.export`` those are FakeTensors. :func:`borrowed` snapshots every submodule
(its ``__dict__``, the contents of its dicts, lists and sets, and clones of its buffers),
puts the module in eval mode, and on exit, failure included, puts all of it back.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch

# Containers whose contents are restored in place: hooks, _buffers, _modules, user caches.
_CONTAINERS = (dict, list, set)


class _Snapshot:
    """One submodule's attributes, the contents of its containers and its buffer values."""

    def __init__(self, module: torch.nn.Module):
        self.module = module
        self.attributes = dict(module.__dict__)
        self.contents = {key: _copy_contents(value) for key, value in self.attributes.items()
                         if isinstance(value, _CONTAINERS)}
        self.buffers = {name: buf.detach().clone() for name, buf in module._buffers.items()
                        if isinstance(buf, torch.Tensor)}

    def restore(self) -> None:
        live = self.module.__dict__
        for key in [k for k in live if k not in self.attributes]:
            del live[key]
        for key, value in self.attributes.items():
            if live.get(key, _MISSING) is not value:
                live[key] = value
        for key, saved in self.contents.items():
            _restore_contents(self.attributes[key], saved)
        with torch.no_grad():
            for name, saved in self.buffers.items():
                buf = self.module._buffers.get(name)
                if isinstance(buf, torch.Tensor) and not _same_values(buf, saved):
                    buf.copy_(saved)  # an in-place write (running stats, a cache buffer)


_MISSING = object()


def _copy_contents(container):
    return list(container.items()) if isinstance(container, dict) else list(container)


def _restore_contents(container, saved: list) -> None:
    if _unchanged(container, saved):
        return
    container.clear()
    if isinstance(container, list):
        container.extend(saved)
    else:  # dict (from its items) or set
        container.update(saved)


def _unchanged(container, saved: list) -> bool:
    """Same entries, compared by identity (values may be tensors: no ``==``)."""
    if len(container) != len(saved):
        return False
    if isinstance(container, dict):
        return all(key in container and container[key] is value for key, value in saved)
    return all(a is b for a, b in zip(container, saved))


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))


@contextmanager
def borrowed(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``module`` in eval mode for the duration; afterwards exactly as it was.

    Restores each submodule's attributes (added ones removed, replaced ones put back), the
    contents of its dicts/lists/sets (hooks, registered buffers, caches), buffer values written
    in place, and every training flag, also when the body raises. Parameters are not cloned
    (memory): a forward that writes its own parameters in place is not undone.

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Dropout()).train()
        >>> with borrowed(net):
        ...     net.training, net[0].training
        (False, False)
        >>> net.training, net[0].training
        (True, True)
    """
    snapshots = [_Snapshot(m) for m in module.modules()]
    try:
        module.eval()
        yield module
    finally:
        for snapshot in snapshots:
            snapshot.restore()


def warn_if_training(module: torch.nn.Module) -> None:
    """One warning when ``module`` (or a submodule) is in train mode: eval is converted."""
    training = [name or type(module).__name__ for name, m in module.named_modules() if m.training]
    if training:
        warnings.warn(
            f"{type(module).__name__} is in train mode ({', '.join(training[:3])}"
            f"{', ...' if len(training) > 3 else ''}); crossport converts and checks its "
            "eval-mode function (dropout off, BatchNorm running statistics) and leaves "
            "the module's training flags as they were. Call module.eval() first to silence "
            "this warning.", UserWarning, stacklevel=3)
