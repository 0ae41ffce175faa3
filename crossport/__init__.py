"""crossport: port neural networks between PyTorch and Keras 3 with proven numerical parity.

Example:
    >>> import torch, crossport
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU())
    >>> model = crossport.convert(net.eval(), (torch.randn(1, 3, 32, 32),))
    >>> model(torch.randn(1, 3, 32, 32).numpy()).shape
    TensorShape([1, 8, 16, 16])
"""

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


def _keras_importable() -> bool:
    """Whether TensorFlow and Keras import here (a process running only torch modules
    written by ``to_torch`` may have neither)."""
    try:
        import_tensorflow_quietly()  # before Keras: TF's library-loading lines are not shown
        import keras  # noqa: F401
    except ImportError:
        return False
    return True


if _keras_importable():
    # Registers every Keras layer crossport writes, so keras.models.load_model("m.keras") works
    # after `import crossport` alone (registration is the only effect of the import).
    from crossport import layers  # noqa: F401  (isort: keep first: registration)
    from crossport.api import Conversion, convert, convert_with_report
    from crossport.codegen import to_source
    from crossport.export import ExportResult, calibration_images, export
    from crossport.layout.policy import Policy
    from crossport.options import ConvertOptions
    from crossport.parity.doctor import check
    from crossport.to_keras.registry import register
    from crossport.to_torch.api import TorchConversion, to_torch, to_torch_with_report
    from crossport.to_torch.source import to_torch_source
    from crossport.weights.transfer import transfer_weights
else:
    # Without Keras only the torch side imports: crossport.torch_layers, crossport.errors,
    # and the modules a to_torch conversion is made of (crossport.to_torch.modules).
    def __getattr__(name: str):
        if name in __all__:
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
