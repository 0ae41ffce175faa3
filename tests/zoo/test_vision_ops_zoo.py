"""Vision-ops zoo: image-processing code converted cold with the check on.

torchvision.transforms.v2.functional on tensors and kornia, each transform a tiny module
with fixed parameters (``tests/zoo/vision_cases.py``, shared with
``benchmarks/vision_ops_sweep.py``). Every row converts with the default check (which must
pass or find only float32 rounding), then compares torch and the Keras model on a second
seeded image in range and on one with NaN, +inf and -inf at fixed pixels: shapes, dtypes,
NaN/inf positions, integers exactly (``tests/ops/opinfo_support.compare``). The rows are the
cases the sweep found differing (integer-image resizes, now refused; NaN/inf positions of
bilinear resizing and max pooling, documented differences kept as strict xfails) and a
representative set of the rest (docs/parity.md, "Vision-ops sweep").

kornia is installed by ``./run setup`` with ``--no-deps`` (its ``kornia_rs`` is in the
``realworld`` extra); its rows skip when it is not importable.
"""

from __future__ import annotations

import functools

import pytest
import torch

from crossport.errors import UnsupportedOpError
from crossport.parity.verify import run_keras
from tests.ops.opinfo_support import _float64, _tensors, compare
from tests.zoo.common import convert_checked
from tests.zoo.vision_cases import image_like, kornia_cases, torchvision_cases, with_specials

pytestmark = pytest.mark.slow

# NaN/inf positions the sweep found differing where docs/parity.md records the difference
# as kept for speed (NaN propagation): tf.image.resize's half-pixel bilinear makes NaN of an
# inf beside a finite pixel, TF's max pool skips NaN. Strict: a fix turns them into passes.
DOCUMENTED = {
    "tv.resize_down.bilinear.aa0.f32": "bilinear", "kornia.geometry.resize": "bilinear",
    "kornia.geometry.resize_aa": "bilinear", "kornia.geometry.rescale": "bilinear",
    "kornia.geometry.pyrdown": "bilinear", "kornia.geometry.pyrup": "bilinear",
    "kornia.filters.max_blur_pool2d": "max pool",
}
WHY = {"bilinear": "tf.image.resize (half-pixel bilinear) makes NaN of inf beside a finite "
                   "pixel: documented in docs/parity.md, kept for speed",
       "max pool": "TF's max pool skips NaN: documented in docs/parity.md, kept for speed"}
REPRESENTATIVE = [
    "tv.resize_down.bilinear.aa1.f32", "tv.resize_up.bicubic.f32",
    "tv.resize_down.nearest.aa0.u8", "tv.resize_up.nearest_exact.f32",
    "tv.affine.nearest.u8", "tv.rotate.bilinear.f32", "tv.rotate_expand.f32",
    "tv.elastic.f32", "tv.gaussian_blur.u8", "tv.adjust_hue.f32", "tv.adjust_hue.u8",
    "tv.adjust_saturation.u8", "tv.adjust_sharpness.u8", "tv.adjust_gamma.u8",
    "tv.posterize.u8", "tv.solarize.f32", "tv.autocontrast.u8", "tv.equalize.u8",
    "tv.invert.u8", "tv.pad.reflect.f32", "tv.pad.symmetric.u8", "tv.five_crop.f32",
    "tv.center_crop_pad.u8", "tv.erase.f32", "tv.to_dtype_f32.u8",
    "tv.to_dtype_f32_then_u8.u8",
    "kornia.color.hsv_roundtrip", "kornia.color.hls_roundtrip", "kornia.color.lab_roundtrip",
    "kornia.color.luv_roundtrip", "kornia.color.rgb_to_ycbcr",
    "kornia.filters.GaussianBlur2d_reflect", "kornia.filters.MedianBlur",
    "kornia.filters.Sobel", "kornia.filters.BilateralBlur", "kornia.filters.MotionBlur",
    "kornia.enhance.adjust_hue", "kornia.enhance.sharpness", "kornia.enhance.solarize",
    "kornia.geometry.warp_affine.bilinear.reflection", "kornia.geometry.warp_perspective.nearest",
    "kornia.geometry.rotate", "kornia.geometry.remap", "kornia.geometry.crop_and_resize",
    "kornia.geometry.elastic_transform2d", "kornia.morphology.dilation_cross",
    "kornia.morphology.top_hat", "kornia.feature.harris_response",
    "kornia.feature.SIFTDescriptor", "kornia.ssim", "kornia.psnr",
]
# normal-distributed check inputs leave [0, 1]: out-of-range float -> uint8 casts are
# undefined in torch (docs/parity.md), kornia's equalize raises: the example checks alone
IN_RANGE = ["tv.to_dtype_u8.f32", "tv.equalize.f32", "kornia.enhance.posterize",
            "kornia.enhance.equalize"]
# torch's fixed-point integer resize kernels: refused, naming the op
REFUSED = {"tv.resize_down.bilinear.aa1.u8": "aten._upsample_bilinear2d_aa",
           "tv.resize_down.bicubic.aa0.u8": "aten.upsample_bicubic2d"}


@functools.cache
def _torchvision():
    return torchvision_cases()


@functools.cache
def _kornia():
    return kornia_cases()


def build(name: str):
    if name.startswith("kornia."):
        pytest.importorskip("kornia", reason="kornia is not installed (./run setup adds it)")
        return _kornia()[name]()
    return _torchvision()[name]()


def assert_matches_images(module, conversion, example) -> None:
    """torch and Keras agree on a seeded in-range image and on one with NaN/inf pixels."""
    checks = [("seeded image", image_like(example, 4321))]
    if any(t.is_floating_point() for t in example):
        checks.append(("NaN/inf image", with_specials(image_like(example, 99))))
    for what, inputs in checks:
        try:
            with torch.no_grad():
                ref = module(*(t.clone() for t in inputs))
        except RuntimeError as exc:  # kornia asserts values in [0, 1]: NaN is out
            print(f"{what}: torch rejects it ({exc})")
            continue
        got = run_keras(conversion.model, inputs, False, like=ref)
        problems, err = compare(_tensors(ref), got, _float64(module, inputs))
        print(f"{what}: normalized error {err:.2e}")
        assert not problems, f"{what}: " + "; ".join(problems)


ROWS = [pytest.param(name, id=name, marks=pytest.mark.xfail(strict=True,
                                                              reason=WHY[DOCUMENTED[name]]))
        for name in DOCUMENTED] + REPRESENTATIVE + IN_RANGE


@pytest.mark.parametrize("name", ROWS)
def test_vision_op_converts(name):
    module, example = build(name)
    options = {"check_inputs": 0} if name in IN_RANGE else {}
    conversion = convert_checked(name, module.eval(), example, **options)
    assert_matches_images(module, conversion, example)


@pytest.mark.parametrize("name", REFUSED)
def test_integer_image_resize_is_refused(name):
    module, example = build(name)
    with pytest.raises(UnsupportedOpError, match=f"{REFUSED[name]}.*fixed-point integer"):
        convert_checked(name, module.eval(), example)
