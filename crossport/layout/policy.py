"""Layout policies: the contract between a converter and the layout pass, in both directions.

A converter declares one policy saying how it wants its tensor inputs held; the layout pass
(``assign.py``) and the emitter of each direction do the rest. A held tensor relates to the
reference tensor (the source framework's value) by a :class:`crossport.layout.Layout`:
``held == reference.permute(layout.perm)``; a CUSTOM converter remaps its axis arguments
through the dim contract in ``dims.py`` (``physical_axis``, ``after_reduce`` ...).

| policy | PyTorch -> Keras | Keras -> PyTorch |
|---|---|---|
| ``AGNOSTIC`` | elementwise: inputs harmonised to one layout, kept | the same |
| ``CHANNELS_LAST`` | conv/pool/norm: N, spatial..., C in and out; a computed conv ``weight`` as Keras' kernel | (not used) |
| ``CHANNELS_FIRST`` | (not used) | conv/pool/norm: N, C, spatial... in and out |
| ``CANONICAL`` | needs the reference order, gives it | the same |
| ``CUSTOM`` | reads the layouts itself and declares its output's | the same |
"""

from __future__ import annotations

import enum


class Policy(enum.Enum):
    """How a converter wants its tensor inputs laid out (see docs/architecture.md)."""

    AGNOSTIC = "agnostic"              # elementwise: inputs harmonised to one layout, kept
    CHANNELS_LAST = "channels_last"    # torch -> Keras conv/pool/norm: N, spatial..., C
    CHANNELS_FIRST = "channels_first"  # Keras -> torch conv/pool/norm: N, C, spatial...
    CANONICAL = "canonical"            # needs the reference order in and gives it out
    CUSTOM = "custom"                  # reads the input layouts itself, sets its output's
