"""Ctrl-C on the command line: one line on stderr and exit status 130, never a traceback.

SIGINT raises ``KeyboardInterrupt`` as usual, so every ``with``/``finally`` on the way out
runs: :class:`crossport.export.staging.Staging` removes its hidden staging folders, temporary
directories go, nothing half-written reaches an output path. Typer turns the interrupt into
a silent ``Exit(130)``; the handler's flag is how :func:`reported` knows it was one. A second
Ctrl-C while that clean-up runs is ignored, so the clean-up is not cut short.
"""

from __future__ import annotations

import contextlib
import signal
import sys

EXIT_INTERRUPTED = 130  # 128 + SIGINT: what shells report for a command stopped by Ctrl-C


class _Seen:
    interrupted = False


def _on_sigint(signum, frame) -> None:
    _Seen.interrupted = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the clean-up on the way out finish
    raise KeyboardInterrupt


@contextlib.contextmanager
def reported():
    """Run the command; if Ctrl-C stopped it, print one line and exit 130."""
    try:
        signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread (an embedding caller): keep its handling
        pass
    try:
        yield
    except KeyboardInterrupt:
        pass
    except SystemExit:  # the command's own exit code, unless Typer's Exit(130) of a Ctrl-C
        if not _Seen.interrupted:
            raise
    else:
        if not _Seen.interrupted:
            return
    print("crossport: interrupted", file=sys.stderr, flush=True)
    sys.exit(EXIT_INTERRUPTED)
