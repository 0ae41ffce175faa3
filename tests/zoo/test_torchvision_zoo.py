"""torchvision model zoo: real model definitions, random weights made live, parity proven.

Every model is built with random weights, made live (``make_live``: no dead branches,
BatchNorm calibrated, outputs O(1)), converted with ``check=False`` and compared with
torch eager on fresh random inputs (not the export example). An error above 1e-4 passes
only with float64 evidence that it is float32 rounding (docs/parity.md). Every model
converts with zero transposes inside (ShuffleNet's channel shuffles become a channel
gather), counted by the emitter and in the traced TF graph.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils import _pytree as pytree

import crossport
from crossport.parity import normalized_error, rounding_verdict
from crossport.parity.graph import graph_transposes
from crossport.parity.live import check_live, make_live
from crossport.parity.verify import fresh_inputs, from_keras_outputs, run_torch, to_keras_inputs

pytestmark = pytest.mark.slow

ATOL = 1e-4
FRESH_SEEDS = (101, 102)
_SEG = dict(weights=None, weights_backbone=None)

# name, constructor keywords, input shape. 224x224 where cheap; the heavier nets run at
# non-square sizes, which also catch H/W mix-ups a square input hides (and vgg11_bn's
# 5x6 -> 7x7 adaptive pool upsamples with uneven windows).
CLASSIFICATION = [
    ("resnet18", {}, (1, 3, 224, 224)),
    ("resnet50", {}, (1, 3, 160, 192)),
    ("mobilenet_v2", {}, (1, 3, 224, 224)),
    ("mobilenet_v3_small", {}, (1, 3, 224, 224)),
    ("mobilenet_v3_large", {}, (1, 3, 192, 160)),
    ("efficientnet_b0", {}, (1, 3, 224, 224)),
    ("efficientnet_v2_s", {}, (1, 3, 160, 192)),
    ("convnext_tiny", {}, (1, 3, 160, 192)),
    ("regnet_y_400mf", {}, (1, 3, 224, 224)),
    ("densenet121", {}, (1, 3, 160, 192)),
    ("squeezenet1_0", {}, (1, 3, 224, 224)),
    ("shufflenet_v2_x1_0", {}, (1, 3, 224, 224)),
    ("mnasnet0_5", {}, (1, 3, 224, 224)),
    ("googlenet", dict(aux_logits=False, init_weights=True), (1, 3, 192, 160)),
    ("inception_v3", dict(aux_logits=False, init_weights=True), (1, 3, 299, 299)),
    ("alexnet", {}, (1, 3, 224, 224)),
    ("vgg11_bn", {}, (1, 3, 160, 192)),
]
SEGMENTATION = [
    ("fcn_resnet50", dict(_SEG, aux_loss=False), (1, 3, 128, 160)),
    ("deeplabv3_mobilenet_v3_large", dict(_SEG, aux_loss=False), (1, 3, 160, 128)),
    ("lraspp_mobilenet_v3_large", _SEG, (1, 3, 128, 160)),
]
# Known gaps: name -> reason (xfail strict, so a fix shows up as XPASS).
KNOWN_GAPS: dict[str, str] = {}


def _cases(table, segmentation):
    return [pytest.param(name, kwargs, shape, segmentation, id=name,
                         marks=[pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[name])]
                         if name in KNOWN_GAPS else [])
            for name, kwargs, shape in table]


def build_live(torchvision, name, kwargs, shape, segmentation):
    """The torchvision model with random weights made live, and its export example."""
    torch.manual_seed(0)
    zoo = torchvision.models.segmentation if segmentation else torchvision.models
    module = getattr(zoo, name)(**kwargs)
    example = (torch.randn(shape, generator=torch.Generator().manual_seed(0)),)
    make_live(module, example)
    check_live(module, example)
    return module.eval(), example


def assert_parity(module, conversion, example, channels_last_io=False):
    """Torch eager vs Keras on fresh inputs: within ATOL, or proven rounding against fp64."""
    module64 = None
    for seed in FRESH_SEEDS:
        inputs = fresh_inputs(example, seed)
        with torch.no_grad():
            ref_tree = module(*inputs)
        got_tree = conversion.model(_keras_args(inputs, channels_last_io), training=False)
        _assert_same_structure(ref_tree, got_tree)
        ref = [t.numpy() for t in pytree.tree_leaves(ref_tree)]
        got = from_keras_outputs(got_tree, channels_last_io)
        assert [r.shape for r in ref] == [g.shape for g in got]
        error = max(normalized_error(r, g) for r, g in zip(ref, got))
        print(f"fresh input {seed}: normalized error {error:.2e}, max|ref| "
              f"{max(float(abs(r).max()) for r in ref):.3g}")
        if error <= ATOL:
            continue
        # Past tolerance: accept only with fp64 evidence that this is float32 rounding.
        if module64 is None:
            module64 = copy.deepcopy(module).double()
        ref64 = run_torch(module64, tuple(a.double() for a in inputs))
        keras_vs64 = max(normalized_error(r, g) for r, g in zip(ref64, got))
        torch_vs64 = max(normalized_error(r, t) for r, t in zip(ref64, ref))
        verdict = rounding_verdict(keras_vs64, torch_vs64)
        print(f"  Keras vs fp64 {keras_vs64:.2e}, torch fp32 vs fp64 {torch_vs64:.2e}: {verdict}")
        assert verdict == "rounding", (
            f"normalized error {error:.2e} > {ATOL:.0e} and not rounding: Keras vs fp64 "
            f"{keras_vs64:.2e}, torch fp32 vs fp64 {torch_vs64:.2e}")


def _keras_args(inputs, channels_last_io):
    arrays = to_keras_inputs(inputs, channels_last_io)
    return arrays if len(arrays) > 1 else arrays[0]


def _assert_same_structure(ref, got):
    """Keras returns what torch returns: a tensor, or a dict with the same keys."""
    if isinstance(ref, dict):
        assert isinstance(got, dict) and set(got) == set(ref), f"{type(got)} != dict {set(ref)}"
    else:
        assert isinstance(ref, torch.Tensor) and not isinstance(got, (dict, list, tuple))


@pytest.mark.parametrize("name, kwargs, shape, segmentation",
                         _cases(CLASSIFICATION, False) + _cases(SEGMENTATION, True))
def test_torchvision_model(torchvision, name, kwargs, shape, segmentation):
    module, example = build_live(torchvision, name, kwargs, shape, segmentation)
    conversion = crossport.convert_with_report(module, example, check=False)
    assert_parity(module, conversion, example)
    in_graph = graph_transposes(conversion.model)
    print(f"{name}: {conversion.transposes} transposes inside, "
          f"{conversion.boundary_transposes} at the boundary, {in_graph} in the TF graph")
    assert conversion.transposes == 0, f"{conversion.transposes} transposes inside {name}"
    assert in_graph == conversion.boundary_transposes, "the TF graph has more transposes"


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small"])
def test_channels_last_io_has_no_transposes(torchvision, name):
    kwargs, shape = next((k, s) for n, k, s in CLASSIFICATION if n == name)
    module, example = build_live(torchvision, name, kwargs, shape, False)
    conversion = crossport.convert_with_report(module, example, check=False,
                                               channels_last_io=True)
    assert conversion.transposes == 0 and conversion.boundary_transposes == 0
    assert_parity(module, conversion, example, channels_last_io=True)
