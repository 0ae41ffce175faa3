"""Bitwise ops, shifts, cumulative extremes, medians, round(decimals) and empty reductions
on the LiteRT interpreter: builtin-only files that give torch's values on the extremes, or a
clear refusal at export."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import crossport
from crossport.export.formats import load_tflite, tflite_op_names
from tests.ops.opcases import Fn
from tests.ops.test_bitwise import with_counts


def _export_and_run(module, example, inputs, path):
    """Export ``module`` converted on ``example``; its outputs on ``inputs`` on LiteRT."""
    conversion = crossport.convert_with_report(module.eval(), example)
    result = crossport.export(conversion, path)
    assert result.passed
    assert "CUSTOM" not in tflite_op_names(path)
    names = [t.name for t in conversion.model.inputs]
    return load_tflite(path, names)([x.numpy() for x in inputs])


def _torch_outputs(module, inputs):
    with torch.no_grad():
        out = module(*inputs)
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


def _assert_no_builtin(module, args, tf_op, aten, path):
    """Exporting ``module`` is an ExportError naming TF's ``tf_op``, the ``aten`` op it came
    from and its source line; nothing is left in ``path``'s folder."""
    conversion = crossport.convert_with_report(module.eval(), args)
    with pytest.raises(crossport.ExportError,
                       match=rf"no TFLite builtin: .*{tf_op}.* \(from aten\.{aten} in "
                             r"<root module> \(.*\.py:\d+"):
        crossport.export(conversion, path)
    assert list(path.parent.iterdir()) == []


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.int8])
def test_xor_not_and_right_shift_export_as_builtins(dtype, tmp_path):
    """BITWISE_XOR and RIGHT_SHIFT builtins (not as x ^ ~0), counts out of range included:
    torch's sign fill, not LiteRT's own rule for them."""
    module = Fn(lambda a, b: (a ^ b, ~a, a >> b, a >> 3, torch.bitwise_right_shift(a, 40)))
    args = with_counts(dtype)
    got = _export_and_run(module, args, args, tmp_path / "m.tflite")
    assert {"BITWISE_XOR", "RIGHT_SHIFT"} <= set(tflite_op_names(tmp_path / "m.tflite"))
    for g, w in zip(got, _torch_outputs(module, args), strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("fn, tf_op, aten", [
    (lambda a, b: a & b, "BitwiseAnd", "__and__"),
    (lambda a, b: torch.bitwise_or(a, b), "BitwiseOr", "bitwise_or"),
    (lambda a, b: a << b, "LeftShift", "__lshift__"),
    (lambda a, b: (a >> b).long() ^ b.long(), "BitwiseXor", "__xor__"),
], ids=["and", "or", "left-shift", "int64-xor"])
def test_bitwise_ops_without_a_builtin_are_refused_at_export(fn, tf_op, aten, tmp_path):
    """LiteRT has no AND/OR/LEFT_SHIFT builtin and no 64-bit XOR: a clear ExportError
    naming the torch op and its source line, no file."""
    _assert_no_builtin(Fn(fn), with_counts(torch.int32), tf_op, aten, tmp_path / "m.tflite")


def _specials(n=12):
    s = torch.tensor([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -3.0, 1e-30, 100.0, 2.0, 2.0,
                      -3.0])[:n]
    return s.repeat_interleave(n).reshape(n, n), s.repeat(n).reshape(n, n)


def _order_stats(a, b):
    return (*torch.cummax(a, 0), *torch.cummin(b, 1), *a.median(1), *b.median(0),
            b.nanmedian(1).values, a.median(), b[:, 1:].nanmedian())


def test_cummax_cummin_and_medians_match_torch_on_litert(tmp_path):
    """The scan (slices, concat, select) and the sorted gather run as builtins; NaN, +-inf
    and ties give torch's values and indices."""
    example = (torch.randn(12, 12), torch.randn(12, 12))
    got = _export_and_run(Fn(_order_stats), example, _specials(), tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(Fn(_order_stats), _specials()), strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("decimals", [2, -1])
def test_round_decimals_is_refused_at_tflite_export(decimals, tmp_path):
    """LiteRT's file divides by 10**n as a multiplication by the rounded reciprocal
    (``round(3.65, 1)`` gave 3.6499999): refused before writing, naming the op."""
    module = Fn(lambda x: torch.round(x * 3, decimals=decimals))
    conversion = crossport.convert_with_report(module.eval(), (torch.randn(4, 5),))
    with pytest.raises(crossport.ExportError, match=r"round\(x, decimals=n\) has no exact "
                                                    r"TFLite form.*aten.round.decimals"):
        crossport.export(conversion, tmp_path / "m.tflite")
    assert list(tmp_path.iterdir()) == []


def test_an_empty_output_is_refused_at_tflite_export(tmp_path):
    """The amax of an empty tensor over a non-empty dim is empty: LiteRT could not load the
    file ("Invalid tensor size"); refused before writing, naming the output."""
    module = Fn(lambda x: (x.sum(1), x[:, :0].amax(0)))
    conversion = crossport.convert_with_report(module.eval(), (torch.randn(3, 4),))
    with pytest.raises(crossport.ExportError, match=r"no elements.*output 1 of shape \(0,\)"):
        crossport.export(conversion, tmp_path / "m.tflite")
    assert list(tmp_path.iterdir()) == []


def test_reductions_over_an_empty_dim_match_torch_on_litert(tmp_path):
    """sum 0, prod 1, mean NaN, any False, all True over an empty dim, on LiteRT."""
    def fn(x):
        e = x[:, :0]
        return (e.sum(1), e.prod(1), e.mean(1), (e > 0).any(1), (e > 0).all(1), e.var(1),
                (e * 10).int().sum(1))

    x = torch.randn(3, 4)
    got = _export_and_run(Fn(fn), (x,), (x,), tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(Fn(fn), (x,)), strict=True):
        np.testing.assert_array_equal(g, w)


def _hyperbolic(x):
    return (torch.asin(x), torch.acos(x), torch.sinh(x), torch.cosh(x), torch.asinh(x),
            torch.acosh(x), torch.atanh(x))


def test_inverse_trig_and_hyperbolic_functions_match_torch_on_litert(tmp_path):
    """asin, acos, sinh, cosh, asinh, acosh and atanh (TF's kernels need Flex) composed from
    builtins: NaN, +-inf, +-0.0 and the domain edges give torch's values on LiteRT."""
    from tests.ops.test_hyperbolic import specials

    example = (torch.randn(4, 8),)
    got = _export_and_run(Fn(_hyperbolic), example, (specials(),), tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(Fn(_hyperbolic), (specials(),)), strict=True):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(np.isinf(g), np.isinf(w))
        # LiteRT's own EXP is ~60 ulps off at large arguments (76.9 vs float64), sinh/cosh
        # inherit it; the Keras model is within 4 ulps of float64 (tests/ops/test_hyperbolic)
        np.testing.assert_allclose(g, w, rtol=5e-6, atol=0)
        zeros = w == 0
        np.testing.assert_array_equal(np.signbit(g[zeros]), np.signbit(w[zeros]))


def test_erfc_is_refused_at_export(tmp_path):
    """TF's Erfc has no TFLite builtin: a clear ExportError naming aten.erfc, no file."""
    _assert_no_builtin(Fn(torch.erfc), (torch.randn(3, 4),), "Erfc", "erfc",
                       tmp_path / "m.tflite")


def _prod_var_mean(a, b):
    return (a.prod(), b[5:, 5:].prod(), a[:, 5:].prod(), *torch.var_mean(a, 1),
            *torch.std_mean(b[5:], 0, keepdim=True))


def test_prod_all_and_var_mean_match_torch_on_litert(tmp_path):
    """prod of every element (REDUCE_PROD) and var_mean/std_mean as builtins: NaN, +-inf
    and zeros give torch's values (the mean NaN where a slice holds an inf, as torch's)."""
    example = (torch.randn(12, 12), torch.randn(12, 12))
    got = _export_and_run(Fn(_prod_var_mean), example, _specials(), tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(Fn(_prod_var_mean), _specials()), strict=True):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)  # var of a constant: ~1e-7


def _diagonals(a, b):
    return (torch.diagonal(a, 1), torch.diag(b, -2), torch.trace(a[3:, 3:]),
            torch.trace(b[:2, :2]), torch.diagonal(a.reshape(3, 4, 12), 0, 2, 0))


def test_diagonal_diag_and_trace_match_torch_on_litert(tmp_path):
    """diagonal/diag/trace as one GATHER (TF's MatrixDiagPart has no builtin): NaN, +-inf
    and signed zeros pass through, trace sums them as torch does."""
    example = (torch.randn(12, 12), torch.randn(12, 12))
    got = _export_and_run(Fn(_diagonals), example, _specials(), tmp_path / "m.tflite")
    assert "GATHER" in tflite_op_names(tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(Fn(_diagonals), _specials()), strict=True):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(np.signbit(g[w == 0]), np.signbit(w[w == 0]))


def _routing(x, probes):
    """transformers' expert routing: top-2 expert ids sorted ascending (int64), counted
    with histc; and histc where its rounding decides the bin."""
    ids, order = torch.sort(torch.topk(x, 2).indices.reshape(-1))
    counts = torch.histc(ids.float(), bins=4, min=0, max=3)
    return ids, order, torch.argsort(x, dim=0), counts, torch.histc(probes, 7, -1.3, 2.9)


def test_int64_ascending_sort_and_histc_match_torch_on_litert(tmp_path):
    """An ascending sort of int64 keys reversed them with a 64-bit XOR (no builtin: the
    export was refused); -1 - key is the same bits as a SUB. histc's bins are comparisons
    with constants, so LiteRT bins edge values as torch does."""
    from tests.ops.test_experts import edge_probes

    example = (torch.randn(6, 4), edge_probes(7, -1.3, 2.9)[0])
    inputs = (torch.randn(6, 4, generator=torch.Generator().manual_seed(3)), example[1])
    got = _export_and_run(Fn(_routing), example, inputs, tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(Fn(_routing), inputs), strict=True):
        np.testing.assert_array_equal(g, w)


def _assert_grid_samples_match(module, example, args, mode, path):
    """grid_sample's outputs on LiteRT against torch: NaN/inf positions exactly, nearest
    values exactly, interpolated values to rounding (torch sums the taps with FMAs, LiteRT
    without)."""
    got = _export_and_run(module, example, args, path)
    for g, w in zip(got, _torch_outputs(module, args), strict=True):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(np.isinf(g), np.isinf(w))
        finite = np.isfinite(w)
        if mode == "nearest":
            np.testing.assert_array_equal(g[finite], w[finite])
        else:
            np.testing.assert_allclose(g[finite], w[finite], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_matches_torch_on_litert(mode, tmp_path):
    """grid_sample from builtins (FLOOR, ROUND, GATHER, SELECT ...): NaN/+-inf/huge grid
    positions, NaN/inf pixels and the nearest tie torch decides with an FMA give torch's
    values on LiteRT, for every padding and align_corners."""
    from tests.ops.test_sampling import PADDINGS, special_grid, special_image

    module = Fn(lambda x, g: tuple(
        F.grid_sample(x, g, mode=mode, padding_mode=p, align_corners=a)
        for p in PADDINGS for a in (False, True)))
    example = (torch.randn(2, 3, 5, 97), torch.rand(2, 22, 22, 2) * 2 - 1)
    args = (special_image(), special_grid())
    _assert_grid_samples_match(module, example, args, mode, tmp_path / "m.tflite")


def _scatter_reductions(x, s):
    from tests.ops.test_segment import REDUCTIONS, special_index

    index = special_index()
    reductions = [r for r in REDUCTIONS if x.dtype != torch.bool or r != "mean"]
    return (tuple(x.scatter_reduce(0, index, s, r, include_self=i)
                  for r in reductions for i in (True, False))
            + tuple(x.index_reduce(1, torch.tensor([0, 2, 2, 5, 0, 5]), s, r)
                    for r in reductions if r != "sum")
            + tuple(x.scatter(0, index, v, reduce=r) for r in ("add", "multiply")
                    for v in (s, 2)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
def test_scatter_and_index_reduce_match_torch_on_litert(dtype, tmp_path):
    """UNSORTED_SEGMENT_SUM/PROD/MAX/MIN: NaN, +-inf (targets receiving only -inf or
    only +inf), integer floor means and bool or/and give torch's values on LiteRT (also
    through Tensor.scatter(reduce='add' | 'multiply'))."""
    from tests.ops.test_segment import SPECIAL

    if dtype == torch.float32:
        args = (torch.tensor(SPECIAL).flip(0), torch.tensor(SPECIAL))
    else:
        gen = torch.Generator().manual_seed(0)
        args = tuple(torch.randint(-5, 5, (4, 6), generator=gen).to(dtype) for _ in range(2))
    example = tuple((torch.randn(4, 6) * 3).to(dtype) for _ in range(2))
    got = _export_and_run(Fn(_scatter_reductions), example, args, tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(Fn(_scatter_reductions), args), strict=True):
        # a mean's division by a count folded to a constant is a multiplication by its
        # reciprocal in the file: one ulp (2.3333335 for 7/3)
        np.testing.assert_allclose(g, w, rtol=2e-7, atol=0)


def test_int64_scatter_reduce_is_refused_at_export(tmp_path):
    """LiteRT's segment ops take no int64: an ExportError naming aten.scatter_reduce, no
    file."""
    module = Fn(lambda x, s: x.scatter_reduce(0, torch.tensor([[0, 1], [0, 0]]), s, "amax"))
    args = (torch.arange(6).reshape(3, 2), torch.arange(4).reshape(2, 2))
    _assert_no_builtin(module, args, "UnsortedSegmentMax", "scatter_reduce",
                       tmp_path / "m.tflite")


def test_embedding_bag_matches_torch_on_litert(tmp_path):
    """Bags as UNSORTED_SEGMENT_* ops: sum, mean and max with padding, empty bags,
    NaN/+-inf rows (max's first-entry NaN rule) on LiteRT. The table is an input: an
    infinite weight would be saturated by the TFLite converter (the export's re-check
    refuses that file)."""
    weight = torch.tensor([[np.nan, 1.0], [2.0, np.nan], [3.0, 4.0], [-np.inf, -np.inf],
                           [0.0, np.inf], [5.0, -1.0]])
    offsets = torch.tensor([0, 2, 2, 4, 6, 8, 11])

    def bags(table, indices):
        return tuple(F.embedding_bag(indices, table, offsets, mode=m, padding_idx=p)
                     for m in ("sum", "mean", "max") for p in (None, 4))

    indices = torch.tensor([0, 2, 2, 0, 1, 2, 3, 3, 4, 0, 2, 1, 5])
    args = (weight, indices)
    got = _export_and_run(Fn(bags), (torch.randn(6, 2), indices), args, tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(Fn(bags), args), strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-7, atol=0)


def test_functional_embedding_bag_with_a_parameter_table_exports(tmp_path):
    """F.embedding_bag in forward (no module path): its Embedding layer was named after the
    op, ``_embedding_bag``, and TF refused the weight scope ``_embedding_bag/embeddings``."""
    module = Fn(lambda self, i: F.embedding_bag(i, self.weight, mode="mean"),
                weight=torch.randn(10, 3))
    indices = torch.randint(0, 10, (4, 5))
    got = _export_and_run(module, (indices,), (indices,), tmp_path / "m.tflite")
    np.testing.assert_allclose(got[0], _torch_outputs(module, (indices,))[0], rtol=1e-6)


def test_cdist_matches_torch_on_litert(tmp_path):
    """cdist's direct form from builtins (SUB, ABS, SUM, SQRT, POW, REDUCE_MAX): every p on
    NaN/+-inf/huge coordinates, the inf-norm skipping NaN as torch's running max does."""
    from tests.ops.test_linalg import CDIST_P

    nan, inf = np.nan, np.inf
    a = torch.tensor([[nan, 0.0, 0.0], [1.0, inf, -inf], [0.0, 0.0, 0.0], [nan, nan, nan],
                      [2.0, -0.0, 1e30], [0.5, -2.0, 3.0]])
    b = torch.tensor([[1.0, inf, 0.0], [0.0, 0.0, 0.0], [-1e30, 3.0, nan], [0.25, 1.0, -1.0]])
    module = Fn(lambda x, y: tuple(torch.cdist(x, y, p=p) for p in CDIST_P))
    got = _export_and_run(module, (torch.randn(6, 3), torch.randn(4, 3)), (a, b),
                          tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(module, (a, b)), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=0)


def _scans_and_searches(a, b):
    boundaries = torch.tensor([-np.inf, -1.0, 0.0, 0.0, 0.5, 2.0, np.inf, np.nan])
    return (torch.logcumsumexp(a, 1), torch.logcumsumexp(b, 0), a.kthvalue(3, 1).values,
            b.kthvalue(12, 0).values, torch.searchsorted(boundaries, a),
            torch.bucketize(b, boundaries, right=True, out_int32=True),
            torch.searchsorted(b.sort(1).values, a[:, :4].contiguous(), side="right"))


def test_logcumsumexp_kthvalue_and_searchsorted_match_torch_on_litert(tmp_path):
    """The doubling scan (slices, MAXIMUM/MINIMUM, EXP, LOG, SELECT), the k-smallest
    TOPK_V2 and the binary search (GATHER, comparisons, SELECT) as builtins: NaN, +-inf and
    ties give torch's values and positions."""
    example = (torch.randn(12, 12), torch.randn(12, 12))
    module = Fn(_scans_and_searches)
    got = _export_and_run(module, example, _specials(), tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(module, _specials()), strict=True):
        if w.dtype.kind == "f":
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=0)
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("fn, tf_op, aten", [
    (torch.linalg.inv, "MatrixInverse", "linalg_inv_ex"),
    (lambda a: torch.linalg.solve(a, a[..., :1]), "MatrixSolve", "_linalg_solve_ex"),
    (torch.linalg.det, "MatrixDeterminant", "_linalg_det"),
    (lambda a: torch.linalg.slogdet(a)[1], "LogMatrixDeterminant", "_linalg_slogdet"),
    (lambda a: torch.linalg.inv_ex(a).info, "MatrixInverse", "linalg_inv_ex"),
    (lambda a: torch.linalg.cholesky(a @ a.mT), "Cholesky", "linalg_cholesky_ex"),
    (lambda a: torch.cholesky(a @ a.mT), "Cholesky", "cholesky"),
    (lambda a: torch.linalg.solve_triangular(a, a, upper=True), "MatrixTriangularSolve",
     "linalg_solve_triangular"),
    (lambda a: torch.triangular_solve(a, a)[0], "MatrixTriangularSolve", "triangular_solve"),
    (torch.linalg.eigvalsh, "SelfAdjointEigV2", "_linalg_eigh"),
    (torch.linalg.pinv, "Svd", "linalg_pinv"),
    (lambda a: torch.linalg.pinv(a @ a.mT, hermitian=True), "SelfAdjointEigV2",
     "linalg_pinv"),
    (torch.matrix_exp, "MatrixSolve", "linalg_matrix_exp"),
    (lambda a: torch.linalg.qr(a).Q, "Qr", "linalg_qr"),
    (lambda a: torch.linalg.lu_factor(a).LU, "MatrixInverse", "linalg_lu_factor_ex"),
    (lambda a: torch.linalg.lu_solve(*torch.linalg.lu_factor_ex(a)[:2], a),
     "MatrixTriangularSolve", "linalg_lu_solve"),
], ids=["inv", "solve", "det", "slogdet", "inv-ex-info", "cholesky", "torch-cholesky", "solve-triangular", "triangular-solve", "eigvalsh", "pinv",
        "pinv-hermitian", "matrix-exp", "qr", "lu-factor-raising", "lu-solve"])
def test_matrix_kernels_are_refused_at_export(fn, tf_op, aten, tmp_path):
    """TFLite has no builtin for TF's LU-based matrix kernels, Cholesky, triangular solves,
    eigensolvers or SVD: an ExportError naming the torch op and its line, no file."""
    matrices = torch.randn(2, 3, 3) * 0.1 + torch.eye(3)
    _assert_no_builtin(Fn(fn), (matrices,), tf_op, aten, tmp_path / "m.tflite")


def test_cholesky_ex_matches_torch_on_litert(tmp_path):
    """cholesky_ex is built column by column from builtins (no Cholesky kernel): on LiteRT
    its info and partial factors of matrices that are not positive-definite are torch's."""
    from tests.ops.test_factor import _failing_matrices

    module = Fn(lambda a: (*torch.linalg.cholesky_ex(a),
                           torch.linalg.cholesky_ex(a.mT, upper=True).L))
    got = _export_and_run(module, (_failing_matrices(),), (_failing_matrices(),),
                          tmp_path / "m.tflite")
    want = _torch_outputs(module, (_failing_matrices(),))
    np.testing.assert_array_equal(got[1], want[1])
    for g, w in zip(got[::2], want[::2], strict=True):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_lu_factor_ex_linalg_lu_and_lu_unpack_match_torch_on_litert(tmp_path):
    """The LU elimination is builtins (float32 throughout): on LiteRT the pivots, info
    and NaN/±inf positions of NaN, inf, singular and tied matrices are torch's."""
    from tests.ops.test_lu import _special_matrices

    module = Fn(lambda a: (*torch.linalg.lu_factor_ex(a), *torch.linalg.lu(a),
                           *torch.lu_unpack(*torch.linalg.lu_factor_ex(a.mT)[:2])))
    special = _special_matrices(4, 4, torch.float32)
    got = _export_and_run(module, (torch.randn(20, 4, 4),), (special,), tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(module, (special,)), strict=True):
        if w.dtype.kind != "f":
            np.testing.assert_array_equal(g, w)
            continue
        for test in (np.isnan, np.isposinf, np.isneginf):
            np.testing.assert_array_equal(test(g), test(w))
        finite = np.isfinite(w)
        np.testing.assert_allclose(g[finite], w[finite], rtol=1e-5, atol=1e-6)


def test_householder_product_matches_torch_on_litert(tmp_path):
    """org2r step by step from builtins: LAPACK's NaN/±inf positions on LiteRT too."""
    from tests.ops.test_factor import _householder_specials

    module = Fn(torch.linalg.householder_product)
    special = _householder_specials(6, 4, torch.float32)
    got = _export_and_run(module, (torch.randn(13, 6, 4), torch.rand(13, 4)), special,
                          tmp_path / "m.tflite")[0]
    want = _torch_outputs(module, special)[0]
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(got), test(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-5)


def test_lgamma_matches_torch_on_litert(tmp_path):
    """The TFLite converter lowers TF's Lgamma to builtins (a Lanczos series: LOG, SIN,
    FLOOR, SELECT ...): the poles, +-inf and NaN give torch's values; finite values are
    within 5e-6 relative of torch's (LiteRT's series, measured at most 4.4e-6 from float64
    on [-30, 60] where torch float32 is 6e-8; the export's check accepts it as rounding)."""
    from tests.ops.test_gamma import SPECIALS

    x = torch.tensor(SPECIALS["lgamma"]).reshape(2, 13)
    got = _export_and_run(Fn(torch.lgamma), (torch.rand(2, 13) * 5,), (x,),
                          tmp_path / "m.tflite")[0]
    want = torch.lgamma(x).numpy()
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(got), test(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=5e-6, atol=1e-6)


@pytest.mark.parametrize("fn, tf_op, aten", [
    (torch.digamma, "Digamma", "digamma"), (torch.erfinv, "Erf", "erfinv"),
], ids=["digamma", "erfinv"])
def test_digamma_and_erfinv_are_refused_at_export(fn, tf_op, aten, tmp_path):
    """TF's Digamma and the float64 Erf of erfinv's Newton steps have no TFLite builtin:
    an ExportError naming the torch op, no file."""
    _assert_no_builtin(Fn(fn), (torch.rand(3, 4) * 0.9,), tf_op, aten, tmp_path / "m.tflite")


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d_matches_torch_on_litert(mode, tmp_path):
    """The 3-D kernel's rules (NaN to the last voxel, -100 for positions past the int range,
    reflection by fmod) from builtins: torch's NaN/inf positions and nearest voxels on
    LiteRT for every padding and align_corners."""
    from tests.ops.test_sampling import PADDINGS, special_grid_3d, special_volume

    module = Fn(lambda x, g: tuple(
        F.grid_sample(x, g, mode=mode, padding_mode=p, align_corners=a)
        for p in PADDINGS for a in (False, True)))
    args = (special_volume(), special_grid_3d())
    example = (torch.randn(args[0].shape), torch.rand(args[1].shape) * 2 - 1)
    _assert_grid_samples_match(module, example, args, mode, tmp_path / "m.tflite")


def _aliases_and_signbit(x, n):
    return (torch.view_copy(x, (4, -1)), torch.permute_copy(x, (1, 0)),
            *torch.unbind_copy(x[:2], 0), torch.narrow_copy(x, 1, -3, 2), torch.signbit(x),
            torch.signbit(n), torch.signbit(n > 0))


def test_copy_aliases_and_signbit_match_torch_on_litert(tmp_path):
    """view/permute/unbind/narrow_copy, and signbit as a BITCAST: -0.0, -inf and a NaN with
    its sign bit set read negative on LiteRT as in torch; int32 as x < 0, bools False."""
    x = torch.cat([_specials()[0][0], torch.tensor([-float("nan"), -1e-45, 1e-45, 7.0])])
    x = x.reshape(4, 4)
    n = torch.tensor([[-2**31, -1, 0, 2**31 - 1]], dtype=torch.int32)
    module = Fn(_aliases_and_signbit)
    got = _export_and_run(module, (torch.randn(4, 4), n - 5), (x, n), tmp_path / "m.tflite")
    assert "BITCAST" in tflite_op_names(tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(module, (x, n)), strict=True):
        np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))  # NaN bits too


def _products_and_distances(s, a, b):
    # infinite factors: a 2-D product with a run-time operand is a BATCH_MATMUL of one, not
    # FULLY_CONNECTED, which clamped an infinite result to +-FLT_MAX
    return (torch.addmv(s[:, 0], a[0], b[0, :, 1], beta=0.5, alpha=2),
            torch.addmv(s[:, 1], a[1], b[1, :, 0], beta=0), a[0] @ b[0, :, 1],
            b[0, :, 1] @ b[0, :, 1], a[0] @ b[0],
            torch.addbmm(s, a, b, alpha=0), torch.addbmm(s, a, b.nan_to_num(), beta=-1),
            torch.conj_physical(s),
            *(torch.dist(a[0], b[0, :, :3], p) for p in (0, 0.5, 1, 2, 3, -1, math.inf, -math.inf)))


def test_addmv_addbmm_dist_match_torch_on_litert(tmp_path):
    """addmv/addbmm with torch's beta=0 / alpha=0 rules (NaN and inf left out), matrix and
    vector products with infinite factors (+-inf kept, not +-FLT_MAX) and dist for every p
    on special values (BATCH_MATMUL, SUM, POW ... builtins)."""
    from tests.ops.test_linear import _special_operands

    args = _special_operands()
    example = tuple(torch.randn(t.shape) for t in args)
    got = _export_and_run(Fn(_products_and_distances), example, args, tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(Fn(_products_and_distances), args), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=0)


def test_ldexp_matches_torch_on_litert(tmp_path):
    """ldexp by int64 exponents built from bits (BITCAST of a biased exponent, MUL): exact
    where torch's result is a normal number, 0, inf or NaN; wrapped exponents as torch's."""
    from tests.ops.test_special_values import with_exponents

    args = with_exponents()
    module = Fn(lambda a, e: (torch.ldexp(a, e), torch.ldexp(a, (e % 5).float() - 2)))
    example = (torch.randn(3, 4), torch.randint(-300, 300, (3, 4)))
    got = _export_and_run(module, example, args, tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(module, args), strict=True):  # subnormals flushed
        normal = ~((w != 0) & (np.abs(w) < np.finfo(np.float32).tiny))
        np.testing.assert_array_equal(g[normal].view(np.int32), w[normal].view(np.int32))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.int8, torch.uint8])
