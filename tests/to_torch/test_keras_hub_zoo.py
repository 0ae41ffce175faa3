"""keras_hub backbones (tiny configs, seeded, weights made live; no presets) converted to
torch and checked against Keras on TF; slow. keras_hub's blocks are custom layers: these
convert through crossport's tracing of their call(). The whole keras_hub sweep is
benchmarks/keras_hub_sweep.py."""

import keras
import numpy as np
import pytest
import torch

import crossport
from crossport.to_torch.verify import run_keras
from tests.to_torch.harness import make_live

keras_hub = pytest.importorskip("keras_hub")

ZOO = {
    "ResNetBackbone": dict(input_conv_filters=[16], input_conv_kernel_sizes=[7],
                           stackwise_num_filters=[64, 16], stackwise_num_blocks=[1, 1],
                           stackwise_num_strides=[1, 2], block_type="bottleneck_block"),
    "EfficientNetBackbone": dict(
        stackwise_kernel_sizes=[3, 3, 3], stackwise_num_repeats=[1, 1, 1],
        stackwise_input_filters=[8, 8, 16], stackwise_output_filters=[8, 16, 16],
        stackwise_expansion_ratios=[1, 4, 4], stackwise_squeeze_and_excite_ratios=[0, 0, 0.25],
        stackwise_strides=[1, 2, 2], stackwise_block_types=["fused", "fused", "unfused"],
        stackwise_force_input_filters=[0] * 3, stackwise_nores_option=[False] * 3,
        width_coefficient=1.0, depth_coefficient=1.0),
    "MobileNetBackbone": dict(
        stackwise_expansion=[[16, 24], [32]], stackwise_num_blocks=[2, 1],
        stackwise_num_filters=[[8, 8], [16]], stackwise_kernel_size=[[3, 3], [5]],
        stackwise_num_strides=[[2, 1], [2]], stackwise_se_ratio=[[None, None], [0.25]],
        stackwise_activation=[["relu", "relu"], ["hard_swish"], ["hard_swish"]],
        stackwise_padding=[[1, 1], [2]], output_num_filters=32, input_activation="hard_swish",
        output_activation="hard_swish", input_num_filters=8, depthwise_filters=8,
        depthwise_stride=2, depthwise_residual=False, squeeze_and_excite=0.5,
        last_layer_filter=32),
    "DenseNetBackbone": dict(stackwise_num_repeats=[1, 2], growth_rate=4),
    "CSPNetBackbone": dict(stem_filters=8, stem_kernel_size=3, stem_strides=1,
                           stackwise_strides=2, stackwise_depth=[1, 1],
                           stackwise_num_filters=[8, 16], block_type="dark_block",
                           stage_type="csp", stem_padding="same", down_growth=True,
                           bottle_ratio=(0.5, 1.0), block_ratio=(1.0, 0.5),
                           expand_ratio=(2.0, 1.0)),
}
SIZE = 32


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO)
def test_keras_hub_backbone(name):
    keras.utils.set_random_seed(0)
    model = getattr(keras_hub.models, name)(image_shape=(SIZE, SIZE, 3), **ZOO[name])
    make_live(model)
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((2, SIZE, SIZE, 3),
                                                                  dtype=np.float32))
    try:
        conv = crossport.to_torch_with_report(model, (x,))
        report = conv.report
    except crossport.ParityError as err:  # past atol: accepted only with the fp64 evidence
        report = err.report
        assert report.within_rounding, report.summary()
        conv = crossport.to_torch_with_report(model, (x,), check=False)
    assert report.within_rounding, report.summary()
    other = torch.from_numpy(np.random.default_rng(7).standard_normal((2, SIZE, SIZE, 3),
                                                                      dtype=np.float32))
    with torch.no_grad():
        got = conv.module(other)
    want = np.asarray(model(other.numpy(), training=False))
    assert got.shape == want.shape
    error = crossport.parity.metrics.normalized_error(want, got.numpy())
    assert error <= 1e-4, error
    assert got.std() > 1e-3 and not torch.allclose(got, conv.module(torch.flip(other, [1])))


