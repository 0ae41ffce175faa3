"""Linear, matmul, bmm, einsum (pitfalls.md items 9 and 10)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import crossport
from tests.harness import assert_converts, assert_matches_at_sizes
from tests.ops.opcases import Fn, case, inputs


def seeded(factory):
    torch.manual_seed(0)
    return factory()


class Attention(nn.Module):
    """q @ k^T softmax @ v on [B, T, D]: matmul with a transposed operand."""

    def __init__(self, d=8):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        return torch.softmax(q @ k.transpose(-2, -1) / 8 ** 0.5, -1) @ v


ADDMV, ADDBMM = ("aten_addmv_default",), ("aten_addbmm_default",)
TRILINEAR = ("aten__trilinear_default",)
GEN = torch.Generator().manual_seed(0)

CASES = [
    case("pitfall10-linear-2d", seeded(lambda: nn.Linear(6, 4)), (3, 6), expect_converters=("aten_linear_default",)),
    case("linear-nobias", seeded(lambda: nn.Linear(6, 4, bias=False)), (3, 6), expect_converters=("aten_linear_default",)),
    case("linear-1d-input", seeded(lambda: nn.Linear(6, 4)), (6,),
         expect_converters=("aten_linear_default",)),
    case("linear-1d-input-nobias", seeded(lambda: nn.Linear(6, 4, bias=False)), (6,), expect_converters=("aten_linear_default",)),
    case("linear-3d-input", seeded(lambda: nn.Linear(6, 4)), (2, 5, 6), expect_converters=("aten_linear_default",)),
    # weights computed in forward (a hypernetwork; tied weights scaled): a matmul
    case("linear-weight-and-bias-inputs", Fn(lambda x, w, b: F.linear(x, w, b)),
         [(2, 5, 6), (3, 6), (3,)], expect_converters=("aten_linear_default",)),
    case("linear-weight-from-a-hypernetwork",
         seeded(lambda: Fn(lambda self, x, z: F.linear(x, (self.w * z.sigmoid()).T, self.b),
                           w=torch.randn(6, 4), b=torch.randn(4))),
         [(3, 6), (6, 1)]),
    case("linear-1d-input-weight-input", Fn(lambda x, w: F.linear(x, w)), [(6,), (4, 6)]),
    # a Linear with no outputs, then one with no inputs (its bias only): no Dense has 0 units
    case("linear-zero-features", seeded(lambda: nn.Sequential(nn.Linear(6, 0), nn.Linear(0, 4))),
         (2, 5, 6), expect_converters=("aten_linear_default",)),
    # AdaptiveLogSoftmaxWithLoss(8, cutoffs=[5, 10]): its last cluster projects to 8 // 16 = 0
    case("adaptive-log-softmax-log-prob",
         seeded(lambda: Fn(nn.AdaptiveLogSoftmaxWithLoss(8, 20, cutoffs=[5, 10]).log_prob)),
         (3, 8)),
    case("linear-4d-input", seeded(lambda: nn.Linear(5, 3)), (2, 3, 4, 5), expect_converters=("aten_linear_default",)),
    case("pitfall9-conv-flatten-linear", seeded(lambda: nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 3 * 4, 5))), (2, 3, 5, 6), expect_converters=("aten_conv_nd", "aten_linear_default", "aten_view_default")),
    case("pitfall9-conv-flatten-linear-linear", seeded(lambda: nn.Sequential(
        nn.Conv2d(3, 2, 3), nn.Flatten(), nn.Linear(2 * 3 * 3, 5), nn.ReLU(), nn.Linear(5, 2))),
         (2, 3, 5, 5), expect_converters=("aten_conv_nd", "aten_linear_default", "aten_relu_default", "aten_view_default")),
    case("linear-on-conv-channels", seeded(lambda: nn.Sequential(
        nn.Conv2d(3, 4, 3), Fn(lambda x: x.transpose(1, 3)), nn.Linear(4, 2))), (1, 3, 5, 6), expect_converters=("aten_conv_nd", "aten_linear_default", "aten_permute_default")),
    case("mlp", seeded(lambda: nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 2))),
         (4, 6), expect_converters=("aten_gelu_default", "aten_linear_default")),
    case("matmul-2d", Fn(torch.matmul), [(3, 4), (4, 5)],
         expect_converters=("aten_matmul_default",)),
    case("matmul-batched-broadcast", Fn(torch.matmul), [(2, 3, 4), (4, 5)], expect_converters=("aten_matmul_default",)),
    case("matmul-batch-broadcast-both", Fn(torch.matmul), [(2, 1, 3, 4), (5, 4, 2)], expect_converters=("aten_matmul_default",)),
    case("matmul-vector", Fn(torch.matmul), [(2, 3, 4), (4,)], expect_converters=("aten_matmul_default",)),
    case("mm", Fn(torch.mm), [(3, 4), (4, 2)], expect_converters=("aten_bmm_default",)),
    case("bmm", Fn(torch.bmm), [(2, 3, 4), (2, 4, 5)],
         expect_converters=("aten_bmm_default",)),
    # torch sums int32 into int64 in a one-operand reduction (Keras kept int32)
    case("einsum-int32-reduction-is-int64", Fn(lambda a: torch.einsum("ij->j", (a * 9).int())),
         (3, 4), expect_converters=("aten_einsum_default",)),
    # Keras' TF einsum computes integers in float32: low bits lost, int32 saturated
    case("einsum-integers-exact", Fn(lambda a, b: (
        torch.einsum("bij,bjk->bik", (a * 2**40).long(), (b * 2**20).long()),
        torch.einsum("...ij,jk", (a * 2**40).long(), (b[0] * 2**20).long()),
        torch.einsum("i,i", (a[0, :, 0] * 2**30).int(), (a[1, :, 0] * 2**8).int()),
        torch.einsum("Bj,j->B", (a[0] * 2**40).long(), (b[0, :, 0] * 2**20).long()),
        torch.einsum("ij,ij->", (a[0] * 2**20).to(torch.int16), (a[1] * 2**4).to(torch.int16)),
        torch.einsum("i,j", (a[0, 0] * 2**35).long(), (b[0, 0] * 2**35).long()))),
         [(2, 3, 4), (2, 4, 5)], expect_converters=("aten_einsum_default",)),
    # torch's implicit output sorts A-Z before a-z: "ab,bC" is "Ca" (Keras' renaming of
    # upper-case letters gave "aC": a transposed result the check refused)
    case("einsum-implicit-output-mixed-case", Fn(lambda a, b: (
        torch.einsum("ab,bC", a, b), torch.einsum("...b,bC", a, b),
        torch.einsum("Zb, bc", a, b))), [(2, 3), (3, 4)],
         expect_converters=("aten_einsum_default",)),
    case("einsum-bij-bjk", Fn(lambda a, b: torch.einsum("bij,bjk->bik", a, b)),
         [(2, 3, 4), (2, 4, 5)],
         expect_converters=("aten_einsum_default",)),
    case("einsum-outer-transpose", Fn(lambda a, b: torch.einsum("i,j->ji", a, b)), [(3,), (4,)], expect_converters=("aten_einsum_default",)),
    case("einsum-after-conv", seeded(lambda: nn.Sequential(
        nn.Conv2d(3, 4, 3), Fn(lambda x: torch.einsum("nchw,nchw->nc", x, x)))), (1, 3, 5, 6),
         max_transposes=None, expect_converters=("aten_conv_nd", "aten_einsum_default")),
    case("attention-matmul-transpose", Attention(), (2, 5, 8), max_transposes=None, expect_converters=("aten_div_tensor", "aten_linear_default", "aten_matmul_default", "aten_permute_default", "aten_softmax_int", "aten_split_tensor")),
    case("addmm-param", Fn(lambda m, x: torch.addmm(m.b, x, m.w, beta=0.5, alpha=2.0),
                           b=torch.randn(4, generator=torch.Generator().manual_seed(3)),
                           w=torch.randn(6, 4, generator=torch.Generator().manual_seed(4))),
         (3, 6),
         expect_converters=("aten_addmm_default",)),
    case("addmm-hf-conv1d", Fn(lambda m, x: torch.addmm(m.b, x.view(-1, 40), m.w).view(2, 3, 48),
                               b=torch.randn(48, generator=torch.Generator().manual_seed(3)),
                               w=torch.randn(40, 48, generator=torch.Generator().manual_seed(4))),
         (2, 3, 40), expect_converters=("aten_addmm_default", "aten_view_default")),
    # addmv/addbmm (were "no converter"): beta * self + alpha * products
    case("addmv", Fn(torch.addmv), [(3,), (3, 5), (5,)], expect_converters=ADDMV),
    case("addmv-beta-alpha-broadcast-self", Fn(lambda s, m, v: (
        torch.addmv(s, m, v, beta=0.5, alpha=-2.0), torch.addmv(s[0], m, v, beta=3),
        torch.addmv(s[:1], m, v, alpha=0.25))), [(3,), (3, 5), (5,)], expect_converters=ADDMV),
    case("addmv-param-matrix", Fn(lambda m, s, v: torch.addmv(s, m.w, v, beta=0.5),
                                  w=torch.randn(4, 6, generator=torch.Generator().manual_seed(4))),
         [(4,), (6,)], expect_converters=ADDMV),
    case("addmv-int64-int32-wrap", Fn(lambda s, m, v: (
        torch.addmv(s.long() * 2**40, (m * 2**20).long(), (v * 2**20).long(), beta=3, alpha=-5),
        torch.addmv(s.int() * 2**20, (m * 2**10).int(), (v * 2**12).int(), beta=0, alpha=7))),
         [(3,), (3, 5), (5,)], expect_converters=ADDMV),
    case("addbmm", Fn(torch.addbmm), [(3, 5), (4, 3, 2), (4, 2, 5)], expect_converters=ADDBMM),
    case("addbmm-beta-alpha-broadcast-self", Fn(lambda s, a, b: (
        torch.addbmm(s, a, b, beta=-0.5, alpha=2.0), torch.addbmm(s[0], a, b, beta=2),
        torch.addbmm(s[:, :1], a, b, alpha=0.5))), [(3, 5), (4, 3, 2), (4, 2, 5)],
         expect_converters=ADDBMM),
    case("addbmm-int64-int32", Fn(lambda s, a, b: (
        torch.addbmm((s * 9).long(), (a * 2**20).long(), (b * 2**20).long(), beta=2, alpha=3),
        torch.addbmm((s * 9).int(), (a * 9).int(), (b * 9).int(), beta=0, alpha=-1))),
         [(3, 5), (4, 3, 2), (4, 2, 5)], expect_converters=ADDBMM),
    case("addbmm-of-a-channels-last-conv-output", seeded(lambda: nn.Sequential(
        nn.Conv2d(3, 4, 3), Fn(lambda y: torch.addbmm(y[0, 0], y[0], y[1].transpose(1, 2),
                                                      beta=0.5)))), (2, 3, 6, 6),
         max_transposes=None, expect_converters=("aten_conv_nd", *ADDBMM)),
    case("addmv-addbmm-float64", Fn(lambda s, a, b: (
        torch.addmv(s[:, 0].double(), a[0].double(), b[0, :, 0].double(), beta=1 / 3),
        torch.addbmm(s.double(), a.double(), b.double(), alpha=1 / 3))),
         [(3, 5), (4, 3, 2), (4, 2, 5)], expect_converters=ADDMV + ADDBMM),
    # Keras' TF matmul computes integers in float32: large int64 products lost their low
    # bits, int32 overflow saturated instead of wrapping
    case("matmul-mm-bmm-addmm-integers-exact", Fn(lambda a, b: (
        (a * 2**40).long() @ (b * 2**20).long(), torch.mm((a[0] * 2**30).int(), (b[0] * 2**8).int()),
        torch.bmm((a * 2**20).long(), (b * 2**30).long()),
        torch.addmm((a[0, :, :1] * 2**40).long(), (a[0] * 2**33).long(), (b[0] * 2**27).long()),
        (a[0, 0] * 2**30).long() @ (b[0] * 2**30).long(), (a[0] * 2**40).long() @ (b[0, :, 0] * 9).long(),
        (a[0, :, 0] * 2**40).long() @ (b[0, 0, :3] * 2**20).long())),
         [(4, 3, 2), (4, 2, 5)], expect_converters=("aten_matmul_default", "aten_bmm_default",
                                                     "aten_addmm_default")),
    case("matmul-param-right", Fn(lambda m, x: x @ m.w,
                                  w=torch.randn(40, 48, generator=torch.Generator().manual_seed(4))),
         (2, 3, 40), expect_converters=("aten_matmul_default",)),
    case("matmul-param-left", Fn(lambda m, x: m.w @ x,
                                 w=torch.randn(48, 40, generator=torch.Generator().manual_seed(4))),
         (2, 40, 3), expect_converters=("aten_matmul_default",)),
    case("conv1d-transpose-linear-no-transpose", seeded(lambda: nn.Sequential(
        nn.Conv1d(3, 4, 3), Fn(lambda x: x.transpose(1, 2)), nn.Linear(4, 6))), (2, 3, 9), expect_converters=("aten_conv_nd", "aten_linear_default", "aten_permute_default")),
    case("linear-transpose-conv1d-no-transpose", seeded(lambda: nn.Sequential(
        nn.Linear(5, 4), Fn(lambda x: x.transpose(1, 2)), nn.Conv1d(4, 3, 3))), (2, 9, 5), expect_converters=("aten_conv_nd", "aten_linear_default", "aten_permute_default")),
    # nn.Bilinear / F.bilinear (was "no converter": _trilinear, x1 W x2 + b), with and without
    # bias, on leading dims, and in integers (exact, wrapping as torch's)
    case("bilinear", seeded(lambda: nn.Bilinear(3, 4, 5)), [(2, 3), (2, 4)],
         expect_converters=TRILINEAR),
    case("bilinear-nobias-leading-dims", seeded(lambda: nn.Bilinear(3, 4, 2, bias=False)),
         [(2, 5, 3), (2, 5, 4)], expect_converters=TRILINEAR),
    case("bilinear-integers-exact", Fn(
        lambda m, a, b: (F.bilinear((a * 2**20).long(), (b * 2**20).long(), m.w, m.b),
                         F.bilinear((a * 2**12).int(), (b * 2**12).int(), m.w.int())),
        w=torch.randint(-2**20, 2**20, (5, 2, 4), generator=GEN),
        b=torch.randint(-9, 9, (5,), generator=GEN)),
         [(3, 2), (3, 4)], expect_converters=TRILINEAR),
    case("patch-embed-layernorm-linear", seeded(lambda: nn.Sequential(
        nn.Conv2d(3, 8, 2, stride=2), Fn(lambda x: x.flatten(2).transpose(1, 2)), nn.LayerNorm(8),
        nn.Linear(8, 4))), (2, 3, 8, 8), expect_converters=("aten_conv_nd", "aten_layer_norm_default", "aten_linear_default", "aten_permute_default", "aten_view_default")),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_linear(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), **kwargs)


class HFConv1D(nn.Module):
    """GPT-2's projection: ``addmm(bias, x, W)`` with ``W`` stored as [in, out]."""

    def __init__(self, n_in=40, n_out=48):
        super().__init__()
        torch.manual_seed(0)
        self.weight = nn.Parameter(torch.randn(n_in, n_out))
        self.bias = nn.Parameter(torch.randn(n_out))

    def forward(self, x):
        out = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return out.view(*x.shape[:-1], -1) @ self.weight.T  # and a matmul with a parameter


