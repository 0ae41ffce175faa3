"""torch's own OpInfo samples: each either matches torch or is refused naming the op.

For every OpInfo below (``torch.testing._internal.common_methods_invocations.op_db``), its
first float32 samples and one sample of each of int64, int32 and bool it supports become
modules (``tests/ops/opinfo_support.py``); each must convert and match torch on the sample
and on a second seeded random input (shapes, dtypes, NaN/inf positions, values), or raise a
``CrossportError`` that names the op. Never silent (converted, checked, and still wrong),
never a raw exception, never crossport's own check failing. ``CONVERTED`` OpInfos were
refused when the sweep ran and have converters since: their samples must match (PASS). The
lists come from ``benchmarks/opinfo_sweep.py`` (docs/parity.md, "OpInfo sweep"): the OpInfos
whose samples all passed or were refused. ``FAST`` is a representative subset (34 OpInfos, ~30 s on one
core); the rest is ``slow`` (556 OpInfos, ~18 minutes on one shared core).
"""

from __future__ import annotations

import functools

import pytest
import torch

from tests.ops import opinfo_support as support

# one or two per family: elementwise, integer, reductions, indexing, shape, linear algebra,
# nn.functional, refusals
FAST = [
    'abs', 'add', 'mul', 'div.floor_rounding', 'where', 'clamp', 'exp', 'sigmoid', 'sum',
    'mean', 'amax', 'argmax', 'cumsum', 'gather', 'index_select', 'cat', 'reshape', 'permute',
    'transpose', 'matmul', 'softmax', 'nn.functional.relu', 'nn.functional.gelu',
    'nn.functional.layer_norm', 'nn.functional.conv2d', 'nn.functional.avg_pool2d',
    'nn.functional.embedding', 'kthvalue', 'linalg.inv_ex', 'masked_fill', 'remainder', 'eq',
    'ceil', 'maximum',
]

