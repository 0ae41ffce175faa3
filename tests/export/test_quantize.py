"""Full-integer TFLite: calibration, per-op report mapped to torch paths, selective float."""

import pathlib

import numpy as np
import pytest
import torch

import crossport
from crossport.export import quantize
from crossport.export.formats import load_tflite, tflite_op_names


class ThreeConvs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.body = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.head = torch.nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        return self.head(self.body(self.stem(x).relu()).relu()).mean((2, 3))


def _calibration(shape, count=8, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]


def _convert(module, shape, **options):
    torch.manual_seed(0)
    return crossport.convert_with_report(module.eval(), (torch.randn(shape),), **options)


@pytest.fixture(scope="module")
def outlier():
    """``body`` gets one output channel 60x larger: its int8 step swamps the other seven."""
    torch.manual_seed(0)
    net = ThreeConvs()
    with torch.no_grad():
        net.body.weight[5] *= 60
    return _convert(net, (1, 3, 16, 16))


def _litert(path, **kw):
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=str(path), **kw)


def test_outlier_channel_conv_is_named_first(outlier, tmp_path):
    result = crossport.export(outlier, tmp_path / "m.tflite", "tflite-int8-full",
                              calibration=_calibration((1, 3, 16, 16)))
    rows = result.quantization.layers
    assert rows[0].name == "body", result.quantization.summary()
    assert rows[0].op == "CONV_2D" and rows[0].scale > 0
    others = [r.error for r in rows[1:]]
    assert rows[0].error > 5 * max(others), result.quantization.summary()
    assert {"stem", "head"} <= {r.name for r in rows}
    assert result.passed and result.quantization.sqnr_db >= quantize.MIN_SQNR_DB[
        "tflite-int8-full"]
    text, data = result.summary(), result.quantization.to_dict()
    assert "body" in text and "SQNR" in text
    assert data["layers"][0]["name"] == "body" and "zero_point" in data["layers"][0]
    assert '"sqnr_db"' in result.quantization.to_json()


def test_float_layers_leaves_the_named_module_unquantized(outlier, tmp_path):
    result = crossport.export(outlier, tmp_path / "m.tflite", "tflite-int8-full",
                              calibration=_calibration((1, 3, 16, 16)), float_layers=["body"])
    names = {r.name for r in result.quantization.layers}
    assert "body" not in names and {"stem", "head"} <= names
    assert result.quantization.float_layers == ["body"]
    assert result.passed
    interpreter = _litert(tmp_path / "m.tflite")
    float_convs = [t for t in interpreter.get_tensor_details()
                   if "body" in t["name"] and t["dtype"] == np.float32]
    assert float_convs, "the body conv's tensors stay float32"


def test_unknown_float_layer_is_an_input_error(outlier, tmp_path):
    with pytest.raises(crossport.InputError, match="nope"):
        crossport.export(outlier, tmp_path / "m.tflite", "tflite-int8-full",
                         calibration=_calibration((1, 3, 16, 16)), float_layers=["nope"])
    assert list(tmp_path.iterdir()) == []


def test_int8_io_round_trip(tmp_path):
    net = ThreeConvs().eval()
    conversion = _convert(net, (1, 3, 16, 16))
    calibration = _calibration((1, 3, 16, 16))
    result = crossport.export(conversion, tmp_path / "m.tflite", "tflite-int8-full",
                              calibration=calibration, int8_io=True)
    assert result.passed
    interpreter = _litert(tmp_path / "m.tflite")
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    assert inp["dtype"] == np.int8 and out["dtype"] == np.int8
    assert inp["quantization"][0] > 0 and out["quantization"][0] > 0
    # quantize -> run -> dequantize by the file's own scales, against torch fp32
    (got,) = load_tflite(tmp_path / "m.tflite", ["x"])([calibration[0]])
    ref = net(torch.from_numpy(calibration[0])).detach().numpy()
    assert quantize.sqnr_db([(ref, got)]) > quantize.MIN_SQNR_DB["tflite-int8-full"]


def test_int16x8_has_int16_activations_and_passes(tmp_path):
    conversion = _convert(ThreeConvs(), (1, 3, 16, 16))
    result = crossport.export(conversion, tmp_path / "m.tflite", "tflite-int16x8",
                              calibration=_calibration((1, 3, 16, 16)))
    assert result.passed, result.summary()
    assert result.quantization.sqnr_db >= quantize.MIN_SQNR_DB["tflite-int16x8"]
    dtypes = {t["dtype"] for t in _litert(tmp_path / "m.tflite").get_tensor_details()}
    assert np.int16 in dtypes


