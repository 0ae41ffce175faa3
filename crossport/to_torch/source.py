"""``to_torch_source``: a converted module as readable PyTorch source plus its weights.

The file defines ``class KerasModel(nn.Module)`` whose ``__init__`` builds every submodule with
its constructor arguments and whose ``forward`` is the GraphModule's code, and
``build_model()`` loading the state_dict saved beside it (``<file>.pt``). The written file is
imported back from a staging folder beside the target, loaded strictly and compared with the
module on the example inputs before both files land: a module it cannot write faithfully is
an ``ExportError`` and nothing is written. Existing files are replaced only with
``overwrite=True``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from crossport.errors import ExportError, InputError
from crossport.export.staging import Staging
from crossport.to_torch import augment, noise, regularization, spectral
from crossport.to_torch import modules as own
from crossport.torch_layers import conv as tf_conv
from crossport.torch_layers import conv_recurrent as tf_conv_rnn
from crossport.torch_layers import normalization as tf_norm
from crossport.torch_layers import pooling as tf_pool
from crossport.torch_layers import recurrent as tf_rnn
from crossport.torch_layers import recurrent_dropout as tf_rnn_drop
from crossport.torch_layers import resize as tf_resize
from crossport.torch_layers.activation import KerasActivation, KerasPReLU


def _avg(m) -> str:
    extra = f", divisor_override={m.divisor_override!r}" if hasattr(m, "divisor_override") else ""
    return (f"{m.kernel_size!r}, {m.stride!r}, {m.padding!r}, ceil_mode={m.ceil_mode!r}, "
            f"count_include_pad={m.count_include_pad!r}{extra}")


def _rnn(m) -> str:
    extra = f", nonlinearity={m.nonlinearity!r}" if isinstance(m, nn.RNN) else ""
    return (f"{m.input_size}, {m.hidden_size}, batch_first={m.batch_first!r}, "
            f"bidirectional={m.bidirectional!r}{extra}")


def _tf_conv(m) -> str:
    return (f"{m.in_channels}, {m.filters}, {m.kernel_size!r}, {m.strides!r}, {m.padding!r}, "
            f"{m.dilation_rate!r}, {m.groups}, {m.bias is not None!r}, {m.activation!r}")


def _tf_depthwise(m) -> str:
    return (f"{m.in_channels}, {m.kernel_size!r}, {m.strides!r}, {m.padding!r}, "
            f"{m.depth_multiplier}, {m.dilation_rate!r}, {m.bias is not None!r}, "
            f"{m.activation!r}")


def _tf_conv_t(m) -> str:
    return (f"{m.weight.shape[0]}, {m.filters}, {m.kernel_size!r}, {m.strides!r}, "
            f"{m.padding!r}, {m.output_padding!r}, {m.dilation_rate!r}, "
            f"{m.bias is not None!r}, {m.activation!r}")


def _dropout_kwargs(dropout: float, recurrent_dropout: float, per_gate: bool | None) -> str:
    """The Keras dropout keywords of a recurrent module (none without dropout)."""
    if not (dropout or recurrent_dropout):
        return ""
    gate = "" if per_gate is None else f", per_gate={per_gate!r}"
    return f", dropout={dropout!r}, recurrent_dropout={recurrent_dropout!r}{gate}"


def _keras_rnn(m) -> str:
    extra = f", reset_after={m.reset_after!r}" if hasattr(m, "reset_after") else ""
    gate = None if isinstance(m, tf_rnn.KerasSimpleRNN) else m.per_gate
    # KerasSimpleRNN takes no recurrent_activation
    rec = "" if isinstance(m, tf_rnn.KerasSimpleRNN) else f"{m.recurrent_activation!r}, "
    return (f"{m.input_size}, {m.units}, {m.activation!r}, {rec}"
            f"{m.bias is not None!r}, {m.return_sequences!r}, {m.return_state!r}, "
            f"{m.go_backwards!r}{extra}"
            + _dropout_kwargs(m.dropout, m.recurrent_dropout, gate))


def _keras_dropout_rnn(m) -> str:
    act = f", {m.nonlinearity!r}" if isinstance(m, nn.RNN) else ""
    return (f"{m.input_size}, {m.hidden_size}{act}, {m.bidirectional!r}"
            + _dropout_kwargs(m.keras_dropout, m.keras_recurrent_dropout, m.per_gate))


def _bn(m) -> str:
    frozen = ", frozen=True" if m.frozen else ""
    return f"{m.num_features}, eps={m.eps!r}, momentum={m.momentum!r}{frozen}"


def _shape(t: torch.Tensor) -> str:
    return f"torch.zeros({tuple(t.shape)!r})"


def _maybe_shape(t: torch.Tensor | None) -> str:
    return "None" if t is None else _shape(t)


# class -> constructor arguments (as source). Plain torch modules not listed use extra_repr,
# which is their constructor call for the classes listed in _EXTRA_REPR_OK.
_ARGS: dict[type, Callable[[nn.Module], str]] = {
    nn.AvgPool1d: _avg, nn.AvgPool2d: _avg, nn.AvgPool3d: _avg,
    nn.LSTM: _rnn, nn.GRU: _rnn, nn.RNN: _rnn,
    nn.Upsample: lambda m: (f"scale_factor={m.scale_factor!r}, mode={m.mode!r}, "
                            f"align_corners={m.align_corners!r}"),
    tf_conv.TFConv1d: _tf_conv, tf_conv.TFConv2d: _tf_conv, tf_conv.TFConv3d: _tf_conv,
    tf_conv.TFDepthwiseConv1d: _tf_depthwise, tf_conv.TFDepthwiseConv2d: _tf_depthwise,
    tf_conv.TFConv1dTranspose: _tf_conv_t, tf_conv.TFConv2dTranspose: _tf_conv_t,
    tf_conv.TFConv3dTranspose: _tf_conv_t,
    tf_norm.KerasBatchNorm: lambda m: (f"{m.num_features}, {m.eps!r}, {m.momentum!r}, "
                                       f"{m.bias is not None!r}, {m.weight is not None!r}, "
                                       f"{m.axis}, {m.frozen!r}"),
    tf_norm.KerasBatchNorm1d: _bn, tf_norm.KerasBatchNorm2d: _bn, tf_norm.KerasBatchNorm3d: _bn,
    tf_norm.KerasLayerNorm: lambda m: (f"{m.normalized_shape!r}, {m.axis!r}, {m.eps!r}, "
                                       f"{m.bias is not None!r}, {m.weight is not None!r}, "
                                       f"{m.rms_scaling!r}"),
    tf_norm.KerasGroupNorm: lambda m: (f"{m.groups}, {m.num_channels}, {m.eps!r}, "
                                       f"{m.bias is not None!r}, {m.weight is not None!r}, "
                                       f"{m.axis}"),  # (no statistics: nothing frozen)
    tf_conv_rnn.KerasConvLSTM: lambda m: (
        f"{m.rank}, {m.kernel.shape[-2]}, {m.filters}, {m.kernel_size!r}, {m.strides!r}, "
        f"{m.padding!r}, {m.dilation_rate!r}, {m.activation!r}, {m.recurrent_activation!r}, "
        f"{m.bias is not None!r}, {m.return_sequences!r}, {m.return_state!r}, "
        f"{m.go_backwards!r}, {m.channels_last!r}"
        + _dropout_kwargs(m.dropout, m.recurrent_dropout, None)),
    tf_rnn.KerasLSTM: _keras_rnn, tf_rnn.KerasGRU: _keras_rnn, tf_rnn.KerasSimpleRNN: _keras_rnn,
    tf_rnn_drop.KerasDropoutLSTM: _keras_dropout_rnn, tf_rnn_drop.KerasDropoutGRU: _keras_dropout_rnn,
    tf_rnn_drop.KerasDropoutRNN: _keras_dropout_rnn,
    tf_resize.TFResize: lambda m: (f"{m.size!r}, {m.method!r}, {m.antialias!r}, "
                                   f"{m.crop_to_aspect_ratio!r}, {m.pad_to_aspect_ratio!r}, "
                                   f"{m.fill_value!r}"),
    tf_resize.KerasUpSampling2D: lambda m: f"{m.size!r}, {m.interpolation!r}",
    KerasActivation: lambda m: f"{m.name!r}, {m.axis}",
    KerasPReLU: lambda m: f"{tuple(m.alpha.shape)!r}",
    own.Scale: lambda m: f"{m.scale!r}, {m.offset!r}",
    own.KerasAttention: lambda m: f"{m.scale is not None!r}, {m.score_mode!r}, {m.dropout!r}",
    own.Einsum: lambda m: (f"{m.equation!r}, {_shape(m.kernel)}, "
                           f"{None if m.bias is None else _shape(m.bias)}"),
    own.ScaleShift: lambda m: f"{_shape(m.scale)}, {_shape(m.offset)}",
    own.Standardize: lambda m: f"{_shape(m.mean)}, {_shape(m.variance)}, {m.invert!r}",
    own.ChannelScale: lambda m: _shape(m.gamma),
    augment.KerasAugmentation: lambda m: f"{m.layer!r}, {m.kind!r}, {m.cast!r}",
    augment.KerasRandomFlip: lambda m: f"{m.dims!r}",
    augment.KerasAutoContrast: lambda m: f"{m.low!r}, {m.high!r}",
    noise.KerasDropout: lambda m: f"{m.layer!r}, {m.rate!r}, {m.noise_shape!r}",
    noise.KerasAlphaDropout: lambda m: f"{m.layer!r}, {m.rate!r}, {m.noise_shape!r}",
    noise.KerasGaussianNoise: lambda m: f"{m.layer!r}, {m.stddev!r}",
    noise.KerasGaussianDropout: lambda m: f"{m.layer!r}, {m.rate!r}",
    regularization.KerasActivityPenalty: lambda m: f"{m.layer!r}, {m.spec!r}, {m.batch_axes!r}",
    regularization.KerasWeightPenalties: lambda m: f"{m.entries!r}",
    noise.KerasTrainingRefusal: lambda m: f"{m.layer!r}, {m.why!r}",
    spectral.KerasSTFTSpectrogram: lambda m: (
        f"{m.mode!r}, {m.frame_length}, {m.frame_step}, {m.freq_bins}, {m.padding!r}, "
        f"{m.expand_dims!r}, {m.channels_last!r}, {m.epsilon!r}"),
    spectral.KerasMelSpectrogram: lambda m: (
        f"{m.fft_length}, {m.sequence_stride}, {_maybe_shape(m.window)}, "
        f"{_shape(m.mel_matrix)}, {m.power_to_db!r}, {m.top_db!r}, {m.mag_exp!r}, "
        f"{m.min_power!r}, {m.ref_db!r}"),
    spectral.KerasFrames: lambda m: f"{m.sequence_length}, {m.sequence_stride}",
    spectral.KerasSTFT: lambda m: (f"{m.fft_length}, {m.sequence_stride}, "
                                   f"{_maybe_shape(m.window)}, {m.center!r}"),
    spectral.KerasISTFT: lambda m: (f"{m.fft_length}, {m.sequence_stride}, {m.frame_length}, "
                                    f"{_maybe_shape(m.window)}, {m.length!r}, {m.center!r}"),
    own.KerasMultiHeadAttention: lambda m: (
        f"{m.query.in_features}, {m.key.in_features}, {m.value.in_features}, {m.num_heads}, "
        f"{m.key_dim}, {m.value_dim}, {m.attention_output.out_features}, "
        f"{m.query.bias is not None!r}, {m.zero_masked!r}, {m.num_kv_heads}, "
        f"{m.sliding_window!r}, {m.gate is not None!r}, {m.dropout!r}"),
}
for _cls in (tf_pool.TFMaxPool1d, tf_pool.TFMaxPool2d, tf_pool.TFMaxPool3d, tf_pool.TFAvgPool1d,
             tf_pool.TFAvgPool2d, tf_pool.TFAvgPool3d):
    _ARGS[_cls] = lambda m: f"{m.pool_size!r}, {m.strides!r}, {m.padding!r}"

_EXTRA_REPR_OK = (
    nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
    nn.ConvTranspose3d, nn.Linear, nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm,
    nn.GroupNorm, nn.Embedding, nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d,
    nn.AdaptiveMaxPool3d, nn.ZeroPad1d,
    nn.ZeroPad2d, nn.ZeroPad3d, nn.ReLU, nn.ReLU6, nn.Sigmoid, nn.Tanh, nn.ELU, nn.SELU, nn.SiLU,
    nn.GELU, nn.Hardsigmoid, nn.Hardswish, nn.Mish, nn.Softsign, nn.LogSigmoid, nn.Tanhshrink,
    nn.Hardtanh, nn.Softmax, nn.LogSoftmax, nn.LeakyReLU,
)


def _constructor(module: nn.Module, path: str) -> tuple[str, str]:
    """``(import line, constructor call)`` of one leaf module."""
    cls = type(module)
    if cls in _ARGS:
        args = _ARGS[cls](module)
    elif isinstance(module, _EXTRA_REPR_OK) and cls.__module__.startswith("torch.nn"):
        args = module.extra_repr()
    else:
        raise ExportError(f"to_torch_source cannot write submodule {path!r} ({cls.__name__}); "
                          "save the module with torch.export (.pt2) instead")
    if cls.__module__.startswith("torch.nn"):
        return "", f"nn.{cls.__name__}({args})"
    return f"from {cls.__module__} import {cls.__name__}", f"{cls.__name__}({args})"


def _init_lines(module: nn.Module) -> tuple[list[str], set[str]]:
    lines, imports, built = [], set(), []
    for path, sub in module.named_modules():
        if not path or any(path.startswith(b + ".") for b in built):
            continue  # the root, or built by its parent's constructor
        if type(sub) is nn.Module:  # a nested Keras model: a plain container
            lines.append(f"        self.{path} = nn.Module()")
            continue
        built.append(path)
        imp, call = _constructor(sub, path)
        if imp:
            imports.add(imp)
        lines.append(f"        self.{path} = {call}")
    for name, buffer in module.named_buffers(recurse=False):  # keras.ops constants (ctx.constant)
        dtype = str(buffer.dtype).replace("torch.", "")
        persistent = "" if name not in module._non_persistent_buffers_set else \
            ", persistent=False"  # (float_dtype: the dtype the float inputs are cast to)
        lines.append(f"        self.register_buffer({name!r}, torch.empty("
                     f"{tuple(buffer.shape)!r}, dtype=torch.{dtype}){persistent})")
    return lines, imports


# the converted module's KerasGraphModule.regularization_loss, in the written class
_REGULARIZATION_LOSS = [
    "    def regularization_loss(self):",
    '        """Keras\' sum(model.losses) after the last forward (weight penalties on the',
    '        current parameters, activity penalties of that forward): add it to your loss."""',
    "        from crossport.to_torch.regularization import regularization_loss",
    "", "        return regularization_loss(self)", ""]


