"""diagonal (offset, dim1, dim2), diag of a matrix and of a vector, and trace (were "no
converter" apart from diag of a vector): every offset sign and out-of-range offsets (an
empty diagonal), dims in either order, after a conv (channels-last input), integers, and
NaN/inf passing through (trace sums them as torch does)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import crossport
from crossport.errors import DynamicDimError
from tests.harness import assert_converts
from tests.ops.opcases import Fn, case, inputs

DIAGONAL = ("aten_diagonal_default",)


def after_conv(fn):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), Fn(fn))


CASES = [
    case("diagonal-offsets", Fn(lambda x: (torch.diagonal(x), torch.diagonal(x, 2),
                                           torch.diagonal(x, -1), torch.diagonal(x, -3))),
         (4, 6), expect_converters=DIAGONAL),
    case("diagonal-offset-past-the-edge-is-empty", Fn(lambda x: torch.diagonal(x, 7) + 1),
         (4, 6), expect_converters=DIAGONAL),
    case("diagonal-batched-dims-reversed", Fn(lambda x: (torch.diagonal(x, 1, 2, 0),
                                                         x.diagonal(-1, -1, -2))),
         (5, 3, 4), expect_converters=DIAGONAL, max_transposes=2),  # one per diagonal
    case("diagonal-after-conv-channels-and-width", after_conv(lambda x: x.diagonal(0, 1, 3)),
         (2, 3, 6, 7), expect_converters=("aten_conv_nd", *DIAGONAL), max_transposes=1),
    case("diag-matrix-vector-and-trace", Fn(lambda x: (torch.diag(x), torch.diag(x, -2),
                                                       torch.diag(x[0], 1), torch.trace(x))),
         (5, 4), expect_converters=DIAGONAL),
    case("diagonal-and-trace-of-integers", Fn(lambda x: (torch.diagonal((x * 9).long(), 1),
                                                         torch.trace((x * 9).int()))),
         (4, 4), expect_converters=DIAGONAL),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_diagonal(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), **kwargs)


def test_special_values_pass_through():
    s = torch.tensor([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 3e38, -2.0, 5.0])
    x = s.repeat(9, 1) * 1 + s.reshape(9, 1) * 0  # NaN and infs on every diagonal
    assert_converts(Fn(lambda a: (torch.diagonal(a, 1), torch.trace(a[3:, 3:]),
                                  torch.trace(a[1:3, 1:3]), torch.diag(a, -2))), (x,),
                    expect_converters=DIAGONAL)


def test_a_dynamic_diagonal_dim_is_refused():
    module = Fn(lambda x: torch.diagonal(x, 0, 1, 2))
    with pytest.raises(DynamicDimError, match="diagonal"):
        crossport.convert(module.eval(), inputs((2, 5, 5)), dynamic_dims={0: {1: "s"}})
