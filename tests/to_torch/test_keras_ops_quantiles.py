"""keras.ops that had no Keras -> PyTorch converter: the quantiles (quantile, percentile,
nanquantile, nanpercentile, nanmedian), searchsorted / digitize, the segment reductions
and the remaining NaN-ignoring ops (nanprod, nanvar, nanstd, nancumsum, nancumprod,
nanargmax, nanargmin). Keras' TF result is the reference, on inputs with ties, infinities,
NaN and all-NaN slices; dtypes and NaN positions must match exactly."""

import keras
import numpy as np
import pytest
import torch
from keras import ops

import crossport

Q = np.asarray([0.0, 0.3, 0.5, 0.77, 1.0], "float32")


def _special(shape, seed=0, all_nan=True):
    values = np.random.default_rng(seed).standard_normal(shape).astype("float32")
    values = np.round(values, 1)                      # ties
    values[0, 0, 0] = np.nan                          # a NaN in one slice
    if all_nan:
        values[1, 2, :] = np.nan                      # all-NaN slices along each axis
        values[1, :, 0] = np.nan
    values[2, 1] = np.inf
    values[2, 3] = -np.inf
    return values


def _check(model, args, rtol=1e-6):
    conv = crossport.to_torch_with_report(model, tuple(torch.from_numpy(a) for a in args))
    ref = keras.tree.flatten(model(list(args) if len(args) > 1 else args[0]))
    got = keras.tree.flatten(conv.module(*[torch.from_numpy(a) for a in args]))
    assert len(ref) == len(got)
    for i, (r, g) in enumerate(zip(ref, got)):
        r, g = np.asarray(r), g.detach().numpy()
        assert r.shape == g.shape and r.dtype == g.dtype, (i, r.shape, g.shape, r.dtype, g.dtype)
        np.testing.assert_allclose(g, r, rtol=rtol, atol=1e-6, equal_nan=True,
                                   err_msg=f"output {i}")
        np.testing.assert_array_equal(np.isnan(g), np.isnan(r), err_msg=f"output {i}")
    return conv


QUANTILES = {
    "quantile-vector-axis": lambda x: ops.quantile(x, Q, axis=-1),
    "quantile-scalar-all": lambda x: ops.quantile(x, 0.3),
    "quantile-keepdims-two-axes": lambda x: ops.quantile(x, Q[:2], axis=(1, 2),
                                                         keepdims=True),
    "quantile-float64-q": lambda x: ops.quantile(x, np.asarray([0.1, 0.9]), axis=1),
    "percentile-nearest": lambda x: ops.percentile(x, [10.0, 50.0, 95.0], axis=-1,
                                                   method="nearest"),
    "percentile-lower-higher": lambda x: [
        ops.percentile(x, 37.5, axis=1, method="lower"),
        ops.percentile(x, 37.5, axis=1, method="higher", keepdims=True)],
    "percentile-midpoint": lambda x: ops.percentile(x, Q * 100, axis=-1, method="midpoint"),
    "nanquantile-keepdims-all": lambda x: ops.nanquantile(x, 0.25, keepdims=True),
    "nanpercentile-methods": lambda x: [
        ops.nanpercentile(x, 30.0, axis=-1, method=m)
        for m in ("linear", "lower", "higher", "midpoint", "nearest")],
    "nanmedian": lambda x: [ops.nanmedian(x, axis=-1), ops.nanmedian(x, axis=1, keepdims=True)],
}


@pytest.mark.parametrize("fn", QUANTILES.values(), ids=QUANTILES.keys())
def test_quantiles_with_ties_infinities_and_nan(fn):
    x = keras.Input((4, 6))
    _check(keras.Model(x, fn(x)), (_special((3, 4, 6)),))


def test_nanquantile_of_a_vector_q():
    """Keras' TF nanquantile fails on an all-NaN slice with a vector q (its map_fn's NaN
    branch is a scalar): NaN elsewhere."""
    x = keras.Input((4, 6))
    model = keras.Model(x, [ops.nanquantile(x, Q, axis=-1),
                            ops.nanpercentile(x, Q * 100, axis=(1, 2), keepdims=True)])
    _check(model, (_special((3, 4, 6), all_nan=False),))


def test_vector_q_over_all_axes():
    """A vector q with axis=None: a (len(q),) result (the layout once counted every input dim
    as kept: a crash in permute)."""
    x = keras.Input((4, 6))
    model = keras.Model(x, [ops.quantile(x, Q), ops.percentile(x, Q * 100, method="nearest"),
                            ops.nanquantile(x, Q), ops.nanpercentile(x, Q * 100)])
    values = _special((3, 4, 6), all_nan=False)
    values[0, 0, 0] = 0.5                             # NaN-free: quantile is not all NaN
    _check(model, (values,))


