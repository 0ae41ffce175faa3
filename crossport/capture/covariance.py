"""``torch.cov`` and ``torch.corrcoef`` as torch.export can trace them.

torch's C++ ``cov`` warns and zeroes the normalization when the degrees of freedom are not
positive: ``if (is_scalar_tensor_true(norm_factor <= 0))``, a branch on a tensor's value
that torch.export cannot take (the capture failed with ``aten.equal``). While capturing,
``cov`` and ``corrcoef`` run ATen's arithmetic line for line with that branch as a
``where`` (without weights the factor is ``observations - correction``, a size, clamped at
0). torch's checks on the weights' values (non-negative, a non-zero sum) are branches too;
they are left to the parity check, which runs the module eagerly. Weights of a shape or
dtype torch refuses keep torch's own function and its error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode

Tensor = torch.Tensor


def _traceable(input) -> bool:
    """An input torch's ``cov`` takes without raising (its errors stay torch's own)."""
    return isinstance(input, Tensor) and input.dim() <= 2 and input.dtype != torch.bool


def covariance(input: Tensor, correction: int = 1, fweights: Tensor | None = None,
               aweights: Tensor | None = None) -> Tensor:
    """ATen's ``cov``: variables in rows, observations in columns."""
    x = input if input.dim() == 2 else input.view(1, -1)
    observations = x.shape[1]
    w = fweights if aweights is None else aweights if fweights is None else fweights * aweights
    if w is None:
        mean = x.sum(1) / observations
        dof = torch.sym_max(observations - correction, 0)  # torch zeroes a factor <= 0
    else:
        w_sum = w.sum()
        mean = (x * w).sum(1) / w_sum
        if aweights is not None and correction != 0:
            dof = w_sum - correction * (w * aweights).sum() / w_sum
        else:
            dof = w_sum - correction
        dof = torch.where(dof <= 0, torch.zeros_like(dof), dof)
    x = x - mean.unsqueeze(1)
    product = torch.mm(x, (x if w is None else x * w).t().conj())
    return torch.true_divide(product, dof).squeeze()


def _weights_taken(input: Tensor, fweights, aweights) -> bool:
    """Weights of the form torch's ``cov`` accepts: 1-D, one per observation, fweights
    integral, aweights floating."""
    observations = input.shape[-1] if input.dim() else 1
    for weights, integral in ((fweights, True), (aweights, False)):
        if weights is None:
            continue
        if not isinstance(weights, Tensor) or weights.dim() > 1:
            return False
        if weights.numel() != observations or weights.is_floating_point() == integral:
            return False
    return True


def correlation(input: Tensor) -> Tensor:
    """ATen's ``corrcoef`` on :func:`covariance`: normalised by the standard deviations,
    clipped to [-1, 1] (real and imaginary parts apart)."""
    c = covariance(input)
    if c.dim() == 0:  # one variable: nan for nan/inf/0, else 1
        return c / c
    d = c.diagonal()
    stddev = torch.sqrt(d.real if d.is_complex() else d)
    c = c / stddev.view(-1, 1)
    c = c / stddev.view(1, -1)
    if c.is_complex():
        return torch.complex(c.real.clip(-1, 1), c.imag.clip(-1, 1))
    return c.clip(-1, 1)


class _TraceableCovariance(TorchFunctionMode):
    """Routes ``cov`` and ``corrcoef`` calls, however the model reached the function (a
    saved reference, a method), to :func:`covariance` and :func:`correlation`."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _COV:
            bound = _bind_cov(*args, **kwargs)
            if bound is not None:
                return covariance(*bound)
        elif func in _CORRCOEF and len(args) == 1 and not kwargs and _traceable(args[0]):
            return correlation(args[0])
        return func(*args, **kwargs)


_COV = (torch.cov, Tensor.cov)
_CORRCOEF = (torch.corrcoef, Tensor.corrcoef)


def _bind_cov(input, *, correction=1, fweights=None, aweights=None):
    """``covariance``'s arguments for a call torch would take, else None (torch's own
    function then raises its own error)."""
    if _traceable(input) and _weights_taken(input, fweights, aweights):
        return input, correction, fweights, aweights
    return None


@contextlib.contextmanager
def traceable_covariance() -> Iterator[None]:
    """Within the block, ``torch.cov`` / ``Tensor.cov`` and ``torch.corrcoef`` /
    ``Tensor.corrcoef`` run :func:`covariance` and :func:`correlation`."""
    with _TraceableCovariance():
        yield
