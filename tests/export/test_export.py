"""Every format is re-loaded from disk and re-checked against torch; failures leave nothing."""

import keras
import numpy as np
import pytest
import torch

import crossport
from crossport.export import FORMATS
from tests.harness import random_inputs


class TwoInputsDictOut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, image, scale):
        y = self.bn(self.conv(image)).relu()
        return {"logits": self.fc(y.mean((2, 3))) * scale, "features": y}


@pytest.fixture(scope="module")
def conversion():
    torch.manual_seed(0)
    return crossport.convert_with_report(TwoInputsDictOut().eval(),
                                         random_inputs([(2, 3, 16, 16), (2, 1)]),
                                         dynamic_batch=True)


@pytest.mark.parametrize("fmt,name", [
    ("keras", "m.keras"), ("saved_model", "saved"), ("tflite", "m.tflite"),
    ("tflite-fp16", "m16.tflite"), ("tflite-int8", "m8.tflite"),
])
def test_every_format_round_trips_within_its_tolerance(conversion, tmp_path, fmt, name):
    result = crossport.export(conversion, tmp_path / name, fmt)
    assert result.passed and result.path.exists()
    assert result.tolerance == (FORMATS[fmt] or conversion.options.atol)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name], "no temporary leftovers"


def test_keras_file_loads_without_custom_objects(tmp_path):
    """A model using crossport.layers (count_include_pad avg pool) loads after import."""
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AvgPool2d(3, 2, padding=1))
    x = random_inputs((1, 3, 11, 11))
    conversion = crossport.convert_with_report(net.eval(), x)
    assert any(type(layer).__module__.startswith("crossport.layers")
               for layer in conversion.model.layers)
    crossport.export(conversion, tmp_path / "pool.keras")
    loaded = keras.models.load_model(tmp_path / "pool.keras")
    np.testing.assert_allclose(np.asarray(loaded(x[0].numpy())), net(x[0]).detach().numpy(),
                               atol=1e-5)


def test_saved_model_signature_has_forward_names_and_dynamic_batch(conversion, tmp_path):
    import tensorflow as tf

    crossport.export(conversion, tmp_path / "saved")
    signature = tf.saved_model.load(str(tmp_path / "saved")).signatures["serving_default"]
    specs = signature.structured_input_signature[1]
    assert set(specs) == {"image", "scale"}
    assert specs["image"].shape.as_list() == [None, 3, 16, 16]


def test_failed_recheck_leaves_nothing(conversion, tmp_path, monkeypatch):
    monkeypatch.setitem(FORMATS, "tflite-fp16", 1e-12)  # fp16 cannot meet this on purpose
    target = tmp_path / "m16.tflite"
    with pytest.raises(crossport.ExportError, match="nothing was written"):
        crossport.export(conversion, target, "tflite-fp16")
    assert list(tmp_path.iterdir()) == []