def test_failed_sqnr_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setitem(quantize.MIN_SQNR_DB, "tflite-int8-full", 200.0)  # unreachable
    conversion = _convert(ThreeConvs(), (1, 3, 16, 16))
    with pytest.raises(crossport.ExportError, match="SQNR.*nothing was written"):
        crossport.export(conversion, tmp_path / "m.tflite", "tflite-int8-full",
                         calibration=_calibration((1, 3, 16, 16)))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kwargs,match", [
    ({"format": "tflite-int8-full"}, "needs calibration"),
    ({"format": "tflite", "calibration": [np.zeros((1, 3, 16, 16), np.float32)]},
     "calibration only apply"),
    ({"format": "tflite-int8-full", "calibration": [np.zeros((1, 3, 8, 8), np.float32)]},
     r"calibration example 0: input 'x' has shape \(1, 3, 8, 8\)"),
    ({"format": "tflite-int8-full", "calibration": []}, "calibration is empty"),
])
def test_bad_quantization_arguments_are_input_errors(tmp_path, kwargs, match):
    conversion = _convert(ThreeConvs(), (1, 3, 16, 16), check=False)
    with pytest.raises(crossport.InputError, match=match):
        crossport.export(conversion, tmp_path / "m.tflite", **kwargs)


def test_calibration_takes_tuples_of_tensors_for_two_inputs(tmp_path):
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(6, 3)

        def forward(self, a, b):
            return self.fc(a) * b

    torch.manual_seed(0)
    conversion = crossport.convert_with_report(Two().eval(),
                                               (torch.randn(2, 6), torch.randn(2, 3)))
    calibration = [(torch.randn(2, 6), torch.randn(2, 3)) for _ in range(6)]
    result = crossport.export(conversion, tmp_path / "m.tflite", "tflite-int8-full",
                              calibration=calibration)
    assert result.passed, result.summary()
    assert [r.name for r in result.quantization.layers if r.op == "FULLY_CONNECTED"] == ["fc"]


@pytest.fixture(scope="module")
def three_convs():
    return _convert(ThreeConvs(), (1, 3, 16, 16), check=False)


def _filled(value, count=3):
    return [np.full((1, 3, 16, 16), value, np.float32) for _ in range(count)]


@pytest.mark.parametrize("calibration,match", [
    (_filled(np.nan), r"example 0: input 'x' holds NaN or inf"),  # was: 'debug mode'
    (_filled(np.inf), r"example 0: input 'x' holds NaN or inf"),  # was: a segfault in TF
    (5, "calibration must be an iterable of examples .* not a int"),  # was: TypeError
    ({"x": np.zeros((1, 3, 16, 16), np.float32)}, "iterable of examples"),
    ("calib/", "is a path; pass the examples"),  # was: 'input x has shape ()'
    (pathlib.Path("calib"), "is a path; pass the examples"),  # was: TypeError
    ([np.full((1, 3, 16, 16), "a")], r"example 0: input 'x' has dtype <U1"),  # ValueError
    ([[None]], r"example 0: input 'x' has dtype object"),
    ([{"y": np.zeros((1, 3, 16, 16), np.float32)}], r"dict with keys \['y'\].*\['x'\]"),
])
def test_malformed_calibration_is_one_input_error_naming_the_example(three_convs, tmp_path,
                                                                     calibration, match):
    with pytest.raises(crossport.InputError, match=match):
        crossport.export(three_convs, tmp_path / "m.tflite", "tflite-int8-full",
                         calibration=calibration)
    assert list(tmp_path.iterdir()) == []


def test_calibration_examples_of_different_sizes_for_a_dynamic_dim_are_refused(tmp_path):
    """TF's calibrator failed with 'Cannot set tensor: Dimension mismatch. Got 17 but
    expected 16' when the examples of a dynamic H/W model differed in size."""
    conversion = _convert(ThreeConvs(), (1, 3, 16, 16), check=False,
                          dynamic_dims={0: {2: "h", 3: "w"}})
    calibration = _calibration((1, 3, 16, 16), count=2) + _calibration((1, 3, 17, 16), count=2)
    with pytest.raises(crossport.InputError, match=r"example 2: input 'x' has shape "
                                                   r"\(1, 3, 17, 16\), example 0 has"):
        crossport.export(conversion, tmp_path / "m.tflite", "tflite-int8-full",
                         calibration=calibration)
    assert list(tmp_path.iterdir()) == []


