"""Example arguments beyond tensors: lists, tuples and dicts of tensors become one Keras
input per tensor (named after the argument and key), Python numbers, bools and None are
fixed at conversion as torch.export fixes them. Checked against the real module, exported,
and the module left as it was."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import crossport


class Fuse(nn.Module):
    """Two images in a list, a dict of per-channel scales, a Python int and a flag."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 2)

    def forward(self, images, scales, repeats: int, flip: bool = False, bias=None):
        x = self.conv(images[0]) + self.conv(images[1]) * scales["gain"]
        x = x.mean((2, 3)).repeat(1, repeats)[:, :4]
        y = self.head(-x if flip else x)
        return y if bias is None else y + bias


def _args(batch=2):
    g = torch.Generator().manual_seed(batch)
    return ([torch.randn(batch, 3, 8, 8, generator=g), torch.randn(batch, 3, 8, 8, generator=g)],
            {"gain": torch.randn(1, 4, 1, 1, generator=g)}, 3, True, None)


def test_containers_become_named_inputs_and_numbers_are_fixed(tmp_path):
    torch.manual_seed(0)
    module = Fuse().eval()
    before = dict(module.__dict__)
    conversion = crossport.convert_with_report(module, _args())
    assert conversion.report.passed, conversion.report.summary()
    assert [t.name for t in conversion.model.inputs] == ["images_0", "images_1", "scales_gain"]
    assert {layer.name for layer in conversion.model.layers} >= {"conv", "head"}  # torch paths
    assert type(module) is Fuse and module.__dict__ == before  # the module as it was
    images, scales, *_ = _args(5)
    got = conversion.model([images[0].numpy(), images[1].numpy(), scales["gain"].numpy()])
    with torch.no_grad():
        want = module(*_args(5))
    np.testing.assert_allclose(np.asarray(got), want.numpy(), atol=1e-5)
    result = crossport.export(conversion, tmp_path / "m.tflite")
    assert result.passed, result.summary()
    assert crossport.to_source(conversion, tmp_path / "m.py").exists()  # re-checked


def test_dynamic_dims_name_the_leaves():
    conversion = crossport.convert_with_report(
        Fuse().eval(), _args(), dynamic_dims={"images_0": {0: "b"}, "images_1": {0: "b"}})
    assert conversion.model.inputs[0].shape[0] is None
    assert conversion.report.passed


def test_objects_other_than_tensors_and_numbers_are_refused():
    class TakesModule(nn.Module):
        def forward(self, x, other):
            return other(x)

    with pytest.raises(crossport.InputError, match="Linear.*fixes Python numbers"):
        crossport.convert(TakesModule().eval(), (torch.randn(2, 3), nn.Linear(3, 3)))
