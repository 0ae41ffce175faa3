"""keras.ops norm, normalize, dot, tensordot, median, moments, ptp, amax/amin and the matrix
ops (inv, solve, det, slogdet, lu_factor, qr, cholesky, cholesky_inverse, logdet,
solve_triangular, eigh, svd, pinv, lstsq, matrix_rank, cdist, erfinv) -> torch, on tensors
held in Keras order and permuted (a conv output held NCHW), batches of matrices, and the
special values where Keras' TF kernels differ from torch's own (median's ``-inf * 0``, a zero
vector under normalize, NaN counted by ord=0, Eigen's pivots and reflections, TF's SVD of a
NaN matrix, its erfinv)."""


import keras
import numpy as np
import pytest
import torch

import crossport
from tests.to_torch.harness import assert_to_torch, reloaded

L = keras.layers
ops = keras.ops
INF = float("inf")


def _conv(x):
    return L.Conv2D(3, 1)(x)   # held NCHW: the op's Keras axes are remapped


MATRIX_ORDS = (None, "fro", 1, -1, INF, -INF, "nuc", 2, -2)
VECTOR_ORDS = (None, 2, INF, -INF, 0, 1, -1, 3, 0.5)

OPS = {
    "norm-vector-ords": ((5, 6), lambda x: [ops.norm(x, ord=o, axis=-1) for o in VECTOR_ORDS]),
    "norm-vector-keepdims-held-nchw": ((4, 5, 3), lambda x: [
        ops.norm(_conv(x), axis=-1, keepdims=True), ops.norm(_conv(x), ord=3, axis=1)]),
    "norm-matrix-ords": ((5, 6), lambda x: [ops.norm(x, ord=o, axis=(1, 2))
                                            for o in MATRIX_ORDS]),
    "norm-matrix-keepdims": ((5, 6), lambda x: [ops.norm(x, ord=o, axis=(1, 2), keepdims=True)
                                                for o in MATRIX_ORDS]),
    "norm-matrix-held-nchw": ((4, 5, 3), lambda x: [
        ops.norm(_conv(x), ord=o, axis=(-1, 1)) for o in (1, INF, "fro", "nuc")]),
    "norm-axis-none": ((6,), lambda x: [ops.norm(x), ops.norm(x, ord=1)]),
    "norm-of-ints": ((6,), lambda x: ops.norm(ops.cast(x * 4.0, "int32"), ord=1, axis=-1)),
    "normalize": ((4, 5, 3), lambda x: [
        ops.normalize(_conv(x)), ops.normalize(x, axis=1, order=1),
        ops.normalize(x, axis=(1, 2), epsilon=0.5), ops.normalize(_conv(x), order=3,
                                                                   epsilon=1e-3)]),
    "dot": ((5, 6), lambda x: [
        ops.dot(x, np.linspace(-1, 1, 18, dtype="float32").reshape(6, 3)),
        ops.dot(x, np.linspace(0, 1, 6, dtype="float32")),
        ops.dot(x, np.arange(24, dtype="float32").reshape(2, 6, 2) / 10),
        ops.dot(x, np.float32(1.5))]),
    "dot-of-ints": ((6,), lambda x: ops.dot(ops.cast(x * 4.0, "int32"),
                                            np.arange(18, dtype="int32").reshape(6, 3))),
    "tensordot": ((5, 6), lambda x: [
        ops.tensordot(x, np.linspace(-1, 1, 60, dtype="float32").reshape(5, 6, 2), axes=2),
        ops.tensordot(x, np.ones((6, 3), "float32"), axes=1),
        ops.tensordot(_t(x), np.linspace(0, 1, 15, dtype="float32").reshape(3, 5),
                      axes=([2], [1])),
        ops.tensordot(x, np.linspace(0, 1, 30, dtype="float32").reshape(6, 5),
                      axes=[[1, 2], [1, 0]]),
        ops.tensordot(x, x, axes=([0], [0]))]),
    "median": ((5, 6), lambda x: [ops.median(x, axis=-1), ops.median(x, axis=1, keepdims=True),
                                  ops.median(x, axis=(1, 2)), ops.median(x),
                                  ops.median(x, keepdims=True)]),
    "median-held-nchw": ((4, 5, 3), lambda x: [ops.median(_conv(x), axis=-1),
                                               ops.median(_conv(x), axis=(1, 3), keepdims=True)]),
    "median-of-ints": ((6,), lambda x: ops.median(ops.cast(x * 4.0, "int32"), axis=-1)),
    "moments-ptp-amax": ((4, 5, 3), lambda x: [
        *ops.moments(_conv(x), axes=[1, 2]), *ops.moments(x, axes=[-1], keepdims=True),
        ops.ptp(_conv(x), axis=-1), ops.amax(_conv(x), axis=(1, 2)),
        ops.amin(x, axis=-1, keepdims=True)]),
}


