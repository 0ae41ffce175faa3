"""Format round trip on the torchvision CNN zoo: every artifact re-loaded and re-checked.

Each classification CNN of ``test_torchvision_zoo`` (random weights made live) is converted
with ``dynamic_batch=True`` at a small input and written as ``.keras`` and fp32 TFLite (six
also as a SavedModel) by ``crossport.export``, which re-loads the file (TFLite on the
LiteRT interpreter, its own kernels) and compares it with torch eager on fresh inputs. fp32
TFLite must stay within 1e-4 of torch, or (a live model's large logits) be no further from
torch float64 than twice torch float32's own distance: rounding by parity.md's evidence, not
a loosened bound. Three models also go through fp16 and int8 TFLite at their stated
tolerances, and one segmentation model (dict output) through ``.keras`` and TFLite.
"""

from __future__ import annotations

import time

import pytest

import crossport
from crossport.export import FORMATS
from tests.zoo.test_torchvision_zoo import CLASSIFICATION, SEGMENTATION, build_live

pytestmark = pytest.mark.slow

TFLITE_ATOL = 1e-4
# Small inputs keep the file to minutes; every architecture in the table accepts 96x96
# (inception_v3 needs >= 75). Non-square, so an H/W mix-up in an artifact shows.
SHAPE = (1, 3, 96, 112)
QUANTIZED = ("mobilenet_v3_small", "resnet18", "squeezenet1_0")
# A SavedModel runs the TF kernels the conversion's check ran, from a traced graph: written
# for a few architectures here (tests/export/test_layer_configs reloads every layer type's
# SavedModel in a fresh process), not for all 18 (~7 s each of CI).
SAVED_MODEL = QUANTIZED + ("inception_v3", "efficientnet_v2_s", "shufflenet_v2_x1_0")
SEGMENTATION_MODEL = "lraspp_mobilenet_v3_large"


def _export_all(torchvision, tmp_path, name, kwargs, segmentation, formats):
    start = time.perf_counter()
    module, example = build_live(torchvision, name, kwargs, SHAPE, segmentation)
    conversion = crossport.convert_with_report(module, example, check=False,
                                               dynamic_batch=True)
    assert conversion.model.inputs[0].shape[0] is None, "batch dim is not dynamic"
    results = {}
    for fmt, filename in formats:
        result = crossport.export(conversion, tmp_path / filename, fmt)
        print(f"{name} {fmt}: error {result.max_error:.2e} (tolerance "
              f"{result.tolerance:.0e}), {result.seconds:.1f} s")
        assert result.passed and result.path.exists()
        assert result.tolerance == (FORMATS[fmt] or conversion.options.atol)
        results[fmt] = result
    print(f"{name}: {time.perf_counter() - start:.1f} s in all")
    _assert_tflite_within_rounding(results["tflite"])
    return results


def _assert_tflite_within_rounding(result):
    """1e-4 of torch, or float64 evidence that the excess is float32 rounding: inception_v3's
    live logits put torch fp32 itself 8e-5 from fp64, and the .tflite 8.1e-5 (1.2e-4 apart)."""
    if result.max_error <= TFLITE_ATOL:
        return
    evidence = result.recheck.evidence
    assert evidence is not None, f"error {result.max_error:.2e} without float64 evidence"
    assert evidence.keras_vs_fp64 <= 2 * evidence.torch_vs_fp64, evidence


@pytest.mark.parametrize("name, kwargs", [pytest.param(n, k, id=n)
                                          for n, k, _shape in CLASSIFICATION])
def test_classification_round_trip(torchvision, tmp_path, name, kwargs):
    formats = [("keras", "model.keras"), ("tflite", "model.tflite")]
    if name in SAVED_MODEL:
        formats.append(("saved_model", "saved_model"))
    if name in QUANTIZED:
        formats += [("tflite-fp16", "model_fp16.tflite"), ("tflite-int8", "model_int8.tflite")]
    _export_all(torchvision, tmp_path, name, kwargs, False, formats)


def test_segmentation_round_trip(torchvision, tmp_path):
    kwargs = next(k for n, k, _shape in SEGMENTATION if n == SEGMENTATION_MODEL)
    _export_all(torchvision, tmp_path, SEGMENTATION_MODEL, kwargs, True,
                [("keras", "model.keras"), ("tflite", "model.tflite")])