def test_gcd_lcm_match_torch_on_litert(dtype, tmp_path):
    """gcd/lcm near the type's limits (abs of the minimum, wrapping lcm, Euclid's slowest
    inputs) bit for bit on LiteRT: FLOOR_MOD, FLOOR_DIV, NEG, ABS, SELECT builtins."""
    from tests.ops.test_integer import gcd_lcm, number_theory_pairs

    args = number_theory_pairs(dtype)
    got = _export_and_run(Fn(gcd_lcm), args, args, tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(Fn(gcd_lcm), args), strict=True):
        np.testing.assert_array_equal(g, w)


def test_int64_gcd_exports_and_int64_lcm_is_refused(tmp_path):
    """int64 gcd needs FLOOR_MOD only (LiteRT has it); int64 lcm divides and takes abs,
    which LiteRT has no int64 kernels for: an ExportError naming aten.lcm, no file."""
    from tests.ops.test_integer import number_theory_pairs

    args = number_theory_pairs(torch.int64)
    got = _export_and_run(Fn(torch.gcd), args, args, tmp_path / "gcd" / "m.tflite")
    np.testing.assert_array_equal(got[0], torch.gcd(*args).numpy())
    (tmp_path / "lcm").mkdir()
    _assert_no_builtin(Fn(torch.lcm), args, "FloorDiv", "lcm", tmp_path / "lcm" / "m.tflite")