def source(module: torch.fx.GraphModule) -> str:
    """The Python source of ``module`` (see the module docstring)."""
    code = module.graph.python_code(root_module="self")
    unknown = set(code.globals) - {"inf", "nan", "NoneType", "torch", "device", "fx_pytree",
                                   "pytree", "operator", "getattr"}
    if unknown:
        raise ExportError(f"to_torch_source cannot write functions {sorted(unknown)}; save the "
                          "module with torch.export (.pt2) instead")
    init, imports = _init_lines(module)
    body = "\n".join("    " + line if line.strip() else line
                     for line in code.src.strip("\n").splitlines())
    return "\n".join([
        '"""PyTorch port of a Keras model, written by crossport.to_torch_source."""', "",
        "import math  # noqa: F401", "import operator  # noqa: F401",
        "from math import inf, nan  # noqa: F401  (fx writes float constants by these names)",
        "from pathlib import Path",
        "", "import torch", "from torch import nn", *sorted(imports), "", "",
        "class KerasModel(nn.Module):", "    def __init__(self):", "        super().__init__()",
        *init, "", body, "", *_REGULARIZATION_LOSS, "",
        "def build_model(weights=Path(__file__).with_suffix('.pt')):",
        '    """The model with the converted weights, in eval mode."""',
        "    model = KerasModel()",
        "    model.load_state_dict(torch.load(weights), strict=True)",
        *_frozen_lines(module),
        "    return model.eval()", ""])


