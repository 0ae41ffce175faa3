"""Full-integer calibration from a folder of images, preprocessed like the model's input."""

import numpy as np
import pytest
import torch

import crossport
from crossport.export import quantize
from crossport.export.formats import load_tflite
from crossport.export.images import IMAGENET_MEAN, IMAGENET_STD
from tests.export.test_quantize import ThreeConvs

Image = pytest.importorskip("PIL.Image")


def _photos(folder, sizes, seed=0):
    """Smooth random RGB images (a photo's statistics more than white noise), PNG."""
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    for i, (w, h) in enumerate(sizes):
        coarse = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
        Image.fromarray(coarse).resize((w, h), Image.Resampling.BILINEAR).save(
            folder / f"img{i:02d}.png")
    return folder


def _convert(shape, **options):
    torch.manual_seed(0)
    return crossport.convert_with_report(ThreeConvs().eval(), (torch.randn(shape),), **options)


@pytest.mark.parametrize("channels_last_io", [False, True], ids=["nchw", "nhwc"])
def test_int8_export_calibrated_on_mixed_size_images(tmp_path, channels_last_io):
    folder = _photos(tmp_path / "images", [(20, 20), (32, 24), (17, 40), (64, 64)] * 2)
    (folder / "notes.txt").write_text("not an image: ignored")
    conversion = _convert((1, 3, 16, 16), channels_last_io=channels_last_io)
    calibration = crossport.calibration_images(folder)
    result = crossport.export(conversion, tmp_path / "m.tflite", "tflite-int8-full",
                              calibration=calibration)
    q = result.quantization
    assert result.passed and q.sqnr_db >= quantize.MIN_SQNR_DB["tflite-int8-full"], q.summary()
    examples = calibration.examples(conversion.model.inputs, channels_last_io)
    assert len(examples) == 8
    expected = (1, 16, 16, 3) if channels_last_io else (1, 3, 16, 16)
    assert all(e[0].shape == expected and e[0].dtype == np.float32 for e in examples)
    (got,) = load_tflite(tmp_path / "m.tflite", ["x"])(examples[0])
    x = torch.from_numpy(examples[0][0])
    ref = conversion.module(x.permute(0, 3, 1, 2) if channels_last_io else x).detach().numpy()
    assert quantize.sqnr_db([(ref, got)]) >= quantize.MIN_SQNR_DB["tflite-int8-full"]


def test_preprocessing_scales_normalizes_and_lays_out_like_the_model(tmp_path):
    folder = tmp_path / "solid"
    folder.mkdir()
    Image.new("RGB", (30, 20), (255, 128, 0)).save(folder / "a.png")
    inputs = _convert((1, 3, 16, 16), check=False).model.inputs
    (example,) = crossport.calibration_images(folder).examples(inputs, False)
    pixel = np.array([255, 128, 0]) / 255
    want = (pixel - IMAGENET_MEAN) / IMAGENET_STD
    np.testing.assert_allclose(example[0][0, :, 7, 9], want, rtol=1e-6)
    (raw,) = crossport.calibration_images(folder, mean=(0,), std=(1,), scale=1).examples(
        inputs, False)
    np.testing.assert_array_equal(raw[0][0, :, 0, 0], [255, 128, 0])


def test_center_crop_keeps_the_middle(tmp_path):
    """A wide image: the crop drops equal parts of the left (red) and right (blue) edges."""
    folder = tmp_path / "wide"
    folder.mkdir()
    pixels = np.zeros((16, 48, 3), np.uint8)
    pixels[:, :12, 0] = 255  # red left quarter
    pixels[:, 12:36, 1] = 255  # green middle half
    pixels[:, 36:, 2] = 255  # blue right quarter
    Image.fromarray(pixels).save(folder / "a.png")
    inputs = _convert((1, 3, 16, 16), check=False).model.inputs
    (example,) = crossport.calibration_images(folder, mean=(0,), std=(1,), scale=1,
                                              resize=16).examples(inputs, False)
    np.testing.assert_array_equal(example[0][0, 1], 255)  # all green
    assert example[0][0, 0].max() == 0 and example[0][0, 2].max() == 0


def test_grayscale_model_reads_one_channel(tmp_path):
    folder = _photos(tmp_path / "gray", [(10, 10), (12, 9)])
    net = torch.nn.Conv2d(1, 2, 3).eval()
    conversion = crossport.convert_with_report(net, (torch.randn(2, 1, 8, 8),), check=False)
    (example,) = crossport.calibration_images(folder, mean=(0.5,), std=(0.25,)).examples(
        conversion.model.inputs, False)
    assert example[0].shape == (2, 1, 8, 8)  # batch 2: the two images form one example


@pytest.mark.parametrize("make,options,match", [
    (lambda d: None, {}, "has no image files"),
    (lambda d: (d / "broken.png").write_bytes(b"not a png"), {}, "cannot read .*broken.png"),
    (lambda d: _photos(d, [(8, 8)]), {"mean": (0.5, 0.5)}, "mean has 2 values"),
    (lambda d: _photos(d, [(8, 8)]), {"std": (0.5, 0.0, 0.5)}, "has a zero"),
], ids=["empty", "unreadable", "mean-length", "zero-std"])
def test_bad_image_folder_is_one_input_error(tmp_path, make, options, match):
    folder = tmp_path / "images"
    folder.mkdir()
    make(folder)
    conversion = _convert((1, 3, 16, 16), check=False)
    with pytest.raises(crossport.InputError, match=match):
        crossport.export(conversion, tmp_path / "m.tflite", "tflite-int8-full",
                         calibration=crossport.calibration_images(folder, **options))
    assert not (tmp_path / "m.tflite").exists()


def test_image_calibration_needs_one_image_input(tmp_path):
    folder = _photos(tmp_path / "images", [(8, 8)])
    conversion = crossport.convert_with_report(torch.nn.Linear(6, 3).eval(),
                                               (torch.randn(2, 6),), check=False)
    with pytest.raises(crossport.InputError, match="one 4-D image input"):
        crossport.export(conversion, tmp_path / "m.tflite", "tflite-int8-full",
                         calibration=crossport.calibration_images(folder))
