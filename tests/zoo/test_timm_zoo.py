"""timm zoo: one small model per architecture family, random weights made live, parity proven.

Each model is built with ``pretrained=False`` (timm's own ``test_*`` models where the family
has one, else the smallest variant, shrunk through ``timm.create_model`` keywords: depth,
width, ``img_size``), made live (``crossport.parity.live``: no dead branches, BatchNorm
calibrated), converted by ``convert_with_report`` with the default check, and compared again
with torch eager on a fresh seeded input: within ``ATOL``, or float32 rounding by the float64
evidence (docs/parity.md). ``benchmarks/timm_sweep.py`` runs every timm family (docs/parity.md,
"timm sweep"); this file keeps a representative, fast subset.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from crossport.compat import import_torchvision
from crossport.parity.live import check_live, make_live
from crossport.parity.verify import fresh_inputs
from tests.zoo.common import assert_matches_on, convert_checked, zoo_params

pytestmark = pytest.mark.slow

ATOL = 1e-4
BATCH = 2
_TINY_VIT = dict(embed_dim=32, depth=2, num_heads=2)

# name -> (timm model, create_model keywords, input size). Families in the comments.
MODELS = {
    "resnet": ("test_resnet", {}, 96),
    "efficientnet": ("test_efficientnet", {}, 96),
    "efficientnet_ln": ("test_efficientnet_ln", {}, 96),
    "convnext": ("test_convnext", {}, 96),
    "byobnet": ("test_byobnet", {}, 96),
    "nfnet": ("test_nfnet", {}, 96),
    "mambaout": ("test_mambaout", {}, 96),
    "regnet": ("regnetx_002", {}, 96),
    "mobilenetv3": ("mobilenetv3_small_050", {}, 96),
    "vit": ("test_vit", {}, 64),
    "vit_relpos": ("test_vit_relpos", dict(img_size=64), 64),
    "deit_distilled": ("deit_tiny_distilled_patch16_224", dict(_TINY_VIT, img_size=64), 64),
    "coatnet": ("test_coatnet", dict(img_size=64), 64),
    "maxvit": ("test_maxvit", dict(img_size=64), 64),
    "swin": ("swin_tiny_patch4_window7_224",
             dict(img_size=64, window_size=4, embed_dim=16, depths=(1, 1, 2, 1),
                  num_heads=(1, 2, 2, 4)), 64),
    "mixer": ("timm.models.mlp_mixer.MlpMixer",
              dict(img_size=64, patch_size=16, num_blocks=2, embed_dim=64), 64),
    "levit": ("levit_128s", dict(img_size=64), 64),
    "mobilevit": ("mobilevit_xxs", {}, 64),
    "efficientformer_v2": ("efficientformerv2_s0", dict(img_size=64), 64),
    "edgenext": ("edgenext_xx_small", {}, 64),
    "pvt_v2": ("pvt_v2_b0", {}, 64),
    "xcit": ("xcit_nano_12_p8_224", dict(img_size=64, depth=2), 64),
}
# Known gaps: name -> the failure today (xfail strict, so a fix shows up as XPASS).
KNOWN_GAPS: dict[str, str] = {}


def build(name):
    import_torchvision()  # timm imports torchvision; make it importable on CPU torch
    import timm

    model, kwargs, size = MODELS[name]
    torch.manual_seed(0)
    if "." in model:  # a model class built directly (its registered variants are large)
        path, cls = model.rsplit(".", 1)
        module = getattr(importlib.import_module(path), cls)(**kwargs)
    else:
        module = timm.create_model(model, pretrained=False, **kwargs)
    example = (torch.randn(BATCH, 3, size, size, generator=torch.Generator().manual_seed(0)),)
    make_live(module, example)
    check_live(module, example)
    return module.eval(), example


@pytest.mark.parametrize("name", zoo_params(MODELS, KNOWN_GAPS))
def test_timm_model(name):
    module, example = build(name)
    conversion = convert_checked(name, module, example)
    # independently of the check: a fresh seeded input, torch eager against Keras
    assert_matches_on(module, conversion, fresh_inputs(example, 1234), ATOL)
