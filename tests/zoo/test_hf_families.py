"""More transformers families, one of each architecture not already in the HF zoos.

Relative-position attention (DeBERTa-v2, MPNet), ALiBi (BLOOM), partial rotary and parallel
residuals (GPT-NeoX, Phi), attention soft-capping and sliding windows (Gemma 2), q/k norms
(Qwen3), shared layers (ALBERT), span convolutions (ConvBERT), bottlenecks (MobileBERT),
learned position offsets (OPT), pooling mixers (PoolFormer), attention-bias CNN hybrids
(LeViT), spatial-reduction attention (PVTv2), log-spaced continuous position bias (SwinV2),
detection tokens (YOLOS), HF's CNN ports (ResNet, RegNet, EfficientNet), a linear-attention
RNN (RWKV), a spectrogram transformer (AST), speech encoders with gated relative bias
(WavLM) or a feature projection (Data2Vec-audio) and mixtures of experts on transformers 5's
default experts path (Mixtral, Qwen2-MoE, GPT-OSS). 27 models, about 6 minutes on one
worker. The
sweep over every family (benchmarks/hf_sweep.py, docs/parity.md "transformers sweep")
picked them; tests/zoo/test_hf_zoo.py and test_realworld_zoo.py hold the rest.

Each is built from a tiny config (no downloads), made live, converted with the default
check, then compared with torch eager on another seeded input, with float64 evidence past
the tolerance (docs/parity.md). Token inputs carry padding in the second row.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from crossport.compat import import_torchvision
from crossport.parity.live import make_live
from tests.zoo.common import assert_matches_on, convert_checked, zoo_params

pytestmark = pytest.mark.slow
os.environ.setdefault("HF_HUB_OFFLINE", "1")

BATCH, VOCAB, SEQ, ATOL = 2, 128, 8, 1e-4
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
TEXT = dict(vocab_size=VOCAB, max_position_embeddings=64, **TINY)


class LastHidden(nn.Module):
    """``forward(*tensors) -> last_hidden_state`` with the tensors passed by name."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, tuple(names)

    def forward(self, *args):
        return self.model(**dict(zip(self.names, args))).last_hidden_state


def _transformers():
    import_torchvision()  # transformers imports torchvision; make it importable on CPU torch
    import transformers

    return transformers


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def tokens(seed):
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=_gen(seed))
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, SEQ - 2:] = 0  # padding at the end of the second sequence
    return ids, mask


def images(size):
    return lambda seed: (torch.randn(BATCH, 3, size, size, generator=_gen(seed)),)


def waves(seed):
    return (torch.randn(BATCH, 800, generator=_gen(seed)),)


def text(config_name, model_name, **config):
    def build(T):
        model = getattr(T, model_name)(getattr(T, config_name)(**{**TEXT, **config}))
        return LastHidden(model, ("input_ids", "attention_mask")), tokens

    return build


def vision(config_name, model_name, size, **config):
    def build(T):
        model = getattr(T, model_name)(getattr(T, config_name)(**config))
        return LastHidden(model, ("pixel_values",)), images(size)

    return build


_SPEECH = dict(conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
               num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, **TINY)


def speech(config_name, model_name, **config):
    def build(T):
        model = getattr(T, model_name)(getattr(T, config_name)(**{**_SPEECH, **config}))
        return LastHidden(model, ("input_values",)), waves

    return build


def spectrogram(T):
    config = T.ASTConfig(num_mel_bins=16, max_length=32, patch_size=8, frequency_stride=4,
                         time_stride=4, **TINY)
    model = T.ASTModel(config)
    return LastHidden(model, ("input_values",)), lambda seed: (
        torch.randn(BATCH, 32, 16, generator=_gen(seed)),)


def rwkv(T):
    config = T.RwkvConfig(vocab_size=VOCAB, context_length=64, hidden_size=32,
                          num_hidden_layers=2, attention_hidden_size=32, intermediate_size=64,
                          use_cache=False, rescale_every=0)  # else weights rescale in place
    return LastHidden(T.RwkvModel(config), ("input_ids",)), lambda seed: tokens(seed)[:1]


_DECODER = dict(num_key_value_heads=2, use_cache=False, pad_token_id=0, bos_token_id=1,
                eos_token_id=2)
_STAGES = dict(num_channels=3, depths=[1, 1], hidden_sizes=[16, 32])

