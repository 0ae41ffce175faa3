"""cummax/cummin, logcumsumexp, median/nanmedian and kthvalue against torch: values and
indices, on ties, NaN, +-inf, +-0.0 and integer extremes, along every dim and in a
channels-last layout.

All were "no converter". Ties are made inside the module (``round(x * 1.5)``), so the
harness's fresh random inputs tie too.
"""

from __future__ import annotations

import pytest
import torch

import crossport
from crossport.errors import DynamicDimError
from tests.harness import assert_converts
from tests.ops.opcases import ConvThen, Fn, case
from tests.ops.test_special_values import all_pairs, near_limits

CUM = ("aten_cummax_default", "aten_cummin_default")
LOGCUMSUMEXP = ("aten_logcumsumexp_default",)
KTH = ("aten_kthvalue_default",)
MEDIANS = ("aten_median_dim", "aten_nanmedian_dim", "aten_median_default",
           "aten_nanmedian_default")


def _tied(x):
    return torch.round(x * 1.5)


def _cum_all(a, b):
    return (*torch.cummax(a, 1), *torch.cummin(a, 0), *torch.cummax(b, -1), *torch.cummin(b, 1))


def _medians(a, b):
    return (*a.median(1), *a.median(0, keepdim=True), a.nanmedian(1).values,
            b.nanmedian(0, keepdim=True)[0], *b.median(-1), a.median(), b[:, 1:].median(),
            a.nanmedian(), b[1:, :1].nanmedian())


def tied_conv_then(fn):
    """A channels-last activation, tied, scanned along channels and along H."""
    return ConvThen(lambda y: fn(_tied(y)))


def _logcumsumexp_all(a, b):
    return (torch.logcumsumexp(a, 1), torch.logcumsumexp(a, 0), torch.logcumsumexp(b, -1),
            torch.logcumsumexp(b.double(), 0))


