"""Public entry points of the Keras -> PyTorch direction: ``to_torch``, ``to_torch_with_report``."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from crossport.errors import InputError, ParityError
from crossport.parity.compare import from_numpy
from crossport.parity.report import ParityReport
from crossport.to_torch.examples import examples_from_inputs


@dataclass
class TorchConversion:
    """A Keras model converted to a torch module, with its parity report.

    Attributes:
        module: the ``torch.nn.Module`` (a ``KerasGraphModule``: an ``fx.GraphModule`` of
            plain torch modules whose ``regularization_loss()`` is Keras' ``sum(model.losses)``
            after its last forward).
        report: the parity report against Keras (``None`` when ``check=False``).
        permutes: permutes inside the module, not counting those at its inputs/outputs.
        boundary_permutes: permutes at the inputs and outputs (layout conversion).
        seconds: wall time per stage (capture, convert, verify).
    """

    module: torch.nn.Module
    report: ParityReport | None
    permutes: int
    boundary_permutes: int
    seconds: dict[str, float] = field(default_factory=dict)
    example_args: tuple = ()

    def summary(self) -> str:
        stages = ", ".join(f"{k} {v:.1f}s" for k, v in self.seconds.items())
        parity = self.report.summary() if self.report else "parity: not checked"
        return (f"{parity}\npermutes: {self.permutes} inside the module, "
                f"{self.boundary_permutes} at inputs/outputs\ntime: {stages}")


def _load(kmodel_or_path):
    import keras

    if isinstance(kmodel_or_path, (str, os.PathLike)):
        path = os.fspath(kmodel_or_path)
        if not os.path.exists(path):
            raise InputError(f"no Keras model file at {path!r}")
        try:
            return keras.models.load_model(path, compile=False)
        except Exception as exc:  # Keras' own message (safe_mode, unknown layer ...), one line
            raise InputError(f"Keras could not load {path!r}: {type(exc).__name__}: {exc}") \
                from exc
    if not isinstance(kmodel_or_path, keras.Model):
        raise InputError(f"expected a keras.Model or a .keras/.h5 path, got "
                         f"{type(kmodel_or_path).__name__}")
    return kmodel_or_path


# unsigned dtypes torch has for storage only: no arithmetic, comparison or reduction kernels
_STORAGE_ONLY = (torch.uint16, torch.uint32, torch.uint64)


def _example(example_args) -> tuple:
    if isinstance(example_args, (torch.Tensor, np.ndarray)):
        example_args = (example_args,)
    out = []
    for a in example_args:
        if isinstance(a, np.ndarray) and a.dtype.kind in "USO":  # torch has no such tensors
            raise InputError(f"example input {len(out)} is a numpy array of {a.dtype} "
                             "(strings or objects), which torch has no tensors for; keep the "
                             "string preprocessing (StringLookup, TextVectorization, Hashing) "
                             "in Keras or tf.data and convert the model that takes its ids")
        if isinstance(a, np.ndarray):
            a = from_numpy(a)
        if not isinstance(a, torch.Tensor):
            raise InputError(f"example inputs must be torch tensors or numpy arrays, got "
                             f"{type(a).__name__}")
        if a.dtype in _STORAGE_ONLY:
            raise InputError(f"example input {len(out)} is {a.dtype}, which torch stores but "
                             "cannot compute on (no CPU kernels); give the Keras model an "
                             "int32 / int64 input instead")
        out.append(a)
    return tuple(out)


def _by_input_name(kmodel, example: dict) -> tuple:
    """A dict of example inputs as the module's positional arguments (``kmodel.inputs``
    order): keyed as the model's dict inputs are (Keras flattens them in sorted key order,
    not the order written), else by the ``Input`` names."""
    import keras

    structure = getattr(kmodel, "_inputs_struct", None)
    if isinstance(structure, dict):
        names = keras.tree.flatten({key: key for key in structure})
    else:
        names = [tensor.name for tensor in kmodel.inputs]
    if set(example) != set(names):
        raise InputError(f"example inputs are keyed {sorted(map(str, example))}; the model's "
                         f"inputs are {names} (the module takes them positionally in this "
                         "order)")
    return tuple(example[name] for name in names)


def _keras_shape(arg: torch.Tensor, channels_first_io: bool) -> tuple:
    """An example input's shape as the Keras model takes it (NCHW -> NHWC)."""
    shape = tuple(arg.shape)
    if channels_first_io and len(shape) >= 3:
        shape = (shape[0], *shape[2:], shape[1])
    return shape


