"""The one place for environment workarounds."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings


def import_tensorflow_quietly() -> None:
    """Import TensorFlow without the lines its libraries print while loading.

    The absl and oneDNN start-up lines ("All log messages before absl::InitializeLog() ...")
    are written before any logging setting applies, so file descriptor 2 points at
    /dev/null during the import (Python exceptions still propagate). Nothing else changes:
    no environment variable, logger or warning filter. Skipped when TensorFlow is already
    imported or the user asked for its logs (``TF_CPP_MIN_LOG_LEVEL=0``).
    """
    if "tensorflow" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0":
        return
    with stderr_fd_silenced():
        import tensorflow  # noqa: F401


def quiet_tensorflow() -> None:
    """Silence TensorFlow's logging for a command-line run: C++ log level, absl and TF's
    Python loggers limited to errors (a library must not do this to its caller)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import_tensorflow_quietly()
    import absl.logging
    import tensorflow as tf

    absl.logging.set_verbosity(absl.logging.ERROR)
    tf.get_logger().setLevel("ERROR")


@contextlib.contextmanager
def stderr_fd_silenced():
    """File descriptor 2 points at /dev/null in the block (native libraries' logging);
    Python exceptions still propagate."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def quiet_warnings() -> None:
    """Hide the deprecation and user warnings torch and Keras print during a conversion,
    and torch's own error logs of failures crossport reports itself (command line only: a
    library must not change its caller's warning filters or loggers)."""
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
    for module in (r"torch(\.|$)", r"keras(\.|$)", r"tensorflow(\.|$)"):
        warnings.filterwarnings("ignore", category=UserWarning, module=module)
    logging.getLogger("torch").setLevel(logging.CRITICAL)


def import_torchvision():
    """Import torchvision on a CPU-only torch build.

    torchvision's wheel is built against CUDA torch: its compiled ops cannot load on the
    CPU build, and the import fails while registering fake kernels for ``torchvision::nms``
    and ``qnms``. Defining those two schemas first lets the pure-Python model definitions
    import; detection ops (nms, roi_align) stay unavailable.
    """
    import torch

    for op in ("nms", "qnms"):
        try:
            torch.library.define(f"torchvision::{op}",
                                 "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        except RuntimeError:
            pass  # already defined by torchvision itself or an earlier call
    import torchvision

    return torchvision


@contextlib.contextmanager
def quiet_tflite_interpreter():
    """Silence ``tf.lite.Interpreter``'s deprecation warning.

    ``tf.lite.experimental.QuantizationDebugger`` (the per-layer quantization metrics) runs
    its NumericVerify debug model on TF's own interpreter: LiteRT lacks that op.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"\s*Warning: tf.lite.Interpreter is deprecated")
        warnings.filterwarnings("ignore", message=r".*experimental_preserve_all_tensors")
        yield


def export_archive_endpoint(archive, name: str):
    """The ``tf.function`` a Keras ``ExportArchive`` made for endpoint ``name`` (Keras keeps
    it on a private trackable; the generative TFLite writer re-traces its Python function)."""
    function = getattr(getattr(archive, "_tf_trackable", archive), name, None)
    if function is None or not hasattr(function, "python_function"):
        raise RuntimeError(f"this Keras version keeps no endpoint {name!r} where crossport "
                           "looks for it (keras.export.ExportArchive internals changed)")
    return function
