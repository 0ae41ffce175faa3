"""keras.ops calls a traced ``call()`` makes on run-time sizes, kept as graph nodes.

Keras computes a keras.ops call eagerly when no argument is a symbolic tensor:
``ops.arange(seq_len)`` or ``ops.slice(table, (0, 0), (seq_len, d))`` of a variable would be
a constant of the example's length. While a call is traced (``sizes.tracing_sizes``), the
public keras.ops functions are wrapped: a call handed a :class:`~crossport.to_torch.sizes.
RunSize` and no symbolic tensor is recorded instead (its tensor arguments become symbolic
constants, ``arange`` / ``ones`` / ``zeros`` / ``full`` and a size made a tensor are ops of
their own). The constants hang on a stand-in tensor (the one the size was read from) so the
traced functional graph reaches them; their converters ignore it.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import traceback
import types

import keras
import numpy as np

from crossport.to_torch.patching import active, replace
from crossport.to_torch.sizes import RunSize, describe, dim, leaves, moved, sizes_in

# the unwrapped functions this module itself calls (taken before any wrapping)
_is_tensor = keras.ops.is_tensor
_convert_to_tensor = keras.ops.convert_to_tensor
_broadcast_to = keras.ops.broadcast_to
# functions that only look at a value: never recorded
_INSPECTING = frozenset({"is_tensor", "shape", "dtype", "is_int_dtype",
                         "is_float_dtype", "standardize_dtype", "result_type"})
# elementwise keras.ops that take a run-time size as a tensor operand (an int32 0-d one, as
# Keras converts a Python int): ``ops.minimum(seq_len, window)``
_SCALAR_MATH = frozenset({
    "add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "mod", "power",
    "minimum", "maximum", "negative", "abs", "absolute", "square", "sqrt", "log", "exp",
    "floor", "ceil", "round", "sign", "clip", "less", "less_equal", "greater",
    "greater_equal", "equal", "not_equal", "where"})
# Variable operators: with a KerasTensor operand they leave it to the tensor's reflected
# operator (a symbolic keras.ops node); TF's own would refuse the KerasTensor
_VARIABLE_OPERATORS = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul")


class SizeTraceError(ValueError):
    """A keras.ops call on a run-time size that cannot be kept as a graph node."""


class TraceRefused(Exception):
    """A traced call that cannot be recorded faithfully; the message is the refusal,
    complete (what, where, what to do)."""


def precision_refusal(layer, traced: bool = True) -> str | None:
    """Why a layer's dtype policy is not reproduced, or None.

    ``Layer.__call__`` runs ``call`` under its dtype policy: float inputs cast to the
    compute dtype (reproduced: the emitter's casts, :func:`autocast_inputs` in a trace)
    and, when variables are kept in another dtype (``mixed_float16`` /
    ``mixed_bfloat16``), every variable read cast to the compute dtype (an autocast scope,
    not reproduced); float16 / bfloat16 arithmetic is TF's kernels' own. float32 compute
    converts; float64 too in a traced ``call`` (keras.ops in Keras' dtypes), not in a
    layer converter (their modules compute in float32)."""
    policy = getattr(layer, "dtype_policy", None)
    if policy is None:
        return None
    compute, variable = policy.compute_dtype, policy.variable_dtype
    allowed = ("float32", "float64") if traced else ("float32",)
    if compute in allowed and variable in (compute, None):
        return None
    variables = f" with {variable} variables" if variable != compute else ""
    return (f"{PRECISION_PREFIX} {compute}{variables} (dtype policy {policy.name!r})")


# how a dtype-policy refusal starts (the pre-flight check lists them on one line)
PRECISION_PREFIX = "computes in"
PRECISION_ADVICE = ("only float32 compute converts (float64 too in a custom layer's traced "
                    "call): rebuild the model under keras.config.set_dtype_policy('float32') "
                    "and load its weights")


def guard_loops(layer) -> None:
    """``range``, ``min`` and ``max`` in the modules defining ``layer``'s class (and its
    bases outside Keras) replaced until the trace ends: ``range`` refuses a run-time size
    (``for i in range(num_chunks)`` would be unrolled at the example's count, Qwen3.5's
    chunked delta rule, right only for lengths of that many chunks); ``min`` / ``max`` of
    sizes compute at run time (``conditions.extremum``) instead of branching at the
    example's. A module's global shadows the builtin for that module alone."""
    from crossport.to_torch.patching import current_stack

    stack = current_stack()
    if stack is None:
        return
    for cls in type(layer).__mro__:
        module = sys.modules.get(cls.__module__)
        if module is None or cls.__module__.startswith(("keras.", "builtins", "crossport.")):
            continue
        for name, guarded in _GUARDED.items():
            if name not in vars(module):  # neither guarded yet nor the module's own
                replace(stack, module, name, guarded)


def _size_extremum(name: str, builtin):
    def extremum(*args, **kwargs):
        values = args[0] if len(args) == 1 else args
        if active() and not kwargs and args:
            values = list(values)
            if sizes_in(values) and all(isinstance(v, (int, np.integer)) and
                                        not isinstance(v, bool) for v in values):
                from crossport.to_torch.conditions import extremum as size_extremum

                values = [v if isinstance(v, int) else int(v) for v in values]
                return functools.reduce(lambda a, b: size_extremum(name, a, b), values)
        return builtin(values, **kwargs) if len(args) == 1 else builtin(*args, **kwargs)

    extremum.__crossport_guard__ = True
    return extremum


def _guarded_range(*args):
    if active() and any(isinstance(a, RunSize) for a in args):
        from crossport.to_torch.rawtf import user_line

        size = next(a for a in args if isinstance(a, RunSize))
        raise TraceRefused(
            f"its call() loops over a run-time size (range({describe(size)})"
            f"{user_line(traceback.extract_stack())}): the trace would unroll it at the "
            "example's count, wrong at other sizes; convert at a fixed size (an Input "
            "without None there) or register a converter for the layer")
    return range(*args)


_guarded_range.__crossport_guard__ = True
_GUARDED = {"range": _guarded_range, "min": _size_extremum("min", min),
            "max": _size_extremum("max", max)}


def autocast_inputs(layer, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` as ``Layer.__call__`` hands them to ``call``: each float
    KerasTensor cast to the layer's input dtype when the layer autocasts (the casts are ops
    of the trace, so a float64 input of a float32 layer is float32 inside, as in Keras)."""
    if not getattr(layer, "_convert_input_args", True):
        return args, kwargs
    policy, dtype = layer.dtype_policy, layer.input_dtype

    def convert(value):
        if not isinstance(value, keras.KerasTensor):
            return value
        converted = policy.convert_input(value, layer.autocast, dtype)
        if getattr(value, "_keras_mask", None) is not None:
            converted._keras_mask = value._keras_mask
        return converted

    return keras.tree.map_structure(convert, (tuple(args), dict(kwargs)))


class TraceConstant(keras.Operation):
    """A constant (an eager tensor, a numpy array or a Keras variable) as a symbolic tensor,
    anchored on a stand-in tensor of the trace."""

    def __init__(self, value, name=None):
        super().__init__(name=name)
        self.value = value

    def call(self, *anchors):
        return keras.ops.convert_to_tensor(self.value)

    def compute_output_spec(self, *anchors):
        dtype = keras.backend.standardize_dtype(self.value.dtype)
        return keras.KerasTensor(tuple(self.value.shape), dtype=dtype)


class SizeArange(keras.Operation):
    """``ops.arange(start, stop, step)`` with run-time bounds (ints or RunSizes)."""

    def __init__(self, start, stop, step, dtype, name=None):
        super().__init__(name=name)
        self.start, self.stop, self.step, self.dtype = start, stop, step, dtype

    def call(self, *anchors):
        return keras.ops.arange(int(self.start), int(self.stop), int(self.step),
                                dtype=self.dtype)

    def compute_output_spec(self, *anchors):
        if self.step > 0:
            length = (self.stop - self.start + self.step - 1) // self.step
        else:  # ceil((stop - start) / step) for a negative step
            length = (self.start - self.stop - self.step - 1) // -self.step
        return keras.KerasTensor((length,), dtype=self.dtype)


class SizeScalar(keras.Operation):
    """A run-time size as a 0-d tensor (``ops.cast(seq_len, "float32")``)."""

    def __init__(self, size, dtype, name=None):
        super().__init__(name=name)
        self.size, self.dtype = size, dtype

    def call(self, *anchors):
        return keras.ops.convert_to_tensor(int(self.size), dtype=self.dtype)

    def compute_output_spec(self, *anchors):
        return keras.KerasTensor((), dtype=self.dtype)


def is_constant(value) -> bool:
    return (isinstance(value, (keras.Variable, np.ndarray))
            or (_is_tensor(value) and not isinstance(value, keras.KerasTensor)))


def _anchor(args) -> list:
    tensors = [t for s in sizes_in(args) for t in leaves(s)]
    return tensors[:1]


def _symbolic(value) -> bool:
    return any(isinstance(v, keras.KerasTensor) for v in keras.tree.flatten(value))


def _lifted(name: str, fn, args: tuple, kwargs: dict):
    """``fn(*args, **kwargs)`` recorded as graph nodes (see the module docstring)."""
    anchor = _anchor((args, kwargs))
    if name == "arange":
        return _arange(anchor, *args, **kwargs)
    if name in ("ones", "zeros", "empty", "full"):
        return _filled(name, anchor, *args, **kwargs)
    if name in ("convert_to_tensor", "cast", "array") and isinstance(args[0], RunSize):
        dtype = kwargs.get("dtype", args[1] if len(args) > 1 else None) or "int32"
        return SizeScalar(args[0], keras.backend.standardize_dtype(dtype))(*anchor)
    if name in _SCALAR_MATH and not sizes_in(kwargs) and all(
            not isinstance(a, (list, tuple, dict, slice)) for a in args):
        # ops.minimum(seq_len, 64): Keras makes each Python int an int32 tensor
        args = tuple(SizeScalar(a, "int32")(*anchor) if isinstance(a, RunSize) else a
                     for a in args)
        return fn(*args, **kwargs)
    if not any(is_constant(v) for v in keras.tree.flatten((args, kwargs))):
        raise SizeTraceError(f"keras.ops.{name} on a run-time size is not converted")
    args, kwargs = keras.tree.map_structure(
        lambda v: TraceConstant(v)(*anchor) if is_constant(v) else v, (args, kwargs))
    result = fn(*args, **kwargs)
    if not _symbolic(result):
        raise SizeTraceError(f"keras.ops.{name} on a run-time size is not converted")
    return result


def _arange(anchor, start, stop=None, step=None, dtype=None):
    """``ops.arange`` with a run-time bound: int bounds and a non-zero int step; an
    integral float (XLNet's ``arange(klen, -qlen, -1.0)``) is that int, and makes Keras'
    default dtype a float one."""
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    bounds = (start, stop, step)
    floats = any(isinstance(b, (float, np.floating)) for b in bounds)
    if not all(_integral(b) for b in bounds) or isinstance(step, RunSize) or step == 0:
        raise SizeTraceError("keras.ops.arange of a run-time size with a non-integral bound "
                             "or step, or a step that is a run-time size, is not converted")
    start, stop = (b if isinstance(b, RunSize) else int(b) for b in (start, stop))
    if dtype is None:
        dtype = keras.backend.floatx() if floats else "int32"
    return SizeArange(start, stop, int(step), keras.backend.standardize_dtype(dtype))(*anchor)


def _integral(value) -> bool:
    if isinstance(value, (int, np.integer)):
        return True
    return isinstance(value, (float, np.floating)) and float(value).is_integer()


def _filled(name, anchor, shape, fill_value=None, dtype=None):
    if name != "full":
        fill_value, dtype = (1 if name == "ones" else 0), fill_value if dtype is None else dtype
    if _symbolic(fill_value) or not isinstance(shape, (list, tuple)):
        raise SizeTraceError(f"keras.ops.{name} of a run-time size with a tensor fill value "
                             "is not converted")
    dtype = keras.backend.standardize_dtype(dtype or keras.backend.floatx())
    value = _convert_to_tensor(np.asarray(fill_value), dtype=dtype)
    return _broadcast_to(TraceConstant(value)(*anchor), tuple(shape))


def _wrap(name: str, fn):
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        if not active():
            return fn(*args, **kwargs)
        if name == "ndim" and args and isinstance(args[0], keras.KerasTensor):
            return len(args[0].shape)  # the rank is static (Keras returns a symbolic one)
        if sizes_in((args, kwargs)) and not _symbolic((args, kwargs)):
            return _lifted(name, fn, args, kwargs)
        return fn(*args, **kwargs)

    wrapped.__crossport_lifted__ = fn
    return wrapped


def _namespaces() -> list[types.ModuleType]:
    ops = keras.ops
    return [ops, ops.numpy, ops.nn, keras.src.ops]


def _custom_sublayer(layer) -> bool:
    """A custom layer without a converter: a traced call inlines its ``call``."""
    from crossport.to_torch.registry import lookup

    return (isinstance(layer, keras.layers.Layer) and not isinstance(layer, keras.Model)
            and not type(layer).__module__.startswith("keras.") and layer.built
            and lookup(layer) is None)


def _known(tensor) -> bool:
    return None not in tensor.shape


def track_sizes(infer, outputs, args, kwargs) -> None:
    """Mark the output sizes that depend on a run-time size as RunSizes reading the
    output's own run-time shape, where Keras' shape inference returned a plain number or
    ``None`` for them (``einsum`` and ``EinsumDense`` rebuild their output shapes).

    ``infer(*args, **kwargs)`` (the op's ``compute_output_spec``) runs again with every
    run-time size moved (:func:`moved`): a size that moves with them is one. A ``None``
    size whose inputs are all known gets the example's value from running the op in a
    backend graph."""
    outs = [t for t in keras.tree.flatten(outputs) if isinstance(t, keras.KerasTensor)]
    tensors = [t for t in keras.tree.flatten((args, kwargs)) if isinstance(t, keras.KerasTensor)]
    if not outs or not any(sizes_in(tuple(t.shape)) for t in tensors):
        return
    if all(isinstance(s, RunSize) for t in outs for s in t.shape):
        return
    other = _infer_moved(infer, args, kwargs, outs)
    example = _infer_example(outs, tensors, args, kwargs, infer)
    for out, moved_shape, example_shape in zip(outs, other, example):
        new = []
        for axis, (size, size2, value) in enumerate(zip(out.shape, moved_shape, example_shape)):
            if size is None and value is not None:
                size = dim(value, out, axis)
            elif isinstance(size, int) and not isinstance(size, RunSize) and size2 != size:
                size = dim(size, out, axis)
            new.append(size)
        out._shape = tuple(new)


def _infer_moved(infer, args, kwargs, outs) -> list[tuple]:
    def spec(value):
        if not isinstance(value, keras.KerasTensor):
            return value
        return keras.KerasTensor(tuple(moved(s) for s in value.shape), dtype=value.dtype)

    moved_args, moved_kwargs = keras.tree.map_structure(spec, (args, kwargs))
    try:
        specs = keras.tree.flatten(infer(*moved_args, **moved_kwargs))
    except Exception:  # noqa: BLE001  (not inferable there: the sizes stay as Keras gave)
        specs = []
    shapes = [tuple(t.shape) for t in specs if isinstance(t, keras.KerasTensor)]
    if len(shapes) != len(outs) or any(len(a) != len(b.shape) for a, b in zip(shapes, outs)):
        return [tuple(t.shape) for t in outs]
    return shapes


def _infer_example(outs, tensors, args, kwargs, infer) -> list[tuple]:
    """The example's output sizes where Keras left ``None`` (run in a backend graph)."""
    if all(None not in t.shape for t in outs) or not all(None not in t.shape for t in tensors):
        return [tuple(t.shape) for t in outs]
    fn = getattr(infer, "__self__", None)
    try:
        specs = keras.tree.flatten(keras.src.backend.compute_output_spec(fn.call, *args,
                                                                         **kwargs))
    except Exception:  # noqa: BLE001  (not inferable: the size stays unknown)
        return [tuple(t.shape) for t in outs]
    shapes = [tuple(t.shape) for t in specs if isinstance(t, keras.KerasTensor)]
    if len(shapes) != len(outs) or any(len(a) != len(b.shape) for a, b in zip(shapes, outs)):
        return [tuple(t.shape) for t in outs]
    return shapes


def _layer_call(original):
    def __call__(self, *args, **kwargs):
        if not active():
            return original(self, *args, **kwargs)
        tensors = [t for t in keras.tree.flatten((args, kwargs))
                   if isinstance(t, keras.KerasTensor)]
        if not tensors:
            return original(self, *args, **kwargs)
        if _custom_sublayer(self) and not any(
                getattr(t, "_keras_mask", None) is not None for t in tensors):
            refusal = precision_refusal(self)
            if refusal:
                raise TraceRefused(f"its sublayer {self.name!r} ({type(self).__name__}) "
                                   f"{refusal}; {PRECISION_ADVICE}")
            args, kwargs = autocast_inputs(self, args, kwargs)
            guard_loops(self)
            return self.call(*args, **_call_kwargs(self, kwargs))  # inlined: RunSizes kept
        outputs = original(self, *args, **kwargs)
        track_sizes(self.compute_output_spec, outputs, args, kwargs)
        return outputs

    return __call__


def _call_kwargs(layer, kwargs: dict) -> dict:
    """``kwargs`` as ``Layer.__call__`` hands them to ``call``: ``training`` only to a call
    that takes it."""
    if "training" in kwargs and "training" not in layer._call_signature.parameters:
        kwargs = {k: v for k, v in kwargs.items() if k != "training"}
    return kwargs


def _variable_operator(original):
    @functools.wraps(original)
    def operator(self, other):
        if isinstance(other, keras.KerasTensor) and active():
            return NotImplemented
        return original(self, other)

    return operator


def _variable_getitem(original):
    """``variable[:seq_len]`` (Keras reads it eagerly): a graph node with the RunSize."""
    def __getitem__(self, key):
        if sizes_in(key) and active():
            return TraceConstant(self)(*_anchor(key))[key]
        return original(self, key)

    return __getitem__


def _tensor_getitem(original):
    """``x[:n]``, ``x[None]``: a key of one slice or ``None`` as the 1-tuple numpy reads
    it the same as (Keras' GetItem takes only ints and tuples)."""
    def __getitem__(self, key):
        if (key is None or isinstance(key, slice) or key is Ellipsis) and active():
            key = (key,)
        return original(self, key)

    return __getitem__


def _tensor_eq(self, other):
    """``x == y`` in the traced layer's own code: ``ops.equal`` as on the TF tensors Keras
    runs the call on (XLNet's ``ops.where(n == m, 1, 0)`` diagonal). KerasTensor defines no
    ``__eq__`` (identity, so tensors stay hashable): the trace would record ``False``.
    Keras', TF's and crossport's own code, and a comparison with None, keep identity."""
    if other is not None and active() and _user_code(sys._getframe(1)) and (
            isinstance(other, (keras.KerasTensor, int, float, np.ndarray, np.generic))
            or _is_tensor(other)):
        return keras.ops.equal(self, other)
    return object.__eq__(self, other)


_LIBRARY_PATHS = ("/keras/src/", "/tensorflow/", "/torch/", "/optree/", "/numpy/",
                  "/tf_keras/", "/ml_dtypes/", "-packages/tree/", "/absl/")
_STDLIB = sysconfig.get_paths()["stdlib"].replace("\\", "/") + "/"
_CROSSPORT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))).replace("\\", "/") + "/"


