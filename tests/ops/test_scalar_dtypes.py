"""Python numbers beside tensors are applied in the op's computation dtype, as torch does.

torch converts a Python number to the common dtype of the op's operands (a float rounded
once from its double, an integer wrapped to the tensor's width), and its CPU kernels apply
the number to a float16 tensor in float32 for ``mul``, ``div`` and the activations with a
scalar parameter (``crossport/to_keras/scalars.py``). Keras made a Python float a float32
and a Python int an int32 tensor first in comparisons, ``mod``, ``abs``, ``where`` and the
bitwise ops, so a float64 ``x < 0.1`` compared with 0.10000000149, an int8 ``x < 300``
compared in int32 (torch: with 44), and a float16 ``x * 0.1`` multiplied by float16's
0.0999755859. The inputs sit on the constants, where a rounded constant flips a comparison
or a floor; every row compares dtypes exactly, integers and float16 exactly, float64 within
1e-13 (normalized).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.harness import assert_converts
from tests.ops.opcases import Fn, case


def _float64_edges():
    return (torch.tensor([0.1, 2.09, 0.1000000001, 0.09999999999, -0.1, 1.0, 7.0, 3.0, 0.3,
                          0.30000000001, 0.2, 0.5], dtype=torch.float64),)


def _int8():
    return (torch.tensor([1, 3, 100, -5, 127, -128, 0, 7, 44, -44, 56, -56], dtype=torch.int8),)


def _uint8():
    return (torch.tensor([1, 3, 200, 5, 255, 0, 44, 7], dtype=torch.uint8),)


def _int32():
    return (torch.tensor([1, 3, 16777217, -5, 2**30, 0, 7, -2**31], dtype=torch.int32),)


def _int64():
    return (torch.tensor([2**33, 2**33 + 1, -2**33, 5, -7, 2**40, 3, 0, 2**62, -1]),)


def _bools():
    return (torch.tensor([True, False, True, True, False]),)


def _half():
    return ((torch.linspace(-3, 3, 64) + 0.0123).half(),)


def _half_tenths():
    """float16 multiples of 0.1: each quotient by 0.1 sits next to an integer, on the side
    that float32's 0.1 (torch's divisor) and float16's 0.0999755859 disagree about."""
    return ((torch.arange(-64, 64) * 0.1).half(),)


def _half_pairs():
    """Every 7th finite float16 of each sign, divided by the same shuffled: quotients past
    2048, where float16's integers are 2 apart and each rounded step can move the floor."""
    grid = torch.arange(0, 0x7C00, 7, dtype=torch.int16).view(torch.float16)
    x = torch.cat([grid, -grid])
    return x, x[torch.randperm(len(x), generator=torch.Generator().manual_seed(0))]


F64, EXACT = 1e-13, 0.0

