"""Calibration examples from a folder of images, with the model's preprocessing.

Each image is read with Pillow (the ``images`` extra), converted to RGB (or grayscale for a
one-channel input), its shorter side resized to ``resize`` and center-cropped to the model's
input height and width (the torchvision ``Resize`` + ``CenterCrop`` recipe), then scaled and
normalized per channel: ``(pixel * scale - mean) / std``. The result is laid out like the
model's input (NCHW, or NHWC for ``channels_last_io``) in its dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from crossport.errors import InputError

# torchvision's ImageNet preprocessing: RGB in [0, 1], then these per-channel statistics.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif",
                            ".tiff", ".ppm", ".pgm"})
# ImageNet's resize-then-crop ratio (256 -> 224) when ``resize`` is not given.
CROP_FRACTION = 0.875


@dataclass(frozen=True)
class ImageFolder:
    """A folder of images to calibrate on; the model's input decides shape and layout.

    Made by :func:`calibration_images`; ``crossport.export(..., calibration=ImageFolder)``
    reads it once it knows the conversion's input.
    """

    path: Path
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    scale: float = 1 / 255
    resize: int | None = None
    crop: tuple[int, int] | None = None

    def files(self) -> list[Path]:
        """The image files, in name order (other files are ignored)."""
        if not self.path.is_dir():
            raise InputError(f"calibration images: {self.path} is not a folder")
        files = sorted(p for p in self.path.iterdir()
                       if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise InputError(f"calibration images: {self.path} has no image files "
                             f"({', '.join(sorted(IMAGE_SUFFIXES))})")
        return files

    def examples(self, inputs: list, channels_last_io: bool) -> list[list[np.ndarray]]:
        """One example per ``batch`` images, each ``[batch, C, H, W]`` (``[.., H, W, C]``)."""
        batch, channels, height, width = _image_input(inputs, channels_last_io, self.crop)
        mean, std = _per_channel(self.mean, "mean", channels), _per_channel(self.std, "std",
                                                                            channels)
        if any(s == 0 for s in std):
            raise InputError(f"calibration images: std {self.std} has a zero")
        files = self.files()
        if len(files) < batch:
            raise InputError(f"calibration images: {self.path} has {len(files)} images; the "
                             f"model's batch is {batch}: give at least {batch}")
        resize = self.resize or round(min(height, width) / CROP_FRACTION)
        images = [(_read(f, channels, resize, height, width) * self.scale - mean) / std
                  for f in files]
        dtype = inputs[0].dtype
        examples = []
        for start in range(0, len(images) - batch + 1, batch):  # a last partial batch: unused
            array = np.stack(images[start:start + batch]).astype(dtype)  # [B, H, W, C]
            examples.append([array if channels_last_io else array.transpose(0, 3, 1, 2)])
        return examples


def calibration_images(path: str | Path, *, mean: Sequence[float] = IMAGENET_MEAN,
                       std: Sequence[float] = IMAGENET_STD, scale: float = 1 / 255,
                       resize: int | None = None,
                       crop: tuple[int, int] | None = None) -> ImageFolder:
    """Calibration examples read from the images in ``path``, preprocessed like the model's.

    Args:
        path: a folder of .jpg/.png/... images (other files are ignored), read in name order.
        mean, std: per-channel normalization after scaling (RGB order; one value for a
            grayscale input). Defaults: torchvision's ImageNet statistics.
        scale: multiplies the 0..255 pixel values first (``1/255``: [0, 1]; ``1``: raw).
        resize: the shorter side is resized to this before the center crop; default the
            crop's shorter side / 0.875 (ImageNet: 256 for a 224 crop).
        crop: ``(H, W)`` of the crop; default the model's input height and width (needed
            only when those are dynamic).

    Example:
        >>> import crossport
        >>> calibration = crossport.calibration_images("calib/", mean=(0.5,) * 3,
        ...                                            std=(0.5,) * 3)
        >>> calibration.scale
        0.00392156862745098
    """
    if scale <= 0:
        raise InputError(f"calibration images: scale must be positive, got {scale}")
    if resize is not None and resize <= 0:
        raise InputError(f"calibration images: resize must be positive, got {resize}")
    return ImageFolder(Path(path), tuple(float(m) for m in mean),
                       tuple(float(s) for s in std), float(scale), resize,
                       None if crop is None else (int(crop[0]), int(crop[1])))


def has_images(folder: Path) -> bool:
    """Whether a folder holds any image file (what ``--calibration DIR`` dispatches on)."""
    return any(p.suffix.lower() in IMAGE_SUFFIXES for p in folder.iterdir() if p.is_file())


def _image_input(inputs: list, channels_last_io: bool, crop) -> tuple[int, int, int, int]:
    """``(batch, channels, height, width)`` of the model's single image input."""
    if len(inputs) != 1 or len(inputs[0].shape) != 4:
        shapes = ", ".join(str(tuple(t.shape)) for t in inputs)
        raise InputError(f"calibration images need a model with one 4-D image input; this "
                         f"one takes {shapes}: pass calibration= arrays instead")
    shape = tuple(inputs[0].shape)
    batch, channels, height, width = ((shape[0], shape[3], shape[1], shape[2])
                                      if channels_last_io else shape)
    if np.dtype(inputs[0].dtype).kind != "f":
        raise InputError(f"calibration images feed float inputs; input {inputs[0].name!r} is "
                         f"{inputs[0].dtype}: pass calibration= arrays instead")
    if channels not in (1, 3):
        layout = "NHWC" if channels_last_io else "NCHW"
        raise InputError(f"calibration images: the model's input {shape} ({layout}) has "
                         f"{channels} channels; images give 1 (grayscale) or 3 (RGB). Is the "
                         f"layout right (channels_last_io)?")
    if crop is not None:
        height, width = crop
    elif height is None or width is None:
        raise InputError(f"calibration images: the model's input {shape} has a dynamic "
                         f"height or width: pass crop=(H, W) (CLI: --calibration-crop HxW)")
    return batch or 1, channels, height, width


