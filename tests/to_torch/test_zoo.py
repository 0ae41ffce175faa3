"""keras.applications (weights=None, every constant weight randomised so BN is no identity)
converted to torch and checked against Keras on TF; slow."""

import keras
import numpy as np
import pytest
import torch

import crossport
from tests.to_torch.harness import make_live

ZOO = {
    # name: (input size, permutes allowed inside the module)
    "ResNet50": (96, 0),
    "MobileNetV2": (96, 0),
    "ResNet50V2": (96, 0),
    "MobileNetV3Small": (96, 1),
    "EfficientNetB0": (96, 0),
    "EfficientNetV2B0": (96, 0),
    "DenseNet121": (96, 0),
    "ConvNeXtTiny": (96, None),
    "InceptionV3": (160, 0),
    "Xception": (96, 0),
    "NASNetMobile": (96, None),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO)
def test_keras_applications(name):
    size, permutes = ZOO[name]
    keras.utils.set_random_seed(0)  # the kernels: the same model whatever ran before
    model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3),
                                              classifier_activation=None)
    make_live(model)
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((2, size, size, 3),
                                                                  dtype=np.float32))
    try:
        conv = crossport.to_torch_with_report(model, (x,))
        report = conv.report
    except crossport.ParityError as err:  # past atol: accepted only with the fp64 evidence
        report = err.report
        assert report.within_rounding, report.summary()
        conv = crossport.to_torch_with_report(model, (x,), check=False)
    assert report.within_rounding, report.summary()
    if permutes is not None:
        assert conv.permutes <= permutes, conv.permutes
    with torch.no_grad():
        out = conv.module(x)
        other = conv.module(torch.flip(x, [1]))
    assert out.std() > 1e-3 and not torch.allclose(out, other)  # live, input-dependent
    trainable = sum(p.numel() for p in conv.module.parameters() if p.requires_grad)
    assert trainable == sum(int(np.prod(w.shape)) for w in model.trainable_weights)
