"""Attention: scaled_dot_product_attention, nn.MultiheadAttention, Transformer layers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import crossport
from crossport.errors import UnsupportedOpError
from tests.harness import assert_converts
from tests.ops.opcases import Fn, case, inputs


def floats(shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def qkv(b=2, h=2, lq=5, lk=6, e=4, f=3):
    return lambda: (floats((b, h, lq, e), 0), floats((b, h, lk, e), 1), floats((b, h, lk, f), 2))


def _with_inf_key(k):
    k[:, :, 1] = float("inf")
    return k


def sdpa(**kw):
    return Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw))


def with_mask(mask, **kw):
    return Fn(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=m.mask, **kw),
              mask=mask)


class MaskInput(nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class HeadsSplit(nn.Module):
    """BERT's pattern: linear -> view -> transpose(1, 2) -> sdpa -> transpose -> reshape."""

    def __init__(self, d=8, h=2):
        super().__init__()
        torch.manual_seed(0)
        self.h, self.qkv, self.out = h, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(b, s, d))


def mha(seed=0, **kw):
    torch.manual_seed(seed)
    return nn.MultiheadAttention(8, 2, **kw)


class MHA(nn.Module):
    def __init__(self, need_weights=True, kpm=None, mask=None, **kw):
        super().__init__()
        self.attn, self.need_weights = mha(**kw), need_weights
        self.kpm, self.mask = kpm, mask

    def forward(self, q, k=None, v=None):
        k, v = (q, q) if k is None else (k, v)  # self-attention: one input, packed projection
        out, weights = self.attn(q, k, v, key_padding_mask=self.kpm, attn_mask=self.mask,
                                 need_weights=self.need_weights)
        return (out, weights) if self.need_weights else out


def enc(**kw):
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, **kw)