def test_calibration_examples_may_be_dicts_keyed_by_input_name(three_convs, tmp_path):
    calibration = [{"x": a} for a in _calibration((1, 3, 16, 16), count=4)]
    result = crossport.export(three_convs, tmp_path / "m.tflite", "tflite-int8-full",
                              calibration=calibration)
    assert result.passed, result.summary()


def test_fractional_calibration_values_for_integer_ids_are_refused(tmp_path):
    class Ids(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(20, 4)

        def forward(self, ids):
            return self.emb(ids).mean(1)

    conversion = crossport.convert_with_report(Ids().eval(), (torch.randint(0, 20, (1, 5)),),
                                               check=False)
    calibration = [np.random.default_rng(i).uniform(0, 19, (1, 5)) for i in range(3)]
    with pytest.raises(crossport.InputError, match="fractional values; the input is int"):
        crossport.export(conversion, tmp_path / "m.tflite", "tflite-int8-full",
                         calibration=calibration)  # was: 'gather index out of bounds'
    assert list(tmp_path.iterdir()) == []


def test_one_float_layer_given_as_a_string_is_that_module(outlier, tmp_path):
    """``float_layers="body"`` was read as the modules 'b', 'o', 'd', 'y'."""
    result = crossport.export(outlier, tmp_path / "m.tflite", "tflite-int8-full",
                              calibration=_calibration((1, 3, 16, 16)), float_layers="body")
    assert result.quantization.float_layers == ["body"]
    assert "body" not in {r.name for r in result.quantization.layers}


@pytest.mark.parametrize("kwargs,match", [
    ({"check_inputs": -1}, "check_inputs=-1: expected an int >= 0"),
    ({"check_inputs": 1.5}, "check_inputs=1.5"),
    ({"check": "no"}, "check='no': expected True or False"),
])
def test_export_check_options_are_validated(three_convs, tmp_path, kwargs, match):
    with pytest.raises(crossport.InputError, match=match):
        crossport.export(three_convs, tmp_path / "m.tflite", **kwargs)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_int8_resnet18_runs_on_litert_with_xnnpack(tmp_path):
    """Live random weights, random calibration: stated SQNR >= 15 dB (28 dB measured)."""
    from crossport.compat import import_torchvision
    from crossport.parity.live import make_live

    torchvision = import_torchvision()
    torch.manual_seed(0)
    x = torch.randn(1, 3, 224, 224)
    net = make_live(torchvision.models.resnet18(weights=None).eval(), (x,))
    conversion = crossport.convert_with_report(net, (x,), check=False)
    result = crossport.export(conversion, tmp_path / "r18.tflite", "tflite-int8-full",
                              calibration=_calibration((1, 3, 224, 224), count=6))
    assert result.passed and result.quantization.sqnr_db >= 15.0, result.summary()
    names = {r.name for r in result.quantization.layers}
    assert {"conv1", "layer3.0.conv1", "layer4.1.conv2", "fc"} <= names
    interpreter = _litert(tmp_path / "r18.tflite", num_threads=1)
    interpreter.allocate_tensors()  # XNNPACK's prepare failed on the -inf max-pool padding
    assert "DELEGATE" in [op["op_name"] for op in interpreter._get_ops_details()]
    assert tflite_op_names(tmp_path / "r18.tflite").count("CONV_2D") == 20
    interpreter.invoke()


class Recurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(20, 8)
        self.encoder = torch.nn.LSTM(8, 8, num_layers=2, batch_first=True)
        self.decoder = torch.nn.GRU(8, 4, batch_first=True, bidirectional=True)

    def forward(self, ids):
        return self.decoder(self.encoder(self.emb(ids))[0])[0]


@pytest.mark.parametrize("fmt", ["tflite-int8-full", "tflite-int16x8"])
def test_recurrent_layers_are_refused_by_name_before_the_calibrator_crashes(tmp_path, fmt):
    """TF's calibrator segfaulted on the WHILE loops LSTM/GRU become (the whole process)."""
    conversion = crossport.convert_with_report(Recurrent().eval(),
                                               (torch.randint(0, 20, (1, 6)),), check=False)
    calibration = [np.random.default_rng(i).integers(0, 20, (1, 6)) for i in range(3)]
    with pytest.raises(crossport.ExportError, match=rf"{fmt} cannot quantize recurrent "
                                                    r"layers: encoder, decoder \(LSTM"):
        crossport.export(conversion, tmp_path / "m.tflite", fmt, calibration=calibration)
    assert list(tmp_path.iterdir()) == []


class LayerNormHead(torch.nn.Module):
    """LayerNorm: TF's int16x8 quantizer has no int16 SquaredDifference."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.fc(x))


class CumulativeSine(torch.nn.Module):
    def forward(self, x):
        return torch.cumsum(x, 1).sin()


@pytest.mark.parametrize("module,fmt,match", [
    (LayerNormHead(), "tflite-int16x8",
     r"the tflite-int16x8 file TF's quantizer wrote does not run on LiteRT: SquaredDifference "
     r"only supports FLOAT32 and INT32 now, got 7\..*Export tflite-int8-full"),
    (CumulativeSine(), "tflite-int8-full",  # was: 'check if the quantized model is in debug mode'
     r"TF's int8 quantizer cannot quantize this model: none of the model's ops has an int8 "
     r"TFLite kernel.*Export tflite-int16x8, tflite-fp16"),
])
def test_what_tf_cannot_quantize_is_one_short_export_error(tmp_path, module, fmt, match):
    conversion = crossport.convert_with_report(module.eval(), (torch.randn(2, 8),), check=False)
    with pytest.raises(crossport.ExportError, match=match) as info:
        crossport.export(conversion, tmp_path / "m.tflite", fmt,
                         calibration=[np.random.default_rng(i).standard_normal((2, 8))
                                      .astype(np.float32) for i in range(3)])
    assert str(info.value).count("SquaredDifference") <= 1 and "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_the_sqnr_gate_measures_examples_held_out_from_calibration(tmp_path):
    """The re-check ran on the last calibration examples, whose ranges the calibrator had
    just fitted: examples far outside the others' range passed. Held out, they fail."""
    conversion = _convert(ThreeConvs(), (1, 3, 16, 16), check=False)
    usual = _calibration((1, 3, 16, 16), count=18)
    unusual = [50 * a for a in _calibration((1, 3, 16, 16), count=2, seed=1)]
    with pytest.raises(crossport.ExportError, match=r"output SQNR .* < 15 dB"):
        crossport.export(conversion, tmp_path / "m.tflite", "tflite-int8-full",
                         calibration=usual + unusual)
    assert list(tmp_path.iterdir()) == []
    result = crossport.export(conversion, tmp_path / "m.tflite", "tflite-int8-full",
                              calibration=usual + usual[:2])
    assert result.passed
    assert "on 2 examples held out from calibration" in result.summary()
    few = crossport.export(conversion, tmp_path / "few.tflite", "tflite-int8-full",
                           calibration=usual[:8])
    assert "in-sample: with 20 or more examples 2 are held out" in few.summary()


class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x) + x  # an op of no layer: keras.ops.add in the Keras model


class ResidualNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.block = Residual()
        self.fc = torch.nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.block(self.stem(x)), 1))  # flatten: the root's


def test_ops_outside_modules_are_named_after_their_torch_node(tmp_path):
    """They showed raw TFLite tensor names (functional_1/Add1, functional_1/Reshape1)."""
    conversion = _convert(ResidualNet(), (1, 3, 8, 8))
    result = crossport.export(conversion, tmp_path / "r.tflite", "tflite-int8-full",
                              calibration=_calibration((1, 3, 8, 8)))
    rows = {r.name: r for r in result.quantization.layers}
    assert rows["block (add)"].op == "ADD" and rows["block (add)"].node == "add"
    assert rows["<root> (flatten)"].op == "RESHAPE"
    assert rows["<input x>"].op == "TRANSPOSE"  # NCHW in, NHWC inside
    modules = set(dict(conversion.module.named_modules())) | {"<root>"}
    nodes = {n.name for n in conversion.exported.graph_module.graph.nodes}
    for row in result.quantization.layers:
        module = row.name.split(" (")[0]
        assert module in modules or row.name.startswith("<input "), row
        assert row.node in nodes, row
    assert result.passed


def test_float_layers_keeps_a_modules_own_ops_in_float_too(tmp_path):
    """float_layers=["block"] kept block.conv in float but quantized block's residual add."""
    conversion = _convert(ResidualNet(), (1, 3, 8, 8))
    result = crossport.export(conversion, tmp_path / "r.tflite", "tflite-int8-full",
                              calibration=_calibration((1, 3, 8, 8)), float_layers=["block"])
    rows = result.quantization.layers
    assert not [r for r in rows if r.name.startswith("block")], result.quantization.summary()
    assert "ADD" not in {r.op for r in rows} and {"stem", "fc"} & {r.name for r in rows}
