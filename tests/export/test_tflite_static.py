"""TFLite exports keep the conversion's static shapes and need only builtin ops."""

import numpy as np
import pytest
import torch

import crossport
from crossport.export.formats import tflite_op_names
from tests.harness import random_inputs


class DilatedConvs(torch.nn.Module):
    """deeplabv3-style dilated convs: with an unknown batch TFLite keeps SPACE_TO_BATCH_ND."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=2, dilation=2)
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=4, dilation=4, groups=8)

    def forward(self, x):
        return self.depthwise(self.conv(x).relu())


def _litert(path):
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=str(path))


def test_fixed_size_conversion_exports_static_shape_without_space_to_batch(tmp_path):
    torch.manual_seed(0)
    conversion = crossport.convert_with_report(DilatedConvs().eval(),
                                               random_inputs((1, 3, 32, 32)))
    crossport.export(conversion, tmp_path / "m.tflite")
    ops = tflite_op_names(tmp_path / "m.tflite")
    assert "SPACE_TO_BATCH_ND" not in ops and "BATCH_TO_SPACE_ND" not in ops, ops
    assert {"CONV_2D", "DEPTHWISE_CONV_2D"} <= set(ops)
    (detail,) = _litert(tmp_path / "m.tflite").get_input_details()
    assert detail["shape_signature"].tolist() == [1, 3, 32, 32]


@pytest.mark.parametrize("batch", [1, 3])
def test_dynamic_batch_export_runs_at_any_batch_on_litert(tmp_path, batch):
    torch.manual_seed(0)
    net = DilatedConvs().eval()
    conversion = crossport.convert_with_report(net, random_inputs((2, 3, 16, 16)),
                                               dynamic_batch=True)
    crossport.export(conversion, tmp_path / "m.tflite")
    interpreter = _litert(tmp_path / "m.tflite")
    (detail,) = interpreter.get_input_details()
    assert detail["shape_signature"].tolist() == [-1, 3, 16, 16]
    (x,) = random_inputs((batch, 3, 16, 16), seed=batch)
    (out,) = interpreter.get_signature_runner("serving_default")(x=x.numpy()).values()
    np.testing.assert_allclose(out, net(x).detach().numpy(), atol=1e-4, rtol=1e-4)


class ErfBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(5, 5)

    def forward(self, x):
        return torch.erf(self.fc(x))


def test_op_without_a_tflite_builtin_is_an_export_error_naming_it(tmp_path):
    """TF's Erf has no TFLite builtin: Flex only, which standalone LiteRT lacks."""
    conversion = crossport.convert_with_report(ErfBlock().eval(), random_inputs((2, 5)))
    with pytest.raises(crossport.ExportError, match=r"no TFLite builtin: Erf.*aten\.erf") as info:
        crossport.export(conversion, tmp_path / "m.tflite")
    assert "Flex" in str(info.value) and "test_tflite_static.py" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_new_axis_indexing_needs_no_flex(tmp_path):
    """``x[:, None]``-style indexing lowers to builtin RESHAPE/STRIDED_SLICE, batch fixed or not."""

    class NewAxes(torch.nn.Module):
        def forward(self, x):
            return x[:, None, 1:3, None] * x[:, :, None, None, :1].sum(1, keepdim=True)

    for dynamic_batch in (False, True):
        conversion = crossport.convert_with_report(NewAxes().eval(), random_inputs((2, 5, 6)),
                                                   dynamic_batch=dynamic_batch)
        result = crossport.export(conversion, tmp_path / f"m{dynamic_batch}.tflite")
        assert result.passed
        assert "FlexStridedSlice" not in tflite_op_names(result.path)


class AnchorDecode(torch.nn.Module):
    """YOLO's box decode in small: ``anchors - lt`` and ``anchors / wh`` where the anchors
    are built in forward from sizes alone (``arange(w).type_as(x)``: no converter folds them,
    TF does) and held transposed (``.transpose(0, 1)`` is free), so one operand of the Sub
    or Div needs a transpose to meet the other."""

    def __init__(self, op, squeeze=False):
        super().__init__()
        self.op, self.squeeze = op, squeeze

    def forward(self, x):
        grid = torch.arange(x.shape[-1]).type_as(x) + 0.5
        grid = (grid.view(-1, 1).expand(-1, 2) * torch.tensor([1.0, 3.0])).transpose(0, 1)
        lt, rb = x.chunk(2, 1)
        if self.squeeze:  # a lower-rank activation broadcast against the anchors
            lt, rb, grid = lt[0], rb[0], grid.unsqueeze(0)
        else:
            grid = grid.unsqueeze(0)
        if self.op == "sub":
            return grid - lt, rb
        return grid / (rb.abs() + 1.0), lt


@pytest.mark.parametrize("squeeze", [False, True], ids=["same-rank", "broadcast"])
@pytest.mark.parametrize("op", ["sub", "div"])
def test_constant_minus_transposed_activation_stays_right_on_litert(tmp_path, op, squeeze):
    """TF's TFLite converter swaps the operands of ``c - transpose(x)`` and
    ``c / transpose(x)`` when it pushes the transpose past the op (push-transpose-through-
    ewise, TF 2.21): the layout pass must transpose the anchors (folded by TF), never the
    activation, so LiteRT computes what torch does."""
    conversion = crossport.convert_with_report(AnchorDecode(op, squeeze).eval(),
                                               random_inputs((1, 4, 6)))
    result = crossport.export(conversion, tmp_path / "m.tflite")
    assert result.passed and result.max_error < 1e-5, result.summary()