def test_matrix_product_constants_are_model_weights():
    """A parameter in addmm/matmul is a weight of the Keras model (saved in its weights
    file), not a constant inlined in its graph (GPT-2's export took 5x longer)."""
    import numpy as np

    import crossport

    module = HFConv1D().eval()
    conversion = crossport.convert_with_report(module, (torch.randn(2, 3, 40),))
    stored = sum(int(np.prod(w.shape)) for w in conversion.model.weights)
    assert stored >= sum(p.numel() for p in module.parameters()), stored
    assert "Dense" in {type(layer).__name__ for layer in conversion.model.layers}


NAN, INF = float("nan"), float("inf")


def _special_operands():
    """self [3, 4], a [2, 3, 3], b [2, 3, 4] holding NaN, +-inf and -0.0 in different
    places (rows and columns without them too)."""
    s = torch.tensor([[NAN, 1.0, INF, -0.0], [2.0, -INF, 0.5, NAN], [1.0, 2.0, 3.0, 4.0]])
    a = torch.tensor([[[1.0, NAN, 0.0], [INF, 2.0, -1.0], [0.5, 0.25, -0.0]],
                      [[1.0, 1.0, 1.0], [-INF, 0.0, 2.0], [3.0, -2.0, 0.5]]])
    b = torch.tensor([[[1.0, -2.0, 0.5, 3.0], [NAN, 0.0, 1.0, 1.0], [-1.0, INF, 2.0, 0.0]],
                      [[0.5, 1.0, -1.0, 2.0], [1.0, 1.0, 0.0, -0.0], [2.0, 0.5, NAN, 1.0]]])
    return s, a, b