def _t(x):
    return ops.transpose(x, (0, 2, 1))


@pytest.mark.parametrize("shape, fn", OPS.values(), ids=OPS.keys())
def test_keras_ops(shape, fn):
    x = keras.Input(shape)
    assert_to_torch(keras.Model(x, fn(x)))


def test_held_layout_needs_no_permute():
    """Vector norms, normalize, median and moments run at the held axes of an NCHW block."""
    x = keras.Input((4, 5, 3))
    a = _conv(x)
    outs = [ops.norm(a, axis=-1), ops.normalize(a), ops.median(a, axis=(1, 2)),
            ops.moments(a, axes=[1, 2])[1]]
    assert_to_torch(keras.Model(x, outs), max_permutes=0)


def _run(model, net, values):
    want = [np.asarray(w) for w in keras.tree.flatten(model(values))]
    with torch.no_grad():
        got = [g.numpy() for g in keras.tree.flatten(net(torch.from_numpy(values)))]
    return want, got


def _assert_special(model, net, values, rtol=1e-5):
    want, got = _run(model, net, values)
    assert len(want) == len(got)
    for i, (w, g) in enumerate(zip(want, got)):
        assert w.shape == g.shape and w.dtype == g.dtype, (i, w.shape, g.shape)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"output {i}")
        np.testing.assert_array_equal(np.isposinf(g), np.isposinf(w), err_msg=f"output {i}")
        np.testing.assert_array_equal(np.isneginf(g), np.isneginf(w), err_msg=f"output {i}")
        finite = np.isfinite(w)
        np.testing.assert_allclose(g[finite], w[finite], rtol=rtol, atol=1e-5,
                                   err_msg=f"output {i}")


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.0, 0.5], np.float32)


def _special(shape, seed, nan_rate=0.1):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape).astype(np.float32)
    mask = rng.random(shape) < 0.4
    values[mask] = rng.choice(SPECIAL[1:], size=int(mask.sum()))
    values[rng.random(shape) < nan_rate] = np.nan
    return values


@pytest.mark.parametrize("seed", [0, 1])
def test_norms_with_special_values(seed):
    """ord=0 counts NaN as non-zero, ±inf norms take |x|, p-norms of 0 with p < 0 are 0 (the
    sum is inf), a NaN anywhere in a slice makes its norm NaN; rows of zeros included."""
    x = keras.Input((7,))
    outs = [ops.norm(x, ord=o, axis=-1) for o in VECTOR_ORDS]
    outs += [ops.norm(ops.reshape(x[:, :6], (-1, 2, 3)), ord=o, axis=(1, 2))
             for o in (None, 1, -1, INF, -INF)]
    outs += [ops.norm(ops.reshape(x[:, :6], (-1, 2, 3)), ord=o, axis=(1, 2))
             for o in ("nuc", 2, -2)]   # TF's SVD gives NaN for non-finite matrices
    model = keras.Model(x, outs)
    net = crossport.to_torch(model, (torch.randn(2, 7),))
    values = _special((40, 7), seed)
    values[0] = 0.0
    values[1] = -0.0
    _assert_special(model, net, values)


