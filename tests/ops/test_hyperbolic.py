"""Inverse trigonometric and hyperbolic functions and erfc (were "no converter") on the
values random inputs miss: NaN, +-inf, +-0.0, the domain edges (+-1 and one ulp past them
for asin/acos/atanh, 1 and below for acosh), tiny values (cancellation) and huge ones
(overflow of x² or e^x before the function overflows).

Left out on purpose: sinh/cosh of |x| in (88.72, 89.4] (float32), where torch's own result
depends on its kernel (inf from the vectorised loop, the finite value from the scalar tail).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from crossport.parity.verify import run_keras
from tests.harness import assert_converts
from tests.ops.opcases import Fn

SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1.0000001, -1.0000001, 0.9999999,
            -0.9999999, 1e-30, -1e-30, 1e-4, -1e-4, 0.5, -0.5, 2.0, -3.0, 5.0, 10.0, -20.0,
            88.0, -88.5, 100.0, -100.0, 1e10, -1e10, 1e20, -1e20, 3e38, -3e38]

FUNCTIONS = {"asin": torch.asin, "acos": torch.acos, "sinh": torch.sinh, "cosh": torch.cosh,
             "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh,
             "erfc": torch.erfc}


def specials(dtype=torch.float32):
    return torch.tensor(SPECIALS, dtype=dtype).reshape(4, 8)


# rows naming their converters for tests/ops/test_coverage.py (not CASES: tests/codegen reads
# tables of that name as (module, shapes, kwargs))
ROWS = [pytest.param(name, {"expect_converters": (f"aten_{name}_default",)}, id=name)
        for name in FUNCTIONS]


@pytest.mark.parametrize("name, kwargs", ROWS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_torch_on_special_values(name, kwargs, dtype):
    module, args = Fn(FUNCTIONS[name]), (specials(dtype),)
    conversion = assert_converts(module, args, **kwargs)
    want = FUNCTIONS[name](args[0]).numpy()
    got = np.asarray(run_keras(conversion.model, args, False, like=FUNCTIONS[name](args[0]))[0])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    zeros = want == 0
    assert (np.signbit(got[zeros]) == np.signbit(want[zeros])).all()  # -0.0 stays -0.0


def test_random_and_integer_inputs():
    module = Fn(lambda x, n: (torch.asin(x.clamp(-1, 1)), torch.acos(x.tanh()), torch.sinh(x * 4),
                              torch.cosh(x * 4), torch.asinh(x * 1e3), torch.acosh(x.abs() + 1),
                              torch.atanh(x.tanh()), torch.erfc(x * 3), torch.asinh(n),
                              torch.cosh(n)))
    assert_converts(module, (torch.randn(6, 50), torch.arange(-5, 5).reshape(2, 5)))