def test_quantile_ignores_method_as_keras_op_does():
    """Keras' Quantile op never passes ``method`` to the backend: linear, in Keras too."""
    x = keras.Input((6,))
    model = keras.Model(x, ops.quantile(x, 0.3, axis=-1, method="lower"))
    _check(model, (np.round(np.random.default_rng(1).standard_normal((3, 6)), 1)
                   .astype("float32"),))


def test_quantile_of_ints_and_a_q_tensor():
    x, q = keras.Input((7,), dtype="int32"), keras.Input((3,))
    model = keras.Model([x, q], [ops.quantile(x, 0.4, axis=-1),
                                 ops.quantile(ops.cast(x, "float32"), q[0], axis=-1)])
    ints = np.random.default_rng(2).integers(-50, 50, (2, 7)).astype("int32")
    _check(model, (ints, np.asarray([[0.1, 0.5, 0.99]] * 2, "float32")))


def test_searchsorted_and_digitize_with_nan_and_infinities():
    """A NaN searched for on the left is 0 in TF (torch's kernel gives the length)."""
    x = keras.Input((7,))
    i = keras.Input((7,), dtype="int32")
    sequence = np.asarray([-1.0, 0.0, 0.0, 0.5, 2.0], "float32")
    bins = np.asarray([-1.0, 0.0, 0.5, 2.0])
    model = keras.Model([x, i], [
        ops.searchsorted(sequence, ops.reshape(x, (-1,)), side="left"),   # TF: 1-d values
        ops.searchsorted(sequence, ops.reshape(x, (-1,)), side="right"),
        ops.digitize(x, bins), ops.digitize(i, np.asarray([0, 2, 3]))])
    values = np.asarray([[np.nan, 0.0, -0.0, 0.5, np.inf, -np.inf, 1.7],
                         [-1.0, 2.0, 3.0, -5.0, 0.25, np.nan, 0.5]], "float32")
    ints = np.asarray([[0, 1, 2, 3, -4, 9, 2]] * 2, "int32")
    _check(model, (values, ints))


SEGMENT_DATA = np.asarray([[1.0, np.nan], [np.nan, 2.0], [3.0, -1.0], [2.0, np.nan],
                           [np.nan, 4.0], [-np.inf, 0.5], [5.0, 1.0], [7.0, np.nan]],
                          "float32")
SEGMENT_IDS = np.asarray([0, 0, 0, 1, 1, 2, 4, 4], "int32")


@pytest.mark.parametrize("sort", [False, True], ids=["unsorted", "sorted"])
def test_segment_reductions_with_empty_segments_and_nan(sort):
    """Unsorted: 6 segments (5 and 3 empty: 0, 1, the dtype's lowest / highest); sorted:
    ids[-1] + 1 rows, empty ones 0. NaN in max / min as TF's in-order fold (2 columns: TF's
    sorted kernel folds in order only outside Eigen's vectorised columns, see parity.md)."""
    data, raw = keras.Input((2,)), keras.Input((), dtype="int32")
    count = None if sort else 6
    # sorted ids at every input the check makes (TF's sorted kernels reject others)
    ids = ops.sort(ops.abs(raw)) if sort else raw
    model = keras.Model([data, raw], [
        ops.segment_sum(data, ids, num_segments=count, sorted=sort),
        ops.segment_max(data, ids, num_segments=count, sorted=sort),
        ops.segment_min(data, ids, num_segments=count, sorted=sort),
        ops.segment_prod(data, ids, num_segments=count, sorted=sort)])
    _check(model, (SEGMENT_DATA, SEGMENT_IDS))


def test_unsorted_segment_max_after_a_nan_folds_from_the_next_value():
    """TF's unsorted max / min start from the dtype's lowest / highest value, but a NaN takes
    the accumulator's place, so a -inf after it is the result ([1, nan, -inf] is -inf, a lone
    -inf the lowest finite value); 17 columns reach Eigen's vectorised path too (the unsorted
    kernel folds in order there as well; float64 as in the report that found it)."""
    data, ids = keras.Input((17,), dtype="float64"), keras.Input((), dtype="int32")
    model = keras.Model([data, ids], [ops.segment_max(data, ids, num_segments=4),
                                      ops.segment_min(-data, ids, num_segments=4)])
    column = np.asarray([1.0, np.nan, -np.inf, np.nan, -np.inf, -np.inf, 2.0, np.nan, 3.0])
    _check(model, (np.repeat(column[:, None], 17, 1), np.asarray([0, 0, 0, 1, 1, 2, 3, 3, 3],
                                                                 "int32")))