TEXT = {
    "BertBackbone": dict(vocabulary_size=64, num_layers=2, num_heads=2, hidden_dim=16,
                         intermediate_dim=32, max_sequence_length=32),
    "GPT2Backbone": dict(vocabulary_size=64, num_layers=2, num_heads=2, hidden_dim=16,
                         intermediate_dim=32, max_sequence_length=32),
    "LlamaBackbone": dict(vocabulary_size=64, num_layers=2, num_query_heads=4,
                          num_key_value_heads=2, hidden_dim=16, intermediate_dim=32),
    "T5Backbone": dict(vocabulary_size=64, num_layers=2, num_heads=2, hidden_dim=16,
                       intermediate_dim=32, key_value_dim=8),
    # a sliding window shorter than the lengths: tf.linalg.band_part of a run-time band
    "Qwen3Backbone": dict(vocabulary_size=64, num_layers=1, num_query_heads=2,
                          num_key_value_heads=1, hidden_dim=16, intermediate_dim=32,
                          head_dim=8, sliding_window_size=4),
    # tf.gather(batch_dims=3) and ops.repeat by the length (relative positions)
    "DebertaV3Backbone": dict(vocabulary_size=64, num_layers=1, num_heads=2, hidden_dim=16,
                              intermediate_dim=32, max_sequence_length=32),
    # arange(klen, -qlen, -1.0), == of traced tensors, masks declared 2-d, a None stream
    "XLNetBackbone": dict(vocabulary_size=64, num_layers=1, num_heads=2, hidden_dim=16,
                          intermediate_dim=32),
    "FNetBackbone": dict(vocabulary_size=64, num_layers=1, hidden_dim=16, intermediate_dim=32,
                         max_sequence_length=32),   # keras.ops.fft2
}


def _text_inputs(model, batch: int, length: int, seed: int) -> tuple:
    """Token ids and padding masks (the last row padded) by Keras input name."""
    rng = np.random.default_rng(seed)
    out = []
    for tensor in model.inputs:
        if "mask" in tensor.name:
            a = np.ones((batch, length), dtype="int64")
            a[-1, length // 2:] = 0
        else:  # segment ids take 0 or 1
            high = 2 if "segment" in tensor.name else 64
            a = rng.integers(0, high, (batch, length)).astype("int64")
        out.append(torch.from_numpy(a))
    return tuple(out)


@pytest.mark.slow
@pytest.mark.parametrize("name", TEXT)
def test_keras_hub_text_backbone_at_every_length(name):
    """Converted at one length, right at others: the run-time sequence length and batch
    are read from the inputs (PositionEmbedding slices, causal masks, RoPE, heads)."""
    keras.utils.set_random_seed(0)
    model = getattr(keras_hub.models, name)(**TEXT[name])
    make_live(model)
    conv = crossport.to_torch_with_report(model, _text_inputs(model, 2, 8, 0))
    assert len(conv.report.shapes) == 2, conv.report.summary()  # checked at a second size
    for batch, length in ((3, 5), (1, 13), (2, 1)):
        inputs = _text_inputs(model, batch, length, batch * length)
        ref = run_keras(model, inputs, False)  # dict inputs in Keras' flatten order
        with torch.no_grad():
            got = keras.tree.flatten(conv.module(*inputs))
        for r, g in zip(ref, got):
            assert r.shape == tuple(g.shape)
            error = crossport.parity.metrics.normalized_error(r, g.numpy())
            assert error <= 1e-4, (batch, length, error)


@pytest.mark.slow
@pytest.mark.parametrize("name,kwargs", [
    ("ViTBackbone", dict(patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32)),
    ("SwinTransformerBackbone", dict(patch_size=2, embed_dim=16, depths=[1, 1],
                                     num_heads=[2, 2], window_size=4)),
], ids=["ViT", "Swin"])
def test_keras_hub_vision_transformer(name, kwargs):
    """Patch embeddings with a class token tiled to the run-time batch (ViT), windows cut
    with ops.shape sizes (Swin); checked at another batch."""
    keras.utils.set_random_seed(0)
    model = getattr(keras_hub.models, name)(image_shape=(SIZE, SIZE, 3), **kwargs)
    make_live(model)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((2, SIZE, SIZE, 3), dtype=np.float32))
    conv = crossport.to_torch_with_report(model, (x,))
    other = rng.standard_normal((3, SIZE, SIZE, 3), dtype=np.float32)
    want = keras.tree.flatten(model(other, training=False))
    with torch.no_grad():
        got = keras.tree.flatten(conv.module(torch.from_numpy(other)))
    for w, g in zip(want, got):
        error = crossport.parity.metrics.normalized_error(np.asarray(w), g.numpy())
        assert error <= 1e-4, error