SLOW = [
    'H', 'T', '__getitem__', '__radd__', '__rdiv__', '__rmatmul__', '__rmod__', '__rmul__',
    '__ror__', '__rpow__', '__rsub__', '__rxor__', '_batch_norm_with_update', '_chunk_cat',
    '_native_batch_norm_legit', '_segment_reduce.lengths', '_segment_reduce.offsets',
    '_softmax_backward_data', '_unsafe_masked_index', '_unsafe_masked_index_put_accumulate',
    '_upsample_bilinear2d_aa', 'acos', 'acosh', 'addbmm', 'addcdiv', 'addcmul', 'addmm',
    'addmm.decomposed', 'addmv', 'addr', 'alias_copy', 'all', 'amin', 'aminmax', 'angle', 'any',
    'argmin', 'argwhere', 'as_strided', 'as_strided.partial_views', 'as_strided_copy',
    'as_strided_scatter', 'asin', 'asinh', 'atan', 'atan2', 'atanh', 'atleast_1d', 'atleast_2d',
    'atleast_3d', 'baddbmm', 'bincount', 'bitwise_and', 'bitwise_left_shift', 'bitwise_not',
    'bitwise_or', 'bitwise_right_shift', 'bitwise_xor', 'block_diag', 'bmm',
    'bmm.triton_optimized', 'bool', 'broadcast_tensors', 'broadcast_to', 'bucketize', 'byte',
    'cartesian_prod', 'cdist', 'char', 'chunk', 'clamp_max', 'clamp_min', 'clone',
    'column_stack', 'combinations', 'conj', 'conj_physical', 'constant_pad_nd', 'contiguous',
    'copysign', 'corrcoef', 'cos', 'cosh', 'count_nonzero', 'cov', 'cross', 'cummax', 'cummin',
    'cumprod', 'cumulative_trapezoid', 'deg2rad', 'diag', 'diag_embed', 'diagflat', 'diagonal',
    'diagonal_copy', 'diagonal_scatter', 'diff', 'digamma', 'dist', 'div.no_rounding_mode',
    'div.trunc_rounding', 'dot', 'double', 'dsplit', 'dstack', 'einsum', 'erf', 'erfc',
    'erfinv', 'exp2', 'expand', 'expand_as', 'expand_copy', 'expm1', 'fft.fftshift', 'fft.hfft',
    'fft.hfft2', 'fft.hfftn', 'fft.ifftshift', 'fft.irfft', 'fft.irfft2', 'fft.irfftn', 'fill',
    'flatten', 'flip', 'fliplr', 'flipud', 'float', 'float_power', 'floor', 'floor_divide',
    'fmax', 'fmin', 'fmod', 'frac', 'frexp', 'full_like', 'gcd', 'ge', 'geqrf', 'gradient',
    'grid_sampler_2d', 'grid_sampler_3d', 'gt', 'hash_tensor', 'heaviside', 'histc',
    'histogram', 'histogramdd', 'hsplit', 'hstack', 'hypot', 'i0', 'igamma', 'igammac',
    'index_add', 'index_copy', 'index_fill', 'index_put', 'index_reduce.amax',
    'index_reduce.amin', 'index_reduce.mean', 'index_reduce.prod', 'inner', 'int', 'isclose',
    'isfinite', 'isin', 'isinf', 'isnan', 'isneginf', 'isposinf', 'isreal', 'kron',
    'lcm', 'ldexp', 'le', 'lerp', 'lgamma', 'linalg.cholesky_ex',
    'linalg.cond', 'linalg.cross', 'linalg.det', 'linalg.diagonal', 'linalg.eigh',
    'linalg.eigvalsh', 'linalg.householder_product', 'linalg.ldl_factor',
    'linalg.ldl_factor_ex', 'linalg.ldl_solve', 'linalg.lstsq', 'linalg.lstsq.grad_oriented',
    'linalg.lu', 'linalg.lu_factor', 'linalg.lu_factor_ex', 'linalg.lu_solve',
    'linalg.matrix_norm', 'linalg.matrix_power', 'linalg.matrix_rank',
    'linalg.matrix_rank.hermitian', 'linalg.multi_dot', 'linalg.norm',
    'linalg.norm.subgradients_at_zero', 'linalg.pinv', 'linalg.pinv.hermitian',
    'linalg.pinv.singular', 'linalg.qr', 'linalg.slogdet', 'linalg.solve', 'linalg.solve_ex',
    'linalg.solve_triangular', 'linalg.svdvals', 'linalg.tensorinv', 'linalg.tensorsolve',
    'linalg.vander', 'linalg.vector_norm', 'linspace.tensor_overload', 'log', 'log10', 'log1p',
    'log2', 'log_softmax', 'log_softmax.with_dtype', 'logaddexp', 'logaddexp2', 'logdet',
    'logical_and', 'logical_not', 'logical_or', 'logical_xor', 'logit',
    'logspace.tensor_overload', 'logsumexp', 'long', 'lt', 'lu', 'lu_solve', 'lu_unpack', 'mH',
    'mT', 'masked.amax', 'masked.amin', 'masked.argmax', 'masked.argmin', 'masked.cumprod',
    'masked.cumsum', 'masked.log_softmax', 'masked.logaddexp', 'masked.logsumexp',
    'masked.mean', 'masked.median', 'masked.norm', 'masked.normalize', 'masked.prod',
    'masked.softmax', 'masked.softmin', 'masked.std', 'masked.sum', 'masked.var',
    'masked_scatter', 'masked_select', 'matrix_exp', 'max.binary', 'max.reduction_no_dim',
    'max.reduction_with_dim', 'max_pool2d_with_indices_backward', 'median',
    'meshgrid.list_of_tensors', 'meshgrid.variadic_tensors', 'min.binary',
    'min.reduction_no_dim', 'min.reduction_with_dim', 'minimum', 'mm', 'mode', 'movedim',
    'msort', 'mv', 'mvlgamma.mvlgamma_p_1', 'mvlgamma.mvlgamma_p_3', 'mvlgamma.mvlgamma_p_5',
    'nan_to_num', 'nanmean', 'nanmedian', 'nanquantile', 'nansum', 'narrow', 'narrow_copy',
    'native_group_norm', 'native_layer_norm', 'ne', 'neg', 'new_full', 'new_ones', 'new_zeros',
    'nextafter', 'nn.functional.adaptive_avg_pool1d', 'nn.functional.adaptive_avg_pool2d',
    'nn.functional.adaptive_avg_pool3d', 'nn.functional.adaptive_max_pool1d',
    'nn.functional.adaptive_max_pool2d', 'nn.functional.adaptive_max_pool3d',
    'nn.functional.avg_pool1d', 'nn.functional.avg_pool3d', 'nn.functional.batch_norm',
    'nn.functional.bilinear', 'nn.functional.binary_cross_entropy_with_logits',
    'nn.functional.celu', 'nn.functional.channel_shuffle', 'nn.functional.conv1d',
    'nn.functional.conv3d', 'nn.functional.conv_transpose1d', 'nn.functional.conv_transpose2d',
    'nn.functional.conv_transpose3d', 'nn.functional.cosine_embedding_loss',
    'nn.functional.cosine_similarity', 'nn.functional.cross_entropy', 'nn.functional.ctc_loss',
    'nn.functional.elu', 'nn.functional.embedding_bag', 'nn.functional.fractional_max_pool2d',
    'nn.functional.fractional_max_pool3d', 'nn.functional.gaussian_nll_loss',
    'nn.functional.glu', 'nn.functional.grid_sample', 'nn.functional.group_norm',
    'nn.functional.hardshrink', 'nn.functional.hardsigmoid', 'nn.functional.hardswish',
    'nn.functional.hardtanh', 'nn.functional.hinge_embedding_loss', 'nn.functional.huber_loss',
    'nn.functional.instance_norm', 'nn.functional.interpolate.area',
    'nn.functional.interpolate.bicubic', 'nn.functional.interpolate.bilinear',
    'nn.functional.interpolate.linear', 'nn.functional.interpolate.nearest',
    'nn.functional.interpolate.nearest-exact', 'nn.functional.interpolate.trilinear',
    'nn.functional.kl_div', 'nn.functional.l1_loss', 'nn.functional.leaky_relu',
    'nn.functional.linear', 'nn.functional.linear_cross_entropy',
    'nn.functional.linear_cross_entropy.chunked',
    'nn.functional.linear_cross_entropy.chunked_none', 'nn.functional.local_response_norm',
    'nn.functional.logsigmoid', 'nn.functional.margin_ranking_loss', 'nn.functional.max_pool1d',
    'nn.functional.max_pool2d', 'nn.functional.max_pool3d', 'nn.functional.max_unpool1d',
    'nn.functional.max_unpool1d.grad', 'nn.functional.max_unpool2d',
    'nn.functional.max_unpool2d.grad', 'nn.functional.max_unpool3d',
    'nn.functional.max_unpool3d.grad', 'nn.functional.mish', 'nn.functional.mse_loss',
    'nn.functional.multi_head_attention_forward', 'nn.functional.multi_margin_loss',
    'nn.functional.multilabel_margin_loss', 'nn.functional.multilabel_soft_margin_loss',
    'nn.functional.nll_loss', 'nn.functional.normalize', 'nn.functional.one_hot',
    'nn.functional.pad.circular', 'nn.functional.pad.constant', 'nn.functional.pad.reflect',
    'nn.functional.pad.replicate', 'nn.functional.pad.replicate_negative',
    'nn.functional.pairwise_distance', 'nn.functional.pdist', 'nn.functional.pixel_shuffle',
    'nn.functional.pixel_unshuffle', 'nn.functional.prelu', 'nn.functional.relu6',
    'nn.functional.rms_norm', 'nn.functional.scaled_dot_product_attention',
    'nn.functional.selu', 'nn.functional.silu', 'nn.functional.smooth_l1_loss',
    'nn.functional.soft_margin_loss', 'nn.functional.softmin',
    'nn.functional.softmin.with_dtype', 'nn.functional.softplus', 'nn.functional.softshrink',
    'nn.functional.softsign', 'nn.functional.tanhshrink', 'nn.functional.threshold',
    'nn.functional.triplet_margin_loss', 'nn.functional.triplet_margin_with_distance_loss',
    'nn.functional.upsample_bilinear', 'nn.functional.upsample_nearest', 'nonzero',
    'nonzero_static', 'norm', 'norm.fro', 'norm.inf', 'norm.nuc', 'ones_like', 'ormqr', 'outer',
    'pca_lowrank', 'permute_copy', 'pinverse', 'polygamma.polygamma_n_0',
    'polygamma.polygamma_n_1', 'polygamma.polygamma_n_2', 'polygamma.polygamma_n_3',
    'polygamma.polygamma_n_4', 'positive', 'pow', 'prod', 'put', 'qr', 'quantile', 'rad2deg',
    'ravel', 'real', 'reciprocal', 'renorm', 'repeat', 'repeat_interleave', 'reshape_as',
    'resolve_conj', 'resolve_neg', 'roll', 'rot90', 'round', 'round.decimals_0',
    'round.decimals_3', 'round.decimals_neg_3', 'rsqrt', 'rsub', 'scatter', 'scatter_add',
    'scatter_reduce.amax', 'scatter_reduce.amin', 'scatter_reduce.mean', 'scatter_reduce.prod',
    'scatter_reduce.sum', 'select', 'select_scatter', 'sgn', 'short', 'sign', 'signbit', 'sin',
    'sinc', 'sinh', 'slice', 'slice_scatter', 'softmax.with_dtype', 'special.airy_ai',
    'special.bessel_j0', 'special.bessel_j1', 'special.bessel_y0', 'special.bessel_y1',
    'special.chebyshev_polynomial_t', 'special.chebyshev_polynomial_u',
    'special.chebyshev_polynomial_v', 'special.chebyshev_polynomial_w', 'special.entr',
    'special.erfcx', 'special.hermite_polynomial_h', 'special.hermite_polynomial_he',
    'special.i0e', 'special.i1', 'special.i1e', 'special.laguerre_polynomial_l',
    'special.legendre_polynomial_p', 'special.log_ndtr', 'special.modified_bessel_i0',
    'special.modified_bessel_i1', 'special.modified_bessel_k0', 'special.modified_bessel_k1',
    'special.ndtr', 'special.ndtri', 'special.polygamma.special_polygamma_n_0',
    'special.scaled_modified_bessel_k0', 'special.scaled_modified_bessel_k1',
    'special.shifted_chebyshev_polynomial_t', 'special.shifted_chebyshev_polynomial_u',
    'special.shifted_chebyshev_polynomial_v', 'special.shifted_chebyshev_polynomial_w',
    'special.spherical_bessel_j0', 'special.xlog1py', 'special.zeta', 'split',
    'split.list_args', 'split_with_sizes', 'split_with_sizes_copy', 'sqrt', 'square', 'squeeze',
    'squeeze.multiple', 'squeeze_copy', 'stack', 'std', 'std.unbiased', 'std_mean',
    'std_mean.unbiased', 'stft', 'sub', 'sum_to_size', 'svd_lowrank', 't', 't_copy', 'take',
    'take_along_dim', 'tan', 'tanh', 'tensor_split', 'tensordot', 'tile', 'to',
    'torch.ops.aten._safe_softmax.default', 'trace', 'transpose_copy', 'trapezoid', 'trapz',
    'triangular_solve', 'tril', 'triu', 'true_divide', 'trunc', 'unbind', 'unbind_copy',
    'unflatten', 'unfold', 'unfold_copy', 'unique', 'unique_consecutive', 'unravel_index',
    'unsafe_chunk', 'unsafe_split', 'unsqueeze', 'unsqueeze_copy', 'var', 'var.unbiased',
    'var_mean', 'var_mean.unbiased', 'vdot', 'view', 'view_as', 'view_copy', 'vsplit', 'vstack',
    'xlogy', 'zeros_like',
]

