"""The process-wide patches of Keras a traced ``call()`` needs, restored on every exit.

Tracing (``sizes.tracing_sizes``, ``lift.install``) replaces Keras functions and methods
(``standardize_shape``, the public keras.ops functions, ``Layer.__call__``...) for the
duration of one traced call. Python has no per-thread module attributes, so the replacements
are visible to every thread; they are made harmless there:

* one trace at a time: :func:`session` holds a process-wide lock, so two conversions in one
  process trace one after the other (the second waits);
* each replacement acts only on the thread that is tracing (:func:`active`) and calls the
  original function on any other thread, so a thread building or running a Keras model
  while another converts sees Keras unchanged;
* every replacement is undone on the way out, whatever ends the trace (an exception, a
  ``KeyboardInterrupt``): the undo is registered before the replacement is made.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

_LOCK = threading.RLock()
_STATE = threading.local()
_MISSING = object()


def active() -> bool:
    """Whether the current thread is tracing (inside :func:`session`)."""
    return getattr(_STATE, "depth", 0) > 0


@contextmanager
def session() -> Iterator[ExitStack | None]:
    """One trace: the lock held and this thread marked as tracing. Yields the ExitStack the
    replacements register their undo on (:func:`replace`), or None when this thread is
    already tracing (a nested entry: the outer session's replacements stay in place)."""
    with _LOCK:
        if active():
            _STATE.depth += 1
            try:
                yield None
            finally:
                _STATE.depth -= 1
            return
        with ExitStack() as stack:
            _STATE.depth, _STATE.stack = 1, stack
            stack.callback(setattr, _STATE, "depth", 0)
            stack.callback(setattr, _STATE, "stack", None)
            yield stack


def current_stack() -> ExitStack | None:
    """The open session's ExitStack on this thread (for a replacement made mid-trace)."""
    return getattr(_STATE, "stack", None) if active() else None


def replace(stack: ExitStack, owner, name: str, value) -> None:
    """``owner.name = value`` until ``stack`` closes; an attribute ``owner`` only inherited
    is deleted again rather than copied into its ``__dict__``."""
    own = vars(owner).get(name, _MISSING)

    def undo() -> None:
        if own is not _MISSING:
            setattr(owner, name, own)
        elif name in vars(owner):
            delattr(owner, name)

    stack.callback(undo)
    setattr(owner, name, value)
