"""HF transformers and torchvision sequence models: tiny configs, random weights, parity.

Every model is built from a small config (hidden 32, 2 layers, 2 heads; no downloads),
made live, converted with ``check=False`` and compared with torch eager on fresh inputs:
token ids within the vocabulary and attention masks with padding. Token tensors stay in
torch order (no transposes in BERT/GPT-2). With a dynamic sequence dim the converted model
is run at a second length.
"""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

import crossport
from crossport.compat import import_torchvision
from crossport.parity.live import make_live
from tests.zoo.test_torchvision_zoo import assert_parity, build_live

pytestmark = pytest.mark.slow

VOCAB, BATCH = 100, 2
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


class Text(nn.Module):
    """``forward(input_ids, attention_mask) -> last_hidden_state`` (keywords for HF)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class Tensor(nn.Module):
    """``forward(x) -> last_hidden_state`` for vision and audio models."""

    def __init__(self, model, key):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, x):
        out = self.model(**{self.key: x})
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out


def _transformers():
    import_torchvision()  # transformers imports torchvision; make it importable on CPU torch
    import transformers

    return transformers


def text_inputs(length, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (BATCH, length), generator=gen)
    mask = torch.ones(BATCH, length, dtype=torch.long)
    mask[1, length - 3:] = 0  # padding at the end of the second sequence
    return ids, mask


def image(size=32, seed=0):
    return (torch.randn(BATCH, 3, size, size, generator=torch.Generator().manual_seed(seed)),)


def bert(T):
    return Text(T.BertModel(T.BertConfig(vocab_size=VOCAB, max_position_embeddings=64, **TINY),
                            add_pooling_layer=False))


def distilbert(T):
    return Text(T.DistilBertModel(T.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2,
                                                     n_heads=2, hidden_dim=64,
                                                     max_position_embeddings=64)))


def roberta(T):
    return Text(T.RobertaModel(T.RobertaConfig(vocab_size=VOCAB, max_position_embeddings=64,
                                               **TINY), add_pooling_layer=False))


def gpt2(T):
    return Text(T.GPT2Model(T.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2,
                                         n_positions=64, bos_token_id=0, eos_token_id=0)))


def t5(T):
    return Text(T.T5EncoderModel(T.T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64,
                                            num_layers=2, num_heads=2)))


def vit(T):
    return Tensor(T.ViTModel(T.ViTConfig(image_size=32, patch_size=8, **TINY),
                             add_pooling_layer=False), "pixel_values")


def swin(T):
    return Tensor(T.SwinModel(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16,
                                           depths=[1, 1], num_heads=[2, 2], window_size=4),
                              add_pooling_layer=False), "pixel_values")


def convnext(T):
    return Tensor(T.ConvNextModel(T.ConvNextConfig(num_stages=2, hidden_sizes=[16, 32],
                                                   depths=[1, 1])), "pixel_values")


def segformer(T):
    return Tensor(T.SegformerModel(T.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
        num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2])),
        "pixel_values")


def wav2vec2(T):
    return Tensor(T.Wav2Vec2Model(T.Wav2Vec2Config(
        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, **TINY)), "input_values")


def whisper(T):
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    return Tensor(WhisperEncoder(T.WhisperConfig(d_model=32, encoder_layers=2,
                                                 encoder_attention_heads=2, encoder_ffn_dim=64,
                                                 num_mel_bins=16, max_source_positions=16)),
                  "input_features")


def audio(length, seed=0):
    return (torch.randn(BATCH, length, generator=torch.Generator().manual_seed(seed)),)


def mels(seed=0):
    return (torch.randn(BATCH, 16, 32, generator=torch.Generator().manual_seed(seed)),)


# name, builder, example inputs, {input: {dim: name}} for the dynamic run and a 2nd example.
TEXT_DYN = {0: {1: "seq"}, 1: {1: "seq"}}
MODELS = [
    ("bert", bert, text_inputs(12), TEXT_DYN, text_inputs(7, 1)),
    ("distilbert", distilbert, text_inputs(12), TEXT_DYN, text_inputs(7, 1)),
    ("roberta", roberta, text_inputs(12), TEXT_DYN, text_inputs(7, 1)),
    ("gpt2", gpt2, text_inputs(12), TEXT_DYN, text_inputs(7, 1)),
    ("t5_encoder", t5, text_inputs(12), TEXT_DYN, text_inputs(7, 1)),
    ("vit", vit, image(), None, None),
    ("swin", swin, image(), None, None),
    ("convnext", convnext, image(), {0: {2: "h", 3: "w"}}, image(48, 1)),
    ("segformer", segformer, image(), {0: {2: "h", 3: "w"}}, image(48, 1)),
    ("wav2vec2", wav2vec2, audio(400), {0: {1: "samples"}}, audio(560, 1)),
    ("whisper_encoder", whisper, mels(), None, None),  # fixed 2*max_source_positions frames
]
# Known gaps: name -> reason (xfail strict, so a fix shows up as XPASS).
KNOWN_GAPS: dict[str, str] = {}
DYNAMIC_GAPS: dict[str, str] = {}
NO_TRANSPOSES = {"bert", "distilbert", "roberta", "gpt2", "vit"}


def own_transposes(exported) -> int:
    """Transposes the torch model performs on data of rank > 2 (attention's k.T is rank 4)."""
    aten = torch.ops.aten
    return sum(1 for n in exported.graph.nodes
               if n.target in (aten.transpose.int, aten.permute.default)
               and n.meta["val"].dim() > 2)


def build(name):
    builder, example = next((b, e) for n, b, e, _d, _s in MODELS if n == name)
    torch.manual_seed(0)
    module = builder(_transformers()).eval()
    make_live(module, example)
    return module.eval(), example


def _marks(name, gaps):
    return [pytest.mark.xfail(strict=True, reason=gaps[name])] if name in gaps else []


@pytest.mark.parametrize("name", [pytest.param(m[0], marks=_marks(m[0], KNOWN_GAPS), id=m[0])
                                  for m in MODELS])
def test_hf_model(name):
    module, example = build(name)
    start = time.perf_counter()
    conversion = crossport.convert_with_report(module, example, check=False)
    assert_parity(module, conversion, example)
    print(f"{name}: {conversion.transposes} transposes, {time.perf_counter() - start:.1f}s")
    own = 0 if name in NO_TRANSPOSES else own_transposes(conversion.exported)
    assert conversion.transposes <= own, f"{conversion.transposes} transposes (at most {own})"


@pytest.mark.parametrize("name", [pytest.param(m[0], marks=_marks(m[0], DYNAMIC_GAPS), id=m[0])
                                  for m in MODELS if m[3]])
def test_hf_model_dynamic(name):
    module, example = build(name)
    dims, second = next((d, s) for n, _b, _e, d, s in MODELS if n == name)
    conversion = crossport.convert_with_report(module, example, check=False, dynamic_dims=dims)
    for d_input, d_dims in dims.items():
        shape = conversion.model.inputs[d_input].shape
        assert all(shape[d] is None for d in d_dims), f"input {d_input} is {shape}"
    assert_parity(module, conversion, example)
    assert_parity(module, conversion, second)


# torchvision transformers: the real definitions at their smallest valid input sizes.
TORCHVISION = [
    ("vit_b_16", {"image_size": 64}, (1, 3, 64, 64)),
    ("swin_t", {}, (1, 3, 64, 64)),
    ("maxvit_t", {}, (1, 3, 224, 224)),  # 5 stride-2 stages of 7x7 partitions: 224 minimum
]
TORCHVISION_GAPS: dict[str, str] = {}


@pytest.mark.parametrize("name, kwargs, shape", [
    pytest.param(n, k, s, id=n, marks=_marks(n, TORCHVISION_GAPS)) for n, k, s in TORCHVISION])
def test_torchvision_transformer(torchvision, name, kwargs, shape):
    module, example = build_live(torchvision, name, kwargs, shape, False)
    start = time.perf_counter()
    conversion = crossport.convert_with_report(module, example, check=False)
    assert_parity(module, conversion, example)
    print(f"{name}: {conversion.transposes} transposes, {time.perf_counter() - start:.1f}s")
    own = own_transposes(conversion.exported)
    assert conversion.transposes <= own, f"{conversion.transposes} transposes (at most {own})"


def test_bert_dynamic_batch_and_sequence():
    module, example = build("bert")
    conversion = crossport.convert_with_report(
        module, example, check=False, dynamic_batch=True,
        dynamic_dims={"input_ids": {1: "seq"}, "attention_mask": {1: "seq"}})
    assert [tuple(i.shape) for i in conversion.model.inputs] == [(None, None)] * 2
    assert conversion.transposes == 0
    for batch, length in ((3, 9), (1, 20)):
        ids = torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(5))
        mask = torch.ones(batch, length, dtype=torch.long)
        mask[0, length // 2:] = 0
        assert_parity(module, conversion, (ids, mask))


class LoopUntil(nn.Module):
    """A data-dependent Python loop: torch.export cannot capture it."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        while x.abs().sum() > 1:
            x = self.proj(x) * 0.5
        return x


def test_data_dependent_loop_is_a_clear_error():
    with pytest.raises(crossport.CaptureError, match="LoopUntil") as info:
        crossport.convert(LoopUntil().eval(), (torch.randn(2, 4),), check=False)
    assert "while x.abs().sum() > 1" in str(info.value)