def _frozen(module: nn.Module) -> set[str]:
    return {name for name, param in module.named_parameters() if not param.requires_grad}


def _frozen_lines(module: nn.Module) -> list[str]:
    """``build_model`` lines freezing the parameters Keras does not train (a state_dict
    does not carry ``requires_grad``)."""
    names = sorted(_frozen(module))
    if not names:
        return []
    return ["    for name in (  # weights Keras does not train",
            *[f"            {name!r}," for name in names],
            "    ):", "        model.get_parameter(name).requires_grad_(False)"]


def to_torch_source(conversion_or_module, path, example_args: tuple | None = None, *,
                    overwrite: bool = False) -> Path:
    """Write ``path`` (PyTorch source) and ``path.with_suffix('.pt')`` (its state_dict).

    Both files are written and re-checked in a staging folder beside ``path`` and land
    together, or neither does.

    Args:
        conversion_or_module: a :class:`~crossport.to_torch.api.TorchConversion` or its module.
        path: the ``.py`` file to write.
        example_args: inputs for the re-check (a TorchConversion remembers its own).
        overwrite: replace existing files of those two names; without it either existing
            is an ``ExportError`` and nothing is written.

    Example:
        >>> import keras, torch, crossport, tempfile, pathlib
        >>> kmodel = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        >>> conv = crossport.to_torch_with_report(kmodel, (torch.randn(1, 4),))
        >>> out = crossport.to_torch_source(conv, pathlib.Path(tempfile.mkdtemp()) / "m.py")
        >>> out.name
        'm.py'
    """
    with Staging(overwrite) as staging:
        stage_torch_source(conversion_or_module, path, staging, example_args)
        staging.commit()
    return Path(path)


