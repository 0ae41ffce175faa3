"""crossport's exceptions: one base class, one subclass per kind of failure.

Messages say what happened (with the values received), what is supported, and what to do,
and name the torch module path and user source line where there is one.
"""

from __future__ import annotations


class CrossportError(Exception):
    """Base class of every error crossport raises on purpose."""


class InputError(CrossportError, ValueError):
    """The caller's arguments are unusable (wrong type, shape or option)."""


class CaptureError(CrossportError):
    """``torch.export`` could not capture the module (data-dependent control flow, ...)."""


class UnsupportedOpError(CrossportError):
    """One or more ops have no faithful Keras conversion; the message lists all of them."""

    def __init__(self, message: str, problems: list | None = None):
        super().__init__(message)
        self.problems = problems or []


class ConversionError(CrossportError):
    """A converter failed on a node: the message names the node, op, module path and line.

    The original exception is chained as ``__cause__`` (``crossport convert --debug`` shows
    its traceback). Errors raised on purpose (other CrossportErrors) are not wrapped.
    """

    def __init__(self, message: str, node: str = "", op: str = ""):
        super().__init__(message)
        self.node = node
        self.op = op


class ParityError(CrossportError):
    """The converted model does not compute what the torch module computes."""

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report


class ExportError(CrossportError):
    """Writing or re-loading an exported artifact failed; nothing was left at the target."""


class DynamicDimError(UnsupportedOpError):
    """An op cannot compute its result at every size of a dim made dynamic.

    The message names each such op, the dim, its module path and source line; convert with
    that dim static (drop it from ``dynamic_dims`` / ``dynamic_batch``) or change the model.
    """
class UnsupportedLayerError(CrossportError):
    """Keras layers without a faithful PyTorch conversion; the message lists all of them.

    ``problems`` holds ``(layer path, class name, reason)`` for every such layer.
    """

    def __init__(self, message: str, problems: list | None = None):
        super().__init__(message)
        self.problems = problems or []


class TrainingModeError(CrossportError, RuntimeError):
    """A converted module was run in ``train()`` mode through a Keras layer whose training
    behaviour it does not reproduce (random augmentation, a dropout Keras itself cannot
    train): call ``.eval()``, or augment in the data pipeline /
    replace the submodule as the message says."""
