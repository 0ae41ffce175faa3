"""``torch.distributions`` objects built inside ``forward`` (a policy's ``Normal(mu, sigma)
.log_prob(action)``), captured without their argument validation.

By default a distribution checks its parameters and values against its constraints
(``scale > 0``) and raises when one fails: a branch on tensor values, which ``torch.export``
cannot take (the capture failed). The check changes no value it lets through, so while
capturing it is off, as ``validate_args=False`` would set it; the parity check still runs
the module eagerly, validation included.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch.distributions import Distribution


@contextlib.contextmanager
def unvalidated_distributions() -> Iterator[None]:
    """Within the block, distributions built without ``validate_args`` do not validate."""
    default = Distribution._validate_args
    Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        Distribution.set_default_validate_args(default)
