"""Torch modules that compute exactly what TensorFlow/Keras layers compute (TF/Keras -> torch).

For porting TF code and checkpoints to PyTorch by hand: each module takes channels-first
tensors, keeps torch-shaped weights (Keras layout for recurrent layers), reproduces TF's
arithmetic (asymmetric ``SAME`` padding, Keras epsilons, ``tf.image.resize`` kernels, gate
orders) and has ``from_keras(layer)`` to copy a built Keras layer. See ``docs/pitfalls.md``.
"""

from crossport.torch_layers.activation import (
    KerasActivation,
    KerasGELU,
    KerasHardSigmoid,
    KerasLeakyReLU,
    KerasPReLU,
    activation_name,
    keras_activation,
)
from crossport.torch_layers.conv import (
    TFConv1d,
    TFConv1dTranspose,
    TFConv2d,
    TFConv2dTranspose,
    TFConv3d,
    TFConv3dTranspose,
    TFDepthwiseConv1d,
    TFDepthwiseConv2d,
    TFSeparableConv2d,
    transpose_output_geometry,
)
from crossport.torch_layers.conv_recurrent import KerasConvLSTM
from crossport.torch_layers.core import KerasDense
from crossport.torch_layers.normalization import (
    KerasBatchNorm,
    KerasBatchNorm1d,
    KerasBatchNorm2d,
    KerasBatchNorm3d,
    KerasGroupNorm,
    KerasLayerNorm,
    TFContribLayerNorm,
    keras_axis_to_torch,
)
from crossport.torch_layers.padding import TFPad, same_padding, same_paddings
from crossport.torch_layers.pooling import (
    TFAvgPool1d,
    TFAvgPool2d,
    TFAvgPool3d,
    TFMaxPool1d,
    TFMaxPool2d,
    TFMaxPool3d,
)
from crossport.torch_layers.recurrent import KerasGRU, KerasLSTM, KerasSimpleRNN
from crossport.torch_layers.resize import METHODS, KerasUpSampling2D, TFResize, tf_resize

__all__ = [
    "METHODS",
    "KerasActivation",
    "KerasBatchNorm",
    "KerasBatchNorm1d",
    "KerasBatchNorm2d",
    "KerasBatchNorm3d",
    "KerasConvLSTM",
    "KerasDense",
    "KerasGELU",
    "KerasGRU",
    "KerasGroupNorm",
    "KerasHardSigmoid",
    "KerasLSTM",
    "KerasLayerNorm",
    "KerasLeakyReLU",
    "KerasPReLU",
    "KerasSimpleRNN",
    "KerasUpSampling2D",
    "TFAvgPool1d",
    "TFAvgPool2d",
    "TFAvgPool3d",
    "TFContribLayerNorm",
    "TFConv1d",
    "TFConv1dTranspose",
    "TFConv2d",
    "TFConv2dTranspose",
    "TFConv3d",
    "TFConv3dTranspose",
    "TFDepthwiseConv1d",
    "TFDepthwiseConv2d",
    "TFMaxPool1d",
    "TFMaxPool2d",
    "TFMaxPool3d",
    "TFPad",
    "TFResize",
    "TFSeparableConv2d",
    "activation_name",
    "keras_activation",
    "keras_axis_to_torch",
    "same_padding",
    "same_paddings",
    "tf_resize",
    "transpose_output_geometry",
]
