"""Calibration examples read from files (``crossport convert --calibration``)."""

import keras
import numpy as np
import pytest

import crossport
from crossport.export.calibration import load_calibration

INPUTS = [keras.Input((3, 4, 4), batch_size=1, name="x")]


def _corrupt_npz(path):
    path.write_bytes(b"PK\x03\x04 not really a zip archive")  # was: BadZipFile, exit 2


def _truncated_npz(path):
    np.savez(path, x=np.zeros((2, 1, 3, 4, 4), np.float32))
    path.write_bytes(path.read_bytes()[:40])


@pytest.mark.parametrize("make", [_corrupt_npz, _truncated_npz])
def test_a_corrupt_npz_is_an_input_error_naming_it(tmp_path, make):
    make(tmp_path / "calib.npz")
    with pytest.raises(crossport.InputError, match="calib.npz: cannot read it as a numpy file"):
        load_calibration(tmp_path / "calib.npz", INPUTS)


def test_a_corrupt_npz_in_a_folder_is_an_input_error_naming_it(tmp_path):
    np.savez(tmp_path / "0.npz", x=np.zeros((1, 3, 4, 4), np.float32))
    _corrupt_npz(tmp_path / "1.npz")
    with pytest.raises(crossport.InputError, match="1.npz: cannot read it as a numpy file"):
        load_calibration(tmp_path, INPUTS)


def test_wrong_keys_say_so_without_blaming_the_file_format(tmp_path):
    np.savez(tmp_path / "calib.npz", a=np.zeros((2, 1, 3, 4, 4), np.float32), b=np.zeros(3))
    with pytest.raises(crossport.InputError) as info:
        load_calibration(tmp_path / "calib.npz", INPUTS)
    assert "arrays ['a', 'b']; expected one per input, named ['x']" in str(info.value)
    assert "cannot read it" not in str(info.value)


@pytest.mark.parametrize("preprocessing", [{"mean": (0.5,)}, {"scale": 1.0, "std": (0.2,)}])
def test_image_preprocessing_for_numpy_examples_is_an_input_error(tmp_path, preprocessing):
    """It was silently ignored: the int8 model then calibrated on other data than asked."""
    np.save(tmp_path / "0.npy", np.zeros((1, 3, 4, 4), np.float32))
    np.savez(tmp_path / "stacked.npz", x=np.zeros((2, 1, 3, 4, 4), np.float32))
    flags = ", ".join(f"--calibration-{k}" for k in preprocessing)
    for path in (tmp_path, tmp_path / "stacked.npz"):
        with pytest.raises(crossport.InputError, match=f"{flags}: image preprocessing"):
            load_calibration(path, INPUTS, preprocessing)


def test_calibration_inputs_are_the_conversions_inputs():
    torch = pytest.importorskip("torch")
    from crossport.export.calibration import calibration_inputs

    class Two(torch.nn.Module):
        def forward(self, image, ids):
            return image.mean() + ids.sum()

    args = (torch.randn(2, 3, 8, 6), torch.randint(0, 5, (2, 7)))
    options = {"channels_last_io": True, "dynamic_dims": {"ids": {1: "seq"}}}
    specs = calibration_inputs(Two().eval(), args, **options)
    model = crossport.convert(Two().eval(), args, **options)
    assert [(s.name, tuple(s.shape), s.dtype) for s in specs] == [
        (t.name, tuple(t.shape), t.dtype) for t in model.inputs]


def test_check_calibration_fails_before_converting(tmp_path):
    torch = pytest.importorskip("torch")
    from crossport.export.calibration import check_calibration

    module, args = torch.nn.Conv2d(3, 4, 3), (torch.randn(1, 3, 4, 4),)
    bad = [np.zeros((1, 3, 4, 4), np.float32), np.full((1, 3, 4, 4), np.inf, np.float32)]
    with pytest.raises(crossport.InputError, match="example 1: input 'input' holds NaN or inf"):
        check_calibration(bad, module, args)
    np.savez(tmp_path / "c.npz", input=np.zeros((5, 3, 4, 4), np.float32))
    examples = check_calibration(tmp_path / "c.npz", module, args, dynamic_batch=True)
    assert len(examples) == 5 and examples[0][0].shape == (1, 3, 4, 4)
