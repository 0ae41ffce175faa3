"""TFLite exports keep the conversion's static shapes and need only builtin ops."""

import math

import keras
import numpy as np
import pytest
import torch

import crossport
from crossport.export.formats import tflite_op_names
from crossport.to_keras.registry import replaced
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


class AsinBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(5, 5)

    def forward(self, x):
        return torch.asin(self.fc(x).tanh())


def test_op_without_a_tflite_builtin_is_an_export_error_naming_it(tmp_path):
    """TF's Asin has no TFLite builtin: Flex only, which standalone LiteRT lacks (a user's
    converter emitting it; the built-in converters lower erf/tan/atan to builtins)."""
    asin = torch.ops.aten.asin.default
    with replaced(asin, lambda ctx, self: keras.ops.arcsin(self), policy=crossport.Policy.AGNOSTIC):
        conversion = crossport.convert_with_report(AsinBlock().eval(), random_inputs((2, 5)))
    with pytest.raises(crossport.ExportError, match=r"no TFLite builtin: Asin.*aten\.asin") as info:
        crossport.export(conversion, tmp_path / "m.tflite")
    assert "Flex" in str(info.value) and "test_tflite_static.py" in str(info.value)
    assert list(tmp_path.iterdir()) == []


class SpecialFunctions(torch.nn.Module):
    """erf (also as an exact-GELU composite), tan, atan and atan2: Flex-only ops in TF."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x):
        h = self.fc(x)
        gelu = h * 0.5 * (1.0 + torch.erf(h / math.sqrt(2.0)))
        return (torch.erf(x * 2.5) + gelu + torch.tan(x * 0.7) + torch.atan(h * 3.0)
                + torch.atan2(h, x))


def test_erf_tan_atan_export_with_builtin_ops_and_match_torch_on_litert(tmp_path):
    torch.manual_seed(0)
    net = SpecialFunctions().eval()
    conversion = crossport.convert_with_report(net, random_inputs((4, 3, 6)))
    result = crossport.export(conversion, tmp_path / "m.tflite")
    assert result.passed
    ops = tflite_op_names(result.path)
    assert not [op for op in ops if op.startswith("Flex") or op == "CUSTOM"], ops
    assert "ATAN2" in ops and {"SIN", "COS"} <= set(ops)
    interpreter = _litert(result.path)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    for seed in range(3):
        (x,) = random_inputs((4, 3, 6), seed=seed)
        x = x * 2.0  # reach erf's flat tails and tan's steep parts
        interpreter.set_tensor(inp["index"], x.numpy())
        interpreter.invoke()
        want = net(x).detach().numpy()
        np.testing.assert_allclose(interpreter.get_tensor(out["index"]), want,
                                   atol=2e-5 * max(1.0, np.abs(want).max()), rtol=0)


def _xnnpack_partitions(path) -> int:
    """Delegate nodes LiteRT's default XNNPACK delegate makes of the file (1: all of it)."""
    interpreter = _litert(path)
    interpreter.allocate_tensors()
    return sum(op["op_name"] == "DELEGATE" for op in interpreter._get_ops_details())


