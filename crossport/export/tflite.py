"""The TF -> TFLite converter, restricted to TFLite builtin ops.

Standalone LiteRT has no Flex (TF Select) delegate, so a file that needs a TF kernel would
load nowhere it is meant to run: such an export is an :class:`ExportError` naming the ops.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from crossport.errors import ExportError

# TF op -> the torch ATen op that usually produced it, to point at the user's module
_ATEN_OF = {"Tan": "tan", "Atan": "atan", "Erfinv": "erfinv"}
# TF's FFT ops and the complex tensor they read come from the torch.fft kernels
_FFT = ("_fft_r2c", "_fft_c2c", "_fft_c2r")
_ATENS_OF = {"Erf": ("erf", "erfinv"),  # erfinv's Newton steps (ops/special.py)
             "FFT": _FFT, "FFT2D": _FFT, "IRFFT": ("_fft_c2r",), "Complex": _FFT,
             "ComplexAbs": _FFT, "LeftShift": ("bitwise_left_shift", "__lshift__"),
             "RightShift": ("bitwise_right_shift", "__rshift__"), "Invert": ("bitwise_not",),
             # index_put's last writer / accumulated sums (ops/assign.py, DynamicIndexPut),
             # scatter_reduce / index_reduce (layers/scatter.py)
             **{f"UnsortedSegment{r}": ("scatter_reduce", "index_reduce")
                + (("index_put",) if r in ("Sum", "Max") else ())
                for r in ("Sum", "Prod", "Max", "Min")},
             "FloorDiv": ("floor_divide", "div", "lcm"),  # TFLite's FLOOR_DIV: no int64
             "Abs": ("abs", "lcm"),  # TFLite's ABS: no int64
             # TF's LU-based matrix kernels (ops/solve.py; expm solves a Padé system)
             "MatrixInverse": ("linalg_inv_ex", "linalg_lu_factor_ex"),  # ops/lu.py's raise
             "MatrixSolve": ("_linalg_solve_ex", "linalg_matrix_exp"),
             "MatrixDeterminant": ("_linalg_det",),
             "LogMatrixDeterminant": ("_linalg_slogdet",),
             # factorizations (ops/factor.py, ops/linalg.py; cholesky_ex is builtins)
             "Cholesky": ("linalg_cholesky_ex", "cholesky"),
             "MatrixTriangularSolve": ("linalg_solve_triangular", "triangular_solve",
                                       "linalg_lu_solve"),
             "SelfAdjointEigV2": ("_linalg_eigh", "linalg_pinv"),
             "Svd": ("_linalg_svd", "linalg_pinv"), "Qr": ("linalg_qr",),
             # TF's special-function kernels (ops/bessel.py, ops/special.py)
             "BesselI0": ("i0", "special_modified_bessel_i0"),
             "BesselI1": ("special_i1", "special_modified_bessel_i1"),
             "BesselI0e": ("special_i0e",), "BesselI1e": ("special_i1e",),
             **{f"Bessel{k}": (f"special_{'scaled_' if k.endswith('e') else ''}modified_"
                               f"bessel_{k[:2].lower()}",) for k in ("K0", "K1", "K0e", "K1e")},
             **{f"Bessel{k}": (f"special_bessel_{k.lower()}",) for k in ("J0", "J1", "Y0", "Y1")},
             "Ndtri": ("special_ndtri",), "Zeta": ("special_zeta",),
             "Erfc": ("erfc", "special_erfcx")}  # erfcx's float64 exp(x^2) erfc(x)
# TF ops that only integer results bring (a float floor division is converted without it)
_INTEGER_ONLY = {"FloorDiv", "Abs"}
# The call targets of transformers 5's default experts path, which does not export: its
# batched_mm path does (gathers and batched matmuls)
_MOE_DEFAULT_PATH = {"transformers.grouped_mm_fallback.default"}


def _atens_of(tf_op: str) -> tuple[str, ...]:
    """The aten op names a TF op may come from: listed ones, else its name in snake case
    (``BitwiseAnd`` -> ``bitwise_and``, and ``__and__`` for the ``&`` operator) and lower
    case (``Erf`` -> ``erf``)."""
    if tf_op in _ATENS_OF:
        return _ATENS_OF[tf_op]
    if tf_op in _ATEN_OF:
        return (_ATEN_OF[tf_op],)
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", tf_op).lower()
    operator = (f"__{snake.removeprefix('bitwise_')}__",) if snake.startswith("bitwise_") else ()
    return (snake, tf_op.lower(), *operator)


def converter_from_saved_model(saved: Path, ops: str = "builtins"):
    """A ``TFLiteConverter`` limited to builtin ops (``ops``: builtins, int8 or int16x8).

    It is TF's own converter without two pure-Python passes over the finished flatbuffer
    (:func:`_lean_converter`); both only shrink or annotate the file.
    """
    import tensorflow as tf

    converter = _lean_converter(saved)
    if converter is None:
        converter = tf.lite.TFLiteConverter.from_saved_model(str(saved))
    ops_set = {
        "builtins": tf.lite.OpsSet.TFLITE_BUILTINS,
        "int8": tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
        "int16x8": tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8,
    }[ops]
    converter.target_spec.supported_ops = [ops_set]
    return converter


def keep_infinite_constants(converter) -> None:
    """Keeps ``±inf`` constants infinite in a float file. By default TF's converter rewrites
    every infinite constant to ``±FLT_MAX`` (its "canonicalize boundary value" pass), so
    ``masked_fill(mask, -inf)`` wrote -3.4e38, ``x == inf`` was False at inf, ``isposinf``
    and ``nan_to_num`` missed inf, and a fully masked softmax row gave 1/n where torch gives
    NaN. Files with float activations only (float32, fp16 and dynamic-range int8 weights):
    a full-integer file's calibrated range cannot hold an infinity."""
    if hasattr(converter, "canonicalizing_inf_as_min_max_float"):
        converter.canonicalizing_inf_as_min_max_float = False


