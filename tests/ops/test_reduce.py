"""Reductions, softmax and arg-reductions on any dim, before and after a conv (pitfall 8).

var/std use torch's unbiased default (correction=1); argmax/argmin outputs are int64 and
compared exactly.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.harness import assert_converts
from tests.ops.opcases import Fn, case, inputs


def after_conv(fn):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), Fn(fn))


CASES = [
    case("mean-dim1", Fn(lambda x: x.mean(1)), (2, 3, 4), expect_converters=("aten_mean_dim",)),
    case("mean-all", Fn(lambda x: x.mean()), (2, 3, 4), expect_converters=("aten_mean_dim",)),
    case("mean-dims-keepdim", Fn(lambda x: x.mean((0, 2), keepdim=True)), (2, 3, 4), expect_converters=("aten_mean_dim",)),
    case("sum-neg-dim", Fn(lambda x: x.sum(-1)), (2, 3, 4), expect_converters=("aten_sum_dim_intlist",)),
    case("sum-all", Fn(lambda x: x.sum()), (2, 3, 4), expect_converters=("aten_sum_dim_intlist",)),
    case("sum-bool-to-int64", Fn(lambda x: (x > 0).sum(1)), (2, 3, 4), expect_converters=("aten_gt_Scalar", "aten_sum_dim_intlist")),
    case("amax-amin", Fn(lambda x: (x.amax(1), x.amin((0, 2), keepdim=True))), (2, 3, 4),
         expect_converters=("aten_amax_default", "aten_amin_default")),
    case("max-dim-values", Fn(lambda x: torch.max(x, 2).values), (2, 3, 4),
         expect_converters=("aten_max_dim",)),
    case("max-dim-values-and-indices", Fn(lambda x: tuple(torch.max(x, 1))), (2, 3, 4), expect_converters=("aten_max_dim",)),
    case("min-dim-keepdim-after-conv", after_conv(lambda x: tuple(x.min(1, keepdim=True))),
         (1, 3, 6, 7),
         expect_converters=("aten_min_dim",)),
    case("var-unbiased-default", Fn(lambda x: x.var(1)), (2, 5, 4), expect_converters=("aten_var_correction",)),
    case("var-biased", Fn(lambda x: x.var(-1, unbiased=False)), (2, 5, 4),
         expect_converters=("aten_var_correction",)),
    case("var-correction2-keepdim", Fn(lambda x: torch.var(x, (1, 2), correction=2,
                                                           keepdim=True)), (2, 5, 4), expect_converters=("aten_var_correction",)),
    case("std-unbiased-default", Fn(lambda x: x.std(2)), (2, 5, 4), expect_converters=("aten_std_correction",)),
    case("std-all", Fn(lambda x: x.std()), (2, 5, 4),
         expect_converters=("aten_std_correction",)),
    case("prod-dim", Fn(lambda x: x.prod(1)), (2, 3, 4),
         expect_converters=("aten_prod_dim_int",)),
    # were "no converter": prod over every element, var_mean/std_mean (tuples)
    case("prod-all", Fn(lambda x: (x * 0.5 + 1).prod()), (2, 3, 4),
         expect_converters=("aten_prod_default",)),
    case("var-mean-correction-keepdim", Fn(lambda x: torch.var_mean(x, (0, 2), correction=0,
                                                                     keepdim=True)),
         (2, 5, 4), expect_converters=("aten_var_mean_correction",)),
    case("var-mean-all-and-std-mean-dim", Fn(lambda x: (*torch.var_mean(x),
                                                        *torch.std_mean(x, 1, correction=2))),
         (2, 5, 4), expect_converters=("aten_var_mean_correction", "aten_sqrt_default")),
    case("std-mean-channels-after-conv", after_conv(lambda x: torch.std_mean(x, 1)),
         (1, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_var_mean_correction")),
    case("mean-channels-after-conv", after_conv(lambda x: x.mean(1)), (1, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_mean_dim")),
    case("mean-hw-after-conv", after_conv(lambda x: x.mean((2, 3))), (2, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_mean_dim")),
    case("sum-width-keepdim-after-conv", after_conv(lambda x: x.sum(-1, keepdim=True)),
         (1, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_sum_dim_intlist")),
    case("amax-channels-after-conv", after_conv(lambda x: x.amax(1, keepdim=True)),
         (1, 3, 6, 7), expect_converters=("aten_amax_default", "aten_conv_nd")),
    case("var-channels-after-conv", after_conv(lambda x: x.var(1)), (1, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_var_correction")),
    case("std-hw-after-conv", after_conv(lambda x: x.std((2, 3))), (2, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_std_correction")),
    case("softmax-last", nn.Softmax(-1), (2, 3, 5), expect_converters=("aten_softmax_int",)),
    # torch reads a 0-dim tensor as one element: dim 0 or -1 reduces nothing (the
    # converters raised "dim 0 is out of range for a rank-0 tensor")
    case("reductions-of-a-0dim-tensor-with-dim", Fn(lambda x: (
        x.sum(0), x.mean(-1, keepdim=True), x.amax(0), torch.logsumexp(x, 0), x.argmax(0),
        x.argmin(-1), (x > 0).any(0))), [()],
         expect_converters=("aten_sum_dim_intlist", "aten_argmax_default")),
    case("cumsum-cumprod-of-a-0dim-tensor", Fn(lambda x: (
        torch.cumsum(x, 0), torch.cumprod(x, -1), torch.cumsum((x * 5).int(), 0))), [()],
         expect_converters=("aten_cumsum_default", "aten_cumprod_default")),
    # the same for the ops that take a dim and return the value with its index (and
    # softmax, flip, gather, index_select, unfold): torch gives the value itself, index 0, where the
    # converters raised "dim 0 is out of range for a rank-0 tensor" (found by the OpInfo
    # sweep on median; topk(0) of a scalar is its value too)
    case("dim-ops-of-a-0dim-tensor", Fn(lambda x: (
        *x.max(0), *x.min(-1, keepdim=True), *x.sort(0), *x.topk(1, 0), *x.topk(0),
        *x.median(0), x.nanmedian(-1).values, *(x * 5).int().median(0, keepdim=True),
        *torch.cummax(x, 0), *torch.cummin((x * 5).int(), -1), torch.softmax(x, 0),
        torch.log_softmax(x, -1), x.flip(0), x.gather(0, torch.tensor(0)),
        x.index_select(0, torch.tensor([0])), x.unfold(0, 1, 2), x.unfold(-1, 0, 1))), [()],
         expect_converters=("aten_max_dim", "aten_min_dim", "aten_sort_default",
                            "aten_topk_default", "aten_median_dim", "aten_nanmedian_dim",
                            "aten_cummax_default", "aten_cummin_default", "aten_softmax_int",
                            "aten_log_softmax_int", "aten_flip_default", "aten_gather_default",
                            "aten_index_select_default", "aten_unfold_default")),
    # softmax(x, dim, dtype=...) computes in dtype (the dtype was ignored: float32 came out
    # for float64, and an integer input failed at run time)
    case("softmax-dtype-float64", Fn(lambda x: torch.softmax(x, -1, dtype=torch.float64)),
         (2, 5), expect_converters=("aten_softmax_int",)),
    case("log-softmax-of-ints-with-dtype", Fn(
        lambda x: torch.log_softmax((x * 3).long(), -1, dtype=torch.float32)), (2, 5),
         expect_converters=("aten_log_softmax_int",)),
    # found by the s17 audit: mean's dtype= was ignored (float32 out for float64, from ints
    # and from float32 alike)
    case("mean-of-ints-with-dtype-float64",
         Fn(lambda x: (x * 3).long().mean(1, dtype=torch.float64)), (2, 5),
         expect_converters=("aten_mean_dim",)),
    case("mean-of-float32-in-float64", Fn(lambda x: x.mean(dtype=torch.float64)), (2, 5),
         expect_converters=("aten_mean_dim",)),
    case("softmax-dim0", nn.Softmax(0), (3, 4), kernel_transposes=True,
         expect_converters=("aten_softmax_int",)),
    case("softmax-dim1-after-conv", after_conv(lambda x: torch.softmax(x, 1)), (1, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_softmax_int")),
    case("softmax-height-after-conv", after_conv(lambda x: torch.softmax(x, 2)), (1, 3, 6, 7),
         kernel_transposes=True, expect_converters=("aten_conv_nd", "aten_softmax_int")),
    case("log-softmax-last", nn.LogSoftmax(-1), (2, 3, 5),
         expect_converters=("aten_log_softmax_int",)),
    case("log-softmax-dim1-after-conv", after_conv(lambda x: torch.log_softmax(x, 1)),
         (1, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_log_softmax_int")),
    case("argmax-dim", Fn(lambda x: x.argmax(1)), (2, 5, 4), expect_converters=("aten_argmax_default",)),
    case("argmax-flat", Fn(lambda x: x.argmax()), (2, 5, 4), expect_converters=("aten_argmax_default",)),
    case("argmin-keepdim", Fn(lambda x: x.argmin(-1, keepdim=True)), (2, 5, 4),
         expect_converters=("aten_argmin_default",)),
    case("pitfall15-argmax-ties-first-index", Fn(lambda x: torch.round(x).clamp(0, 1).argmax(1)),
         (4, 6),
         expect_converters=("aten_round_default",)),
    case("argmax-channels-after-conv", after_conv(lambda x: x.argmax(1)), (1, 3, 6, 7), expect_converters=("aten_argmax_default", "aten_conv_nd")),
    case("argmin-flat-after-conv", after_conv(lambda x: x.argmin()), (1, 3, 6, 7),
         max_transposes=None, expect_converters=("aten_argmin_default", "aten_conv_nd")),
    case("pitfall9-log-softmax-after-flatten-keeps-flat-order", nn.Sequential(
        nn.Conv2d(3, 2, 3), nn.Flatten(), nn.LogSoftmax(-1)), (2, 3, 4, 5), expect_converters=("aten_conv_nd", "aten_log_softmax_int", "aten_view_default")),
    case("pitfall9-amax-sum-after-flatten", nn.Sequential(
        nn.Conv2d(3, 2, 3), nn.Flatten(), Fn(lambda x: x.amax(1) + x.sum(-1))), (2, 3, 4, 5), expect_converters=("aten_add_tensor", "aten_amax_default", "aten_conv_nd", "aten_sum_dim_intlist", "aten_view_default")),
    case("softmax-after-flatten-then-linear", nn.Sequential(
        nn.Conv2d(3, 2, 3), nn.Flatten(), nn.Softmax(-1), nn.Linear(12, 3)), (2, 3, 4, 5), expect_converters=("aten_conv_nd", "aten_linear_default", "aten_softmax_int", "aten_view_default")),
    # torch.cov / corrcoef: a CaptureError before (ATen branches on the degrees of freedom;
    # capture/covariance.py); no degrees of freedom left gives torch's inf/nan
    case("cov-corrcoef-corrections", Fn(lambda x: (
        torch.cov(x.T), x.T.cov(correction=0), torch.corrcoef(x.T), x[:, 0].corrcoef(),
        torch.cov(x[:1].T), x[:, 0].cov(correction=7), torch.cov((x * 5).long().T))),
         (6, 3), max_transposes=None),
    case("cov-weighted", Fn(lambda m, x: (
        torch.cov(x.T, fweights=m.f, correction=2), torch.cov(x.T, aweights=x[:, 0].exp()),
        torch.cov(x.T, fweights=m.f, aweights=x[:, 1].sigmoid(), correction=0),
        torch.cov(x.T, aweights=x[:, 0].exp(), correction=9)), f=torch.tensor([1, 0, 3, 2, 1, 4])),
         (6, 3), max_transposes=None),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_reduce(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), **kwargs)