ACCEPTED = ("PASS", "REFUSED", "SKIP")

# Refused ("no converter") when the sweep ran, converted since: every sample must now match
# torch; a refusal fails here too
CONVERTED = [
    'grid_sampler_2d', 'nn.functional.grid_sample', 'scatter_reduce.sum', 'scatter_reduce.prod',
    'scatter_reduce.mean', 'scatter_reduce.amax', 'scatter_reduce.amin', 'index_reduce.prod',
    'index_reduce.mean', 'index_reduce.amax', 'index_reduce.amin', 'nn.functional.embedding_bag',
    'cdist', 'logcumsumexp', 'isin', 'bucketize', 'linalg.inv', 'linalg.det', 'linalg.slogdet',
    'logdet', 'linalg.solve', 'lgamma', 'digamma', 'erfinv', 'mvlgamma.mvlgamma_p_1',
    'mvlgamma.mvlgamma_p_3', 'mvlgamma.mvlgamma_p_5', 'grid_sampler_3d', 'view_copy',
    'permute_copy', 'unbind_copy', 'narrow_copy', 'signbit', 'scatter', 'addmv', 'addbmm',
    'dist', 'conj_physical', 'ldexp', 'gcd', 'lcm', 'nonzero_static', 'nn.functional.bilinear',
    'angle', 'nanmedian', 'masked_scatter', 'diagonal_scatter', 'nn.functional.pdist', 'put',
    # session 16 (tests/ops/test_factor.py); linalg.cholesky and cholesky skip every sample
    # (torch rejects the check's fresh random input): test_factor.py covers them
    'linalg.cholesky_ex', 'linalg.eigvalsh', 'linalg.inv_ex', 'linalg.solve_ex', 'linalg.pinv',
    'linalg.pinv.hermitian', 'linalg.pinv.singular', 'pinverse', 'matrix_exp',
    'linalg.solve_triangular', 'triangular_solve', 'linalg.matrix_rank.hermitian', 'linalg.qr',
    'qr',
    # session 17 (tests/ops/test_lu.py, test_factor.py)
    'linalg.lu_factor', 'linalg.lu_factor_ex', 'linalg.lu', 'lu', 'lu_unpack',
    'linalg.lu_solve', 'lu_solve', 'linalg.householder_product',
    # session 16 (tests/ops/test_bessel.py, test_special_functions.py)
    'i0', 'special.i0e', 'special.i1', 'special.i1e', 'special.modified_bessel_i0', 'special.modified_bessel_i1',
    'special.modified_bessel_k0', 'special.modified_bessel_k1',
    'special.scaled_modified_bessel_k0', 'special.scaled_modified_bessel_k1',
    'special.bessel_j0', 'special.bessel_j1', 'special.bessel_y0', 'special.bessel_y1',
    'special.spherical_bessel_j0', 'special.ndtri', 'special.log_ndtr', 'special.erfcx',
    'igamma', 'igammac', 'special.zeta', 'nextafter', 'frexp',
    # session 17 (tests/ops/test_airy.py)
    'special.airy_ai',
    # session 25 (capture/covariance.py; tests/ops/test_reduce.py)
    'cov', 'corrcoef',
]