def _user_code(frame) -> bool:
    """Whether ``frame`` runs a layer's code (keras_hub's, a user's), not a library's
    (Keras', TF's, numpy's, crossport's own: its package directory, so a checkout in a
    folder named crossport is no library)."""
    return _user_path(frame.f_code.co_filename)


@functools.lru_cache(maxsize=4096)
def _user_path(filename: str) -> bool:
    path = filename.replace("\\", "/")
    if path.startswith(("<frozen", _CROSSPORT)) or any(p in path for p in _LIBRARY_PATHS):
        return False
    return not path.startswith(_STDLIB) or "-packages/" in path


def _symbolic_call(original):
    def symbolic_call(self, *args, **kwargs):
        outputs = original(self, *args, **kwargs)
        if not isinstance(self, keras.layers.Layer) and active():
            track_sizes(self.compute_output_spec, outputs, args, kwargs)
        return outputs

    return symbolic_call


def install(stack) -> None:
    """The public keras.ops functions wrapped (see the module docstring) until ``stack``
    closes; a custom sublayer called inside is inlined (its own ``call`` traced in place),
    and output sizes that follow a run-time size are tracked (:func:`track_sizes`). Each
    wrapper acts only on the tracing thread (``patching.active``)."""
    variable = keras.src.backend.common.variables.Variable
    operation = keras.src.ops.operation.Operation
    replace(stack, keras.layers.Layer, "__call__", _layer_call(keras.layers.Layer.__call__))
    replace(stack, operation, "symbolic_call", _symbolic_call(operation.symbolic_call))
    replace(stack, variable, "__getitem__", _variable_getitem(variable.__getitem__))
    replace(stack, keras.KerasTensor, "__getitem__",
            _tensor_getitem(keras.KerasTensor.__getitem__))
    replace(stack, keras.KerasTensor, "__eq__", _tensor_eq)
    for name in (f"__{r}{n}__" for n in _VARIABLE_OPERATORS for r in ("", "r")):
        replace(stack, variable, name, _variable_operator(getattr(variable, name)))
    for module in _namespaces():
        for name, fn in list(vars(module).items()):
            if isinstance(fn, types.FunctionType) and not name.startswith("_") \
                    and name not in _INSPECTING and not hasattr(fn, "__crossport_lifted__"):
                replace(stack, module, name, _wrap(name, fn))
