"""Keras 3 layers that compute exactly what the PyTorch layer of the same name computes.

Torch argument names and defaults; ``data_format="channels_last"`` (default, the converter's
layout) or ``"channels_first"`` for spatial layers; ``from_torch(module, data_format)`` copies
a torch module's configuration and weights. See :mod:`crossport.layers.base` for layouts.
"""

# The converter's run-time shape layers (SizeOf, DynamicReshape, ...): registered for
# deserialisation on import, but plumbing rather than hand-porting blocks, so not in __all__.
from crossport.layers import dynamic, linalg  # noqa: F401
from crossport.layers.activation import GELU
from crossport.layers.adaptive_pooling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool3d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AdaptiveMaxPool3d,
)
from crossport.layers.airy import AiryAi
from crossport.layers.constant import Constant
from crossport.layers.conv import (
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
)
from crossport.layers.functional_conv import FunctionalConv, FunctionalConvTranspose
from crossport.layers.fused_norm import FusedBatchNormalization, StableLayerNormalization
from crossport.layers.grouped_conv import GroupedConv1D, GroupedConv2D
from crossport.layers.normalization import (
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    GroupNorm,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
    LayerNorm,
)
from crossport.layers.padding import Pad
from crossport.layers.polynomial import OrthogonalPolynomial
from crossport.layers.pooling import (
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
)
from crossport.layers.projected_lstm import ProjectedLSTM, ProjectedLSTMCell
from crossport.layers.recurrent import GRU, LSTM, RNN
from crossport.layers.resize import Interpolate, InterpolateTo
from crossport.layers.scatter import BagReduce, ScatterReduce
from crossport.layers.shuffle import PixelShuffle, PixelUnshuffle
from crossport.layers.special import Digamma, Erf, LogGamma, TFSpecialFunction

__all__ = [
    "GRU",
    "LSTM",
    "RNN",
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d",
    "AiryAi",
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "BagReduce",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "Constant",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "Digamma",
    "Erf",
    "FunctionalConv",
    "FunctionalConvTranspose",
    "FusedBatchNormalization",
    "GELU",
    "GroupedConv1D",
    "GroupedConv2D",
    "GroupNorm",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "Interpolate",
    "InterpolateTo",
    "LayerNorm",
    "LogGamma",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "OrthogonalPolynomial",
    "Pad",
    "PixelShuffle",
    "ProjectedLSTM",
    "ProjectedLSTMCell",
    "PixelUnshuffle",
    "ScatterReduce",
    "StableLayerNormalization",
    "TFSpecialFunction",
]
