"""What to write for one operation: the constructor of a layer, the ``keras.ops`` function of an op.

Layers are written with the arguments that differ from a default-constructed instance, the
required ones positionally (``Conv2D(64, (3, 3), strides=(2, 2), name="conv1")``). Ops are
written as the ``keras.ops`` function that creates them, with the operation's constructor
arguments and the call's arguments bound to that function's signature.
"""

from __future__ import annotations

import inspect
import re

import keras

from crossport.codegen.keras_graph import operation_arguments

# The config keys every layer has that the generated source states differently or never.
_SKIP = {"name"}
# Operation classes whose keras.ops function is not the snake-case of the class name.
_OP_FUNCTIONS = {
    "IsNan": "isnan", "IsInf": "isinf", "IsFinite": "isfinite", "AllClose": "allclose",
    "IsIn": "isin", "SearchSorted": "searchsorted", "BatchNorm": "batch_normalization",
    "CTCLoss": "ctc_loss", "CTCDecode": "ctc_decode", "RMSNorm": "rms_normalization",
    "LayerNorm": "layer_normalization", "RGBToGrayscale": "rgb_to_grayscale",
    "RGBToHSV": "rgb_to_hsv", "HSVToRGB": "hsv_to_rgb",
}
_OP_NAMESPACES = {
    "keras.src.ops.numpy": "keras.ops",
    "keras.src.ops.math": "keras.ops",
    "keras.src.ops.nn": "keras.ops",
    "keras.src.ops.core": "keras.ops",
    "keras.src.ops.image": "keras.ops.image",
    "keras.src.ops.linalg": "keras.ops.linalg",
}


class SourceError(ValueError):
    """An operation of the model that the source generator cannot write."""


def layer_path(layer: keras.layers.Layer) -> str:
    """``keras.layers.Conv2D`` or ``crossport.layers.MaxPool2d``: the public name of the class."""
    cls = type(layer)
    if getattr(keras.layers, cls.__name__, None) is cls:
        return f"keras.layers.{cls.__name__}"
    import crossport.layers

    if getattr(crossport.layers, cls.__name__, None) is cls:
        return f"crossport.layers.{cls.__name__}"
    from crossport.layers import dynamic  # run-time sizes: internal, but importable

    if getattr(dynamic, cls.__name__, None) is cls:
        return f"crossport.layers.dynamic.{cls.__name__}"
    from crossport.layers import linalg  # svdvals, matrix_exp: imported by crossport.layers

    if getattr(linalg, cls.__name__, None) is cls:
        return f"crossport.layers.linalg.{cls.__name__}"
    raise SourceError(
        f"layer {layer.name!r} is a {cls.__module__}.{cls.__name__}, which is neither in "
        "keras.layers nor in crossport.layers; the generated source could not import it")


