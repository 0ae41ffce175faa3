"""Embeddings, gathers, scatters, sorting, masks, positions (pitfalls.md items 14, 15).

Integer outputs compare exactly; index inputs are int64 like torch's token ids.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.harness import assert_converts
from tests.ops.opcases import ConvThen, Fn, case, inputs


def ints(shape, low, high, seed=0):
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed))


def floats(shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def emb(n=10, d=4, **kw):
    torch.manual_seed(0)
    return nn.Embedding(n, d, **kw)


class Positions(nn.Module):
    """BERT-style: token + position embedding, positions from arange."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.tok, self.pos = nn.Embedding(20, 6), nn.Embedding(16, 6)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        return self.tok(ids) + self.pos(pos)


class RobertaPositions(nn.Module):
    """RoBERTa: positions counted over non-padding tokens with cumsum."""

    def __init__(self, pad=1):
        super().__init__()
        torch.manual_seed(0)
        self.pad, self.pos = pad, nn.Embedding(16, 4, padding_idx=pad)

    def forward(self, ids):
        mask = ids.ne(self.pad).int()
        positions = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + self.pad
        return self.pos(positions)


class MaskedScores(nn.Module):
    def forward(self, scores, mask):
        return scores.masked_fill(mask[:, None, :] == 0, float("-inf")).softmax(-1)


