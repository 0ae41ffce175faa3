"""TensorFlow functions a traced ``call()`` applies to KerasTensors directly.

keras_hub's TF-backend code paths call a few TF functions on their tensors (Qwen3's
``tf.linalg.band_part`` sliding window, DeBERTa's ``tf.gather(..., batch_dims=3)``). On a
KerasTensor such a call fails inside TF, and TF then asks its global dispatchers to handle
it: while a call is traced (``sizes.tracing_sizes``) crossport registers one
(:class:`RawTFDispatcher`, acting on the tracing thread only). It records the call as the
keras.ops computing exactly what the TF function computes, so the trace, the converters and
the self-check see ordinary keras.ops:

* ``tf.linalg.band_part(x, lower, upper)``: ``where(in_band, x, 0)`` with TF's band rule
  (a negative bound keeps that whole triangle), bounds ints, run-time sizes or 0-d tensors;
* ``tf.gather(params, indices, axis, batch_dims)``: ``take`` (no batch dims) or
  ``take_along_axis`` (every dim but the gathered one a batch dim);
* ``tf.cast``, ``tf.reshape`` (a shape of ints and run-time sizes), ``tf.shape`` (the sizes
  stacked, run-time ones read at run time).

Any other TF function on a KerasTensor, or one of these in a form not listed, is refused
naming the function and the source line that calls it (:func:`refusal`); so is TF code that
does not dispatch (``tf.TensorArray.write``: TF raises, :func:`raw_tf_refusal` names it). A
TF function given only ints and run-time sizes (``tf.range(n)``) computes eagerly, a
constant of the example's size: the self-check at a second size fails on it.

Where TF raises at run time (``tf.gather`` of an index out of range on CPU), the module
computes Keras' ``take`` value instead: there is no TF value to differ from.
"""

from __future__ import annotations

import inspect
import linecache
import traceback

import keras
import numpy as np
from tensorflow.python.util import dispatch, tf_export

from crossport.to_torch.lift import SizeScalar, TraceConstant, TraceRefused, is_constant
from crossport.to_torch.patching import active
from crossport.to_torch.sizes import RunSize

ops = keras.ops
# the message TF raises when a KerasTensor reaches a TF function that does not dispatch
_KERAS_TENSOR_IN_TF = "A KerasTensor cannot be used as input to a TensorFlow function"
_SKIPPED_PATHS = ("/tensorflow/", "/keras/src/", "/crossport/", "/tf_keras/")


def _is_keras_tensor(value) -> bool:
    return isinstance(value, keras.KerasTensor)


class UnrecordedTF(TraceRefused, ValueError):
    """A TF function crossport does not record: also a ValueError, the error TF's operators
    catch to try the other operand's reflected one (``eager_tensor * keras_tensor`` is
    then ``KerasTensor.__rmul__``, a keras.ops multiply)."""


class RawTFDispatcher(dispatch.GlobalOpDispatcher):
    """Handles a TF function called on KerasTensors while a call is traced."""

    def handle(self, op, args, kwargs):
        if not active() or not any(_is_keras_tensor(v) for v in
                                   keras.tree.flatten((list(args), kwargs))):
            return self.NOT_SUPPORTED
        name = tf_export.get_canonical_name_for_symbol(op) or getattr(op, "__name__", "?")
        recorder = _RECORDERS.get(name)
        if recorder is None:
            raise UnrecordedTF(refusal(f"tf.{name}", "crossport does not record"))
        try:
            bound = inspect.signature(op).bind(*args, **kwargs)
        except TypeError as exc:
            raise TraceRefused(refusal(f"tf.{name}", f"with these arguments ({exc})")) from exc
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        arguments.pop("name", None)
        return recorder(f"tf.{name}", **arguments)


def install(stack) -> None:
    """The dispatcher registered with TF until ``stack`` closes."""
    dispatcher = RawTFDispatcher()
    registered = dispatch._GLOBAL_DISPATCHERS  # TF keeps no public unregister

    def unregister() -> None:
        if dispatcher in registered:
            registered.remove(dispatcher)

    stack.callback(unregister)
    registered.append(dispatcher)


def refusal(function: str | None, why: str, frames=None) -> str:
    """The message refusing a raw TF call: the function (None: TF code that does not
    dispatch), why, and the user's source line."""
    where = user_line(frames if frames is not None else traceback.extract_stack())
    what = (f"applies {function} to a traced tensor{where}, which {why}" if function else
            f"passes a traced tensor to TensorFlow code{where}, which {why}")
    return (f"its call() {what}; only Keras layers, keras.ops and tf.linalg.band_part / "
            "tf.gather / tf.cast / tf.reshape / tf.shape are recorded: write it with "
            "keras.ops, or register a converter for the layer with "
            "crossport.to_torch.register_layer(...)")


