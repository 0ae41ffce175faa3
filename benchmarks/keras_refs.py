"""Hand-written Keras references with exactly torchvision's architecture.

``keras.applications.ResNet50`` is ResNet v1 (stride 2 in the first 1x1 conv of a
downsampling block, conv biases); torchvision's ``resnet50`` is v1.5 (stride 2 in the 3x3
conv, no conv bias), ~6% more FLOPs. To tell architecture from conversion overhead, this
builds v1.5 with the same layer types keras.applications uses.
"""

from __future__ import annotations

import keras
from keras import layers

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
