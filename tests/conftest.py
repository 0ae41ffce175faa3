"""Test-wide set-up: quiet TensorFlow, deterministic seeds, torchvision on CPU torch."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest
import torch


def load_torchvision():
    """Import torchvision although its compiled ops cannot load on the CPU build of torch.

    The wheel's ``_C.so`` is built against CUDA torch; the import fails while registering
    fake kernels for ``torchvision::nms``/``qnms`` unless their schemas exist. The model
    definitions are pure Python and work; detection ops stay unavailable.
    """
    for op in ("nms", "qnms"):
        try:
            torch.library.define(f"torchvision::{op}",
                                 "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        except RuntimeError:
            pass  # defined already
    import torchvision

    return torchvision


@pytest.fixture(scope="session")
def torchvision():
    return load_torchvision()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
