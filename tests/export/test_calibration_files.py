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