class ShiftedWindowBlock(torch.nn.Module):
    """Swin's cyclic shift (roll), patch merging (stride-2 slices), a qkv select and unbind."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(4, 12)
        self.proj = torch.nn.Linear(16, 8)

    def forward(self, x):  # [B, H, W, C]
        x = torch.roll(x, shifts=(-2, -2), dims=(1, 2))
        qkv = self.qkv(x).reshape(*x.shape[:3], 3, 4).permute(3, 0, 1, 2, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        x = q * k.sigmoid() + v
        x = torch.roll(x, shifts=(2, 2), dims=(1, 2))
        merged = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2],
                            x[:, 1::2, 1::2]], -1)
        rows = self.proj(merged).unbind(1)
        return rows[0] + rows[-1]


def test_swin_indexing_runs_in_one_xnnpack_partition(tmp_path):
    """No GATHER (roll), shrinking or strided STRIDED_SLICE, or UNPACK: XNNPACK takes none
    of them, and each split the graph (Swin-T: 26 partitions)."""
    torch.manual_seed(0)
    conversion = crossport.convert_with_report(ShiftedWindowBlock().eval(),
                                               random_inputs((1, 8, 8, 4)))
    result = crossport.export(conversion, tmp_path / "m.tflite")
    assert result.passed
    ops = tflite_op_names(result.path)
    assert not {"GATHER", "UNPACK"} & set(ops), ops
    assert _xnnpack_partitions(result.path) == 1


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


@pytest.mark.parametrize("quantization", ["float32", "float16"])
def test_lean_converter_writes_what_tfs_converter_writes(tmp_path, quantization):
    """The export skips TF's Python post-passes (buffer dedup, metadata): same ops, same
    results on LiteRT as TF's public converter on the same SavedModel."""
    import tensorflow as tf

    from crossport.export import formats, tflite

    torch.manual_seed(0)
    conversion = crossport.convert_with_report(DilatedConvs().eval(),
                                               random_inputs((1, 3, 16, 16)))
    formats.write_saved_model(conversion.model, tmp_path / "saved")
    files = {}
    for name, converter in [
            ("lean", tflite.converter_from_saved_model(tmp_path / "saved")),
            ("tf", tf.lite.TFLiteConverter.from_saved_model(str(tmp_path / "saved")))]:
        if quantization == "float16":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.target_spec.supported_types = [tf.float16]
        files[name] = tmp_path / f"{name}.tflite"
        files[name].write_bytes(converter.convert())
    assert type(tflite.converter_from_saved_model(tmp_path / "saved")).__name__ == (
        "LeanSavedModelConverter"), "TF's converter changed: the lean path fell back"
    assert tflite_op_names(files["lean"]) == tflite_op_names(files["tf"])
    (x,) = random_inputs((1, 3, 16, 16), seed=1)
    outs = [list(_litert(f).get_signature_runner("serving_default")(x=x.numpy()).values())[0]
            for f in files.values()]
    np.testing.assert_array_equal(outs[0], outs[1])


class GeluBlock(torch.nn.Module):
    """Exact and tanh GELU after a conv and after a Linear."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.fc = torch.nn.Linear(8, 6)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.conv(x)).mean((2, 3))
        return torch.nn.functional.gelu(self.fc(h), approximate="tanh")


def test_gelu_exports_as_tflite_gelu_ops(tmp_path):
    """crossport.layers.GELU computes torch's erf formula; TF's Erf has no TFLite builtin,
    so the export must fuse each GELU into the builtin op (never Flex)."""
    torch.manual_seed(0)
    conversion = crossport.convert_with_report(GeluBlock().eval(), random_inputs((1, 3, 10, 10)))
    result = crossport.export(conversion, tmp_path / "m.tflite")
    ops = tflite_op_names(result.path)
    assert result.passed and ops.count("GELU") == 2, ops
    assert not [op for op in ops if op.startswith("Flex") or op in ("CUSTOM", "ERF")], ops


class TextEncoder(torch.nn.Module):
    """Embedding, a scaled query projection (TF folds the scale into its kernel) and MLP."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(100, 32)
        self.query = torch.nn.Linear(32, 32)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                       torch.nn.Linear(64, 32))

    def forward(self, ids):
        x = self.embed(ids)
        return self.mlp(x) + self.query(x) * 0.125