def test_nonzero_static_matches_torch_on_litert(tmp_path):
    """nonzero_static's coordinates (NaN counts, -0.0 does not; cut and filled rows) from
    CUMSUM, UNSORTED_SEGMENT_SUM, FLOOR_DIV/FLOOR_MOD builtins."""
    module = Fn(lambda x: (torch.nonzero_static(x, size=12),
                           torch.nonzero_static(x > 0, size=3, fill_value=9)))
    x = torch.tensor([[0.0, float("nan"), -0.0, float("inf")], [-1.0, 0.0, 2.0, 0.0],
                      [0.0, 0.0, 0.0, 1e-30]])
    got = _export_and_run(module, (torch.randn(3, 4),), (x,), tmp_path / "m.tflite")
    for g, w in zip(got, _torch_outputs(module, (x,)), strict=True):
        np.testing.assert_array_equal(g, w)


_S = torch.special


@pytest.mark.parametrize("fn, tf_op, aten", [
    (torch.i0, "BesselI0", "i0"),
    (_S.modified_bessel_i0, "BesselI0", "special_modified_bessel_i0"),
    (_S.i0e, "BesselI0e", "special_i0e"), (_S.i1, "BesselI1", "special_i1"),
    (_S.modified_bessel_i1, "BesselI1", "special_modified_bessel_i1"),
    (_S.i1e, "BesselI1e", "special_i1e"),
    (_S.modified_bessel_k0, "BesselK0", "special_modified_bessel_k0"),
    (_S.modified_bessel_k1, "BesselK1", "special_modified_bessel_k1"),
    (_S.scaled_modified_bessel_k0, "BesselK0e", "special_scaled_modified_bessel_k0"),
    (_S.scaled_modified_bessel_k1, "BesselK1e", "special_scaled_modified_bessel_k1"),
    (_S.bessel_j0, "BesselJ0", "special_bessel_j0"),
    (_S.bessel_j1, "BesselJ1", "special_bessel_j1"),
    (_S.bessel_y0, "BesselY0", "special_bessel_y0"),
    (_S.bessel_y1, "BesselY1", "special_bessel_y1"),
    (_S.ndtri, "Ndtri", "special_ndtri"), (_S.erfcx, "Erfc", "special_erfcx"),
    (lambda x: _S.gammainc(x, 2 * x), "Igamma", "igamma"),
    (lambda x: _S.gammaincc(x, 2 * x), "Igammac", "igammac"),
    (lambda x: _S.zeta(x + 2, x), "Zeta", "special_zeta"),
    (lambda x: torch.nextafter(x, 2 * x), "NextAfter", "nextafter"),
], ids=lambda v: v if isinstance(v, str) and v[0].islower() else "")
def test_special_functions_without_a_builtin_are_refused_at_export(fn, tf_op, aten,
                                                                    tmp_path):
    """TF's Bessel, Ndtri, Igamma(c), Zeta and NextAfter kernels and the float64 Erfc of
    erfcx have no TFLite builtin: an ExportError naming the torch op, no file."""
    _assert_no_builtin(Fn(fn), (torch.rand(3, 4) * 0.9 + 0.05,), tf_op, aten,
                       tmp_path / "m.tflite")