@functools.cache
def _op_db() -> dict:
    from torch.testing._internal.common_methods_invocations import op_db

    return {support.op_id(op): op for op in op_db}


def _verdicts(name: str) -> list[tuple[str, int, support.Verdict]]:
    op = _op_db()[name]
    out = []
    for dtype in support.dtypes_of(op):
        count = 2 if dtype == torch.float32 else 1
        for i, sample in enumerate(support.samples(op, dtype, count)):
            out.append((str(dtype), i, support.classify(op, sample)))
    return out


def _assert_never_silent(name: str) -> None:
    verdicts = _verdicts(name)
    bad = [f"{dtype} sample {i}: {v.kind}: {v.detail}" for dtype, i, v in verdicts
           if v.kind not in ACCEPTED]
    assert not bad, f"{name}:\n" + "\n".join(bad)
    # the property must have been exercised: some sample converted or was refused
    assert any(v.kind != "SKIP" for _, _, v in verdicts), f"{name}: every sample skipped"


@pytest.mark.parametrize("name", CONVERTED)
def test_converted_opinfo_samples_match_torch(name):
    verdicts = _verdicts(name)
    bad = [f"{dtype} sample {i}: {v.kind}: {v.detail}" for dtype, i, v in verdicts
           if v.kind not in ("PASS", "SKIP")]
    assert not bad, f"{name}:\n" + "\n".join(bad)
    assert any(v.kind == "PASS" for _, _, v in verdicts), f"{name}: no sample converted"


@pytest.mark.parametrize("name", FAST)
def test_opinfo_sample_matches_or_is_refused(name):
    _assert_never_silent(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_opinfo_sample_matches_or_is_refused_slow(name):
    _assert_never_silent(name)