def test_normalize_epsilon_semantics():
    """order 2 is ``x * min(rsqrt(sum x^2), 1/eps)``: a zero row stays zeros (not NaN), a tiny
    row is scaled by 1/eps, NaN propagates through the minimum; other orders divide by
    ``max(norm, eps)``; ``epsilon=None`` is ``keras.config.epsilon()``."""
    x = keras.Input((5,))
    model = keras.Model(x, [ops.normalize(x), ops.normalize(x, epsilon=1e-2),
                            ops.normalize(x, order=1, epsilon=0.5), ops.normalize(x, order=3)])
    net = crossport.to_torch(model, (torch.randn(2, 5),))
    values = _special((30, 5), 2)
    values[0] = 0.0
    values[1] = 1e-9
    values[2] = np.array([1e-3, -1e-3, 0.0, 0.0, 2e-3], np.float32)
    values[3, :] = 3.0
    _assert_special(model, net, values)


def test_median_special_values_and_sizes():
    """Keras' linear quantile multiplies the lower neighbour by 0 for an odd count:
    ``median([-inf, 0, 1])`` is NaN in Keras (torch.median would say 0), ``[-inf, -inf,
    inf, inf]`` is NaN, a NaN anywhere gives NaN; odd and even counts, one element."""
    x = keras.Input((5, 4))
    model = keras.Model(x, [ops.median(x, axis=1), ops.median(x, axis=-1),
                            ops.median(x[:, :1], axis=1), ops.median(x, axis=(1, 2))])
    net = crossport.to_torch(model, (torch.randn(2, 5, 4),))
    for seed in (3, 4):
        _assert_special(model, net, _special((12, 5, 4), seed, nan_rate=0.02))
    rows = np.zeros((2, 5, 4), np.float32)
    rows[0, :, 0] = [-np.inf, 0.0, 1.0, 2.0, 3.0]
    rows[0, :, 1] = [-np.inf, -np.inf, 0.0, 1.0, 2.0]   # s[lo] * 0 with s[lo] = -inf
    rows[0, 0, :] = [-np.inf, -np.inf, np.inf, np.inf]
    rows[1] = np.inf
    _assert_special(model, net, rows)


@pytest.mark.parametrize("batch", [1, 2, 3, 4])
def test_median_over_the_batch_at_every_size(batch):
    """axis=None counts the batch: the count (odd or even) is read at run time."""
    x = keras.Input((3,))
    model = keras.Model(x, [ops.median(x), ops.median(x, axis=0, keepdims=True)])
    net = crossport.to_torch(model, (torch.randn(2, 3),))
    values = np.random.default_rng(batch).standard_normal((batch, 3)).astype(np.float32)
    _assert_special(model, net, values)


def test_integer_tensordot_stays_integer():
    """tf.tensordot computes int32 in int32 (exact), dot in float32 then casts back."""
    x = keras.Input((4, 3), dtype="int32")
    kernel = np.arange(-6, 6, dtype="int32").reshape(3, 4)
    model = keras.Model(x, [ops.tensordot(x, kernel, axes=1), ops.dot(x, kernel)])
    assert_to_torch(model, live=False, int_high=1000)


def test_norm_keepdims_with_negative_axes_is_refused():
    """Keras' TF backend re-inserts the SVD norms' kept dims at the raw (negative) axes of
    the reduced tensor: its output differs from its own declared shape."""
    x = keras.Input((3, 4))
    model = keras.Model(x, ops.norm(x, ord="nuc", axis=(-2, -1), keepdims=True))
    assert np.asarray(model(np.ones((2, 3, 4), np.float32))).shape != (2, 1, 1)
    with pytest.raises(crossport.UnsupportedLayerError, match="non-negative and ascending"):
        crossport.to_torch(model, (torch.randn(2, 3, 4),))