def test_log_ndtr_is_refused_at_export_naming_erfcx(tmp_path):
    """log_ndtr decomposes into erfcx (and float64 arithmetic around it): the refusal
    names aten.special_erfcx among the ops it comes from."""
    conversion = crossport.convert_with_report(Fn(_S.log_ndtr).eval(), (torch.randn(3, 4),))
    with pytest.raises(crossport.ExportError, match=r"no TFLite builtin: .*Erfc.*aten\."
                       r"special_erfcx in <root module> \(.*\.py:\d+"):
        crossport.export(conversion, tmp_path / "m.tflite")
    assert list(tmp_path.iterdir()) == []


def test_spherical_bessel_j0_matches_torch_on_litert(tmp_path):
    """spherical_bessel_j0 is keras.ops arithmetic (a series below |x| = 0.5, sin(x) / x
    above, 0 at +-inf): it exports, with torch's values on LiteRT."""
    x = torch.tensor([0.0, -0.0, 1e-6, 0.25, -0.4999, 0.5, 1.0, -3.0, 10.0, 100.0,
                      float("inf"), float("-inf"), float("nan"), 7.5]).reshape(2, 7)
    got = _export_and_run(Fn(_S.spherical_bessel_j0), (torch.randn(2, 7),), (x,),
                          tmp_path / "m.tflite")[0]
    want = _S.spherical_bessel_j0(x).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=1e-7)