class Decoder(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        torch.manual_seed(0)
        self.dec = nn.TransformerDecoderLayer(8, 2, 16, batch_first=True, **kw)

    def forward(self, tgt, memory):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.dec(tgt, memory, tgt_mask=mask)


def self_attn(b=2, s=5, d=8, batch_first=True):
    shape = (b, s, d) if batch_first else (s, b, d)
    return lambda: (floats(shape, 0),)


def cross_attn(b=2, lq=4, lk=6, d=8, kd=8, vd=8, batch_first=True):
    def shape(n, dim):
        return (b, n, dim) if batch_first else (n, b, dim)
    return lambda: (floats(shape(lq, d), 0), floats(shape(lk, kd), 1), floats(shape(lk, vd), 2))


KPM = torch.tensor([[False] * 5 + [True], [False] * 6])
BOOL_MASK = torch.rand(5, 6, generator=torch.Generator().manual_seed(3)) > 0.3
FLOAT_MASK = torch.randn(2, 1, 5, 6, generator=torch.Generator().manual_seed(4))

CASES = [
    case("sdpa-plain", sdpa(), qkv(), expect_converters=("aten_scaled_dot_product_attention_default",)),
    case("sdpa-causal", sdpa(is_causal=True), qkv(lq=6), expect_converters=("aten_scaled_dot_product_attention_default",)),
    case("sdpa-causal-rectangular", sdpa(is_causal=True), qkv(lq=4, lk=6), expect_converters=("aten_scaled_dot_product_attention_default",)),
    case("sdpa-scale", sdpa(scale=0.3), qkv(), expect_converters=("aten_scaled_dot_product_attention_default",)),
    case("sdpa-rank3", sdpa(), lambda: (floats((2, 5, 4)), floats((2, 6, 4), 1), floats((2, 6, 3), 2)), expect_converters=("aten_scaled_dot_product_attention_default",)),
    case("sdpa-bool-mask", with_mask(BOOL_MASK), qkv(),
         expect_converters=("aten_scaled_dot_product_attention_default",)),
    case("sdpa-bool-mask-fully-masked-row", with_mask(torch.tensor([[True] * 6, [False] * 6] * 2
                                                                   + [[True] * 6])), qkv(), expect_converters=("aten_scaled_dot_product_attention_default",)),
    case("sdpa-float-mask-broadcast", with_mask(FLOAT_MASK), qkv(), expect_converters=("aten_scaled_dot_product_attention_default",)),
    # torch adds a bool mask as 0/-inf: an inf key at a masked position makes its rows NaN
    case("sdpa-bool-mask-inf-key-masked", with_mask(BOOL_MASK),
         lambda: (floats((2, 2, 5, 4)), _with_inf_key(floats((2, 2, 6, 4), 1)),
                  floats((2, 2, 6, 3), 2)),
         expect_converters=("aten_scaled_dot_product_attention_default",)),
    # constant masks are checked at conversion for rows they mask whole (the run-time check
    # is dropped when none can be): these rows keep it
    case("sdpa-float-mask-minus-inf-row", with_mask(torch.tensor(
        [[0.0] * 6, [float("-inf")] * 6, [0.0, -1.0, 0.0, 0.0, 0.0, float("-inf")], [0.0] * 6,
         [-2.0] * 6])), qkv(), expect_converters=("aten_scaled_dot_product_attention_default",)),
    case("sdpa-mask-input", MaskInput(), lambda: (*qkv()(), floats((2, 1, 1, 6), 5)), expect_converters=("aten_scaled_dot_product_attention_default",)),
    case("sdpa-dropout-zero", sdpa(dropout_p=0.0), qkv(), expect_converters=("aten_scaled_dot_product_attention_default",)),
    case("sdpa-gqa", sdpa(enable_gqa=True), lambda: (floats((2, 4, 5, 4)), floats((2, 2, 6, 4), 1),
                                                    floats((2, 2, 6, 3), 2)), expect_converters=("aten_scaled_dot_product_attention_default",)),
    case("sdpa-heads-split-no-transposes", HeadsSplit(), (2, 5, 8), kernel_transposes=True, expect_converters=("aten_linear_default", "aten_permute_default", "aten_scaled_dot_product_attention_default", "aten_unbind_int", "aten_view_default")),
    case("mha-batch-first", MHA(batch_first=True), self_attn(), expect_converters=("aten_bmm_default", "aten_linear_default", "aten_mean_dim", "aten_mul_tensor", "aten_permute_default", "aten_select_int", "aten_softmax_int", "aten_view_default")),
    case("mha-seq-first", MHA(), self_attn(batch_first=False), expect_converters=("aten_bmm_default", "aten_linear_default", "aten_mean_dim", "aten_mul_tensor", "aten_permute_default", "aten_select_int", "aten_softmax_int", "aten_view_default")),
    case("mha-no-weights", MHA(need_weights=False, batch_first=True), self_attn(), expect_converters=("aten_linear_default", "aten_permute_default", "aten_scaled_dot_product_attention_default", "aten_select_int", "aten_view_default")),
    case("mha-no-bias", MHA(bias=False, batch_first=True), self_attn(), expect_converters=("aten_bmm_default", "aten_linear_default", "aten_mean_dim", "aten_mul_tensor", "aten_permute_default", "aten_select_int", "aten_softmax_int", "aten_view_default")),
    case("mha-kdim-vdim", MHA(kdim=6, vdim=5, batch_first=True), cross_attn(kd=6, vd=5), expect_converters=("aten_bmm_default", "aten_linear_default", "aten_mean_dim", "aten_mul_tensor", "aten_permute_default", "aten_softmax_int", "aten_view_default")),
    case("mha-key-padding-mask", MHA(kpm=KPM, batch_first=True), cross_attn(), expect_converters=("aten_add_tensor", "aten_bmm_default", "aten_linear_default", "aten_mean_dim", "aten_mul_tensor", "aten_permute_default", "aten_softmax_int", "aten_view_default")),
    case("mha-key-padding-mask-no-weights", MHA(need_weights=False, kpm=KPM, batch_first=True),
         cross_attn(), expect_converters=("aten_linear_default", "aten_permute_default", "aten_scaled_dot_product_attention_default", "aten_view_default")),
    case("mha-attn-mask-bool", MHA(mask=BOOL_MASK[:4], batch_first=True), cross_attn(), expect_converters=("aten_add_tensor", "aten_bmm_default", "aten_linear_default", "aten_mean_dim", "aten_mul_tensor", "aten_permute_default", "aten_softmax_int", "aten_view_default")),
    case("mha-attn-mask-float", MHA(mask=FLOAT_MASK[0, 0, :4], batch_first=True), cross_attn(), expect_converters=("aten_add_tensor", "aten_bmm_default", "aten_linear_default", "aten_mean_dim", "aten_mul_tensor", "aten_permute_default", "aten_softmax_int", "aten_view_default")),
    case("mha-add-bias-kv", MHA(add_bias_kv=True, batch_first=True), self_attn(), expect_converters=("aten_bmm_default", "aten_cat_default", "aten_linear_default", "aten_mean_dim", "aten_mul_tensor", "aten_permute_default", "aten_select_int", "aten_softmax_int", "aten_view_default")),
    case("encoder-layer-post-norm-relu", enc(batch_first=True), (2, 5, 8), expect_converters=("aten_add_tensor", "aten_layer_norm_default", "aten_linear_default", "aten_permute_default", "aten_relu_default", "aten_scaled_dot_product_attention_default", "aten_select_int", "aten_view_default")),
    case("encoder-layer-pre-norm-gelu", enc(batch_first=True, norm_first=True,
                                             activation="gelu"), (2, 5, 8), expect_converters=("aten_add_tensor", "aten_gelu_default", "aten_layer_norm_default", "aten_linear_default", "aten_permute_default", "aten_scaled_dot_product_attention_default", "aten_select_int", "aten_view_default")),
    case("encoder-layer-seq-first", enc(), (5, 2, 8), expect_converters=("aten_add_tensor", "aten_layer_norm_default", "aten_linear_default", "aten_permute_default", "aten_relu_default", "aten_scaled_dot_product_attention_default", "aten_select_int", "aten_view_default")),
    case("encoder-stack-with-norm", nn.TransformerEncoder(enc(batch_first=True), 2,
                                                          norm=nn.LayerNorm(8),
                                                          enable_nested_tensor=False), (2, 5, 8), expect_converters=("aten_add_tensor", "aten_layer_norm_default", "aten_linear_default", "aten_permute_default", "aten_relu_default", "aten_scaled_dot_product_attention_default", "aten_select_int", "aten_view_default")),
    case("decoder-layer-causal", Decoder(), lambda: (floats((2, 4, 8)), floats((2, 6, 8), 1)), expect_converters=("aten_add_tensor", "aten_layer_norm_default", "aten_linear_default", "aten_permute_default", "aten_relu_default", "aten_scaled_dot_product_attention_default", "aten_select_int", "aten_view_default")),
    case("decoder-layer-pre-norm-gelu", Decoder(norm_first=True, activation="gelu"),
         lambda: (floats((2, 4, 8)), floats((2, 6, 8), 1)), expect_converters=("aten_add_tensor", "aten_gelu_default", "aten_layer_norm_default", "aten_linear_default", "aten_permute_default", "aten_scaled_dot_product_attention_default", "aten_select_int", "aten_view_default")),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_attention(module, shapes, kwargs):
    kwargs = {"max_transposes": None, **kwargs}
    if module.__class__ is HeadsSplit:
        kwargs["max_transposes"] = 0
    assert_converts(module, shapes() if callable(shapes) else inputs(shapes), **kwargs)


def test_sdpa_dropout_in_eval_is_a_clear_error():
    with pytest.raises(UnsupportedOpError, match="dropout_p=0.3"):
        crossport.convert(sdpa(dropout_p=0.3), qkv()(), check=False)


@pytest.mark.parametrize("mask, is_causal, expected", [
    (None, True, False),  # row i keeps keys 0..i
    (np.array([[True, False], [False, True]]), False, False),
    (np.array([[True, False], [False, False]]), False, True),
    (np.array([[0.0, -np.inf], [-np.inf, -np.inf]]), False, True),
    (np.array([[-1e30, -np.inf], [0.0, -np.inf]]), False, False),  # finite -1e30 keeps a row
    (np.array([False, True]), True, True),  # causal row 0 keeps key 0 only, which is masked
])
def test_whole_row_masking_is_decided_from_constant_masks(mask, is_causal, expected):
    from crossport.to_keras.ops.attention import _may_mask_a_whole_row

    assert _may_mask_a_whole_row(mask, is_causal, 2, 2) is expected


class ConstantMask(nn.Module):
    """sdpa with a mask built inside forward from constants, as transformers 5's BERT does
    without a padding mask (folded by the converter)."""

    def __init__(self, keep: torch.Tensor):
        super().__init__()
        self.register_buffer("keep", keep)

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.keep)


@pytest.mark.parametrize("keep, adds", [
    (torch.ones(1, 1, 6, 6, dtype=torch.bool), False),  # every position kept: no add
    (torch.zeros(1, 1, 6, 6), False),  # zeros added: no add
    (torch.tril(torch.ones(6, 6, dtype=torch.bool)), True),
    (torch.full((6, 6), -2.0), True),
])
def test_a_mask_that_keeps_everything_is_not_added(keep, adds):
    """Same function either way (checked), one full-size add fewer per layer."""
    x = tuple(torch.randn(2, 3, 6, 4, generator=torch.Generator().manual_seed(i))
              for i in range(3))
    plain = crossport.convert(sdpa(), x)
    masked = crossport.convert(ConstantMask(keep).eval(), x)
    extra = len(masked.operations) - len(plain.operations)
    assert (extra > 0) is adds, [type(op).__name__ for op in masked.operations]


class CrossAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, query, key, value):
        return self.attention(query, key, value)[0]