def test_new_linalg_ops_pickle_and_write_source(tmp_path):
    """The converted graph holds torch functions only (no lambda): it pickles, and its
    generated source rebuilds the same module, the run-time median count included."""
    x = keras.Input((6, 4))
    outs = [ops.norm(x, ord=o, axis=-1) for o in VECTOR_ORDS]
    outs += [ops.norm(x, ord="nuc", axis=(1, 2)), ops.normalize(x, axis=1),
             ops.dot(x, np.ones((4, 2), "float32")), ops.tensordot(x, x, axes=([0], [0])),
             ops.median(x, axis=1), ops.median(x), *ops.moments(x, axes=[1]), ops.ptp(x, 1)]
    conv = assert_to_torch(keras.Model(x, outs))
    loaded, written = reloaded(conv, tmp_path / "linalg_torch.py")
    for batch in (3, 4):
        args = (torch.randn(batch, 6, 4),)
        with torch.no_grad():
            want = conv.module(*args)
            torch.testing.assert_close(loaded(*args), want, rtol=0, atol=0, equal_nan=True)
            torch.testing.assert_close(written.build_model()(*args), want, rtol=0, atol=0,
                                       equal_nan=True)


# -- matrix ops: the LU / QR / Cholesky family (kops_matrix) and the SVD / eigen ops ----------

def _spd(x):
    """A batch of symmetric positive-definite matrices ``x x^T + n I``, built in the model."""
    n = x.shape[-2]
    return ops.matmul(x, ops.swapaxes(x, -1, -2)) + np.float32(n) * np.eye(n, dtype="float32")


def _conv4(x):
    return L.Conv2D(4, 1)(x)   # (3, 4, 4) -> held NCHW: the matrices (W, C) are permuted


MATRIX_OPS = {
    "inv-solve": ((5, 5), lambda x: [ops.inv(x), ops.solve(x, x[..., :2]),
                                     ops.solve(x, x[..., 0])]),
    "inv-solve-past-16-rows": ((17, 17), lambda x: [ops.inv(x), ops.solve(x, x[..., 3])]),
    "det-slogdet": ((5, 5), lambda x: [ops.det(x), *ops.slogdet(x), ops.det(x[:, :1, :1])]),
    "det-inv-qr-held-nchw": ((3, 4, 4), lambda x: [
        ops.det(_conv4(x)), *ops.slogdet(_conv4(x)), ops.inv(_conv4(x)), *ops.qr(_conv4(x))]),
    "cholesky-logdet": ((4, 4), lambda x: [
        ops.cholesky(_spd(x)), ops.cholesky(_spd(x), upper=True), ops.logdet(_spd(x)),
        ops.cholesky_inverse(ops.cholesky(_spd(x))),
        ops.cholesky_inverse(ops.cholesky(_spd(x), upper=True), upper=True)]),
    "solve-triangular": ((4, 4), lambda x: [
        ops.solve_triangular(x + 4 * np.eye(4, dtype="float32"), x[..., :2], lower=True),
        ops.solve_triangular(x + 4 * np.eye(4, dtype="float32"), x[..., 1])]),
    "qr": ((6, 4), lambda x: [*ops.qr(x), *ops.qr(x, mode="complete"), *ops.qr(_t(x)),
                              *ops.qr(_t(x), mode="complete")]),
    "eigh-svd-values": ((5, 3), lambda x: [
        ops.eigh(_spd(x))[0], ops.svd(x, compute_uv=False), ops.svd(x)[1],
        ops.svd(_t(x), full_matrices=False)[1]]),
    "pinv-matrix-rank": ((5, 3), lambda x: [
        ops.pinv(x), ops.pinv(_t(x), rcond=0.5), ops.matrix_rank(x),
        ops.matrix_rank(x, tol=1.0)]),
    "lstsq": ((5, 3), lambda x: [
        ops.lstsq(x[0], x[-1]), ops.lstsq(x[0], x[-1, :, 0]), ops.lstsq(x[0], x[-1], rcond=0.3),
        ops.lstsq(x[0], x[-1], rcond=-1.0)]),
    "lstsq-rows-at-run-time": ((3,), lambda x: ops.lstsq(x, ops.sum(x, axis=1))),
    "lu-factor": ((6, 6), lambda x: list(ops.lu_factor(x[0]))),
    "cdist-past-25-rows": ((30, 3), lambda x: [
        ops.cdist(x, x[:, :7]),
        ops.cdist(x, np.linspace(-1, 1, 15, dtype="float32").reshape(5, 3))]),
    "erfinv": ((4, 5, 3), lambda x: [ops.erfinv(ops.tanh(x)), ops.erfinv(ops.tanh(_conv(x)))]),
}