def raw_tf_refusal(exc: BaseException) -> str | None:
    """The refusal for TF's own error on a KerasTensor (a TF call that does not dispatch:
    ``tf.TensorArray.write``), naming the source line; None for any other error."""
    if _KERAS_TENSOR_IN_TF not in str(exc):
        return None
    return refusal(None, "cannot take a symbolic tensor (TF does not dispatch it)",
                   traceback.extract_tb(exc.__traceback__))


def user_line(frames) -> str:
    """`` (at file.py:12: `code`)`` for the innermost frame outside TF, Keras and crossport."""
    for frame in reversed(list(frames)):
        path = frame.filename.replace("\\", "/")
        if not any(part in path for part in _SKIPPED_PATHS):
            code = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
            return f" (at {path.rsplit('/', 1)[-1]}:{frame.lineno}: `{code}`)"
    return ""


# -- the recorded functions ------------------------------------------------------------------

def _int_scalar(value, anchor):
    """A band bound as an int32 value: an int as it is, a run-time size read at run time, a
    tensor cast."""
    if isinstance(value, RunSize):
        return SizeScalar(value, "int32")(anchor)
    if _is_keras_tensor(value):
        return ops.cast(value, "int32")
    return int(value)


def _band_part(function, input, num_lower, num_upper):
    """TF's ``in_band(m, n) = (lower < 0 or m - n <= lower) and (upper < 0 or n - m <=
    upper)`` over the last two dims; out of band 0 (False for bools)."""
    if not _is_keras_tensor(input) or len(input.shape) < 2:
        raise TraceRefused(refusal(function, "takes a matrix (rank >= 2)"))
    rows, cols = input.shape[-2], input.shape[-1]
    if rows is None or cols is None:
        raise TraceRefused(refusal(function, "is given a matrix of unknown size"))
    m = ops.expand_dims(ops.arange(rows, dtype="int32"), -1)
    n = ops.expand_dims(ops.arange(cols, dtype="int32"), 0)
    keep = None
    for bound, distance in ((num_lower, m - n), (num_upper, n - m)):
        bound = _int_scalar(bound, input)
        if isinstance(bound, int):
            if bound < 0:
                continue
            inside = distance <= bound
        else:
            inside = ops.logical_or(ops.less(bound, 0), ops.less_equal(distance, bound))
        keep = inside if keep is None else ops.logical_and(keep, inside)
    if keep is None:  # both bounds negative: the whole matrix
        return input
    return ops.where(_symbolic(keep, input), input, ops.zeros_like(input))


def _symbolic(value, anchor):
    """An eager value (a band of static sizes) as a constant of the trace."""
    return TraceConstant(value)(anchor) if is_constant(value) else value


def _gather(function, params, indices, validate_indices, axis, batch_dims):
    if not _is_keras_tensor(params):
        params = TraceConstant(np.asarray(params))(indices)
    rank_p = len(params.shape)
    rank_i = len(np.shape(indices)) if not _is_keras_tensor(indices) else len(indices.shape)
    batch_dims = int(batch_dims) + (rank_i if batch_dims < 0 else 0)
    axis = batch_dims if axis is None else int(axis) + (rank_p if int(axis) < 0 else 0)
    if batch_dims == 0:
        return ops.take(params, indices, axis=axis)
    if axis == batch_dims == rank_i - 1 == rank_p - 1:
        return ops.take_along_axis(params, indices, axis=axis)
    raise TraceRefused(refusal(function, f"is given batch_dims={batch_dims} and axis={axis} "
                               f"for ranks {rank_p} and {rank_i} (recorded: batch_dims 0, or "
                               "every dim but the last a batch dim)"))


def _cast(function, x, dtype):
    return ops.cast(x, getattr(dtype, "name", dtype))


def _reshape(function, tensor, shape):
    if _is_keras_tensor(shape) or not all(isinstance(s, (int, np.integer)) for s in shape):
        raise TraceRefused(refusal(function, "is given a shape tensor (recorded: a shape of "
                                   "ints and run-time sizes)"))
    return ops.reshape(tensor, tuple(shape))


def _shape(function, input, out_type):
    dtype = getattr(out_type, "name", out_type) or "int32"
    if not _is_keras_tensor(input) or None in input.shape:
        raise TraceRefused(refusal(function, "is given a tensor of unknown size"))
    if not input.shape:
        return TraceConstant(np.zeros((0,), dtype))(input)
    sizes = [SizeScalar(s, dtype)(input) if isinstance(s, RunSize)
             else TraceConstant(np.asarray(s, dtype))(input) for s in input.shape]
    return ops.stack(sizes)


_RECORDERS = {
    "linalg.band_part": _band_part,
    "gather": _gather,
    "cast": _cast,
    "dtypes.cast": _cast,
    "reshape": _reshape,
    "shape": _shape,
}