@pytest.mark.parametrize("format", ["tflite", "tflite-fp16"])
def test_float_tflite_places_tagged_weights_in_one_conversion(tmp_path, format):
    """Dense kernels and Embedding tables convert as tagged splats and are placed after:
    one converter run, the file re-checked against torch by the export itself."""
    from crossport.export import tagged

    conversion = crossport.convert_with_report(TextEncoder().eval(),
                                               (torch.randint(0, 100, (1, 8)),))
    names = {w.name for w in tagged.select(conversion.model)}
    assert any("embed" in n for n in names) and not any("query" in n for n in names), names
    result = crossport.export(conversion, tmp_path / "m.tflite", format=format)
    assert result.passed and "weights" in result.stages, result.stages
    ids = torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(5))
    runner = _litert(tmp_path / "m.tflite").get_signature_runner("serving_default")
    (out,) = runner(**{runner.get_input_details().popitem()[0]: ids.numpy()}).values()
    expected = TextEncoder().eval()(ids).detach().numpy()
    np.testing.assert_allclose(out, expected, atol=1e-5 if format == "tflite" else 2e-2)


def test_a_tag_the_converter_did_not_keep_is_reported_not_placed(tmp_path):
    """A weight whose tag is not in the converter's file is named and nothing is written
    (the export then converts it with its real values)."""
    from crossport.export import formats, tagged

    conversion = crossport.convert_with_report(TextEncoder().eval(),
                                               (torch.randint(0, 100, (1, 8)),))
    weights = tagged.select(conversion.model)
    data = formats._convert(conversion.model, "float32", conversion, {}, weights)
    ghost = tagged.TaggedWeight("ghost/kernel", 1 + 900 * tagged.TAG_STEP, (64, 64),
                                lambda: np.zeros((64, 64), "float32"))
    assert tagged.place(data, tmp_path / "m.tflite", [*weights, ghost]) == {"ghost/kernel"}
    assert not (tmp_path / "m.tflite").exists()
    assert tagged.place(data, tmp_path / "m.tflite", weights) == set()
    assert (tmp_path / "m.tflite").exists()


class DenseWithSplatConstant(torch.nn.Module):
    """A Dense (tagged) and a conv whose kernel is one repeated value (a splat for TF, not
    tagged: conv kernels stay real)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(128, 128, 3, padding=1)
        torch.nn.init.constant_(self.conv.weight, 0.01)
        self.proj = torch.nn.Linear(128, 512)  # large enough for TF to unfold

    def forward(self, x):
        return self.proj(self.conv(x).mean((2, 3)))


def test_splats_unfolded_by_the_converter_become_constants_again(tmp_path):
    """The float export asks TF's converter for FILL ops instead of full-size splats; every
    FILL of a constant, a tag or a genuine splat like ``offset``, is a constant buffer in
    the file again (XNNPACK takes no FILL)."""
    conversion = crossport.convert_with_report(DenseWithSplatConstant().eval(),
                                               random_inputs((1, 128, 8, 8)))
    assert crossport.export(conversion, tmp_path / "m.tflite").passed
    ops = tflite_op_names(tmp_path / "m.tflite")
    assert "FILL" not in ops and "FULLY_CONNECTED" in ops, ops


class SortsWithNaN(torch.nn.Module):
    def forward(self, x):
        values, indices = torch.topk(x * 2, 3, largest=False)
        return values, indices, torch.sort(x, dim=-1, descending=True, stable=True).values


def test_sort_and_topk_order_nan_like_torch_on_litert(tmp_path):
    """torch's NaN order (above +inf) through TFLite builtins only (BITCAST, BITWISE_XOR)."""
    net = SortsWithNaN().eval()
    conversion = crossport.convert_with_report(net, random_inputs((2, 10)))
    result = crossport.export(conversion, tmp_path / "m.tflite")
    ops = tflite_op_names(result.path)
    assert not [op for op in ops if op.startswith("Flex") or op == "CUSTOM"], ops
    runner = _litert(result.path).get_signature_runner("serving_default")
    (x,) = random_inputs((2, 10), seed=1)
    x[0, 3], x[0, 7], x[1, 1], x[1, 5] = float("nan"), -float("inf"), float("inf"), float("nan")
    got = [runner(x=x.numpy())[f"output_{i}"] for i in range(3)]
    for out, want in zip(got, net(x)):
        np.testing.assert_array_equal(out, want.numpy())