def _lean_converter(saved: Path):
    """TF's SavedModel converter minus its Python post-passes, or None on another TF.

    After the MLIR conversion, TF's Python wrapper unpacks and re-packs the whole flatbuffer
    twice with the pure-Python flatbuffers object API: once to merge byte-identical
    constant buffers and once to add a metadata entry (TF version, optimization modes).
    On ViT-B that is 3.7 of 10 s and saves 1.3 KB of 346 MB, so float exports skip both
    (integer-quantized exports keep TF's path: its quantizer runs in that step).
    ``from_saved_model``'s own Python load of the SavedModel, only to validate the
    signature keys we just wrote, is skipped too.
    """
    try:
        from tensorflow.lite.python import lite
    except ImportError:
        return None
    base = getattr(lite, "TFLiteSavedModelConverterV2", None)
    if base is None or not hasattr(base, "_optimize_tflite_model"):
        return None

    class LeanSavedModelConverter(base):
        def _optimize_tflite_model(self, model, quant_mode, *args, **kwargs):
            if quant_mode.is_integer_quantization() or self._sparsify_model():
                return super()._optimize_tflite_model(model, quant_mode, *args, **kwargs)
            return model

    converter = LeanSavedModelConverter(str(saved), {"serve"}, ["serving_default"])
    converter.exclude_conversion_metadata = True
    return converter


def run_converter(convert: Callable[[], bytes], conversion=None) -> bytes:
    """``convert()``, with a need for Flex ops turned into an ``ExportError`` naming them."""
    try:
        return convert()
    except Exception as exc:
        names = flex_ops(exc)
        if not names:
            raise
        raise ExportError(flex_message(names, conversion, exc)) from exc


def flex_ops(exc: BaseException) -> list[str]:
    """TF ops the converter could only keep as Flex (TF Select) ops, from its error."""
    names = []
    for error in getattr(exc, "errors", None) or []:
        if "NEEDS_FLEX" in str(getattr(error, "error_code", "")) or "flex op" in str(
                getattr(error, "error_message", "")):
            names.append(error.operator.name.removeprefix("tf."))
    if not names:
        match = re.search(r"TF Select ops: ([^\n]+)", str(exc))
        names = [n.strip() for n in match.group(1).split(",")] if match else []
    return list(dict.fromkeys(n for n in names if n))


def flex_message(names: list[str], conversion=None, exc: BaseException | None = None) -> str:
    where = _torch_sources(names, conversion) + _torch_modules(names, conversion, exc)
    return (f"the TFLite file would need TF ops that have no TFLite builtin: "
            f"{', '.join(names)}{where}. They only run with the Flex (TF Select) delegate, which "
            "standalone LiteRT does not have, so crossport exports builtin ops only. Export "
            "SavedModel or .keras instead, or replace the op in the torch module."
            + _moe_hint(conversion))


def _moe_hint(conversion) -> str:
    exported = getattr(conversion, "exported", None)
    targets = {str(n.target) for n in exported.graph.nodes} if exported is not None else ()
    if not _MOE_DEFAULT_PATH & set(targets):
        return ""
    return (" This model runs transformers' default mixture-of-experts path (tokens sorted "
            "by expert, an inverse permutation and int64 divisions): build it with "
            "experts_implementation='batched_mm' in its config, whose gathers and batched "
            "matmuls export as builtins.")