def torch_source_files(path: str | Path) -> list[Path]:
    """The files :func:`to_torch_source` writes for ``path``: the source and its weights."""
    path = Path(path)
    return [path, path.with_suffix(".pt")]


def stage_torch_source(conversion_or_module, path: str | Path, staging: Staging,
                       example_args: tuple | None = None) -> Path:
    """Write and re-check the source and its weights at temporary paths claimed in
    ``staging``; nothing reaches ``path`` until ``staging.commit()``."""
    module = getattr(conversion_or_module, "module", conversion_or_module)
    example_args = example_args or getattr(conversion_or_module, "example_args", None)
    if not example_args:
        raise ExportError("to_torch_source needs example_args for its re-check")
    path = Path(path)
    if path.suffix != ".py":
        raise InputError(f"{path}: the generated source must be a .py file")
    text = source(module)
    # Same names in one staging folder: build_model() finds its .pt beside the staged .py.
    staged, weights = (staging.claim(p) for p in torch_source_files(path))
    try:
        staged.write_text(text)
        torch.save(module.state_dict(), weights)
    except OSError as exc:
        raise ExportError(f"writing {path} failed: {type(exc).__name__}: {exc}") from exc
    try:
        _recheck(staged, module, example_args, path)
    except ExportError:
        raise
    except Exception as exc:  # the staged files are discarded: nothing lands
        raise ExportError(f"the written source does not rebuild the module: "
                          f"{type(exc).__name__}: {exc}") from exc
    return path


def _recheck(path: Path, module: nn.Module, args: tuple, target: Path) -> None:
    """Rebuild from the staged ``path``; errors name the ``target`` the user gave."""
    spec = importlib.util.spec_from_file_location(f"_crossport_check_{path.stem}", path)
    written = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(written)
    rebuilt = written.build_model()
    if _frozen(rebuilt) != _frozen(module):
        raise ExportError(f"{target}: the rebuilt module trains other parameters than the "
                          f"conversion ({sorted(_frozen(rebuilt) ^ _frozen(module))})")
    with torch.no_grad():
        for want, got in zip(torch.utils._pytree.tree_leaves(module(*args)),
                             torch.utils._pytree.tree_leaves(rebuilt(*args))):
            same = torch.equal(want, got) or (  # NaN where Keras gives NaN (0/0 masked means)
                want.is_floating_point() and want.shape == got.shape
                and torch.allclose(want, got, rtol=0, atol=0, equal_nan=True))
            if not same:
                raise ExportError(f"{target}: the rebuilt module differs from the conversion "
                                  f"(max |d| {(want - got).abs().max().item():.2e})")