@pytest.mark.parametrize("shape, fn", MATRIX_OPS.values(), ids=MATRIX_OPS.keys())
def test_keras_matrix_ops(shape, fn):
    x = keras.Input(shape)
    assert_to_torch(keras.Model(x, fn(x)))


def test_matrix_ops_in_float64():
    """eps, the smallest normal float and TF's default rcond are the input dtype's: a column
    tail of 1e-25 is reflected and a singular value of 1e-8 kept in float64 (float32's
    thresholds would leave the one and drop the other)."""
    x = keras.Input((4, 4), dtype="float64")
    outs = [ops.inv(x), *ops.qr(x), ops.logdet(_spd(x)), ops.pinv(x), ops.matrix_rank(x),
            ops.erfinv(ops.tanh(x))]
    model = keras.Model(x, outs)
    net = assert_to_torch(model).module
    values = np.diag([1.0, 2.0, 1.0, 1e-8])[None]
    values[0, 1, 0] = 1e-25
    _assert_same_outcome(model, net, values)
    got = net(torch.from_numpy(values))
    assert float(got[1][0, 0, 0]) == -1.0 and int(got[5][0]) == 4


def _outcome(run):
    """The outputs as numpy arrays, or the exception's class if it raised."""
    try:
        return [np.asarray(o) for o in keras.tree.flatten(run())]
    except Exception as exc:  # TF's InvalidArgumentError / Keras' ValueError / torch's assert
        return type(exc)


def _assert_same_outcome(model, net, values, rtol=1e-4):
    """Keras and the module both raise on ``values`` or agree: NaN / ±inf in the same places,
    finite values within ``rtol`` of the largest."""
    want = _outcome(lambda: model(values))
    with torch.no_grad():
        got = _outcome(lambda: net(torch.from_numpy(values)))
    if isinstance(want, type) or isinstance(got, type):
        assert isinstance(want, type) and isinstance(got, type), (want, got, values)
        return
    for i, (w, g) in enumerate(zip(want, got)):
        assert w.shape == g.shape and w.dtype == g.dtype, (i, w.shape, g.shape, g.dtype)
        for special in (np.isnan, np.isposinf, np.isneginf):
            np.testing.assert_array_equal(special(g), special(w), err_msg=f"output {i}")
        finite = np.isfinite(w)
        scale = max(1.0, float(np.abs(w[finite]).max(initial=0.0)))
        np.testing.assert_allclose(g[finite], w[finite], rtol=rtol, atol=rtol * scale,
                                   err_msg=f"output {i}")


