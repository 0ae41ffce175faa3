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


def _finished() -> None:
    """The command is done (its outputs are in place): a Ctrl-C during the interpreter's
    shutdown (TF's exit handlers take a second or two) would only turn its exit status
    into a death by SIGINT, so it is ignored."""
    if _Seen.interrupted is False and signal.getsignal(signal.SIGINT) is _on_sigint:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def reported():
    """Run the command; if Ctrl-C stopped it, print one line and exit 130."""
    # only over Python's default: a SIGINT the parent ignored (a background job of a
    # script) stays ignored, a caller's own handler stays in place
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        try:
            signal.signal(signal.SIGINT, _on_sigint)
        except ValueError:  # not the main thread
            pass
    try:
        yield
    except KeyboardInterrupt:
        pass
    except SystemExit:  # the command's own exit code, unless Typer's Exit(130) of a Ctrl-C
        if not _Seen.interrupted:
            _finished()
            raise
    else:
        if not _Seen.interrupted:
            _finished()
            return
    print("crossport: interrupted", file=sys.stderr, flush=True)
    sys.exit(EXIT_INTERRUPTED)
