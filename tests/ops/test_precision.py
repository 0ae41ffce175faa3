"""float64 and float16 modules (``module.double()`` / ``.half()``) convert to Keras layers
computing in that dtype, checked against torch in it, dtypes included; TFLite refuses them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import crossport
from crossport.errors import ExportError


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.attention(x, x, x)[0]


MODULES = {
    "linear": (lambda: nn.Linear(4, 3), (2, 4)),
    "conv-bn-relu": (lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()),
                     (1, 3, 8, 8)),
    "layer-norm": (lambda: nn.LayerNorm(6), (2, 5, 6)),
    "lstm": (lambda: nn.LSTM(4, 6, batch_first=True), (2, 5, 4)),
    "attention": (SelfAttention, (1, 3, 8)),
    "transformer-encoder": (lambda: nn.TransformerEncoder(
        nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2), (2, 5, 16)),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16], ids=str)
@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_converts_in_its_own_precision(name, dtype):
    build, shape = MODULES[name]
    torch.manual_seed(0)
    module = build().to(dtype).eval()
    x = torch.randn(shape, dtype=dtype)
    conversion = crossport.convert_with_report(module, (x,))  # the check compares dtypes
    assert conversion.report.passed or conversion.report.within_rounding
    out = conversion.model(x.numpy())
    out = out[0] if isinstance(out, (list, tuple)) else out
    assert str(np.asarray(out).dtype) == str(dtype).removeprefix("torch.")


def test_float64_is_exact_to_float64_rounding():
    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.GELU(), nn.Flatten(),
                           nn.Linear(8 * 36, 5)).double().eval()
    conversion = crossport.convert_with_report(module, (torch.randn(2, 3, 8, 8).double(),))
    assert conversion.report.max_error < 1e-12, conversion.report.summary()


def test_half_precision_embedding_keeps_float16():
    module = nn.Embedding(10, 4).half().eval()
    model = crossport.convert(module, (torch.tensor([[1, 2, 3]]),))
    assert model.outputs[0].dtype == "float16"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16], ids=str)
def test_tflite_refuses_other_precisions_and_writes_nothing(dtype, tmp_path):
    conversion = crossport.convert_with_report(nn.Linear(4, 2).to(dtype).eval(),
                                               (torch.randn(1, 4, dtype=dtype),))
    with pytest.raises(ExportError, match="module.float()"):
        crossport.export(conversion, tmp_path / "m.tflite")
    assert not list(tmp_path.iterdir())
    assert crossport.export(conversion, tmp_path / "m.keras").passed  # .keras keeps it