def test_unwritable_target_is_an_export_error(conversion, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(crossport.ExportError):
        crossport.export(conversion, blocker / "m.keras")
    assert blocker.read_text() == "not a directory"


def test_unknown_suffix_is_an_input_error(conversion, tmp_path):
    with pytest.raises(crossport.InputError, match="format"):
        crossport.export(conversion, tmp_path / "m.onnx")


@pytest.mark.parametrize("name, format", [("m.keras", "tflite"), ("m.tflite", "keras"),
                                          ("m.tflite", "saved_model"), ("m.h5", "keras"),
                                          ("m", "keras"), ("m.keras", "tflite-int8")])
def test_a_format_that_contradicts_the_suffix_is_an_input_error(conversion, tmp_path, name,
                                                                format):
    """A TFLite flatbuffer was written as m.keras and a Keras archive as m.tflite (exit 0 on
    the CLI): files no loader of that suffix reads (found by audit)."""
    with pytest.raises(crossport.InputError, match="does not fit"):
        crossport.export(conversion, tmp_path / name, format)
    assert list(tmp_path.iterdir()) == []


def test_a_bare_keras_model_is_an_input_error(conversion, tmp_path):
    """export re-checks against torch: it needs the Conversion, not only its Keras model."""
    with pytest.raises(crossport.InputError, match="convert_with_report"):
        crossport.export(conversion.model, tmp_path / "m.keras")
    assert not (tmp_path / "m.keras").exists()


def test_exporting_twice_needs_overwrite(conversion, tmp_path):
    target = tmp_path / "m.keras"
    crossport.export(conversion, target, check=False)
    first = target.read_bytes()
    with pytest.raises(crossport.ExportError, match="already exists"):
        crossport.export(conversion, target)
    assert target.read_bytes() == first
    result = crossport.export(conversion, target, overwrite=True)
    assert result.passed and keras.models.load_model(target) is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.keras"], "no staging leftovers"


def test_an_existing_folder_is_never_written_into_or_replaced(conversion, tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(crossport.ExportError, match="existing directory"):
            crossport.export(conversion, folder, overwrite=overwrite)
    assert [p.name for p in folder.iterdir()] == ["keep.txt"]
    assert (folder / "keep.txt").read_text() == "mine"


def test_overwrite_never_turns_a_file_into_a_saved_model(conversion, tmp_path):
    readme = tmp_path / "README"
    readme.write_text("my notes")
    with pytest.raises(crossport.ExportError, match="same kind"):
        crossport.export(conversion, readme, overwrite=True)
    assert readme.read_text() == "my notes" and len(list(tmp_path.iterdir())) == 1


def test_a_saved_model_is_replaced_only_with_overwrite(conversion, tmp_path):
    target = tmp_path / "saved"
    crossport.export(conversion, target, check=False)
    with pytest.raises(crossport.ExportError, match="already exists"):
        crossport.export(conversion, target, check=False)
    (target / "marker").write_text("from the first export")
    crossport.export(conversion, target, overwrite=True)
    assert (target / "saved_model.pb").is_file() and not (target / "marker").exists()


def test_to_source_twice_needs_overwrite_and_keeps_the_old_files(conversion, tmp_path):
    target = tmp_path / "m.py"
    crossport.to_source(conversion, target, check=False)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(crossport.ExportError, match="already exists"):
        crossport.to_source(conversion, target, check=False)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    crossport.to_source(conversion, target, overwrite=True)
    assert sorted(before) == sorted(p.name for p in tmp_path.iterdir())


def test_a_failed_commit_rolls_every_output_back(tmp_path, monkeypatch):
    """The second move fails (a full disk, say): the first output is put back as it was."""
    import os

    from crossport.export.staging import Staging

    (tmp_path / "a.txt").write_text("old a")
    real_rename = os.rename

    def failing_rename(src, dst, *args, **kwargs):
        if str(dst).endswith("b.txt"):
            raise OSError(28, "No space left on device")
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", failing_rename)
    with pytest.raises(crossport.ExportError, match="rolled back"):
        with Staging(overwrite=True) as staging:
            staging.claim(tmp_path / "a.txt").write_text("new a")
            staging.claim(tmp_path / "sub" / "b.txt").write_text("new b")
            staging.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
    assert (tmp_path / "a.txt").read_text() == "old a"
class NestedOut(torch.nn.Module):
    """A detection head's output: ``(decoded, {"scores": ..., "feats": [map, map]})``."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.down = torch.nn.Conv2d(4, 4, 3, stride=2, padding=1)

    def forward(self, x):
        a = self.conv(x)
        b = self.down(a)
        decoded = torch.cat([a.flatten(2), b.flatten(2)], 2).sigmoid()
        return decoded, {"scores": b.mean((2, 3)), "feats": [a, b]}


@pytest.mark.parametrize("fmt,name", [("keras", "m.keras"), ("saved_model", "saved"),
                                      ("tflite", "m.tflite")])
def test_nested_outputs_round_trip(tmp_path, fmt, name):
    """A TF signature cannot return a tuple holding a dict of lists: served flat instead."""
    conversion = crossport.convert_with_report(NestedOut().eval(), random_inputs((1, 3, 8, 10)),
                                               channels_last_io=True)
    result = crossport.export(conversion, tmp_path / name, fmt)
    assert result.passed and result.max_error <= 1e-5


class OneTuple(torch.nn.Module):
    """``return (x,)``: HF models with return_dict=False and one output (GPT-2 without a
    cache, Whisper's encoder, Segformer)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 5)

    def forward(self, x):
        return (self.fc(x).relu(),)


@pytest.mark.parametrize("name", ["m.keras", "m.tflite"])
def test_a_one_tuple_output_converts_and_exports(tmp_path, name):
    """Keras returns the bare tensor for a 1-tuple of outputs and the check walked its
    first axis: a ParityError 'shape (4, 5) in Keras, torch (1, 4, 5)', nothing exported."""
    conversion = crossport.convert_with_report(OneTuple().eval(), (torch.randn(1, 4, 3),))
    assert conversion.report.passed
    result = crossport.export(conversion, tmp_path / name)
    assert result.passed and result.max_error < 1e-5


@pytest.fixture(scope="module")
def embedding_bag():
    """Offsets constrain each other (ascending, from 0): random ones are not valid bags, so
    the conversion checks the example inputs only (check_inputs=0)."""
    torch.manual_seed(0)
    return crossport.convert_with_report(
        torch.nn.EmbeddingBag(7, 3, mode="sum").eval(),
        (torch.tensor([1, 2, 4, 5, 4, 3]), torch.tensor([0, 2, 4])), check_inputs=0)


def test_export_rechecks_the_example_inputs_with_check_inputs_0(embedding_bag, tmp_path):
    """Found by the layer round-trip table (tests/export/test_layer_configs.py): export's
    re-check drew fresh inputs only and refused check_inputs=0, so a model whose inputs
    random ones cannot stand in for (embedding_bag's offsets) could not be exported with a
    re-check at all; it failed with torch's raw RuntimeError."""
    result = crossport.export(embedding_bag, tmp_path / "bag.keras", check_inputs=0)
    assert result.passed
    assert [p.name for p in tmp_path.iterdir()] == ["bag.keras"]


def test_export_rechecks_as_many_inputs_as_the_conversion_by_default(embedding_bag, tmp_path):
    """export drew 2 fresh sets whatever the conversion was told: a model converted with
    check_inputs=0 failed its export unless the count was repeated there."""
    assert crossport.export(embedding_bag, tmp_path / "bag.keras").passed


def test_fresh_sets_torch_rejects_keep_the_example_integers(embedding_bag, tmp_path):
    """Random offsets are not valid bags (torch raised on them): the re-checks of export and
    to_source, like the conversion's check, retry such a set with the example's integer
    inputs and fresh floats."""
    assert crossport.export(embedding_bag, tmp_path / "bag.keras", check_inputs=2).passed
    assert crossport.to_source(embedding_bag, tmp_path / "bag_keras.py", check_inputs=2)
    conversion = crossport.convert_with_report(
        torch.nn.EmbeddingBag(7, 3, mode="max").eval(),
        (torch.tensor([1, 2, 4, 5, 4, 3]), torch.tensor([0, 2, 4])))
    assert conversion.report.passed
    assert any("the example's integer inputs with fresh floats" in n
               for n in conversion.report.notes), conversion.report.notes


class _Probabilities(torch.nn.Module):
    """binary_cross_entropy takes probabilities: torch rejects fresh normal floats, and
    there is no integer input to keep."""

    def forward(self, p, target):
        return torch.nn.functional.binary_cross_entropy(p, target, reduction="none")


@pytest.fixture(scope="module")
def probabilities():
    example = (torch.rand(2, 5, generator=torch.Generator().manual_seed(0)),
               torch.rand(2, 5, generator=torch.Generator().manual_seed(1)))
    return crossport.convert_with_report(_Probabilities(), example, check_inputs=0)


def test_export_names_the_input_set_torch_rejects(probabilities, tmp_path):
    with pytest.raises(crossport.InputError, match=r"(?s)fresh input set 1 .*check_inputs=0"):
        crossport.export(probabilities, tmp_path / "p.keras", check_inputs=2)
    assert list(tmp_path.iterdir()) == []


def test_generated_source_is_rechecked_on_the_example_inputs(probabilities, tmp_path):
    """to_source's re-check drew fresh inputs only (2, whatever the conversion was told):
    a model whose inputs random ones cannot stand in for could not be written with a check."""
    path = crossport.to_source(probabilities, tmp_path / "p_keras.py")
    assert path.exists()
    with pytest.raises(crossport.InputError, match=r"(?s)fresh input set 1 .*check_inputs=0"):
        crossport.to_source(probabilities, tmp_path / "other_keras.py", check_inputs=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p_keras.py", "p_keras.weights.h5"]


class OddArgumentNames(torch.nn.Module):
    def forward(self, _mask, Img, img, bild_ä):  # noqa: N803  (the names are the point)
        return _mask * Img + img - bild_ä


@pytest.mark.parametrize("name", ["saved", "m.tflite"])
def test_forward_names_tf_rejects_still_export(tmp_path, name):
    """Found by probing signatures in the deploy audit: a leading '_', a non-ASCII letter or
    two names equal but for case made TF refuse the signature ('Got non-flat/non-unique
    argument names'), so SavedModel and TFLite exports failed. The names are sanitized."""
    conversion = crossport.convert_with_report(OddArgumentNames().eval(),
                                               random_inputs([(2, 3)] * 4))
    result = crossport.export(conversion, tmp_path / name)
    assert result.passed
    if name == "saved":
        import tensorflow as tf

        signature = tf.saved_model.load(str(tmp_path / name)).signatures["serving_default"]
        assert sorted(signature.structured_input_signature[1]) == sorted(
            ["arg_mask", "Img", "img_2", "bild__"])


def test_a_path_under_home_is_expanded(tmp_path, monkeypatch):
    """Found by the deploy audit's path probes: "~/m.keras" created a folder named "~" in
    the working directory (export makes missing parent folders) and wrote there."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(), work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    conversion = crossport.convert_with_report(torch.nn.Linear(3, 2).eval(),
                                               random_inputs((1, 3)))
    result = crossport.export(conversion, "~/models/m.keras")
    assert result.path == home / "models" / "m.keras" and result.path.is_file()
    assert list(work.iterdir()) == []


class DigitKeys(torch.nn.Module):
    def forward(self, x):
        return {"b1": x.mean(-1), "a2": x * 2, "c10": x[:, :2]}


def test_tflite_dict_outputs_keyed_by_digits_export(tmp_path):
    """Found by probing output names in the deploy audit: the TFLite loader ordered the
    signature's outputs by their trailing number (meant for output_<i>), so dict keys such
    as "b1", "a2" came back swapped and the export was refused as a shape mismatch."""
    conversion = crossport.convert_with_report(DigitKeys().eval(), random_inputs((2, 5)))
    assert crossport.export(conversion, tmp_path / "m.tflite").passed


class LastDimOp(torch.nn.Module):
    def __init__(self, op: str):
        super().__init__()
        self.op = op

    def forward(self, x):
        if self.op == "sort":
            return torch.sort(x, stable=True).values
        if self.op == "topk":
            return torch.topk(x, 2).values
        if self.op == "signbit":
            return torch.signbit(x)
        if self.op == "ldexp":  # the powers of two are int bits viewed as floats
            return torch.ldexp(x, (x * 40).int()), torch.ldexp(x, (x * 3).long())
        return torch.frexp(x).mantissa


@pytest.mark.parametrize("op,name", [("sort", "saved"), ("sort", "m.tflite"),
                                     ("topk", "m.tflite"), ("signbit", "saved"),
                                     ("frexp", "m.tflite"), ("ldexp", "saved"),
                                     ("ldexp", "m.tflite")])
def test_bit_views_export_with_a_run_time_last_dim(tmp_path, op, name):
    """Found by the deploy audit's SavedModel round trip of the layer table: keras' TF
    ``view`` tests the last dim in Python, so tracing a run-time last dim raised
    (OperatorNotAllowedInGraphError) and sort/topk/signbit/frexp models with one could be
    converted and saved as .keras but not exported to SavedModel or TFLite. ldexp went
    back to the plain view once (same_width_view raised on its 0-d samples), which these
    rows would have caught."""
    conversion = crossport.convert_with_report(LastDimOp(op).eval(), random_inputs((2, 6)),
                                               dynamic_dims={0: {1: "L"}})
    assert crossport.export(conversion, tmp_path / name).passed