CASES = [
    # float64: a Python float keeps its double (the first 12 rows are last session's fixes)
    case("f64-lt", Fn(lambda x: x < 0.1), _float64_edges, atol=F64),
    case("f64-le", Fn(lambda x: x <= 0.1), _float64_edges, atol=F64),
    case("f64-gt", Fn(lambda x: x > 0.1), _float64_edges, atol=F64),
    case("f64-ge", Fn(lambda x: x >= 0.1), _float64_edges, atol=F64),
    case("f64-eq", Fn(lambda x: x == 0.1), _float64_edges, atol=F64),
    case("f64-ne", Fn(lambda x: x != 0.1), _float64_edges, atol=F64),
    case("f64-scalar-first", Fn(lambda x: 0.1 < x), _float64_edges, atol=F64),
    case("f64-where-scalar", Fn(lambda x: torch.where(x > 2.09, x, 0.1)), _float64_edges,
         atol=F64, expect_converters=("aten_where_self",)),
    case("f64-threshold", Fn(lambda x: F.threshold(x, 0.1, 0.3)), _float64_edges, atol=F64),
    case("f64-fmod", Fn(lambda x: torch.fmod(x, 0.1)), _float64_edges, atol=F64,
         expect_converters=("aten_fmod_tensor",)),
    case("f64-remainder", Fn(lambda x: x % 0.1), _float64_edges, atol=F64,
         expect_converters=("aten_remainder_tensor",)),
    case("f64-leaky-relu", Fn(lambda x: F.leaky_relu(-x, 0.1)), _float64_edges, atol=F64,
         expect_converters=("aten_leaky_relu_default",)),
    # float64 rows new in this session: each failed before
    case("f64-softplus-threshold", Fn(lambda x: F.softplus(x, beta=3.3, threshold=0.33)),
         _float64_edges, atol=F64, expect_converters=("aten_softplus_default",)),
    case("f64-floor-divide", Fn(lambda x: x // 0.1), _float64_edges, atol=F64,
         expect_converters=("aten_floor_divide_default",)),
    case("f64-div-floor", Fn(lambda x: torch.div(x, 0.1, rounding_mode="floor")),
         _float64_edges, atol=F64, expect_converters=("aten_div_tensor_mode",)),
    case("f64-gelu-tanh", Fn(lambda x: F.gelu(x, approximate="tanh")), _float64_edges,
         atol=F64, expect_converters=("aten_gelu_default",)),
    case("f64-elu-scales", Fn(lambda x: torch.ops.aten.elu(x - 0.2, 0.1, 0.3, 0.7)),
         _float64_edges, atol=F64, expect_converters=("aten_elu_default",)),
    case("f64-bucketize-boundaries",
         Fn(lambda x: torch.bucketize(x, torch.tensor([0.1, 0.3], dtype=torch.float64))),
         _float64_edges, atol=F64, expect_converters=("aten_bucketize_tensor",)),
    # float64 regression rows: numbers on the right and on the left of Keras' operators
    case("f64-arithmetic", Fn(lambda x: (x + 0.1, 0.1 - x, x * 0.1, 0.1 * x, x / 0.1,
                                         torch.add(x, x, alpha=0.1), x.abs() ** 0.1)),
         _float64_edges, atol=F64),
    case("f64-bounds", Fn(lambda x: (torch.clamp(x, 0.1, 0.3), F.hardtanh(x, 0.1, 0.3),
                                     x.masked_fill(x > 0.2, 0.1), F.pad(x, (1, 1), value=0.1),
                                     F.elu(-x, 0.1), F.celu(-x, 0.3))),
         _float64_edges, atol=F64),
    # integers: a number wraps to the tensor's width, as torch casts it (failed before)
    case("i8-compare-wrapped", Fn(lambda x: (x < 300, x > -200, x == 300)), _int8),
    case("i8-remainder-wrapped", Fn(lambda x: x % 300), _int8,
         expect_converters=("aten_remainder_tensor",)),
    case("i8-bitwise-wrapped", Fn(lambda x: (x & 300, x ^ 300, x | -300)), _int8,
         expect_converters=("aten_bitwise_and_Tensor", "aten_bitwise_xor_tensor")),
    case("u8-compare-wrapped", Fn(lambda x: (x < 300, x == -1, x >= -1)), _uint8),
    case("i32-compare-wrapped", Fn(lambda x: (x == 2**33, x < 2**33)), _int32),
    case("bool-power", Fn(lambda x: x ** 2), _bools,
         expect_converters=("aten_pow_tensor_scalar",)),
    case("i64-pad-big-fill", Fn(lambda x: F.pad(x, (1, 1), value=2**40 + 1)), _int64,
         expect_converters=("aten_pad_default",)),
    # integer regression rows: int64 beyond int32, float numbers with integer tensors
    case("i64-big-numbers", Fn(lambda x: (x + 2**40, x * 3_000_000_000, x > 2**33,
                                          x // 2**35, x & (2**40 - 1),
                                          torch.where(x > 5, x, 2**40), x * 0.5)), _int64),
    # float16: mul/div/activations apply the number in float32 (failed before)
    case("f16-mul-div", Fn(lambda x: (x * 0.1, x / 0.1, 0.1 / x, x * (1 / 3))), _half,
         atol=EXACT, expect_converters=("aten_mul_tensor", "aten_div_tensor")),
    case("f16-add-alpha", Fn(lambda x: torch.add(x, x, alpha=0.1)), _half, atol=EXACT,
         expect_converters=("aten_add_tensor",)),
    case("f16-leaky-relu", Fn(lambda x: F.leaky_relu(x, 0.1)), _half, atol=EXACT),
    case("f16-elu-celu-selu", Fn(lambda x: (F.elu(x, 0.1), F.celu(x, 0.3), F.selu(x))), _half,
         atol=EXACT, expect_converters=("aten_celu_default", "aten_selu_default")),
    case("f16-softplus", Fn(lambda x: F.softplus(x, beta=0.3)), _half, atol=EXACT),
    case("f16-fmod-remainder", Fn(lambda x: (torch.fmod(x, 0.1), x % 0.1)), _half, atol=EXACT),
    # every rounding mode divides a float16 tensor by the number as a float32, rounded once
    # (trunc and None computed in float16, floor divided by float16's 0.0999755859: 8 vs 9)
    case("f16-div-number-modes", Fn(lambda x: (torch.div(x, 0.1, rounding_mode=None),
                                               torch.div(x, 0.1, rounding_mode="trunc"),
                                               torch.div(x, 0.1, rounding_mode="floor"),
                                               x // 0.3)),
         _half_tenths, atol=EXACT, expect_converters=("aten_div_tensor_mode",)),
    # two float16 tensors: torch's floor division rounds each step to float16 (a divisor of
    # one element takes the number's float32 path); computed in float32 it was 1 off past 1024
    case("f16-floor-divide-tensors", Fn(lambda x, y: (torch.div(x, y, rounding_mode="floor"),
                                                      x // torch.tensor(0.0999, dtype=torch.float16))),
         _half_pairs, atol=EXACT, expect_converters=("aten_div_tensor_mode",)),
    # sub and rsub are torch's add kernel with -alpha: in float32, alpha rounded to float16
    # first, rounded once (they rounded alpha * y to float16 before subtracting)
    case("f16-sub-rsub-alpha", Fn(lambda x: (torch.sub(x, x.flip(0), alpha=0.3),
                                             torch.rsub(x, x.flip(0), alpha=0.3))), _half,
         atol=EXACT, expect_converters=("aten_sub_tensor", "aten_rsub_scalar")),
    # a number times alpha in the computation dtype (Keras made 0.7 * 0.3 a float32 and
    # 100 * 3 an int32 tensor: float64 8e-9 off, int8 came out int32 unwrapped, float16
    # x - 0.7 * 0.3 came out float32)
    case("f64-number-alpha", Fn(lambda x: (torch.add(x, 0.7, alpha=0.3),
                                           torch.sub(x, 0.7, alpha=0.3))),
         _float64_edges, atol=F64, expect_converters=("aten_add_tensor", "aten_sub_tensor")),
    case("i8-number-alpha", Fn(lambda x: (torch.add(x, 100, alpha=3), torch.sub(x, 7, alpha=3))),
         _int8),
    case("f16-number-alpha", Fn(lambda x: (torch.add(x, 0.7, alpha=0.3),
                                           torch.sub(x, 0.7, alpha=0.3),
                                           torch.rsub(x, 0.7, alpha=0.3))), _half, atol=EXACT),
    case("i8-trunc-divide-wrapped", Fn(lambda x: torch.div(x, 300, rounding_mode="trunc")),
         _int8),
    # float16 regression rows: the number rounded to float16 first, as torch's kernels do
    case("f16-add-sub-compare", Fn(lambda x: (x + 0.1, x - 0.1, 0.1 - x, x < 0.1,
                                              torch.where(x > 0.2, x, 0.1),
                                              torch.clamp(x, 0.1, 0.3))), _half, atol=EXACT),
]


@pytest.mark.parametrize("module, make_inputs, kwargs", CASES)
def test_a_python_number_is_applied_in_the_computation_dtype(module, make_inputs, kwargs):
    assert_converts(module, make_inputs(), **kwargs)


def test_a_run_time_pad_fills_a_float64_tensor_with_the_double():
    """DynamicPad (a pad amount computed from a run-time size) cast its Python fill to the
    tensor's dtype through a float32 tensor: 0.1 became 0.10000000149 (failed before)."""
    import numpy as np

    import crossport

    module = Fn(lambda x: F.pad(x, (0, (4 - x.shape[-1] % 4) % 4), value=0.1)).eval()
    example = (torch.randn(2, 5, dtype=torch.float64),)
    conversion = crossport.convert_with_report(module, example, dynamic_dims={0: {1: "n"}})
    assert "DynamicPad" in {type(layer).__name__ for layer in conversion.model.layers}
    for size in (5, 6, 7):
        x = torch.randn(2, size, dtype=torch.float64)
        got = np.asarray(conversion.model(x.numpy()))
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, module(x).numpy())