def to_torch_with_report(kmodel_or_path, example_args=None, *, channels_first_io: bool = False,
                         check: bool = True, atol: float = 1e-4, check_inputs: int = 2,
                         seed: int = 0) -> TorchConversion:
    """Convert a Keras 3 functional/Sequential model to a torch module and check parity.

    Args:
        kmodel_or_path: a ``keras.Model`` or a path Keras loads (``.keras``, ``.h5``).
        example_args: input tensors (torch or numpy) in the Keras layout (NHWC), or NCHW with
            ``channels_first_io=True``: in ``kmodel.inputs`` order (a dict-input model's in
            sorted key order, the module's positional order), or a dict keyed by the model's
            input dict keys / ``Input`` names. ``None``: random inputs made from the model's
            ``Input`` specs (a ``None`` batch is 2; refused, with what to give, for other
            ``None`` dims and for integer inputs that do not feed ``Embedding`` layers).
        channels_first_io: the module takes and returns rank>=3 tensors channels-first.
        check: compare against Keras on the example and ``check_inputs`` fresh inputs;
            raise ``ParityError`` past ``atol``.
        atol: tolerance on ``max|d| / max(1, max|ref|)``.
        check_inputs: fresh random input sets besides the example.
        seed: seed of the fresh inputs.

    Example:
        >>> import keras, torch, crossport
        >>> kmodel = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3)])
        >>> conv = crossport.to_torch_with_report(kmodel, (torch.randn(1, 8, 8, 3),))
        >>> conv.report.passed, conv.permutes
        (True, 0)
    """
    from crossport.options import check_option
    from crossport.to_torch.emit import emit
    from crossport.to_torch.graph import capture, preflight
    from crossport.to_torch.penalties import attach_weight_penalties, check_regularizers
    from crossport.to_torch.trace import graph_kept
    from crossport.to_torch.verify import verify

    for name, value in (("channels_first_io", channels_first_io), ("check", check),
                        ("atol", atol), ("check_inputs", check_inputs), ("seed", seed)):
        check_option(name, value)
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    kmodel = _load(kmodel_or_path)
    if example_args is None:
        example_args = examples_from_inputs(kmodel, channels_first_io=channels_first_io,
                                            seed=seed)
    if isinstance(example_args, dict):
        example_args = _by_input_name(kmodel, example_args)
    with graph_kept(kmodel):  # tracing custom layers records nodes on the user's layers
        args = _example(example_args)
        graph = capture(kmodel, [_keras_shape(a, channels_first_io) for a in args])
        preflight(graph)
        check_regularizers(kmodel, graph)
        seconds["capture"] = time.perf_counter() - start
        start = time.perf_counter()
        emitted = emit(graph, channels_first_io)
        attach_weight_penalties(kmodel, graph, emitted, channels_first_io)
        seconds["convert"] = time.perf_counter() - start
        report = None
        if check:
            start = time.perf_counter()
            report = verify(kmodel, graph, emitted, args, channels_first_io=channels_first_io,
                            atol=atol, check_inputs=check_inputs, seed=seed)
            seconds["verify"] = time.perf_counter() - start
        conversion = TorchConversion(emitted.module, report, emitted.permutes,
                                     emitted.boundary_permutes, seconds, args)
    if report is not None and not report.passed:
        raise ParityError(f"the torch module does not compute what the Keras model computes:\n"
                          f"{report.summary()}", report)
    return conversion


def to_torch(kmodel_or_path, example_args=None, **options) -> torch.nn.Module:
    """Convert a Keras 3 model into a plain ``torch.nn.Module`` with proven parity.

    Same arguments as :func:`to_torch_with_report`; returns only the module. To train it
    as Keras does with regularizers, add ``module.regularization_loss()`` (Keras'
    ``sum(model.losses)`` after the module's last forward) to your loss.

    Example:
        >>> import keras, torch, crossport
        >>> kmodel = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        >>> net = crossport.to_torch(kmodel, (torch.randn(3, 4),))
        >>> net(torch.randn(3, 4)).shape
        torch.Size([3, 2])
    """
    return to_torch_with_report(kmodel_or_path, example_args, **options).module