def test_frexp_matches_torch_on_litert(tmp_path):
    """frexp reads |x|'s bits with a right shift, multiplies and adds (no bitwise and/or,
    which TFLite lacks): the file exports and LiteRT gives torch's mantissas and int32
    exponents bit for bit, at +-0.0, +-inf and NaN too."""
    from tests.ops.test_special_functions import FREXP_VALUES

    x = torch.tensor(FREXP_VALUES).reshape(2, 10)
    got = _export_and_run(Fn(torch.frexp), (torch.randn(2, 10) * 100,), (x,),
                          tmp_path / "m.tflite")
    mantissa, exponent = torch.frexp(x)
    np.testing.assert_array_equal(got[0], mantissa.numpy())
    np.testing.assert_array_equal(np.signbit(got[0]), np.signbit(mantissa.numpy()))
    np.testing.assert_array_equal(got[1], exponent.numpy())


def test_packed_sequence_lstm_matches_torch_on_litert(tmp_path):
    """pack_padded_sequence -> bidirectional LSTM -> pad_packed_sequence: the masked Keras
    LSTMs (and the sort by length) as builtins, right on lengths the example did not have."""
    from tests.ops.test_recurrent import Packed, lengths, rnn, seq

    module = Packed(rnn(torch.nn.LSTM, batch_first=True, bidirectional=True)).eval()
    inputs = (seq(True, n=3, t=6, seed=1), lengths(1, 6, 3))
    got = _export_and_run(module, (seq(True, n=3, t=6), lengths(6, 2, 4)), inputs,
                          tmp_path / "packed.tflite")
    with torch.no_grad():
        want = [t.numpy() for t in torch.utils._pytree.tree_leaves(module(*inputs))]
    assert len(got) == len(want) == 4
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, atol=1e-5)


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "conv-transpose"])
def test_modulated_convs_match_torch_on_litert(transposed, tmp_path):
    """StyleGAN2's modulated conv (a per-sample kernel, groups=batch) and its upsampling
    transposed conv: run-time kernels as builtin CONV_2D / TRANSPOSE_CONV on LiteRT."""
    from tests.ops.test_conv import Modulated

    torch.manual_seed(0)
    module = Modulated(transposed).eval()
    example = (torch.randn(2, 4, 5, 6), torch.randn(2, 5))
    fresh = (torch.randn(2, 4, 5, 6), torch.randn(2, 5))
    got = _export_and_run(module, example, fresh, tmp_path / "m.tflite")
    want = _torch_outputs(module, fresh)
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-5 * np.abs(want[0]).max())