CASES = [
    case("embedding", emb(), lambda: (ints((2, 5), 0, 10),),
         expect_converters=("aten_embedding_default",)),
    case("pitfall14-embedding-padding-idx", emb(padding_idx=0), lambda: (ints((2, 5), 0, 10),), expect_converters=("aten_embedding_default",)),
    case("embedding-3d-ids", emb(), lambda: (ints((2, 3, 4), 0, 10),), expect_converters=("aten_embedding_default",)),
    case("arange-position-embedding", Positions(), lambda: (ints((2, 7), 0, 20),), expect_converters=("aten_add_tensor", "aten_embedding_default")),
    case("cumsum-roberta-positions", RobertaPositions(), lambda: (ints((2, 7), 0, 5),),
         expect_converters=("aten_ne_Scalar",)),
    case("cumsum-float-dim1", Fn(lambda x: x.cumsum(1)), (2, 5, 3),
         expect_converters=("aten_cumsum_default",)),
    case("cumsum-after-conv-channels", nn.Sequential(nn.Conv2d(3, 4, 3), Fn(lambda x: x.cumsum(1))),
         (1, 3, 6, 6), expect_converters=("aten_conv_nd", "aten_cumsum_default")),
    case("comparison-masks-where", Fn(lambda x: torch.where((x > 0) & (x < 1), x, -x)),
         (2, 3, 4), expect_converters=("aten_bitwise_and_Tensor", "aten_gt_Scalar", "aten_lt_Scalar", "aten_neg_default", "aten_where_self")),
    case("masked-fill-attention-mask", MaskedScores(),
         lambda: (floats((2, 3, 5)), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])), expect_converters=("aten_eq_Scalar", "aten_masked_fill_scalar", "aten_softmax_int", "aten_view_default")),
    case("masked-fill-bool", Fn(lambda x: x.masked_fill(x < 0, 0.5)), (2, 6),
         expect_converters=("aten_lt_Scalar", "aten_masked_fill_scalar")),
    case("any-all-dims", Fn(lambda x: ((x > 0).any(1).long() + (x > 1).all(1).long())),
         (2, 3, 4),
         expect_converters=("aten_all_dim", "aten_any_dim")),
    case("full-like-zeros-like", Fn(lambda x: torch.full_like(x, 2.5) + torch.zeros_like(x)
                                    + torch.ones_like(x) * x), (2, 3), expect_converters=("aten_add_tensor", "aten_full_like_default", "aten_mul_tensor")),
    case("new-ones-new-zeros", Fn(lambda x: x + x.new_ones(3) + x.new_zeros(2, 3)
                                  + x.new_full((1, 3), 2.0)), (2, 3), expect_converters=("aten_add_tensor",)),
    case("gather-dim1", Fn(lambda x, i: torch.gather(x, 1, i)),
         lambda: (floats((2, 5, 3)), ints((2, 4, 3), 0, 5)), kernel_transposes=True,
         expect_converters=("aten_gather_default",)),
    case("gather-smaller-index", Fn(lambda x, i: torch.gather(x, 2, i)),
         lambda: (floats((2, 5, 6)), ints((2, 3, 2), 0, 6)), expect_converters=("aten_gather_default",)),
    case("take-along-dim-negative", Fn(lambda x, i: torch.take_along_dim(x, i - 2, 2)),
         lambda: (floats((2, 3, 4)), ints((2, 3, 2), 0, 4)), expect_converters=("aten_expand_default", "aten_gather_default", "aten_remainder_tensor", "aten_sub_tensor")),
    case("index-select-runtime-index", Fn(lambda x, i: x.index_select(1, i)),
         lambda: (floats((2, 5, 3)), ints((4,), 0, 5)),
         expect_converters=("aten_index_select_default",)),
    case("advanced-index-one-tensor", Fn(lambda x, i: x[:, i]),
         lambda: (floats((2, 5, 3)), ints((2, 3), 0, 5)),
         expect_converters=("aten_index_tensor",)),
    case("pitfall15-advanced-index-negative", Fn(lambda x, i: x[:, i - 5]),
         lambda: (floats((2, 5, 3)), ints((4,), 0, 5)), expect_converters=("aten_index_tensor", "aten_sub_tensor")),
    case("advanced-index-two-tensors-pooling", Fn(
        lambda x, i: x[torch.arange(x.shape[0]), i]),
         lambda: (floats((3, 6, 4)), ints((3,), 0, 6)), expect_converters=("aten_index_tensor",)),
    # index tensors on non-adjacent dims: their broadcast dims first, then the others
    case("advanced-index-non-adjacent-lists", Fn(lambda x: x[[0, 2], :, [1, -1]]), (3, 3, 4),
         expect_converters=("aten_index_tensor",), max_transposes=1),
    case("advanced-index-non-adjacent-broadcast-negative", Fn(lambda x, i, j: x[i, 1:, j]),
         lambda: (floats((3, 3, 4)), torch.tensor([[0], [-1]]), torch.tensor([1, -3, 0])),
         expect_converters=("aten_index_tensor",), max_transposes=1),
    case("advanced-index-non-adjacent-after-conv", ConvThen(lambda y: y[:, [0, 5], :, [2, 1]]),
         (2, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_index_tensor"),
         max_transposes=1),
    case("scatter-src", Fn(lambda x, i, s: x.scatter(1, i, s)),
         lambda: (floats((2, 5)), torch.tensor([[0, 2, 4], [1, 3, 0]]), floats((2, 3), 1)), expect_converters=("aten_scatter_src",)),
    case("scatter-value", Fn(lambda x, i: x.scatter(1, i, 7.0)),
         lambda: (floats((2, 5)), torch.tensor([[0, 2], [4, 1]])), expect_converters=("aten_scatter_src",)),
    case("scatter-add-duplicates", Fn(lambda x, i, s: x.scatter_add(1, i, s)),
         lambda: (floats((2, 5)), torch.tensor([[0, 0, 4], [1, 1, 1]]), floats((2, 3), 1)),
         expect_converters=("aten_scatter_src",)),
    # torch adds bools as or; TF has no bool Add / segment sum (failed at run time)
    case("scatter-add-bools", Fn(lambda x, i, s: (x > 0).scatter_add(1, i, s > 0)),
         lambda: (floats((2, 5)), torch.tensor([[0, 0, 4], [1, 1, 1]]), floats((2, 3), 1)),
         expect_converters=("aten_scatter_src",)),
    case("index-put-accumulate-bools", Fn(
        lambda x, i, v: torch.index_put(x > 0, (i,), v > 0, accumulate=True)),
         lambda: (floats((4, 3)), torch.tensor([0, 2, 0]), floats((3, 3), 1)),
         expect_converters=("aten_index_put_default",)),
    case("index-add-bools", Fn(lambda x, i, v: torch.index_add(x > 0, 0, i, v > 0)),
         lambda: (floats((4, 3)), torch.tensor([0, 2, 0]), floats((3, 3), 1))),
    case("topk-largest", Fn(lambda x: torch.topk(x, 3, dim=-1)), (2, 3, 7),
         expect_converters=("aten_topk_default",)),
    case("topk-smallest-dim1", Fn(lambda x: torch.topk(x, 2, dim=1, largest=False)), (2, 5, 3),
         kernel_transposes=True, expect_converters=("aten_topk_default",)),
    case("sort-ascending", Fn(lambda x: torch.sort(x, dim=-1)), (3, 6), expect_converters=("aten_sort_default",)),
    case("sort-descending-dim0", Fn(lambda x: torch.sort(x, dim=0, descending=True)), (5, 3),
         kernel_transposes=True, expect_converters=("aten_sort_default",)),
    case("sort-stable-ties", Fn(lambda x: torch.sort(x, stable=True)),
         lambda: (torch.tensor([[2, 1, 2, 1, 0, 2], [3, 3, 1, 1, 3, 0]]),), expect_converters=("aten_sort_default",)),
    case("sort-uint8", Fn(lambda x: torch.sort(x, dim=-1)),
         lambda: (torch.randint(0, 255, (3, 6), dtype=torch.uint8),), expect_converters=("aten_sort_default",)),
    case("topk-uint8-smallest", Fn(lambda x: torch.topk(x, 2, largest=False)),
         lambda: (torch.randint(0, 255, (3, 6), dtype=torch.uint8),), expect_converters=("aten_topk_default",)),
    case("sort-bool-descending", Fn(lambda x: torch.sort(x > 0, descending=True, stable=True)),
         (3, 6), expect_converters=("aten_gt_Scalar", "aten_sort_default")),
    case("argsort", Fn(lambda x: torch.argsort(x, dim=1)), (2, 6, 3), kernel_transposes=True,
         expect_converters=("aten_sort_default",)),
    case("argmax-dim0", Fn(lambda x: x.argmax(0)), (5, 3, 2), expect_converters=("aten_argmax_default",)),
    case("argmax-dim-last-keepdim", Fn(lambda x: x.argmax(-1, keepdim=True)), (2, 3, 5),
         expect_converters=("aten_argmax_default",)),
    case("argmax-flat", Fn(lambda x: x.argmax()), (3, 4), expect_converters=("aten_argmax_default",)),
    case("pitfall15-argmax-ties-first", Fn(lambda x: x.argmax(1)),
         lambda: (torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]]),), expect_converters=("aten_argmax_default",)),
    case("argmax-channels-after-conv", nn.Sequential(nn.Conv2d(3, 4, 3),
                                                     Fn(lambda x: x.argmax(1))), (2, 3, 6, 6), expect_converters=("aten_argmax_default", "aten_conv_nd")),
    # nonzero_static (was "no converter"): row-major coordinates, cut or filled to `size`
    case("nonzero-static-special-values", Fn(lambda x: (
        torch.nonzero_static(x, size=30), torch.nonzero_static(x, size=4, fill_value=7),
        torch.nonzero_static(x[0], size=9, fill_value=-2**40))),
         lambda: (torch.tensor([[0.0, float("nan"), -0.0, float("inf"), 1e-30],
                                [-float("inf"), 0.0, 0.0, -1.0, float("nan")],
                                [0.0, -0.0, 0.0, 0.0, 0.0]]),),
         expect_converters=("aten_nonzero_static_default",)),
    case("nonzero-static-ints-bools-3d", Fn(lambda x: (
        torch.nonzero_static((x * 2).long(), size=40), torch.nonzero_static(x > 0.5, size=3),
        torch.nonzero_static((x * 3).int(), size=60, fill_value=2**31 - 1))), (2, 3, 5),
         expect_converters=("aten_nonzero_static_default",)),
    case("nonzero-static-int64-extremes", Fn(lambda x: torch.nonzero_static(x, size=6)),
         lambda: (torch.tensor([[-2**63, 0, 2**63 - 1], [0, -1, 0]]),),
         expect_converters=("aten_nonzero_static_default",)),
    case("nonzero-static-after-conv", nn.Sequential(
        nn.Conv2d(3, 4, 3), Fn(lambda y: torch.nonzero_static(y > 0.2, size=25))),
         (1, 3, 5, 5), max_transposes=1,  # inherent: torch's row-major order of coordinates
         expect_converters=("aten_conv_nd", "aten_nonzero_static_default")),
    case("nonzero-static-empty", Fn(lambda x: (
        torch.nonzero_static(x, size=0), x + torch.nonzero_static(x.sum(), size=2).sum())),
         (3, 4), expect_converters=("aten_nonzero_static_default",)),
    case("tril-triu-causal", Fn(lambda x: torch.tril(x) - torch.triu(x, 1)), (2, 4, 4), expect_converters=("aten_sub_tensor", "aten_where_self")),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_index(module, shapes, kwargs):
    assert_converts(module, shapes() if callable(shapes) else inputs(shapes), **kwargs)
