"""Vector and matrix norms: linalg.vector_norm, torch.norm, F.normalize, linalg.matrix_norm,
torch.dist.

Every ``ord`` torch accepts for vectors (0, 1, 2, 3, fractional, negative, inf, -inf) on
any dim, before and after a conv (dims remapped to channels-last), plus the models that use
them: ConvNeXtV2's GRN (timm), XCiT's cross-covariance attention (timm), a cosine
classifier. Singular values convert (matrix_norm 'nuc'/2, svdvals); singular vectors do
not (unique only up to sign): a clear ``UnsupportedOpError``.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import crossport
from crossport.compat import import_torchvision
from crossport.errors import DynamicDimError, UnsupportedOpError
from tests.harness import assert_converts, assert_matches_at_sizes
from tests.ops.opcases import Fn, case, inputs

vector_norm = torch.linalg.vector_norm
matrix_norm = torch.linalg.matrix_norm


CDIST = ("aten__cdist_forward_default",)
CDIST_P = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, math.inf)
DIST = ("aten_dist_default",)
DIST_P = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, -1.0, -2.5, math.inf, -math.inf)
PDIST = ("aten__pdist_forward_default",)
PDIST_P = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, math.inf)


def every_dist(a, b):
    return tuple(torch.dist(a, b, p) for p in DIST_P)


def after_conv(fn):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), Fn(fn))


def with_zeros(fn):
    """Zero some entries: ord 0 counts them out, negative ords see 0^p = inf."""
    return Fn(lambda x: fn(torch.where(x.abs() < 0.3, torch.zeros_like(x), x)))


class CosineClassifier(nn.Module):
    """Cosine-similarity head: normalized features against normalized class weights."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3)
        self.weight = nn.Parameter(torch.randn(5, 8))

    def forward(self, x):
        features = F.normalize(self.conv(x).mean((2, 3)), dim=1)
        return 10.0 * features @ F.normalize(self.weight, dim=1).t()


def timm_module(path, name, *args, **kwargs):
    import_torchvision()  # timm imports torchvision; make it importable on CPU torch
    import importlib

    torch.manual_seed(0)
    module = getattr(importlib.import_module(path), name)(*args, **kwargs)
    with torch.no_grad():  # zero-initialised gains would hide the norm (parity.md)
        for p in module.parameters():
            if not p.any():
                p.normal_()
    return module


def grn(channels_last):
    return timm_module("timm.layers.grn", "GlobalResponseNorm", 4,
                       channels_last=channels_last)


