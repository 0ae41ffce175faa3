"""The public entry points: ``convert`` and ``convert_with_report``."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace

import keras
import torch

from crossport.capture import capture, input_names, normalize_example_args, unwrap_module
from crossport.capture.bind import bind_example_args
from crossport.capture.borrow import borrowed, warn_if_training
from crossport.errors import ConversionError, CrossportError, InputError, ParityError
from crossport.options import ConvertOptions
from crossport.parity import ParityReport, verify
from crossport.parity.reference import TorchReference, can_run_beside
from crossport.parity.verify import CheckPlan, plan_check
from crossport.to_keras.emit import Emitter
from crossport.to_keras.registry import capture_targets


@dataclass
class Conversion:
    """A converted model with everything learnt on the way.

    Attributes:
        model: the Keras functional model (PyTorch layout in and out by default).
        report: the parity report (``None`` when ``check=False``).
        exported: the ``torch.export.ExportedProgram`` the model was built from.
        transposes: transposes inside the model, not counting those at its inputs/outputs.
        boundary_transposes: transposes at the inputs and outputs (layout conversion).
        seconds: wall time per stage (capture, convert, verify).
        module, example_args, options: what was converted, for re-checks after export
            (for example arguments beyond tensors, a view of the module taking their
            tensor leaves, and those leaves: ``capture/bind.py``).
        origins: each Keras operation's torch graph node (``to_keras/origins.py``), which
            names the per-layer quantization report's rows.
        emitted: every graph node's Keras tensor and layout, for the re-checks' replay of
            integers that rounding decided (``parity/ties.py``); dropped with ``model``
            (``conversion.model = None`` frees the Keras layers, as the generative export
            does before TF's converter runs).
    """

    model: keras.Model
    report: ParityReport | None
    exported: torch.export.ExportedProgram
    transposes: int
    boundary_transposes: int
    seconds: dict[str, float] = field(default_factory=dict)
    module: torch.nn.Module | None = None
    example_args: tuple = ()
    options: ConvertOptions | None = None
    origins: dict = field(default_factory=dict, repr=False)  # Keras operation -> torch node
    emitted: object = field(default=None, repr=False)  # every node's Keras tensor: re-checks

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        if name == "model" and value is None:  # its node values hold every layer: let go
            super().__setattr__("emitted", None)

    def summary(self) -> str:
        stages = ", ".join(f"{k} {v:.1f}s" for k, v in self.seconds.items())
        parity = self.report.summary() if self.report else "parity: not checked"
        return (f"{parity}\ntransposes: {self.transposes} inside the model, "
                f"{self.boundary_transposes} at inputs/outputs\ntime: {stages}")


def _options(options: ConvertOptions | None, overrides: dict) -> ConvertOptions:
    options = options or ConvertOptions()
    if not isinstance(options, ConvertOptions):
        raise InputError(f"options must be a crossport.ConvertOptions, got "
                         f"{type(options).__name__} (or pass options as keywords)")
    unknown = set(overrides) - set(ConvertOptions.__dataclass_fields__)
    if unknown:
        raise InputError(f"unknown option(s) {sorted(unknown)}; the options are "
                         f"{sorted(ConvertOptions.__dataclass_fields__)}")
    return replace(options, **overrides).validate()


class _Stages:
    """Times each stage and tells an optional ``on_stage(name)`` callback when one starts."""

    def __init__(self, on_stage: Callable[[str], None] | None):
        self.seconds: dict[str, float] = {}
        self._on_stage = on_stage

    @contextmanager
    def __call__(self, name: str):
        if self._on_stage is not None:
            self._on_stage(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = time.perf_counter() - start


def convert_with_report(module: torch.nn.Module, example_args, options: ConvertOptions | None = None,
                        *, on_stage: Callable[[str], None] | None = None,
                        **overrides) -> Conversion:
    """Convert ``module`` and return the model with its report, timings and transposes.

    Same arguments as :func:`convert`, plus ``on_stage``, called with ``"capture"``,
    ``"convert"`` and ``"verify"`` as each stage starts (progress displays). A failed parity
    check still raises ``ParityError`` (its ``report`` attribute has the details) unless
    ``check=False``.

    Example:
        >>> import torch, crossport
        >>> conv = crossport.convert_with_report(torch.nn.Conv2d(3, 4, 3).eval(),
        ...                                      (torch.randn(1, 3, 8, 8),))
        >>> conv.report.passed, conv.transposes
        (True, 0)
    """
    opts = _options(options, overrides)
    module = unwrap_module(module)
    if isinstance(module, torch.nn.Module):
        warn_if_training(module)
    if isinstance(example_args, (tuple, list)):  # containers and numbers: tensor leaves
        module, example_args = bind_example_args(module, tuple(example_args))
    args = normalize_example_args(example_args)
    stage = _Stages(on_stage)
    with stage("capture"):
        exported = capture(module, args, opts, capture_targets())
    report = None
    with ExitStack() as checking:
        with stage("convert"):
            emitter = Emitter(exported, input_names(module, len(args)), opts)
            emitter.preflight()  # refuse before any torch forward runs
            if opts.check:
                checking.enter_context(borrowed(module))  # module left as it was
                plan, reference = _start_reference(module, exported, args, opts, checking)
            emitted = emitter.emit()
        if opts.check:
            with stage("verify"), _running_keras(module):
                report = verify(module, exported, emitted, args, opts, plan, reference)
    if report is not None and not report.passed:
        raise ParityError(
            f"the converted {type(module).__name__} does not match torch\n{report.summary()}",
            report,
        )
    internal = emitted.transposes - emitted.boundary_transposes
    return Conversion(emitted.model, report, exported, internal, emitted.boundary_transposes,
                      stage.seconds, module, args, opts, emitted.origins, emitted)


def _start_reference(module, exported, args: tuple, opts: ConvertOptions,
                     checking: ExitStack) -> tuple[CheckPlan | None, TorchReference | None]:
    """The check's plan, and torch's forwards on it started on a worker thread: they run
    while the Keras model is built (``checking`` stops them if the build fails). Not for a
    forward that writes buffers in place, which the build reads, nor under thread-local torch
    state a worker would not inherit: ``verify`` then plans and runs torch itself, after the
    build, as the check always did."""
    if not can_run_beside(exported):
        return None, None
    plan = plan_check(module, exported, args, opts)
    return plan, checking.enter_context(TorchReference(module, plan.input_sets, True))


@contextmanager
def _running_keras(module: torch.nn.Module):
    """A converted model that fails when run (a TF kernel rejecting a dtype, ...) is a
    ``ConversionError``, not TensorFlow's exception."""
    try:
        yield
    except CrossportError:
        raise
    except Exception as exc:  # TF/Keras raise many types at run time
        detail = " ".join(str(exc).split())[:300]
        raise ConversionError(
            f"the Keras model converted from {type(module).__name__} failed to run: "
            f"{type(exc).__name__}: {detail} (it builds, but TensorFlow rejects it at run time; "
            "a crossport bug: please report it with this message)") from exc


def convert(module: torch.nn.Module, example_args, options: ConvertOptions | None = None,
            **overrides) -> keras.Model:
    """Convert a ``torch.nn.Module`` into a Keras 3 functional model that computes the same.

    Args:
        module: the module to convert; its eval-mode function is converted and the module
            itself is left unchanged (attributes, buffers, training flags).
        example_args: a tensor, or a tuple of ``forward``'s arguments in order: tensors,
            lists/tuples/dicts of tensors (one Keras input per tensor, named after the
            argument and key: ``images_0``, ``batch_pixels``), and Python numbers, bools,
            strings or None, which are fixed at their example values (as torch.export fixes
            them; the Keras model does not take them).
        options: a :class:`ConvertOptions`; keyword ``overrides`` replace its fields
            (``check``, ``atol``, ``channels_last_io``, ``dynamic_batch``, ...).

    Returns:
        A ``keras.Model``. Call it with numpy arrays in PyTorch layout (one array, or a list
        in ``forward``'s order); it returns outputs nested as torch returns them.

    Raises:
        UnsupportedOpError: lists every op without a faithful conversion, with module
            paths and source lines.
        CaptureError: torch.export cannot capture the module.
        ParityError: the check found a divergence (the message names the first diverging
            node and says whether it is float32 rounding or a semantic error).

    Example:
        >>> import torch, crossport
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))
        >>> model = crossport.convert(net.eval(), (torch.randn(2, 3, 16, 16),))
        >>> [layer.name for layer in model.layers][1:]
        ['0', '1']
    """
    return convert_with_report(module, example_args, options, **overrides).model