def test_unsorted_segments_counted_at_run_time_and_negative_ids_dropped():
    data, ids = keras.Input((2,)), keras.Input((), dtype="int32")
    model = keras.Model([data, ids], [ops.segment_sum(data, ids), ops.segment_max(data, ids)])
    ids_value = np.asarray([0, 2, -1, 2, 0, 1, 1, 0], "int32")
    _check(model, (np.nan_to_num(SEGMENT_DATA, nan=0.5), ids_value))


def test_nan_reductions_prod_var_std_with_nan_and_all_nan():
    x = keras.Input((4, 6))
    model = keras.Model(x, [ops.nanprod(x, axis=-1), ops.nanprod(x, axis=(1, 2), keepdims=True),
                            ops.nanvar(x, axis=-1), ops.nanstd(x, axis=1, keepdims=True),
                            ops.nanvar(x), ops.nanstd(x, axis=-1)])
    _check(model, (_special((3, 4, 6)),), rtol=1e-5)


def test_nan_cumulative_ops_replace_infinities_as_nan_to_num():
    """Keras' nan_to_num makes +-inf the float32 extremes first."""
    x = keras.Input((4, 6))
    model = keras.Model(x, [ops.nancumsum(x, axis=-1), ops.nancumprod(x * 0.5, axis=1),
                            ops.nancumsum(x)])
    _check(model, (_special((3, 4, 6)),), rtol=1e-5)


def test_nan_argmax_and_argmin_with_all_nan_and_negative_zero():
    x = keras.Input((4, 6))
    model = keras.Model(x, [ops.nanargmax(x, axis=-1), ops.nanargmin(x, axis=1, keepdims=True),
                            ops.nanargmax(x), ops.nanargmin(x, axis=-1)])
    values = _special((3, 4, 6))
    values[0, 2, :2] = [-0.0, 0.0]
    values[0, 3, :2] = [0.0, -0.0]
    values[2, 0, :] = -0.0
    _check(model, (values,))


def test_nan_ops_of_ints():
    i = keras.Input((6,), dtype="int32")
    model = keras.Model(i, [ops.nanprod(i, axis=-1), ops.nancumsum(i, axis=-1),
                            ops.nanargmax(i, axis=-1), ops.nanvar(i, axis=-1)])
    _check(model, (np.random.default_rng(3).integers(-4, 5, (3, 6)).astype("int32"),),
           rtol=1e-5)


def test_nancumprod_overflows_in_float32_as_tf():
    """torch's CPU cumprod multiplies in float64: [max, 10, 0.01] came back 3e37 (TF: inf)
    and an overflow times 0 came back 0 (TF: NaN), here with nan_to_num's max for inf."""
    x = keras.Input((6,))
    model = keras.Model(x, [ops.nancumprod(x, axis=-1), ops.nancumprod(x)])
    values = np.asarray([[3e38, 10.0, 0.01, 2.0, -1.0, 0.5],
                         [np.inf, 2.0, 0.0, 3.0, np.nan, 1.0],
                         [-np.inf, -2.0, 1e-3, 0.0, 1.0, 1.0],
                         [0.0, np.inf, 2.0, np.nan, 0.5, 4.0]], "float32")
    _check(model, (values,))


def test_sorted_segments_with_num_segments_refused_as_keras_tf_raises():
    data, ids = keras.Input((2,)), keras.Input((), dtype="int32")
    model = keras.Model([data, ids], ops.segment_max(data, ids, num_segments=3, sorted=True))
    with pytest.raises(crossport.errors.UnsupportedLayerError, match="sorted=True, num_segments"):
        crossport.to_torch(model, (torch.zeros(4, 2), torch.zeros(4, dtype=torch.int32)))


def test_searchsorted_over_a_run_time_length_refused():
    """Keras types the result int64 (length unknown in its graph) but returns int32 when run
    eagerly: the check failed on the dtype before; now one refusal saying what to do."""
    sequence, values = keras.Input((4,)), keras.Input((3,))
    model = keras.Model([sequence, values], ops.searchsorted(
        ops.sort(ops.reshape(sequence, (-1,))), ops.reshape(values, (-1,))))
    with pytest.raises(crossport.errors.UnsupportedLayerError, match="run-time length"):
        crossport.to_torch(model, (torch.randn(2, 4), torch.randn(2, 3)))
