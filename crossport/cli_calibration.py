"""``crossport convert``'s quantization options: --calibration (numpy files or images with
the --calibration-* preprocessing), --float-layer, --int8-io.

Everything here fails before the conversion starts (it can take minutes): option mistakes,
and the calibration data itself, read and checked against the inputs the conversion will
make (names, shapes and dtypes from the torch example inputs).
"""

from __future__ import annotations

from pathlib import Path

from crossport.cli import _fail  # defined before cli.py calls into this module
from crossport.errors import InputError


def parse_image_preprocessing(mean: str | None, std: str | None, scale: float | None,
                              resize: int | None, crop: str | None) -> dict:
    """The ``--calibration-*`` options as ``calibration_images`` keyword arguments."""
    options: dict = {}
    for key, text in (("mean", mean), ("std", std)):
        if text is not None:
            try:
                options[key] = tuple(float(v) for v in text.split(","))
            except ValueError:
                _fail(f"--calibration-{key} {text!r}: expected comma-separated numbers, "
                      "e.g. 0.485,0.456,0.406")
    if crop is not None:
        parts = crop.lower().split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            _fail(f"--calibration-crop {crop!r}: expected HxW, e.g. 224x224")
        options["crop"] = (int(parts[0]), int(parts[1]))
    if scale is not None:
        options["scale"] = scale
    if resize is not None:
        options["resize"] = resize
    return options


def check_export_options(output: Path | None, format: str | None,
                          quantization: dict | None) -> None:
    """Fail now, in one line, on a --format typo or quantization options that do not fit
    the format (they were found only after converting, which can take minutes)."""
    from crossport.export import FORMATS, resolve_format
    from crossport.export.quantize import FULL_INTEGER

    quantization = quantization or {}
    if format is not None and format not in FORMATS:
        _fail(f"InputError: unknown format {format!r}; expected one of {sorted(FORMATS)}")
    given = [flag for flag, key in (("--calibration", "calibration"), ("--float-layer",
                                    "float_layers"), ("--int8-io", "int8_io"))
             if quantization.get(key)]
    if output is None:
        if given:  # they shape the exported file; without -o nothing would read them
            _fail(f"InputError: {', '.join(given)} apply to the exported file: pass -o "
                  "FILE.tflite --format tflite-int8-full (or tflite-int16x8)")
        return
    try:
        format = resolve_format(output, format)
    except InputError as exc:
        _fail(f"InputError: {exc}")
    if format not in FULL_INTEGER and given:
        _fail(f"InputError: {', '.join(given)} only apply to the full-integer formats "
              f"{sorted(FULL_INTEGER)}, not {format!r}")
    calibration = quantization.get("calibration")
    if format in FULL_INTEGER and calibration is None:
        _fail(f"InputError: format {format!r} needs calibration: pass --calibration, a "
              "folder of .npy/.npz examples or images, or one .npz of stacked examples")
    if calibration is not None and not Path(calibration).exists():
        _fail(f"InputError: --calibration {calibration}: no such file or folder")


def read_calibration(module, args, output: Path | None, quantization: dict | None,
                     options: dict) -> dict | None:
    """``quantization`` with ``--calibration`` read and validated against the inputs the
    conversion will make (shapes, dtypes, names from the torch example inputs)."""
    if not quantization or quantization.get("calibration") is None or output is None:
        return quantization
    from crossport.export.calibration import check_calibration

    examples = check_calibration(quantization["calibration"], module, args,
                                 preprocessing=quantization.get("preprocessing"), **options)
    return {**quantization, "calibration": examples}


def export_options(quantization: dict | None) -> dict:
    """``calibration=`` (the examples read from --calibration), ``float_layers=``,
    ``int8_io=``."""
    return {k: v for k, v in (quantization or {}).items()
            if k != "preprocessing" and (v or k == "calibration" and v is not None)}
