"""The one place for environment workarounds."""

from __future__ import annotations

import contextlib
import os
import warnings


def quiet_tensorflow() -> None:
    """Silence TensorFlow's C++ start-up logging (call before TensorFlow is imported)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


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