def _kth_all(a, b):
    n = a.shape[1]
    return (a.kthvalue(1, 1).values, a.kthvalue(n, 1).values, a.kthvalue(5, 0, True)[0],
            b.kthvalue(n // 2).values, b.double().kthvalue(3, 0).values)


CASES = [
    case("cummax-cummin-special-pairs", Fn(_cum_all), all_pairs, expect_converters=CUM),
    case("cummax-cummin-ties-take-the-latest-index",
         Fn(lambda x: (*torch.cummax(_tied(x), 1), *torch.cummin(_tied(x), 0),
                       *torch.cummax(_tied(x), 2))), (5, 37, 3), expect_converters=CUM),
    case("cummax-cummin-int32-extremes", Fn(lambda a, b: _cum_all(a, b)),
         lambda: near_limits(torch.int32), expect_converters=CUM),
    case("cummax-cummin-uint8-int64-bool", Fn(lambda a, b: (
        *torch.cummax(a, 1), *torch.cummin(b.long() * 3, 0), *torch.cummax(a > 7, 1),
        *torch.cummin(b > 100, 0))), lambda: near_limits(torch.uint8), expect_converters=CUM),
    case("cummax-cummin-channels-last", tied_conv_then(lambda y: (*torch.cummax(y, 1),
                                                                  *torch.cummin(y, 2))),
         (2, 3, 9, 8), expect_converters=CUM),
    # every special after every other (NaN, +-inf, huge, -0.0 ...) along both dims: -inf
    # until a finite value, inf from the first inf on, NaN from the first NaN on
    case("logcumsumexp-special-pairs", Fn(_logcumsumexp_all), all_pairs,
         expect_converters=LOGCUMSUMEXP),
    # 300 steps of scale 5 (torch accumulates in double; the scan's 9 steps are ~4 ulps)
    case("logcumsumexp-long-rows", Fn(lambda x: torch.logcumsumexp(x * 5, 1)), (4, 300),
         expect_converters=LOGCUMSUMEXP),
    case("logcumsumexp-channels-last", tied_conv_then(lambda y: (torch.logcumsumexp(y, 1),
                                                                 torch.logcumsumexp(y, 3))),
         (2, 3, 9, 8), expect_converters=LOGCUMSUMEXP),
    case("logcumsumexp-0-dim-and-empty", Fn(lambda x: (
        torch.logcumsumexp(x[0, 0], 0), torch.logcumsumexp(x[:, :0], 1),
        torch.logcumsumexp(x[:, :1], 1))), (3, 4), expect_converters=LOGCUMSUMEXP),
    # the k-th in torch's order, NaN above +inf (values only: the indices are refused)
    case("kthvalue-special-pairs", Fn(_kth_all), all_pairs, expect_converters=KTH),
    case("kthvalue-ties", Fn(lambda x: tuple(_tied(x).kthvalue(k, 1).values
                                             for k in (1, 2, 20, 41))), (6, 41),
         expect_converters=KTH),
    case("kthvalue-int32-extremes-and-int16", Fn(lambda a, b: (
        a.kthvalue(3, 1).values, b.kthvalue(1, 0, keepdim=True).values,
        (a * 3).short().kthvalue(4, 1).values, a[0, 0].kthvalue(1).values)),
         lambda: near_limits(torch.int32), expect_converters=KTH),
    case("kthvalue-channels-last", tied_conv_then(lambda y: (y.kthvalue(2, 1).values,
                                                             y.kthvalue(3, 2, True).values)),
         (2, 3, 9, 8), expect_converters=KTH),
    case("median-nanmedian-special-pairs", Fn(_medians), all_pairs, expect_converters=MEDIANS),
    case("median-nanmedian-ties-odd-and-even", Fn(lambda x: (
        *_tied(x).median(1), *_tied(x[:, :-1]).median(1), _tied(x).nanmedian(0).values,
        _tied(x).median(), _tied(x)[1:].nanmedian())), (6, 41), expect_converters=MEDIANS),
    # nanmedian of integers is median (torch's decomposition)
    case("median-int-extremes", Fn(lambda a, b: (*a.median(1), *b.long().median(0),
                                                 a.median(), b.nanmedian(), *a.nanmedian(0))),
         lambda: near_limits(torch.int32),
         expect_converters=("aten_median_dim", "aten_median_default")),
    case("median-channels-last", tied_conv_then(lambda y: (*y.median(1), y.nanmedian(3, True)[0],
                                                           y.median(), y[:, :2].nanmedian())),
         (2, 3, 9, 8), expect_converters=MEDIANS),
]


@pytest.mark.parametrize("module, make_inputs, kwargs", CASES)
def test_order_statistics_match_torch(module, make_inputs, kwargs):
    args = make_inputs() if callable(make_inputs) else (torch.randn(make_inputs),)
    assert_converts(module, args, max_transposes=None, **kwargs)


def test_cummax_along_a_dynamic_dim_is_refused_before_building():
    """The scan's step count follows the length: a dynamic one is refused, naming it."""
    with pytest.raises(DynamicDimError, match=r"cumulative max/min .*dim 1"):
        crossport.convert(Fn(lambda x: torch.cummax(x, 1)[0]).eval(), (torch.randn(2, 6),),
                          dynamic_dims={0: {1: "seq"}})


def test_nanmedian_indices_are_refused():
    """torch's index for a row of NaN only follows no rule (12 of 20, 17 of 25)."""
    with pytest.raises(crossport.UnsupportedOpError, match="indices of nanmedian"):
        crossport.convert(Fn(lambda x: x.nanmedian(1).indices).eval(), (torch.randn(2, 6),))


def test_median_of_no_elements_is_refused():
    with pytest.raises(crossport.UnsupportedOpError, match="median of no elements"):
        crossport.convert(Fn(lambda x: x[:, :0].nanmedian()).eval(), (torch.randn(2, 6),))


def test_logcumsumexp_along_a_dynamic_dim_is_refused_before_building():
    with pytest.raises(DynamicDimError, match=r"logcumsumexp .*dim 1"):
        crossport.convert(Fn(lambda x: torch.logcumsumexp(x, 1)).eval(), (torch.randn(2, 6),),
                          dynamic_dims={0: {1: "seq"}})


def test_kthvalue_indices_are_refused():
    """torch's quickselect leaves tied values in no reproducible order (measured: 7253 of
    10560 tied rows differ from a stable sort's index)."""
    with pytest.raises(crossport.UnsupportedOpError, match="indices of kthvalue.*stable=True"):
        crossport.convert(Fn(lambda x: x.kthvalue(2, 1).indices).eval(), (torch.randn(2, 6),))


def test_logcumsumexp_of_integers_is_refused():
    with pytest.raises(crossport.UnsupportedOpError, match="logcumsumexp of torch.int64"):
        crossport.convert(Fn(lambda x: torch.logcumsumexp(x, 1)).eval(),
                          (torch.arange(6).reshape(2, 3),))
