"""Real-world zoo: models from the packages users bring, converted cold with the check on.

ultralytics (YOLO built from its packaged yaml), segmentation_models_pytorch
(``encoder_weights=None``), diffusers (tiny UNets and VAE), MONAI (3D UNet; SwinUNETR at its
usual 96³ input) and HF transformers from small configs (decoder LLMs, full T5/BART,
CLIP, DINOv2, BEiT, SAM, ConvNeXtV2). Nothing is downloaded: every model is built from
code or a config with seeded random weights, made live (``crossport.parity.live``) and
converted *cold* (no eager forward in eval mode first: YOLO's head caches its anchors on
the first one) by ``convert_with_report`` with the default parity check. The check must
pass, or find only float32 rounding (docs/parity.md). YOLO also converts with
``channels_last_io=True`` and goes through a TFLite export re-checked on LiteRT.

These packages are installed with ``pip --no-deps`` by ``./run setup`` (they would pull
another torch); see the ``realworld`` extra in pyproject.toml for their small deps.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest
import torch
from torch import nn

import crossport
from crossport.compat import import_torchvision
from crossport.parity import normalized_error, rounding_verdict
from crossport.parity.live import make_live
from crossport.parity.verify import fresh_inputs, run_keras, run_torch
from tests.zoo.common import convert_checked, zoo_params

pytestmark = pytest.mark.slow

# ultralytics: never reach the network, never pip-install, settings outside $HOME.
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_AUTOINSTALL", "false")
os.environ.setdefault("YOLO_VERBOSE", "false")
os.environ.setdefault("YOLO_CONFIG_DIR", str(Path(tempfile.gettempdir()) / "crossport-yolo"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

BATCH, VOCAB, SEQ = 2, 128, 8


def _seed(seed=0):
    return torch.Generator().manual_seed(seed)


def _images(shape, seed=0):
    return torch.randn(shape, generator=_seed(seed))


def _tokens(seed=0, length=SEQ, pad=2):
    ids = torch.randint(0, VOCAB, (BATCH, length), generator=_seed(seed))
    mask = torch.ones(BATCH, length, dtype=torch.long)
    mask[1, length - pad:] = 0  # padding at the end of the second sequence
    return ids, mask


class Outputs(nn.Module):
    """Calls ``model(**dict(zip(names, args)))`` and returns the named output fields."""

    def __init__(self, model, names, fields):
        super().__init__()
        self.model, self.names, self.fields = model, tuple(names), tuple(fields)

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)))
        picked = tuple(getattr(out, f) if hasattr(out, f) else out[f] for f in self.fields)
        return picked if len(picked) > 1 else picked[0]


# --- ultralytics ------------------------------------------------------------------------

def _yolo(yaml):
    def build():
        import_torchvision()
        from ultralytics import YOLO

        return YOLO(yaml).model, (_images((1, 3, 128, 160)),)

    return build


# --- segmentation_models_pytorch --------------------------------------------------------

def _smp(arch, encoder):
    def build():
        import_torchvision()
        import segmentation_models_pytorch as smp

        model = getattr(smp, arch)(encoder, encoder_weights=None, in_channels=3, classes=2)
        return model, (_images((1, 3, 64, 96)),)

    return build


# --- diffusers --------------------------------------------------------------------------

_TINY_UNET = dict(block_out_channels=(16, 32), layers_per_block=1, norm_num_groups=8,
                  attention_head_dim=8)


def _unet2d():
    from diffusers import UNet2DModel

    model = UNet2DModel(sample_size=16, in_channels=3, out_channels=3,
                        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                        up_block_types=("AttnUpBlock2D", "UpBlock2D"), **_TINY_UNET)
    example = (_images((BATCH, 3, 16, 16)), torch.tensor([10.0, 500.0]))
    return Outputs(model, ("sample", "timestep"), ("sample",)), example


def _unet2d_condition():
    from diffusers import UNet2DConditionModel

    model = UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4,
                                 down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                 up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
                                 cross_attention_dim=16, **_TINY_UNET)
    example = (_images((BATCH, 4, 16, 16)), torch.tensor([10.0, 500.0]),
               _images((BATCH, 6, 16), 1))
    names = ("sample", "timestep", "encoder_hidden_states")
    return Outputs(model, names, ("sample",)), example


def _autoencoder_kl():
    from diffusers import AutoencoderKL

    model = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, sample_size=32,
                          block_out_channels=(16, 32), layers_per_block=1, norm_num_groups=8,
                          down_block_types=("DownEncoderBlock2D",) * 2,
                          up_block_types=("UpDecoderBlock2D",) * 2)
    return Outputs(model, ("sample",), ("sample",)), (_images((1, 3, 32, 32)),)


# --- MONAI ------------------------------------------------------------------------------

def _monai_unet():
    from monai.networks.nets import UNet

    model = UNet(spatial_dims=3, in_channels=1, out_channels=2, channels=(8, 16, 32),
                 strides=(2, 2), num_res_units=1)
    return model, (_images((1, 1, 32, 32, 32)),)


def _swin_unetr(size):
    def build():
        from monai.networks.nets import SwinUNETR

        # feature_size 12 is the smallest allowed; 64³ the smallest input whose bottleneck
        # (5 halvings) leaves InstanceNorm more than one voxel.
        model = SwinUNETR(in_channels=1, out_channels=2, feature_size=12)
        return model, (_images((1, 1, size, size, size)),)

    return build


# --- HF transformers --------------------------------------------------------------------

def _transformers():
    import_torchvision()  # transformers imports torchvision; make it importable on CPU torch
    import transformers

    return transformers


_DECODER = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                use_cache=False)
_LM_NAMES = ("input_ids", "attention_mask")


def _decoder(config_name, model_name, **overrides):
    def build():
        T = _transformers()
        config = getattr(T, config_name)(**{**_DECODER, **overrides})
        model = getattr(T, model_name)(config)
        return Outputs(model, _LM_NAMES, ("logits",)), _tokens()

    return build


def _mamba():
    T = _transformers()
    config = T.MambaConfig(vocab_size=VOCAB, hidden_size=32, state_size=8, num_hidden_layers=2,
                           expand=2, conv_kernel=4, use_cache=False)
    return Outputs(T.MambaForCausalLM(config), ("input_ids",), ("logits",)), _tokens()[:1]


def _seq2seq(config_name, model_name, **config):
    def build():
        T = _transformers()
        model = getattr(T, model_name)(getattr(T, config_name)(vocab_size=VOCAB, **config))
        ids, mask = _tokens()
        decoder_ids = torch.randint(0, VOCAB, (BATCH, 5), generator=_seed(3))
        names = ("input_ids", "attention_mask", "decoder_input_ids")
        return Outputs(model, names, ("logits",)), (ids, mask, decoder_ids)

    return build


_VISION = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


def _clip():
    T = _transformers()
    text = dict(vocab_size=VOCAB, max_position_embeddings=SEQ, **_VISION)
    vision = dict(image_size=32, patch_size=8, **_VISION)
    model = T.CLIPModel(T.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))
    ids, mask = _tokens()
    names = ("input_ids", "pixel_values", "attention_mask")
    fields = ("logits_per_image", "text_embeds", "image_embeds")
    return Outputs(model, names, fields), (ids, _images((BATCH, 3, 32, 32)), mask)


def _vision(config_name, model_name, size=32, **config):
    def build():
        T = _transformers()
        model = getattr(T, model_name)(getattr(T, config_name)(**config))
        return (Outputs(model, ("pixel_values",), ("last_hidden_state",)),
                (_images((BATCH, 3, size, size)),))

    return build


def _sam():
    T = _transformers()
    vision = dict(hidden_size=32, output_channels=16, num_hidden_layers=2, num_attention_heads=2,
                  mlp_dim=64, image_size=64, patch_size=8, window_size=4,
                  global_attn_indexes=[1], num_pos_feats=8)
    prompt = dict(hidden_size=16, image_size=64, patch_size=8, mask_input_channels=4)
    mask = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, mlp_dim=32,
                iou_head_hidden_dim=16)
    config = T.SamConfig(vision_config=vision, prompt_encoder_config=prompt,
                         mask_decoder_config=mask)
    points = torch.rand(1, 1, 2, 2, generator=_seed(2)) * 64  # 2 point prompts, in pixels
    names = ("pixel_values", "input_points")
    return (Outputs(T.SamModel(config), names, ("pred_masks", "iou_scores")),
            (_images((1, 3, 64, 64)), points))


# name -> builder of (module, example args). Seeded before each build.
MODELS = {
    "yolov8n": _yolo("yolov8n.yaml"),
    "yolo11n": _yolo("yolo11n.yaml"),
    "smp_unet_resnet18": _smp("Unet", "resnet18"),
    "smp_deeplabv3plus_mobilenet_v2": _smp("DeepLabV3Plus", "mobilenet_v2"),
    "diffusers_unet2d": _unet2d,
    "diffusers_unet2d_condition": _unet2d_condition,
    "diffusers_autoencoder_kl": _autoencoder_kl,
    "monai_unet3d": _monai_unet,
    "monai_swin_unetr_64": _swin_unetr(64),
    "llama": _decoder("LlamaConfig", "LlamaForCausalLM"),
    "mistral": _decoder("MistralConfig", "MistralForCausalLM", sliding_window=4),
    "qwen2": _decoder("Qwen2Config", "Qwen2ForCausalLM"),
    "gemma": _decoder("GemmaConfig", "GemmaForCausalLM", head_dim=8),
    "phi3": _decoder("Phi3Config", "Phi3ForCausalLM", pad_token_id=0),
    "falcon": _decoder("FalconConfig", "FalconForCausalLM", new_decoder_architecture=True,
                       num_kv_heads=2),
    # transformers 5's default experts path (sorted by expert, histc, grouped matmul) and
    # the batched_mm one (a weight gather per token)
    "mixtral": _decoder("MixtralConfig", "MixtralForCausalLM", num_local_experts=4,
                        num_experts_per_tok=2),
    "mixtral_batched_mm": _decoder("MixtralConfig", "MixtralForCausalLM", num_local_experts=4,
                                   num_experts_per_tok=2, experts_implementation="batched_mm"),
    "mamba": _mamba,
    "t5": _seq2seq("T5Config", "T5ForConditionalGeneration", d_model=32, d_kv=8, d_ff=64,
                   num_layers=2, num_heads=4, decoder_start_token_id=0),
    "bart": _seq2seq("BartConfig", "BartForConditionalGeneration", d_model=32,
                     encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                     max_position_embeddings=64),
    "clip": _clip,
    "dinov2": _vision("Dinov2Config", "Dinov2Model", image_size=32, patch_size=8, **_VISION),
    "beit": _vision("BeitConfig", "BeitModel", image_size=32, patch_size=8,
                    use_relative_position_bias=True, **_VISION),
    "sam": _sam,
    "convnextv2": _vision("ConvNextV2Config", "ConvNextV2Model", num_stages=2,
                          hidden_sizes=[16, 32], depths=[1, 1]),
}
YOLO = {"yolov8n", "yolo11n"}

# Known gaps: name -> the failure today (xfail strict, so a fix shows up as XPASS). None today:
# YOLO's cold capture, BEiT's folded index, SAM's slice assignment, ConvNeXtV2's GRN norm and
# SwinUNETR's large reductions were the gaps this file started with.
KNOWN_GAPS: dict[str, str] = {}


def build(name):
    """The model with seeded random weights made live (train-mode forwards only: cold)."""
    return _live(MODELS[name])


def _live(builder):
    torch.manual_seed(0)
    module, example = builder()
    make_live(module, example)
    return module.eval(), example


@pytest.mark.parametrize("name", zoo_params(MODELS, KNOWN_GAPS))
def test_realworld_model(name, tmp_path):
    module, example = build(name)
    convert_checked(name, module, example, channels_last_io=name in YOLO)


# YOLO's box decode (``anchors - lt``, anchors built in forward) once met TF's TFLite converter
# bug that swaps the operands of ``c - transpose(x)`` (~800 px boxes); the layout pass now
# transposes the anchors instead (tests/export/test_tflite_static.py holds the small case).
@pytest.mark.parametrize("name", sorted(YOLO))
def test_yolo_exports_to_tflite(name, tmp_path):
    module, example = build(name)
    conversion = crossport.convert_with_report(module, example, channels_last_io=True)
    result = crossport.export(conversion, tmp_path / f"{name}.tflite")
    print(f"{name} tflite: error {result.max_error:.2e}, {result.seconds:.1f}s")
    assert result.passed and result.path.exists()


# SwinUNETR at its usual 96³ input: minutes and ~13 GB. The default check is off here: its
# failure diagnosis once held every intermediate in float32, float64 and Keras at once
# (> 21 GB at this size). It streams now (about one more Keras forward on top of the
# check), but a failing check at 96³ has not been measured under 20 GB, so one fresh input
# is compared instead, with float64 evidence when past the tolerance.
@pytest.mark.xdist_group("big-memory")  # never beside the 1.1B export (CI: --dist loadgroup)
def test_swin_unetr_at_its_usual_size():
    module, example = _live(_swin_unetr(96))
    start = time.perf_counter()
    conversion = crossport.convert_with_report(module, example, check=False)
    inputs = fresh_inputs(example, 7)
    ref = run_torch(module, inputs)[0]
    got = run_keras(conversion.model, inputs, False)[0]
    error = normalized_error(ref, got)
    print(f"swin_unetr 96³: error {error:.2e}, {time.perf_counter() - start:.1f}s")
    if error <= conversion.options.atol:
        return
    module64 = module.double()  # the module is not used after this
    ref64 = run_torch(module64, tuple(a.double() for a in inputs))[0]
    keras_vs64, torch_vs64 = normalized_error(ref64, got), normalized_error(ref64, ref)
    verdict = rounding_verdict(keras_vs64, torch_vs64)
    assert verdict == "rounding", (f"error {error:.2e}: Keras {keras_vs64:.2e} from float64, "
                                   f"torch fp32 {torch_vs64:.2e}: {verdict}")