def _special_matrices(n, count, seed, rate=0.1):
    """Normal, small-integer (ties, singular) and NaN / ±inf / 0 holding matrices."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((count, n, n)).astype(np.float32)
    integer = rng.random(count) < 0.4
    values[integer] = rng.integers(-2, 3, (int(integer.sum()), n, n))
    mask = rng.random(values.shape) < rate
    values[mask] = rng.choice(SPECIAL[:4], size=int(mask.sum()))
    return values


@pytest.mark.parametrize("n", [3, 12])
def test_lu_ops_special_values_one_matrix_at_a_time(n):
    """TF raises on a zero pivot of Eigen's LU or a NaN at ``a[0, 0]`` and returns NaN for a
    NaN elsewhere (torch.linalg.inv returns NaN for both); slogdet's sign of a NaN matrix is
    NaN (torch's 0); det is ``sign * exp(log|det|)``."""
    x = keras.Input((n, n))
    model = keras.Model(x, [ops.inv(x), ops.solve(x, x[..., 0]), ops.det(x), *ops.slogdet(x)])
    net = crossport.to_torch(model, (torch.randn(1, n, n),))
    for matrix in _special_matrices(n, 60, seed=n):
        _assert_same_outcome(model, net, matrix[None], rtol=1e-3)


# row 3 = 0.1 row 0 + 0.3 row 1 in float32: Eigen's last pivot is exactly 0
SINGULAR = np.array([[3, 0, -2, -2], [3, -3, 2, 1], [0, 2, 2, 0],
                     [1.2000000476837158, -0.9000000357627869, 0.40000003576278687,
                      0.10000000894069672]], np.float32)


def test_singular_matrix_has_eigens_zero_pivot():
    """torch's LU (MKL) leaves a rounding-sized last pivot here (det -2.5e-6), Eigen's is
    exactly 0: det 0, slogdet (0, -inf), and inv / solve / lu_factor raise as in TF."""
    assert torch.linalg.det(torch.from_numpy(SINGULAR)) != 0
    x = keras.Input((4, 4))
    values = keras.Model(x, [ops.det(x), *ops.slogdet(x)])
    net = crossport.to_torch(values, (torch.randn(1, 4, 4),))
    _assert_same_outcome(values, net, SINGULAR[None])
    assert float(net(torch.from_numpy(SINGULAR[None]))[0][0]) == 0.0
    overflowing = np.diag([1e30, 1e30, 0, 1]).astype(np.float32)[None]  # a product: inf * 0
    _assert_same_outcome(values, net, overflowing)
    for op in (ops.inv, lambda m: ops.solve(m, m[..., 0]), lambda m: ops.lu_factor(m[0])):
        model = keras.Model(x, op(x))
        net = crossport.to_torch(model, (torch.randn(1, 4, 4),))
        _assert_same_outcome(model, net, SINGULAR[None])


def test_lu_factor_pivots_on_ties_and_nan():
    """Small-integer matrices tie for the pivot: Eigen takes the first largest, and its
    update (rounded twice, no FMA) keeps the ties that MKL's fused update breaks; a NaN is
    passed over unless it comes first; the pivots are the inverse of TF's row permutation,
    int32."""
    x = keras.Input((6, 6))
    model = keras.Model(x, list(ops.lu_factor(x[0])))
    net = crossport.to_torch(model, (torch.randn(1, 6, 6),))
    rng = np.random.default_rng(0)
    for _ in range(40):
        matrix = rng.integers(-3, 4, (1, 6, 6)).astype(np.float32)
        _assert_same_outcome(model, net, matrix, rtol=0)
    for matrix in _special_matrices(6, 30, seed=6):  # a NaN is a pivot only at the top
        _assert_same_outcome(model, net, matrix[None], rtol=0)


def test_cholesky_family_special_values():
    """cholesky reads the lower triangle and raises (Keras' check_numerics) where TF's factor
    is NaN or inf; cholesky_inverse reads only its factor's triangle; logdet is Eigen's
    LLT: NaN for a matrix that is not positive-definite (torch.logdet is the LU's), inf for
    an inf on the diagonal (LAPACK makes NaN)."""
    x = keras.Input((3, 3))
    example = (torch.eye(3)[None] * 2,)   # (fresh random check inputs are not PD)
    logdet = keras.Model(x, ops.logdet(x))
    net = crossport.to_torch(logdet, example, check_inputs=0)
    cholesky = keras.Model(x, [ops.cholesky(x), ops.cholesky(x, upper=True),
                               ops.cholesky_inverse(x), ops.cholesky_inverse(x, upper=True)])
    chol_net = crossport.to_torch(cholesky, example, check_inputs=0)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 3)).astype(np.float32)
    spd = a @ a.T + 3 * np.eye(3, dtype=np.float32)
    upper_garbage = spd + np.triu(rng.standard_normal((3, 3)).astype(np.float32), 1)
    not_pd = np.array([[1, 2, 0], [2, 1, 0], [0, 0, 1]], np.float32)  # det -3: logdet NaN
    inf_diagonal = spd.copy()
    inf_diagonal[0, 0] = np.inf
    nan_lower = spd.copy()
    nan_lower[2, 1] = np.nan
    for matrix in (spd, upper_garbage, not_pd, inf_diagonal, nan_lower, -spd):
        _assert_same_outcome(logdet, net, matrix[None])
        _assert_same_outcome(cholesky, chol_net, matrix[None])
    assert np.isnan(logdet(not_pd[None])).all() and np.isposinf(logdet(inf_diagonal[None]))