CASES = [
    # an output computed from constants alone (the identity) was an eager tensor, not a
    # Keras output: the model failed to build (OpInfo sweep)
    case("matrix-power-zero-is-eye", Fn(lambda x: torch.linalg.matrix_power(x, 0)), (3, 3)),
    case("vector_norm-ord2-all", Fn(lambda x: vector_norm(x)), (2, 3, 4), expect_converters=("aten_linalg_vector_norm_default",)),
    case("vector_norm-ord2-dim1", Fn(lambda x: vector_norm(x, dim=1)), (2, 3, 4), expect_converters=("aten_linalg_vector_norm_default",)),
    case("vector_norm-ord3-dim1-keepdim", Fn(lambda x: vector_norm(x, 3, dim=1, keepdim=True)),
         (2, 3, 4), expect_converters=("aten_linalg_vector_norm_default",)),
    case("vector_norm-ord1-dims", Fn(lambda x: vector_norm(x, 1, dim=(0, 2))), (2, 3, 4), expect_converters=("aten_linalg_vector_norm_default",)),
    case("vector_norm-ordinf-neg-dim", Fn(lambda x: vector_norm(x, math.inf, dim=-1)),
         (2, 3, 4), expect_converters=("aten_linalg_vector_norm_default",)),
    case("vector_norm-ord-neginf-keepdim",
         Fn(lambda x: vector_norm(x, -math.inf, dim=1, keepdim=True)), (2, 3, 4), expect_converters=("aten_linalg_vector_norm_default",)),
    case("vector_norm-ord0-counts-nonzeros", with_zeros(lambda x: vector_norm(x, 0, dim=-1)),
         (2, 3, 8), expect_converters=("aten_abs_default", "aten_full_like_default", "aten_linalg_vector_norm_default", "aten_lt_Scalar", "aten_where_self")),
    case("vector_norm-ord-fractional", Fn(lambda x: vector_norm(x, 0.5, dim=2)), (2, 3, 4), expect_converters=("aten_linalg_vector_norm_default",)),
    case("vector_norm-ord-negative-with-zeros",
         with_zeros(lambda x: vector_norm(x, -1.5, dim=2)), (2, 3, 6), expect_converters=("aten_abs_default", "aten_full_like_default", "aten_linalg_vector_norm_default", "aten_lt_Scalar", "aten_where_self")),
    case("vector_norm-dtype-float64", Fn(lambda x: vector_norm(x, dim=1, dtype=torch.float64)),
         (2, 3, 4), expect_converters=("aten_linalg_vector_norm_default",)),
    case("vector_norm-channels-after-conv", after_conv(lambda x: vector_norm(x, dim=1)),
         (1, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_linalg_vector_norm_default")),
    case("vector_norm-hw-keepdim-after-conv",
         after_conv(lambda x: vector_norm(x, 2, dim=(2, 3), keepdim=True)), (2, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_linalg_vector_norm_default")),
    case("norm-p2-dim1", Fn(lambda x: torch.norm(x, p=2, dim=1)), (2, 3, 4), expect_converters=("aten_linalg_vector_norm_default",)),
    case("norm-fro-dims-keepdim", Fn(lambda x: torch.norm(x, p="fro", dim=(1, 2),
                                                          keepdim=True)), (2, 3, 4), expect_converters=("aten_linalg_vector_norm_default",)),
    case("norm-default-all", Fn(lambda x: torch.norm(x)), (2, 3, 4), expect_converters=("aten_linalg_vector_norm_default",)),
    case("tensor-norm-p1-last", Fn(lambda x: x.norm(1, dim=-1)), (2, 3, 4), expect_converters=("aten_linalg_vector_norm_default",)),
    case("normalize-dim1", Fn(lambda x: F.normalize(x, dim=1)), (2, 3, 4), expect_converters=("aten_clamp_min_default", "aten_div_tensor", "aten_expand_as_default", "aten_linalg_vector_norm_default")),
    case("normalize-p1-last", Fn(lambda x: F.normalize(x, p=1, dim=-1)), (2, 3, 4), expect_converters=("aten_clamp_min_default", "aten_div_tensor", "aten_expand_as_default", "aten_linalg_vector_norm_default")),
    case("normalize-zero-row-uses-eps", Fn(lambda x: F.normalize(x * (x[:, :1] > 0), dim=1)),
         (4, 5), expect_converters=("aten_clamp_min_default", "aten_div_tensor", "aten_expand_as_default", "aten_gt_Scalar", "aten_linalg_vector_norm_default", "aten_mul_tensor", "aten_slice_tensor")),
    case("normalize-channels-after-conv", after_conv(lambda x: F.normalize(x, dim=1)),
         (2, 3, 6, 7), expect_converters=("aten_clamp_min_default", "aten_conv_nd", "aten_div_tensor", "aten_expand_as_default", "aten_linalg_vector_norm_default")),
    case("matrix_norm-fro", Fn(lambda x: matrix_norm(x)), (2, 3, 4), expect_converters=("aten_linalg_vector_norm_default",)),
    case("matrix_norm-ord1", Fn(lambda x: matrix_norm(x, 1)), (2, 3, 4), expect_converters=("aten_amax_default", "aten_linalg_vector_norm_default")),
    case("matrix_norm-ord-neg1", Fn(lambda x: matrix_norm(x, -1)), (2, 3, 4), expect_converters=("aten_amin_default", "aten_linalg_vector_norm_default")),
    case("matrix_norm-ordinf-keepdim", Fn(lambda x: matrix_norm(x, math.inf, keepdim=True)),
         (2, 3, 4), expect_converters=("aten_amax_default", "aten_linalg_vector_norm_default")),
    case("matrix_norm-ord-neginf", Fn(lambda x: matrix_norm(x, -math.inf)), (2, 3, 4), expect_converters=("aten_amin_default", "aten_linalg_vector_norm_default")),
    case("matrix_norm-nuc", Fn(lambda x: matrix_norm(x, "nuc")), (2, 3, 4), expect_converters=("aten__linalg_svd_default", "aten_permute_default", "aten_sum_dim_intlist")),
    # the SVD kernel takes the matrix in the last two axes: one transpose to put it there
    case("matrix_norm-ord2-dims", Fn(lambda x: matrix_norm(x, 2, dim=(0, 2))), (2, 3, 4),
         max_transposes=1, expect_converters=("aten__linalg_svd_default", "aten_amax_default", "aten_permute_default")),
    case("matrix_norm-nuc-hw-after-conv", after_conv(lambda x: matrix_norm(x, "nuc")),
         (1, 3, 6, 7), max_transposes=1, expect_converters=("aten__linalg_svd_default", "aten_conv_nd", "aten_permute_default", "aten_sum_dim_intlist")),
    case("matrix_norm-nuc-transposed-matrix-no-transpose",
         Fn(lambda x: matrix_norm(x.transpose(1, 2), "nuc")), (2, 3, 4), expect_converters=("aten__linalg_svd_default", "aten_permute_default", "aten_sum_dim_intlist")),
    case("norm-nuc", Fn(lambda x: torch.norm(x, p="nuc")), (3, 5), expect_converters=("aten__linalg_svd_default", "aten_permute_default", "aten_sum_dim_intlist")),
    case("svdvals", Fn(lambda x: torch.linalg.svdvals(x)), (2, 5, 3), expect_converters=("aten__linalg_svd_default",)),
    case("cosine-classifier", CosineClassifier(), (2, 3, 6, 6), expect_converters=("aten_clamp_min_default", "aten_conv_nd", "aten_div_tensor", "aten_expand_as_default", "aten_linalg_vector_norm_default", "aten_matmul_default", "aten_mean_dim", "aten_mul_tensor")),
    case("timm-grn-channels-last", grn(True), (2, 5, 6, 4), expect_converters=("aten_add_tensor", "aten_div_tensor", "aten_linalg_vector_norm_default", "aten_mean_dim", "aten_mul_tensor")),
    case("timm-grn-channels-first-after-conv",
         nn.Sequential(nn.Conv2d(3, 4, 3), grn(False)), (2, 3, 7, 8), expect_converters=("aten_add_tensor", "aten_conv_nd", "aten_div_tensor", "aten_linalg_vector_norm_default", "aten_mean_dim", "aten_mul_tensor")),
    case("timm-xcit-cross-covariance-attention",
         timm_module("timm.models.xcit", "XCA", 16, num_heads=2), (2, 7, 16),
         max_transposes=None, expect_converters=("aten_clamp_min_default", "aten_div_tensor", "aten_expand_as_default", "aten_linalg_vector_norm_default", "aten_linear_default", "aten_matmul_default", "aten_mul_tensor", "aten_permute_default", "aten_softmax_int", "aten_unbind_int", "aten_view_default")),
    # cdist: torch's direct kernel for every p (was "no converter"); p = 2 past 25 rows or
    # with compute_mode='use_mm_for_euclid_dist' is torch's matmul expansion, decomposed
    case("cdist-every-p", Fn(lambda a, b: tuple(torch.cdist(a, b, p=p) for p in CDIST_P)),
         [(2, 5, 3), (2, 4, 3)], expect_converters=CDIST),
    case("cdist-broadcast-batch-unbatched", Fn(lambda a, b: (
        torch.cdist(a, b), torch.cdist(a, b, p=1.0), torch.cdist(a[0, 0], b[0], p=math.inf))),
         [(2, 1, 5, 3), (3, 4, 3)], expect_converters=CDIST),
    case("cdist-after-conv-features", nn.Sequential(nn.Conv2d(3, 4, 3), Fn(
        lambda y: torch.cdist(y.flatten(2).transpose(1, 2), y.mean(3).transpose(1, 2), p=3.0))),
         (2, 3, 5, 6), max_transposes=None, expect_converters=CDIST),
    case("cdist-p2-no-mm-past-25-rows", Fn(lambda a, b: torch.cdist(
        a, b, compute_mode="donot_use_mm_for_euclid_dist")), [(2, 30, 8), (2, 27, 8)],
         expect_converters=CDIST),
    case("cdist-p2-matmul-past-25-rows", Fn(lambda a, b: torch.cdist(a, b)),
         [(2, 30, 8), (2, 27, 8)], max_transposes=None,
         expect_converters=("aten_matmul_default", "aten_clamp_min_default", "aten_sqrt_default")),
    case("cdist-p2-use-mm", Fn(lambda a, b: torch.cdist(
        a, b, compute_mode="use_mm_for_euclid_dist")), [(5, 8), (4, 8)], max_transposes=None,
         expect_converters=("aten_matmul_default",)),
    # torch.dist (was "no converter"): the p-norm of the difference over every element
    case("dist-every-p", Fn(every_dist), [(3, 4), (3, 4)], expect_converters=DIST),
    case("dist-every-p-broadcast-with-zeros", Fn(lambda a, b: every_dist(
        torch.where(a.abs() < 0.3, b[0], a), b[0])), [(3, 4), (2, 4)], expect_converters=DIST),
    case("dist-after-conv", after_conv(lambda y: every_dist(y, y.flip(1))), (1, 3, 6, 6),
         expect_converters=("aten_conv_nd", *DIST)),
    case("dist-float64", Fn(lambda a, b: every_dist(a.double(), b.double())), [(3, 4), (4,)],
         expect_converters=DIST),
    # pdist (was "no converter"): every p, rows i < j in triu order, float64, one row
    case("pdist-every-p", Fn(lambda x: tuple(F.pdist(x, p) for p in PDIST_P)), (6, 4),
         expect_converters=PDIST),
    case("pdist-float64-and-one-row", Fn(lambda x: (
        *(F.pdist(x.double(), p) for p in PDIST_P), F.pdist(x[:1]), F.pdist(x[:, :0], 3.0))),
         (5, 3), expect_converters=PDIST),
    case("cdist-float64", Fn(lambda a, b: tuple(torch.cdist(a.double(), b.double(), p=p)
                                                 for p in CDIST_P)),
         [(2, 5, 3), (2, 4, 3)], expect_converters=CDIST),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_linalg(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), **kwargs)


def test_cdist_special_values_match_torch():
    """NaN, +-inf, -0.0 and huge coordinates: p = 0 counts NaN as NaN, the inf-norm skips
    NaN (torch's running max from 0), the others propagate it."""
    nan, inf = math.nan, math.inf
    a = torch.tensor([[nan, 0.0, 0.0], [1.0, inf, -inf], [0.0, 0.0, 0.0], [nan, nan, nan],
                      [2.0, -0.0, 1e30]])
    b = torch.tensor([[1.0, inf, 0.0], [0.0, 0.0, 0.0], [-1e30, 3.0, nan]])
    module = Fn(lambda x, y: tuple(torch.cdist(x, y, p=p) for p in CDIST_P))
    assert_converts(module, (a, b), expect_converters=CDIST)


def test_dist_special_values_match_torch():
    """NaN, +-inf (inf - inf is NaN), -0.0 and huge values: p = 0 counts NaN as non-zero,
    inf/-inf norms propagate NaN, the other p propagate it; one pair of tensors per row."""
    nan, inf = math.nan, math.inf
    a = torch.tensor([[nan, 0.0, 1.0], [inf, 1.0, 2.0], [inf, -0.0, 3.0], [-0.0, 0.0, 0.0],
                      [1e30, -1e30, 2.0], [1e-30, 0.0, 5.0]])
    b = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 2.0], [inf, 0.0, 3.0], [0.0, -0.0, 0.0],
                      [-1e30, 0.0, 2.0], [0.0, 0.0, 5.0]])
    module = Fn(lambda x, y: tuple(op for i in range(6) for op in every_dist(x[i], y[i])))
    assert_converts(module, (a, b), expect_converters=DIST)


def test_pdist_special_values_match_torch():
    """NaN, +-inf (inf - inf is NaN), -0.0 and huge values: a NaN difference gives NaN for
    every p, the inf-norm too (pdist's kernel propagates it, unlike cdist's)."""
    nan, inf = math.nan, math.inf
    x = torch.tensor([[nan, 0.0, 0.0], [1.0, inf, -inf], [0.0, 0.0, 0.0], [1.0, inf, 3.0],
                      [2.0, -0.0, 1e30], [-1e30, 3.0, 0.0]])
    assert_converts(Fn(lambda x: tuple(F.pdist(x, p) for p in PDIST_P)), x,
                    expect_converters=PDIST)


def test_pdist_with_a_dynamic_row_count_is_refused():
    """pdist's output has n(n-1)/2 rows: n must be static."""
    with pytest.raises(DynamicDimError, match="_pdist_forward"):
        crossport.convert(Fn(lambda x: F.pdist(x)).eval(), inputs((5, 3)),
                          dynamic_dims={0: {0: "n"}})


def test_cdist_p2_with_a_dynamic_row_count_is_refused():
    """torch picks the direct or the matmul formula for p = 2 by the row counts."""
    module = Fn(lambda a, b: torch.cdist(a, b))
    with pytest.raises(DynamicDimError, match=r"cdist's choice of formula .*dim 1 of 'x1'"):
        crossport.convert(module.eval(), inputs([(2, 5, 3), (2, 4, 3)]),
                          dynamic_dims={0: {1: "r"}})


def test_singular_vectors_are_unsupported_with_a_reason():
    module = Fn(lambda x: torch.linalg.svd(x, full_matrices=False)[0])
    with pytest.raises(UnsupportedOpError, match="unique only up to sign"):
        crossport.convert(module.eval(), inputs((2, 4, 3)))


DYNAMIC = [
    pytest.param(Fn(lambda x: vector_norm(x, 3, dim=1)), (2, 6, 4), {0: {1: "seq"}},
                 [(3, 9, 4), (1, 2, 4)], id="vector_norm-over-dynamic-dim"),
    pytest.param(Fn(lambda x: F.normalize(x, dim=-1)), (2, 6, 4), {0: {1: "seq"}},
                 [(3, 9, 4)], id="normalize-dynamic-batch-and-seq"),
    pytest.param(Fn(lambda x: matrix_norm(x, "nuc")), (2, 6, 4), {0: {1: "seq"}},
                 [(3, 9, 4), (1, 3, 4)], id="matrix_norm-nuc-dynamic-rows"),
    pytest.param(Fn(lambda x: tuple(torch.cdist(x, x[:, :3] * 2, p=p)
                                    for p in (0.0, 1.0, 3.0, math.inf))),
                 (2, 6, 4), {0: {1: "seq"}}, [(3, 9, 4), (1, 3, 4)], id="cdist-dynamic-rows"),
    pytest.param(Fn(lambda x: (torch.cdist(x, x.flip(1)), torch.cdist(x, x, p=math.inf))),
                 (2, 6, 4), {0: {2: "features"}}, [(3, 6, 7), (1, 6, 2)],
                 id="cdist-p2-dynamic-batch-and-features"),
]


@pytest.mark.parametrize("module, shape, dims, others", DYNAMIC)
def test_linalg_dynamic(module, shape, dims, others):
    example = inputs(shape)
    conversion = crossport.convert_with_report(module.eval(), example, dynamic_dims=dims,
                                               dynamic_batch=True)
    assert_matches_at_sizes(module, conversion, others, atol=1e-5, seed=3)


def test_pdist_exports_to_tflite(tmp_path):
    """Builtin ops only; NaN rows keep NaN in the file for every p (LiteRT's REDUCE_MAX
    skips NaN: the inf-norm spells the rule out)."""
    x = torch.randn(5, 3)
    x[1, 2] = math.nan
    module = Fn(lambda x: tuple(F.pdist(x, p) for p in PDIST_P)).eval()
    conversion = crossport.convert_with_report(module, (x,))
    result = crossport.export(conversion, tmp_path / "pdist.tflite")
    assert result.max_error < 1e-5, result