def _per_channel(values: tuple[float, ...], what: str, channels: int) -> np.ndarray:
    if len(values) == 1:
        values = values * channels
    if len(values) != channels:
        raise InputError(f"calibration images: {what} has {len(values)} values; the model's "
                         f"input has {channels} channels")
    return np.asarray(values, np.float32)


def _read(path: Path, channels: int, resize: int, height: int, width: int) -> np.ndarray:
    """``[height, width, channels]`` float32 pixels in 0..255, resized and center-cropped."""
    image_module, image_ops = _pillow()
    try:
        with image_module.open(path) as image:
            image = image_ops.exif_transpose(image).convert("L" if channels == 1 else "RGB")
            image = _resize_shorter(image, max(resize, height, width), image_module)
            left, top = (image.width - width) // 2, (image.height - height) // 2
            image = image.crop((left, top, left + width, top + height))
            pixels = np.asarray(image, np.float32)
    except (OSError, ValueError, SyntaxError) as exc:  # Pillow's "cannot identify image"
        raise InputError(f"calibration images: cannot read {path} as an image: {exc}") from exc
    return pixels.reshape(height, width, channels)


def _resize_shorter(image, side: int, image_module):
    w, h = image.size
    if min(w, h) == side:
        return image
    if w <= h:
        size = (side, max(side, round(h * side / w)))
    else:
        size = (max(side, round(w * side / h)), side)
    return image.resize(size, image_module.Resampling.BILINEAR)


def _pillow():
    try:
        from PIL import Image, ImageOps
    except ImportError as exc:
        raise InputError("calibration images are read with Pillow, which is not installed: "
                         "pip install 'crossport[images]' (or pillow)") from exc
    return Image, ImageOps