def test_qr_special_values():
    """Eigen leaves a column whose tail's squared norm is below the smallest normal float
    unreflected (a 1e-20-scaled matrix: Q = I, where LAPACK reflects), and NaN / inf spread
    as its reflections spread them (reduced Q all NaN, a wide matrix's trailing columns by
    its block update); tall, square and wide, both modes."""
    rng = np.random.default_rng(2)
    for m, n in ((5, 3), (4, 4), (3, 6)):
        x = keras.Input((m, n))
        model = keras.Model(x, [*ops.qr(x), *ops.qr(x, mode="complete")])
        net = crossport.to_torch(model, (torch.randn(1, m, n),))
        for kind in range(7):
            values = rng.standard_normal((4, m, n)).astype(np.float32)
            if kind == 0:
                values *= np.float32(1e-20)
            if kind >= 2:
                mask = rng.random(values.shape) < 0.08
                values[mask] = rng.choice(SPECIAL[:3], size=int(mask.sum()))
            if kind in (1, 6):  # zero tails: tau = 0, the reflection is skipped (NaN kept)
                values = np.triu(values)
            _assert_same_outcome(model, net, values)
    tiny = (rng.standard_normal((1, 3, 3)) * 1e-20).astype(np.float32)
    np.testing.assert_array_equal(net(torch.from_numpy(tiny))[2][0].numpy(), np.eye(3))


def test_svd_ops_special_values():
    """TF's SVD of a matrix holding NaN or inf is all NaN (torch's raises): NaN singular
    values and pinv, rank 0, the rest of the batch kept; pinv's default cut-off is TF's
    ``10 max(m, n) eps`` (torch's is ten times smaller: s = 1e-6 here is dropped)."""
    x = keras.Input((3, 3))
    model = keras.Model(x, [ops.svd(x, compute_uv=False), ops.pinv(x), ops.matrix_rank(x),
                            ops.lstsq(x[0], x[-1])])
    net = crossport.to_torch(model, (torch.randn(2, 3, 3),))
    rng = np.random.default_rng(3)
    values = rng.standard_normal((3, 3, 3)).astype(np.float32)
    values[1, 0, 2] = np.nan
    _assert_same_outcome(model, net, values)
    near_singular = np.diag([1.0, 0.5, 1e-6]).astype(np.float32)[None]
    _assert_same_outcome(model, net, np.concatenate([near_singular, values[:1]]), rtol=1e-3)
    assert np.abs(net(torch.from_numpy(near_singular))[1].numpy()).max() < 3
    rank_one = np.outer([1, 2, 3], [1, -1, 2]).astype(np.float32)[None]
    _assert_same_outcome(model, net, np.concatenate([values[:1], rank_one]), rtol=1e-3)


def test_lstsq_cut_off_keeps_a_singular_value_at_it():
    """Keras' TF lstsq keeps ``s >= rcond * s[0]`` (s = 1 with rcond 0.5 and s[0] = 2)."""
    x = keras.Input((3, 3))
    model = keras.Model(x, [ops.lstsq(x[0], x[-1], rcond=0.5), ops.pinv(x, rcond=0.5)])
    net = crossport.to_torch(model, (torch.randn(2, 3, 3),))
    values = np.stack([np.diag([2.0, 1.0, 0.5]), np.ones((3, 3))]).astype(np.float32)
    _assert_same_outcome(model, net, values)
    assert net(torch.from_numpy(values))[0][1, 1] == 1.0