def test_one_tensor_passed_as_query_key_and_value_converts_the_general_function():
    """torch's MultiheadAttention reads only ``value`` when ``query is key is value``; an
    example ``(x, x, x)`` once captured that path and failed the check on distinct inputs."""
    torch.manual_seed(0)
    module, x = CrossAttention().eval(), torch.randn(2, 5, 8)
    model = crossport.convert(module, (x, x, x))
    q, k, v = (torch.randn(2, 5, 8) for _ in range(3))
    np.testing.assert_allclose(np.asarray(model([q.numpy(), k.numpy(), v.numpy()])),
                               module(q, k, v).detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(np.asarray(model([x.numpy()] * 3)),
                               module(x, x, x).detach().numpy(), atol=1e-5)


class PaddedEncoder(nn.Module):
    """nn.TransformerEncoder with a key padding mask, optionally a final norm."""

    def __init__(self, norm: bool, nested: bool = True):
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(16) if norm else None,
                                             enable_nested_tensor=nested)

    def forward(self, x, padding):
        return self.encoder(x, src_key_padding_mask=padding)


def _padding(rows):
    mask = torch.zeros(len(rows), 7, dtype=torch.bool)
    for i, pads in enumerate(rows):
        mask[i, pads] = True
    return mask


@pytest.mark.parametrize("norm", [False, True])
def test_transformer_encoder_pads_as_eager_nested_tensors(norm):
    """Eager TransformerEncoder (eval, no grad) packs a left-aligned padded batch into a
    nested tensor and pads the result back with zeros before its norm; torch.export traces
    the masked path instead (other values at pads: the check failed as semantic). Pads at
    the end are zeros (or norm(0)); a mask with a pad before a token is not left aligned,
    and eager computes every position, as the converted model does."""
    torch.manual_seed(0)
    module = PaddedEncoder(norm).eval()
    x, aligned = floats((3, 7, 16)), _padding([[], [5, 6], [2, 3, 4, 5, 6]])
    model = crossport.convert(module, (x, aligned))
    for mask in (aligned, _padding([[], [2], [6]])):
        with torch.no_grad():
            want = module(x, mask).numpy()
        got = np.asarray(model([x.numpy(), mask.numpy()]))
        np.testing.assert_allclose(got, want, atol=2e-5)
    with torch.no_grad():
        pads = module(x, aligned)[1, 5:]
    assert torch.allclose(pads, module.encoder.norm(torch.zeros(16)) if norm else torch.zeros(16))
    assert nn.TransformerEncoder.forward.__name__ == "forward"  # torch's own, restored
    assert nn.TransformerEncoder.forward.__qualname__ == "TransformerEncoder.forward"