def _zero_scalars(s, a, b):
    """beta=0 leaves self out and alpha=0 the product, NaN and inf included (torch's BLAS
    rule; ``0 * nan`` would be NaN); otherwise they propagate."""
    return tuple(op for beta, alpha in ((0, 1), (1, 0), (0, 0), (2, -1), (0.0, 0.5))
                 for op in (torch.addmm(s, a[0], b[0], beta=beta, alpha=alpha),
                            torch.addmv(s[:, 0], a[1], b[1, :, 1], beta=beta, alpha=alpha),
                            torch.addmv(s[:, 3], a[0], b[0, :, 2], beta=beta, alpha=alpha),
                            torch.addbmm(s, a, b, beta=beta, alpha=alpha)))


def test_add_products_zero_scalars_ignore_nan_like_torch():
    """addmm (beta=0 and alpha=0 were NaN where self or the product held NaN/inf), addmv
    and addbmm on special values."""
    assert_converts(Fn(_zero_scalars), _special_operands(), max_transposes=None,
                    expect_converters=("aten_addmm_default", *ADDMV, *ADDBMM))


def test_integer_einsum_with_a_diagonal_is_refused():
    """A repeated subscript in one operand of an integer einsum: refused before building."""
    module = Fn(lambda x: torch.einsum("ii->i", x)).eval()
    with pytest.raises(crossport.UnsupportedOpError, match=r"einsum with a repeated subscript"):
        crossport.convert(module, (torch.arange(9).reshape(3, 3),))


def test_bilinear_with_a_dynamic_batch():
    module = seeded(lambda: nn.Bilinear(3, 4, 5)).eval()
    conversion = crossport.convert_with_report(module, inputs([(2, 3), (2, 4)]),
                                               dynamic_batch=True)
    assert_matches_at_sizes(module, conversion, [((5, 3), (5, 4)), ((1, 3), (1, 4))])
