"""crossport: port neural networks between PyTorch and Keras 3 with proven numerical parity.

Example:
    >>> import torch, crossport
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU())
    >>> model = crossport.convert(net.eval(), (torch.randn(1, 3, 32, 32),))
    >>> model(torch.randn(1, 3, 32, 32).numpy()).shape
    TensorShape([1, 8, 16, 16])
"""

import importlib
import os
import re
import sys

from crossport.compat import import_tensorflow_quietly
from crossport.errors import (
    CaptureError,
    ConversionError,
    CrossportError,
    ExportError,
    InputError,
    ParityError,
    TrainingModeError,
    UnsupportedLayerError,
    UnsupportedOpError,
)

# The public API beyond the errors (which import without torch or Keras): module -> names
_API = {
    "crossport.api": ("Conversion", "convert", "convert_with_report"),
    "crossport.codegen": ("to_source",),
    "crossport.export": ("ExportResult", "calibration_images", "export"),
    "crossport.layout.policy": ("Policy",),
    "crossport.options": ("ConvertOptions",),
    "crossport.parity.doctor": ("check",),
    "crossport.to_keras.registry": ("register",),
    "crossport.to_torch.api": ("TorchConversion", "to_torch", "to_torch_with_report"),
    "crossport.to_torch.source": ("to_torch_source",),
    "crossport.weights.transfer": ("transfer_weights",),
}
_api_loaded: bool | None = None  # None: not tried yet; False: Keras cannot be imported here


def _keras_importable() -> bool:
    """Whether TensorFlow and Keras import here (a process running only torch modules
    written by ``to_torch`` may have neither)."""
    try:
        import_tensorflow_quietly()  # before Keras: TF's library-loading lines are not shown
        import keras  # noqa: F401
    except ImportError:
        return False
    return True


def _load_api() -> bool:
    """Import the public API into this module once; False where Keras cannot be imported.

    Without Keras only the torch side imports: crossport.torch_layers, crossport.errors, and
    the modules a to_torch conversion is made of (crossport.to_torch.modules).
    """
    global _api_loaded
    if _api_loaded is None:
        _api_loaded = _keras_importable() and _import_api()
    return _api_loaded


def _import_api() -> bool:
    # Registers every Keras layer crossport writes, so keras.models.load_model("m.keras") works
    # after `import crossport` alone (registration is the only effect of the import).
    importlib.import_module("crossport.layers")
    for module, names in _API.items():  # in order: the functions export and to_torch then
        imported = importlib.import_module(module)  # replace their subpackages' attributes
        globals().update({name: getattr(imported, name) for name in names})
    return True


def _is_the_command() -> bool:
    """Whether this process is the ``crossport`` command starting: its console script, or
    ``python -m crossport.cli`` (Python imports this package to find the module while
    ``sys.argv[0]`` is ``"-m"``)."""
    argv = getattr(sys, "argv", None) or [""]
    if argv[0] == "-m":
        return any(arg in ("crossport.cli", "-mcrossport.cli") for arg in sys.orig_argv)
    return re.sub(r"(-script\.pyw?|\.exe)?$", "", os.path.basename(argv[0])) == "crossport"


def __getattr__(name: str):
    """The public API on first use where it was not imported with the package (below)."""
    if name in __all__:
        if _load_api():
            return globals()[name]
        raise ImportError(f"crossport.{name} needs TensorFlow and Keras, which cannot be "
                          "imported in this process; only crossport.torch_layers and "
                          "converted torch modules work without them")
    raise AttributeError(f"module 'crossport' has no attribute {name!r}")


__all__ = [
    "CaptureError",
    "Conversion",
    "ConversionError",
    "ConvertOptions",
    "CrossportError",
    "ExportError",
    "ExportResult",
    "InputError",
    "ParityError",
    "Policy",
    "TorchConversion",
    "TrainingModeError",
    "UnsupportedLayerError",
    "UnsupportedOpError",
    "calibration_images",
    "check",
    "convert",
    "convert_with_report",
    "export",
    "register",
    "to_source",
    "to_torch",
    "to_torch_source",
    "to_torch_with_report",
    "transfer_weights",
]
__version__ = "0.1.0"

# The crossport command parses its arguments first, so --help and usage errors answer without
# waiting seconds for torch, TensorFlow and Keras; crossport.cli loads the API when a command
# runs. Everywhere else `import crossport` imports it (and registers the Keras layers) now.
if not _is_the_command():
    _load_api()