def layer_arguments(layer: keras.layers.Layer) -> tuple[list, dict]:
    """(positional, keyword) constructor arguments that rebuild ``layer``, defaults left out."""
    config = _policy_names(layer.get_config())
    params = inspect.signature(type(layer).__init__).parameters
    required = [name for name, p in params.items() if name != "self" and
                p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    defaults = _default_config(type(layer), params, {k: config[k] for k in required
                                                     if k in config})
    kwargs = {k: v for k, v in config.items()
              if k in required or k not in defaults or not _same(defaults[k], v)}
    kwargs = _restore_derived(type(layer), config, kwargs)
    positional = []
    for name in required:
        if name not in kwargs or params[name].kind is not params[name].POSITIONAL_OR_KEYWORD:
            break
        positional.append(kwargs.pop(name))
    return positional, kwargs


def _restore_derived(cls, config: dict, kwargs: dict) -> dict:
    """Put back arguments whose default derives from another (``strides`` from ``pool_size``).

    Rebuilds the layer from the reduced arguments and compares configs; keys that differ
    are added back, and if that does not settle it the full config is used.
    """
    for _ in range(3):
        try:
            rebuilt = _policy_names(cls(**kwargs).get_config())
        except Exception:  # noqa: BLE001 - the reduced arguments are not enough: keep all
            return dict(config)
        missing = [k for k, v in config.items() if not _same(rebuilt.get(k), v)]
        if not missing:
            return kwargs
        if all(k in kwargs for k in missing):
            break
        kwargs = {k: v for k, v in config.items() if k in kwargs or k in missing}
    return dict(config)


def _policy_names(config: dict) -> dict:
    config = {k: v for k, v in config.items() if k not in _SKIP}
    if isinstance(config.get("dtype"), dict):
        config["dtype"] = dtype_name(config["dtype"])
    return config


def call_keywords(layer: keras.layers.Layer, kwargs: dict) -> dict:
    """The keyword arguments of a layer call that differ from ``call``'s defaults (``mask=None``)."""
    params = inspect.signature(layer.call).parameters
    return {k: v for k, v in kwargs.items()
            if k not in params or params[k].default is params[k].empty
            or not _same(params[k].default, v)}


def _default_config(cls, params, required: dict) -> dict:
    """The config of ``cls`` built with only its required arguments (else its signature defaults)."""
    try:
        config = cls(**required).get_config()
    except Exception:  # noqa: BLE001 - some layers need more than their required arguments
        config = {name: p.default for name, p in params.items() if p.default is not p.empty}
    return _policy_names(config)


def dtype_name(policy):
    """A serialized ``DTypePolicy`` as its name (``"float32"``), which layers accept as dtype."""
    if isinstance(policy, dict) and policy.get("class_name") == "DTypePolicy":
        return policy["config"]["name"]
    return policy


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def op_function(operation: keras.Operation):
    """(source path, function) of the ``keras.ops`` function that creates ``operation``."""
    cls = type(operation)
    namespace = _OP_NAMESPACES.get(cls.__module__)
    name = _OP_FUNCTIONS.get(cls.__name__) or _snake(cls.__name__)
    module = keras.ops
    for part in (namespace or "").split(".")[2:]:
        module = getattr(module, part)
    fn = getattr(module, name, None) if namespace else None
    if fn is None:
        raise SourceError(
            f"operation {operation.name!r} ({cls.__module__}.{cls.__name__}) has no keras.ops "
            "function the source generator knows; it cannot be written as source")
    return f"{namespace}.{name}", fn


def op_arguments(operation: keras.Operation, fn, args: tuple, kwargs: dict) -> tuple[list, dict]:
    """(positional, keyword) arguments of ``fn`` recreating ``operation`` called on ``args``.

    The operation's constructor arguments (``axes`` of ``Transpose``) and the call's keyword
    arguments become keywords; values equal to the function's defaults are left out.
    """
    config = operation_arguments(operation)
    params = inspect.signature(fn).parameters
    merged = dict(config)
    merged.update(kwargs)
    positional, rest = _positional(params, list(args), merged)
    try:
        inspect.signature(fn).bind(*positional, **rest)
    except TypeError as exc:
        raise SourceError(
            f"operation {operation.name!r} ({type(operation).__name__}): its arguments "
            f"{sorted(merged)} do not fit keras.ops.{fn.__name__}{inspect.signature(fn)}: "
            f"{exc}") from exc
    keep = {k: v for k, v in rest.items() if k not in params
            or params[k].default is params[k].empty or not _same(params[k].default, v)}
    return positional, keep


def _positional(params, args: list, named: dict) -> tuple[list, dict]:
    """Arguments in ``fn``'s order: a named one goes positionally only when call arguments
    follow it (``einsum(subscripts, *operands)``), otherwise it stays a keyword."""
    named = dict(named)
    positional = []
    for name, p in params.items():
        if not args:
            break
        if p.kind is p.VAR_POSITIONAL:
            positional += args
            args = []
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional.append(named.pop(name) if name in named else args.pop(0))
        else:
            break
    return positional + args, named


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
