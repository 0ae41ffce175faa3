"""Reductions of tensors with no elements, against torch.

Over a dim that is not empty (the result is empty too), amax/amin/max.dim/min.dim/
argmax/argmin failed at run time: Keras' max/min assert a non-empty input ("the converted
Keras model failed to run: ... Max.call()"). Over an empty dim, torch defines sum 0, prod
1, mean/var NaN, any False, all True, logsumexp -inf (these converted already, kept here
as rows), and rejects amax/argmax/max(): conversion stops at capture with torch's message.
"""

from __future__ import annotations

import pytest
import torch

import crossport
from tests.harness import assert_converts
from tests.ops.opcases import Fn, case

EMPTY_RESULTS = ("aten_amax_default", "aten_amin_default", "aten_max_dim", "aten_min_dim",
                 "aten_argmax_default", "aten_argmin_default")


def _defined(x):
    e = x[:, :0]
    return (e.sum(1), e.sum(), (e * 10).long().sum(1), e.prod(1), (e * 10).int().prod(1),
            e.mean(1), e.mean(), (e > 0).any(1), (e > 0).all(1), (e > 0).any(), (e > 0).all(),
            e.var(1), torch.logsumexp(e, 1), torch.linalg.vector_norm(e, dim=1),
            e.sum(1, keepdim=True), torch.nansum(e, 1))


CASES = [
    case("extremes-and-indices-of-empty-tensors-over-non-empty-dims", Fn(lambda x: (
        x[:, :0].amax(0), x[:, :0].amin(0, keepdim=True), *x[:0].max(1), *x[:, :0].min(0),
        x[:, :0].argmax(0), x[:0].argmin(1, keepdim=True), (x[:0] * 10).int().amax(1),
        *torch.cummax(x[:0], 1), x[:0].median(1).values)), (3, 4),
        expect_converters=EMPTY_RESULTS),
    case("sum-prod-mean-any-all-over-empty-dims", Fn(_defined), (3, 4),
         expect_converters=("aten_sum_dim_intlist", "aten_prod_dim_int", "aten_mean_dim",
                            "aten_any_dim", "aten_all_dim")),
]


@pytest.mark.parametrize("module, shape, kwargs", CASES)
def test_reductions_of_empty_tensors_match_torch(module, shape, kwargs):
    assert_converts(module, (torch.randn(shape),), **kwargs)


@pytest.mark.parametrize("fn, message", [
    (lambda x: x[:, :0].amax(1), "zero-size dimension"),
    (lambda x: x[:, :0].argmax(1), "zero"),
    (lambda x: x[:, :0].max(), "numel\\(\\) == 0"),
], ids=["amax", "argmax", "max-all"])
def test_reductions_torch_rejects_are_refused_at_conversion(fn, message):
    """Not a run-time failure of the Keras model: the capture names torch's own error."""
    with pytest.raises(crossport.CrossportError, match=message):
        crossport.convert(Fn(fn).eval(), (torch.randn(3, 4),))
