"""Hand-written Keras references with exactly the torch models' architectures.

CNNs:

``keras.applications.ResNet50`` is ResNet v1 (stride 2 in the first 1x1 conv of a
downsampling block, conv biases); torchvision's ``resnet50`` is v1.5 (stride 2 in the 3x3
conv, no conv bias), ~6% more FLOPs. To tell architecture from conversion overhead, this
builds v1.5 with the same layer types keras.applications uses.

Text transformers: ``bert_encoder`` and ``gpt2_decoder`` are what a person writes in Keras
for HF's BertModel and GPT2Model (``keras.layers.MultiHeadAttention``, ``Dense``,
``LayerNormalization``), random weights, with the padding mask applied the same way.
"""

from __future__ import annotations

import keras
from keras import layers, ops

BN_EPS = 1e-5  # torchvision's BatchNorm2d default


def _conv_bn(x, filters: int, kernel: int, stride: int, name: str, relu: bool = True):
    """Conv (torch-style symmetric padding) + BN (+ ReLU), as keras.applications writes it."""
    if kernel > 1 and stride > 1:  # 'same' would pad (0, 1) on even inputs; torch pads (1, 1)
        x = layers.ZeroPadding2D(kernel // 2, name=f"{name}_pad")(x)
        padding = "valid"
    else:
        padding = "same"
    x = layers.Conv2D(filters, kernel, strides=stride, padding=padding, use_bias=False,
                      name=f"{name}_conv")(x)
    x = layers.BatchNormalization(epsilon=BN_EPS, name=f"{name}_bn")(x)
    return layers.Activation("relu", name=f"{name}_relu")(x) if relu else x


def _bottleneck(x, filters: int, stride: int, shortcut: bool, name: str):
    """torchvision Bottleneck (v1.5): the stride sits on the 3x3 conv."""
    skip = _conv_bn(x, 4 * filters, 1, stride, f"{name}_0", relu=False) if shortcut else x
    x = _conv_bn(x, filters, 1, 1, f"{name}_1")
    x = _conv_bn(x, filters, 3, stride, f"{name}_2")
    x = _conv_bn(x, 4 * filters, 1, 1, f"{name}_3", relu=False)
    x = layers.Add(name=f"{name}_add")([skip, x])
    return layers.Activation("relu", name=f"{name}_out")(x)


def resnet50_v15(input_shape=(224, 224, 3), classes: int = 1000) -> keras.Model:
    """ResNet-50 v1.5 (torchvision's), random weights, logits out, NHWC."""
    inputs = keras.Input(input_shape, batch_size=1)
    x = layers.ZeroPadding2D(3, name="conv1_pad")(inputs)
    x = layers.Conv2D(64, 7, strides=2, use_bias=False, name="conv1_conv")(x)
    x = layers.BatchNormalization(epsilon=BN_EPS, name="conv1_bn")(x)
    x = layers.Activation("relu", name="conv1_relu")(x)
    x = layers.ZeroPadding2D(1, name="pool1_pad")(x)  # after ReLU zero padding == -inf padding
    x = layers.MaxPooling2D(3, strides=2, name="pool1_pool")(x)
    for stage, (filters, blocks, stride) in enumerate(
            [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)], start=2):
        for block in range(blocks):
            x = _bottleneck(x, filters, stride if block == 0 else 1, block == 0,
                            f"conv{stage}_block{block + 1}")
    x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
    outputs = layers.Dense(classes, name="predictions")(x)
    return keras.Model(inputs, outputs, name="resnet50_v15")


# -- text transformers ---------------------------------------------------------------------
class AttentionMask(layers.Layer):
    """(B, S) int 0/1 -> (B, S, S) bool for MultiHeadAttention (padded keys masked)."""

    def __init__(self, causal: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.causal = causal

    def call(self, mask):
        batch, length = ops.shape(mask)[0], ops.shape(mask)[1]
        keep = ops.broadcast_to(ops.cast(mask, "bool")[:, None, :], (batch, length, length))
        if self.causal:
            keep = ops.logical_and(keep, ops.tril(ops.ones((length, length), "bool")))
        return keep


class Positions(layers.Layer):
    """(B, S) -> (1, S) position ids 0..S-1."""

    def call(self, ids):
        return ops.arange(ops.shape(ids)[1])[None, :]


def _text_inputs(seq: int | None):
    return (keras.Input((seq,), dtype="int32", name="input_ids"),
            keras.Input((seq,), dtype="int32", name="attention_mask"))


def bert_encoder(vocab: int = 30522, hidden: int = 768, num_layers: int = 12, heads: int = 12,
                 intermediate: int = 3072, max_positions: int = 512,
                 seq: int | None = None) -> keras.Model:
    """BERT encoder (post-LN, exact GELU, eps 1e-12): ``last_hidden_state``."""
    ids, mask = _text_inputs(seq)
    positions = Positions(name="positions")(ids)
    x = (layers.Embedding(vocab, hidden, name="word")(ids)
         + layers.Embedding(max_positions, hidden, name="position")(positions)
         + layers.Embedding(2, hidden, name="token_type")(ops.zeros_like(ids)))
    x = layers.LayerNormalization(epsilon=1e-12, name="embed_ln")(x)
    attention_mask = AttentionMask(name="mask")(mask)
    for i in range(num_layers):
        attn = layers.MultiHeadAttention(heads, hidden // heads, name=f"layer{i}_attn")(
            x, x, attention_mask=attention_mask)
        x = layers.LayerNormalization(epsilon=1e-12, name=f"layer{i}_ln1")(x + attn)
        h = layers.Dense(intermediate, activation="gelu", name=f"layer{i}_ff1")(x)
        h = layers.Dense(hidden, name=f"layer{i}_ff2")(h)
        x = layers.LayerNormalization(epsilon=1e-12, name=f"layer{i}_ln2")(x + h)
    return keras.Model([ids, mask], x, name="bert_encoder")


def gpt2_decoder(vocab: int = 50257, hidden: int = 768, num_layers: int = 12, heads: int = 12,
                 max_positions: int = 1024, seq: int | None = None) -> keras.Model:
    """GPT-2 (pre-LN, tanh GELU, eps 1e-5, causal + padding mask): ``last_hidden_state``."""
    ids, mask = _text_inputs(seq)
    positions = Positions(name="positions")(ids)
    x = (layers.Embedding(vocab, hidden, name="wte")(ids)
         + layers.Embedding(max_positions, hidden, name="wpe")(positions))
    attention_mask = AttentionMask(causal=True, name="mask")(mask)
    for i in range(num_layers):
        h = layers.LayerNormalization(epsilon=1e-5, name=f"h{i}_ln1")(x)
        x = x + layers.MultiHeadAttention(heads, hidden // heads, name=f"h{i}_attn")(
            h, h, attention_mask=attention_mask)
        h = layers.LayerNormalization(epsilon=1e-5, name=f"h{i}_ln2")(x)
        h = layers.Dense(4 * hidden, name=f"h{i}_fc")(h)
        h = layers.Dense(hidden, name=f"h{i}_proj")(ops.gelu(h, approximate=True))
        x = x + h
    x = layers.LayerNormalization(epsilon=1e-5, name="ln_f")(x)
    return keras.Model([ids, mask], x, name="gpt2_decoder")