def test_eigh_nan_or_inf_raises():
    """TF's eigensolver raises on a NaN in the lower triangle ('Self-adjoint eigen
    decomposition was not successful'); the module raises on any NaN / inf there (TF returns
    NaN instead on a few such matrices) and ignores the upper triangle."""
    x = keras.Input((3, 3))
    model = keras.Model(x, ops.eigh(x)[0])
    net = crossport.to_torch(model, (torch.eye(3)[None],))
    matrix = np.arange(9, dtype=np.float32).reshape(1, 3, 3)
    _assert_same_outcome(model, net, matrix)
    matrix[0, 0, 2] = np.nan   # upper: unread
    _assert_same_outcome(model, net, matrix)
    matrix[0, 2, 0] = np.nan
    _assert_same_outcome(model, net, matrix)


def test_erfinv_and_cdist_special_values():
    """TF's erfinv is ``ndtri((x + 1) / 2) / sqrt(2)``: 19% high at 1e-7, inf at 1 - 2**-24,
    +0 at -0; cdist past 25 rows keeps an inf (torch.cdist's matmul form makes NaN)."""
    x = keras.Input((30,))
    model = keras.Model(x, [ops.erfinv(x), ops.cdist(x[:, :, None], x[:, :, None])])
    net = crossport.to_torch(model, (torch.rand(1, 30),))
    points = np.array([0, -0.0, 1e-7, -1e-7, 1 - 2**-24, -(1 - 2**-24), 1, -1, 1.0000001, 2,
                       np.nan, np.inf, -np.inf, 0.5, -0.3, 0.999, 1e-30, 1e-45, 0.25, 0.75,
                       -0.75, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9, 0.95], np.float32)
    _assert_same_outcome(model, net, points[None], rtol=1e-6)
    got = net(torch.from_numpy(points[None]))[0][0].numpy()
    assert np.isposinf(got[4]) and not np.signbit(got[1])


def test_eigenvectors_and_singular_vectors_are_refused_when_read():
    """Their signs are Eigen's: reading them refuses the op; the values alone convert."""
    x = keras.Input((3, 3))
    assert_to_torch(keras.Model(x, ops.eigh(_spd(x))[0]))
    for read in (lambda: ops.eigh(_spd(x))[1], lambda: ops.svd(x)[0],
                 lambda: ops.svd(x)[2] * 2.0):
        with pytest.raises(crossport.UnsupportedLayerError, match="up to sign"):
            crossport.to_torch(keras.Model(x, read()), (torch.randn(2, 3, 3),))


def test_matrix_ops_beyond_eigens_unblocked_sizes_are_refused():
    """Eigen blocks QR from 48 reflectors and LU past 16 rows; lu_factor of a batch fails in
    Keras' TF backend (tf.math.invert_permutation takes one permutation)."""
    cases = [((48, 48), lambda x: ops.qr(x)[1], "blocks of 48"),
             ((17, 17), lambda x: ops.lu_factor(x[0])[0], "17x17"),
             ((4, 4), lambda x: ops.lu_factor(x)[0], "invert_permutation")]
    for shape, fn, reason in cases:
        x = keras.Input(shape)
        with pytest.raises(crossport.UnsupportedLayerError, match=reason):
            crossport.to_torch(keras.Model(x, fn(x)), (torch.randn(2, *shape),))


def test_matrix_ops_pickle_and_write_source(tmp_path):
    """The emulated TF algorithms are torch calls in the graph (no crossport function, no
    lambda): the module pickles and its written source rebuilds it, the raising checks
    included."""
    x = keras.Input((4, 4))
    outs = [ops.inv(x), *ops.slogdet(x), *ops.qr(x[:, :, :3]), ops.logdet(_spd(x)),
            ops.cholesky(_spd(x)), ops.pinv(x), ops.erfinv(ops.tanh(x)), ops.cdist(x, x)]
    conv = assert_to_torch(keras.Model(x, outs))
    loaded, written = reloaded(conv, tmp_path / "matrix_torch.py")
    args = (torch.randn(3, 4, 4),)
    with torch.no_grad():
        want = conv.module(*args)
        torch.testing.assert_close(loaded(*args), want, rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(written.build_model()(*args), want, rtol=0, atol=0,
                                   equal_nan=True)
        with pytest.raises(AssertionError, match="not invertible"):
            written.build_model()(torch.zeros(1, 4, 4))