def test_transformer_encoder_without_nested_tensors_is_unchanged():
    torch.manual_seed(0)
    module = PaddedEncoder(norm=False, nested=False).eval()
    x, mask = floats((2, 7, 16)), _padding([[], [5, 6]])
    model = crossport.convert(module, (x, mask))
    with torch.no_grad():
        want = module(x, mask).numpy()
    assert np.abs(want[1, 5:]).max() > 0.1  # computed, not zeroed
    np.testing.assert_allclose(np.asarray(model([x.numpy(), mask.numpy()])), want, atol=2e-5)


class Seq2Seq(nn.Module):
    """nn.Transformer as its documentation uses it: a causal tgt_mask, no is_causal hint."""

    def __init__(self):
        super().__init__()
        self.transformer = nn.Transformer(16, 2, 1, 1, 32, dropout=0.0, batch_first=True)

    def forward(self, src, tgt):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.transformer(src, tgt, tgt_mask=mask)


def test_transformer_with_a_generated_causal_mask_converts():
    """torch compares the mask's values with the causal mask to choose how to run the same
    attention; torch.export cannot branch on that (a CaptureError blaming the user's
    forward). Captured as "not known causal", the mask applies as given."""
    torch.manual_seed(0)
    module, src, tgt = Seq2Seq().eval(), floats((2, 9, 16)), floats((2, 5, 16), 1)
    model = crossport.convert(module, (src, tgt))
    with torch.no_grad():
        want = module(src, tgt).numpy()
    np.testing.assert_allclose(np.asarray(model([src.numpy(), tgt.numpy()])), want, atol=2e-5)
    import torch.nn.modules.transformer as torch_transformer
    assert torch_transformer._detect_is_causal_mask.__module__ == "torch.nn.modules.transformer"
