"""Which torch parameters train: Keras' own ``trainable`` answer, carried to ``requires_grad``.

A torch optimizer steps every parameter with a gradient, so a parameter Keras would not train
has to come back with ``requires_grad=False``: the weights of a layer the user froze
(``layer.trainable = False``, or a frozen nested model), and the stand-in zero bias torch's
``nn.LSTM``/``nn.RNN`` carry where Keras has one bias (it gets the same gradient as
``bias_ih``, so training both would step Keras' bias twice).
"""

from __future__ import annotations

import keras
from torch import nn

# torch layers whose recurrent bias is a zero the Keras layer does not have (GRU's is Keras'
# recurrent bias: reset_after=True)
_ONE_KERAS_BIAS = (nn.LSTM, nn.RNN)


def frozen(layer) -> bool:
    """Whether Keras trains none of ``layer``'s weights (it has some)."""
    return (isinstance(layer, keras.layers.Layer) and bool(layer.weights)
            and not layer.trainable_weights)


def carry_trainable(layer, module: nn.Module, suffix: str = "") -> None:
    """Set ``requires_grad`` on ``module`` (converted from ``layer``, registered with
    ``suffix``) as Keras trains it."""
    if frozen(layer):
        module.requires_grad_(False)
    elif isinstance(layer, keras.layers.Bidirectional):
        _freeze_direction(layer, module, suffix)
    for sub in module.modules():
        if type(sub) in _ONE_KERAS_BIAS:
            for name, param in sub.named_parameters(recurse=False):
                if name.startswith("bias_hh"):
                    param.requires_grad_(False)


def _freeze_direction(layer, module: nn.Module, suffix: str) -> None:
    """A Bidirectional with one direction frozen: that direction's half of torch's
    bidirectional RNN (``*_l0`` / ``*_l0_reverse``), or its masked twin (``_forward`` /
    ``_backward``)."""
    for direction, twin, ending in ((layer.forward_layer, "_forward", "_l0"),
                                    (layer.backward_layer, "_backward", "_l0_reverse")):
        if not frozen(direction):
            continue
        if suffix == twin:
            module.requires_grad_(False)
        elif not suffix:
            for sub in module.modules():
                if isinstance(sub, nn.RNNBase):
                    for name, param in sub.named_parameters(recurse=False):
                        if name.endswith(ending):
                            param.requires_grad_(False)