# name -> builder(transformers) -> (module, inputs(seed)).
MODELS = {
    "albert": text("AlbertConfig", "AlbertModel", embedding_size=16, add_pooling_layer=False),
    "deberta_v2": text("DebertaV2Config", "DebertaV2Model", relative_attention=True,
                       position_buckets=8, pos_att_type=["p2c", "c2p"], max_relative_positions=16),
    "electra": text("ElectraConfig", "ElectraModel", embedding_size=16),
    "mpnet": text("MPNetConfig", "MPNetModel"),
    "convbert": text("ConvBertConfig", "ConvBertModel", embedding_size=32, head_ratio=2,
                     conv_kernel_size=3),
    "mobilebert": text("MobileBertConfig", "MobileBertModel", embedding_size=16,
                       intra_bottleneck_size=16, true_hidden_size=16, num_feedforward_networks=2,
                       add_pooling_layer=False),
    "bloom_alibi": text("BloomConfig", "BloomModel", n_head=2, use_cache=False),
    "gpt_neox": text("GPTNeoXConfig", "GPTNeoXModel", rotary_pct=0.5, use_parallel_residual=True,
                     use_cache=False),
    "opt": text("OPTConfig", "OPTModel", ffn_dim=64, word_embed_proj_dim=32, use_cache=False,
                pad_token_id=1),
    "phi": text("PhiConfig", "PhiModel", partial_rotary_factor=0.5, **_DECODER),
    "gemma2_softcap_sliding": text("Gemma2Config", "Gemma2Model", head_dim=16,
                                   sliding_window=4, attn_logit_softcapping=50.0,
                                   attn_implementation="eager", **_DECODER),
    "qwen3_qk_norm": text("Qwen3Config", "Qwen3Model", head_dim=16, **_DECODER),
    "poolformer": vision("PoolFormerConfig", "PoolFormerModel", 32, num_encoder_blocks=2,
                         depths=[1, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3],
                         strides=[4, 2], padding=[2, 1], pool_size=3, mlp_ratio=2.0),
    "levit": vision("LevitConfig", "LevitModel", 64, image_size=64, hidden_sizes=[32, 48],
                    num_attention_heads=[2, 2], depths=[1, 1], key_dim=[8, 8],
                    attention_ratio=[2, 2], mlp_ratio=[2, 2],
                    down_ops=[["Subsample", 8, 2, 2, 2, 2]]),
    "pvt_v2": vision("PvtV2Config", "PvtV2Model", 32, num_encoder_blocks=2, depths=[1, 1],
                     sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                     patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2]),
    "resnet": vision("ResNetConfig", "ResNetModel", 64, embedding_size=16,
                     layer_type="bottleneck", **_STAGES),
    "regnet": vision("RegNetConfig", "RegNetModel", 64, embedding_size=16, groups_width=8,
                     **_STAGES),
    "swinv2": vision("Swinv2Config", "Swinv2Model", 32, image_size=32, patch_size=4,
                     embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4),
    "yolos": vision("YolosConfig", "YolosModel", 32, image_size=[32, 32], patch_size=8,
                    num_detection_tokens=4, **TINY),
    "efficientnet": vision("EfficientNetConfig", "EfficientNetModel", 64, image_size=64,
                           width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320),
    "audio_spectrogram": spectrogram,
    "rwkv": rwkv,
    # mixture of experts, transformers 5's default experts path (tokens sorted by expert,
    # histc, grouped matmul): top-2 softmax routing, a shared expert with a sigmoid gate,
    # biased transposed experts with a clamped SwiGLU and attention sinks
    "mixtral_experts": text("MixtralConfig", "MixtralModel", num_local_experts=4,
                            num_experts_per_tok=2, **_DECODER),
    "qwen2_moe_shared_expert": text("Qwen2MoeConfig", "Qwen2MoeModel", num_experts=4,
                                    num_experts_per_tok=2, moe_intermediate_size=32,
                                    shared_expert_intermediate_size=32, **_DECODER),
    "gpt_oss_biased_experts": text("GptOssConfig", "GptOssModel", num_local_experts=4,
                                   num_experts_per_tok=2, head_dim=16, sliding_window=4,
                                   **_DECODER),
    "wavlm": speech("WavLMConfig", "WavLMModel", num_buckets=16, max_bucket_distance=32),
    "data2vec_audio": speech("Data2VecAudioConfig", "Data2VecAudioModel"),
}
# Known gaps: name -> the failure today (xfail strict, so a fix shows up as XPASS).
KNOWN_GAPS: dict[str, str] = {}


def build(name):
    torch.manual_seed(0)
    module, inputs = MODELS[name](_transformers())
    module.eval()
    make_live(module, inputs(0))
    return module.eval(), inputs


@pytest.mark.parametrize("name", zoo_params(MODELS, KNOWN_GAPS))
def test_hf_family(name):
    module, inputs = build(name)
    conversion = convert_checked(name, module, inputs(0))
    assert_matches_on(module, conversion, inputs(7), ATOL)