def _torch_sources(names: list[str], conversion) -> str:
    """`` (from aten.erf in block.act (model.py:12: ...))`` for the ops we can trace back."""
    exported = getattr(conversion, "exported", None)
    if exported is None:
        return ""
    from crossport.capture.source import describe

    found = []
    wanted: dict[str, bool] = {}  # aten op -> whether only its integer results count
    for name in names:
        for aten in _atens_of(name):
            wanted[aten] = wanted.get(aten, True) and name in _INTEGER_ONLY
    for node in exported.graph_module.graph.nodes:
        op = getattr(node.target, "__name__", str(node.target)).split(".")[0]
        if node.op == "call_function" and op in wanted and not (
                wanted[op] and _floating(node)):
            found.append(f"aten.{op} {describe(node)}")
    return f" (from {'; '.join(found)})" if found else ""


def _floating(node) -> bool:
    value = node.meta.get("val")
    return getattr(value, "dtype", None) is not None and value.dtype.is_floating_point


def _torch_modules(names: list[str], conversion, exc: BaseException | None) -> str:
    """`` in torch module(s) up, head.act``: the Keras layers (named after torch module
    paths) whose TF ops the converter could not lower, from the locations in its error
    (``fused["Mul:", "functional_1/up_1/mul@__inference_serve_338"]``)."""
    model = getattr(conversion, "model", None)
    if exc is None or model is None:
        return ""
    from crossport.export.quant_report import torch_path
    from crossport.export.quantize import keras_layers_in

    module = getattr(conversion, "module", None)
    paths = set(dict(module.named_modules())) if module is not None else set()
    layer_names = [layer.name for layer in model.layers]
    found: dict[str, None] = {}
    for op, scope in re.findall(r'fused\["(\w+):", "([^"@]+)', str(exc)):
        if op in names:
            for layer in keras_layers_in(scope, layer_names):
                found.setdefault(torch_path(layer, paths) or "<root module>", None)
    if not found:
        return ""
    return f" in {'module' if len(found) == 1 else 'modules'} {', '.join(found)}"


def refuse_inexact_ops(conversion) -> None:
    """What a TFLite file computes differently from torch, refused before writing: an
    output with no elements, and ``round(x, decimals=n)`` divides by ``10**n``, which the TFLite converter turns into a
    multiplication by its rounded reciprocal (``round(3.65, 1)`` came out 3.6499999)."""
    exported = getattr(conversion, "exported", None)
    if exported is None:
        return
    import torch

    from crossport.capture.source import describe

    bad = [f"{node.target} {describe(node)}" for node in exported.graph_module.graph.nodes
           if node.op == "call_function" and str(node.target) == "aten.round.decimals"
           and node.kwargs.get("decimals", 0) != 0]
    output = next(node for node in exported.graph_module.graph.nodes if node.op == "output")
    empty = [f"output {i} of shape {tuple(node.meta['val'].shape)} {describe(node)}"
             for i, node in enumerate(output.args[0])
             if isinstance(node, torch.fx.Node) and hasattr(node.meta.get("val"), "shape")
             and any(isinstance(d, int) and d == 0 for d in node.meta["val"].shape)]
    if empty:
        raise ExportError("LiteRT cannot return a tensor with no elements (the file fails "
                          "to load with 'Invalid tensor size'): " + "; ".join(empty)
                          + ". Drop the empty output, or export SavedModel or .keras.")
    if bad:
        raise ExportError(
            "round(x, decimals=n) has no exact TFLite form (the converter replaces its "
            "division by 10**n with a multiplication by the rounded reciprocal, one ulp off "
            "torch): " + "; ".join(bad) + ". Export SavedModel or .keras, or round in "
            "the application after the model.")


def refuse_unsupported_fft(conversion) -> None:
    """TFLite's one FFT builtin is ``RFFT2D``, whose kernel takes power-of-two lengths only:
    the converter still emits it for any length and the file then fails to load
    ("IsPowerOfTwo ... failed to prepare"). An rfft of another length is refused here,
    naming the torch source; the complex FFTs and irfft need Flex (``run_converter``)."""
    exported = getattr(conversion, "exported", None)
    if exported is None:
        return
    from crossport.capture.source import describe

    bad = []
    for node in exported.graph_module.graph.nodes:
        if node.op != "call_function" or str(node.target) != "aten._fft_r2c.default":
            continue
        self, dims = node.args[0], node.args[1]
        sizes = [int(self.meta["val"].shape[d]) for d in dims]
        if node.args[3] and len(sizes) == 1 and sizes[0] & (sizes[0] - 1):
            bad.append(f"aten._fft_r2c of length {sizes[0]} {describe(node)}")
    if bad:
        raise ExportError(
            "TFLite's only FFT builtin (RFFT2D) takes power-of-two lengths: "
            + "; ".join(bad) + ". Zero-pad to a power of two where the model allows it "
            "(torch.fft.rfft(x, n=...), an stft's n_fft), or export SavedModel or .keras.")
