"""keras_hub backbones (tiny configs, seeded, weights made live; no presets) converted to
torch and checked against Keras on TF; slow. keras_hub's blocks are custom layers: these
convert through crossport's tracing of their call(). The whole keras_hub sweep is
benchmarks/keras_hub_sweep.py."""

import keras
import numpy as np
import pytest
import torch

import crossport
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
