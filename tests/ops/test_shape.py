"""Views, permutes, concatenation, splitting, slicing, indexing (pitfalls.md items 8, 9).

Rows "after-conv" receive channels-last activations, so every dim argument is remapped
through the layout; a transpose is allowed only where torch's own result needs one.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import crossport
from crossport.errors import DynamicDimError
from tests.harness import assert_converts
from tests.ops.opcases import Fn, case, inputs


def after_conv(fn, c_in=3, c_out=4, k=3):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(c_in, c_out, k), Fn(fn))


def conv_fn_conv(fn, c_mid=4, c_after=4):
    """conv -> fn -> 1x1 conv: the op sits between two channels-last consumers."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), Fn(fn), nn.Conv2d(c_mid, c_after, 1))


def flatten_linear(features, out=5):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(features, out))


def flatten_linear_copy(features, out=5):
    """conv -> view_copy(batch, -1) -> Linear: the flat NHWC order reaches the kernel."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), Fn(lambda x: torch.view_copy(x, (x.shape[0], -1))),
                         nn.Linear(features, out))


class FlatConvWith(nn.Module):
    """``op(flatten(conv(x), 1), y)``: features in channels-last block order meet a tensor in
    torch order (the flat layout goes back to torch order once)."""

    def __init__(self, op, c_out):
        super().__init__()
        torch.manual_seed(0)
        self.op, self.conv = op, nn.Conv2d(3, c_out, 3)

    def forward(self, x, y):
        return self.op(torch.flatten(self.conv(x), 1), y)


class SplitCat(nn.Module):
    def forward(self, x):
        a, b = torch.split(x, [1, 3], dim=1)
        return torch.cat([b, a * 2], dim=1)


CASES = [
    # reshape family
    case("view-canonical", Fn(lambda x: x.view(2, -1, 4)), (2, 3, 8), expect_converters=("aten_view_default",)),
    case("reshape-merge-split", Fn(lambda x: x.reshape(2, 6, 2, 2)), (2, 3, 4, 2), expect_converters=("aten_view_default",)),
    case("flatten-start1", Fn(lambda x: torch.flatten(x, 1)), (2, 3, 4, 5), expect_converters=("aten_view_default",)),
    case("flatten-middle-dims", Fn(lambda x: torch.flatten(x, 1, 2)), (2, 3, 4, 5),
         expect_converters=("aten_view_default",)),
    case("unflatten", Fn(lambda x: x.unflatten(1, (2, 3))), (2, 6, 5), expect_converters=("aten_view_default",)),
    case("squeeze-all", Fn(lambda x: x.squeeze()), (2, 1, 3, 1), expect_converters=("aten_squeeze_dim",)),
    case("squeeze-dim", Fn(lambda x: x.squeeze(1)), (2, 1, 3, 1), expect_converters=("aten_squeeze_dim",)),
    case("unsqueeze-neg", Fn(lambda x: x.unsqueeze(-1)), (2, 3, 4), expect_converters=("aten_view_default",)),
    case("pitfall9-flatten-linear-kernel-permuted", flatten_linear(4 * 4 * 5), (2, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_linear_default", "aten_relu_default", "aten_view_default")),
    case("pitfall9-view-batch-linear", nn.Sequential(
        nn.Conv2d(3, 4, 3), Fn(lambda x: x.view(x.shape[0], -1)), nn.Linear(80, 3)),
         (2, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_linear_default", "aten_view_default")),
    case("flatten-after-conv-output", after_conv(lambda x: torch.flatten(x, 1)), (2, 3, 5, 6),
         max_transposes=None, expect_converters=("aten_conv_nd", "aten_view_default")),
    case("flatten2-transpose-patch-embed", after_conv(
        lambda x: x.flatten(2).transpose(1, 2), c_out=6, k=2), (2, 3, 6, 6), expect_converters=("aten_conv_nd", "aten_permute_default", "aten_view_default")),
    case("view-after-conv-splits-channels",
         after_conv(lambda x: x.view(x.shape[0], 2, 2, x.shape[2], x.shape[3]).sum(2)),
         (1, 3, 6, 6), max_transposes=None, expect_converters=("aten_conv_nd", "aten_sum_dim_intlist", "aten_view_default")),
    # permutes
    case("permute", Fn(lambda x: x.permute(2, 0, 3, 1)), (2, 3, 4, 5),
         expect_converters=("aten_permute_default",)),
    case("transpose-int", Fn(lambda x: x.transpose(1, 2)), (2, 3, 4), expect_converters=("aten_permute_default",)),
    case("t-2d", Fn(lambda x: x.t()), (3, 5), expect_converters=("aten_permute_default",)),
    case("permute-after-conv-to-nhwc", after_conv(lambda x: x.permute(0, 2, 3, 1)),
         (1, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_permute_default")),
    case("permute-nhwc-then-linear", nn.Sequential(
        nn.Conv2d(3, 4, 3), Fn(lambda x: x.permute(0, 2, 3, 1)), nn.Linear(4, 6)), (1, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_linear_default", "aten_permute_default")),
    # expand
    case("expand", Fn(lambda x: x.expand(2, 3, 4)), (1, 3, 1),
         expect_converters=("aten_expand_default",)),
    case("expand-bool-mask", Fn(lambda x: torch.where((x > 0).expand(2, 4, 5), x, -1.0)),
         (2, 1, 5), expect_converters=("aten_expand_default",)),
    case("expand-uint8", Fn(lambda x: (x > 0).to(torch.uint8).expand(2, 4, 5)), (2, 1, 5),
         expect_converters=("aten_expand_default",)),
    case("repeat", Fn(lambda x: x.repeat(1, 2, 3)), (2, 3, 4),
         expect_converters=("aten_repeat_default",)),
    case("repeat-new-leading-dims", Fn(lambda x: x.repeat(2, 1, 1, 2)), (3, 4, 5),
         expect_converters=("aten_repeat_default",)),
    case("tile-after-conv", conv_fn_conv(lambda x: torch.tile(x, (1, 2, 1, 1)), c_mid=8),
         (1, 3, 8, 8), expect_converters=("aten_conv_nd", "aten_repeat_default")),
    case("expand-new-leading-dim", Fn(lambda x: x.expand(5, 3, 4)), (3, 1), expect_converters=("aten_expand_default",)),
    case("expand-as-after-gap", after_conv(lambda x: x.mean((2, 3), keepdim=True).expand_as(x)),
         (1, 3, 6, 6), expect_converters=("aten_conv_nd", "aten_expand_as_default", "aten_mean_dim")),
    # cat / stack / split / chunk
    case("cat-dim0", Fn(lambda a, b: torch.cat([a, b])), [(2, 3), (1, 3)],
         expect_converters=("aten_cat_default",)),
    case("cat-negative-dim", Fn(lambda a, b: torch.cat([a, b], -1)), [(2, 3, 2), (2, 3, 4)], expect_converters=("aten_cat_default",)),
    case("pitfall8-cat-channels-after-conv", conv_fn_conv(lambda x: torch.cat([x, x * 2], 1),
                                                         c_mid=8), (1, 3, 6, 6), expect_converters=("aten_cat_default", "aten_conv_nd", "aten_mul_tensor")),
    case("cat-width-after-conv", after_conv(lambda x: torch.cat([x, -x], dim=3)), (1, 3, 6, 6), expect_converters=("aten_cat_default", "aten_conv_nd", "aten_neg_default")),
    case("stack-dim1", Fn(lambda a, b: torch.stack([a, b], 1)), [(2, 3, 4), (2, 3, 4)],
         expect_converters=("aten_stack_default",)),
    case("stack-last-after-conv", after_conv(lambda x: torch.stack([x, x + 1], -1)),
         (1, 3, 5, 5), max_transposes=None, expect_converters=("aten_add_tensor", "aten_conv_nd", "aten_stack_default")),
    case("split-equal", Fn(lambda x: torch.split(x, 2, dim=1)), (2, 6, 3), expect_converters=("aten_split_tensor",)),
    case("split-uneven-last-chunk", Fn(lambda x: torch.split(x, 4, dim=-1)), (2, 3, 10), expect_converters=("aten_split_tensor",)),
    case("split-sizes-channels-after-conv", SplitCat(), (1, 4, 5, 5), expect_converters=("aten_cat_default", "aten_mul_tensor", "aten_split_with_sizes_default")),
    case("pitfall8-split-channels-after-conv",
         after_conv(lambda x: torch.split(x, [1, 3], dim=1)), (1, 3, 6, 6),
         expect_converters=("aten_split_with_sizes_default",)),
    case("chunk-channels-after-conv", conv_fn_conv(lambda x: torch.chunk(x, 2, 1)[0] *
                                                   torch.chunk(x, 2, 1)[1], c_mid=2),
         (1, 3, 6, 6), expect_converters=("aten_conv_nd", "aten_mul_tensor", "aten_split_tensor")),
    case("chunk-uneven", Fn(lambda x: x.chunk(3, dim=2)), (2, 3, 7),
         expect_converters=("aten_split_tensor",)),
    case("unbind", Fn(lambda x: x.unbind(1)), (2, 3, 4),
         expect_converters=("aten_unbind_int",)),
    # the *_copy aliases (torch.view_copy ...): the same values, Keras has no views
    case("view-copy", Fn(lambda x: torch.view_copy(x, (2, -1, 4))), (2, 3, 8),
         expect_converters=("aten_view_default",)),
    case("view-copy-flatten-after-conv", flatten_linear_copy(4 * 4 * 5), (2, 3, 6, 7),
         expect_converters=("aten_conv_nd", "aten_linear_default", "aten_view_default")),
    case("permute-copy", Fn(lambda x: torch.permute_copy(x, (2, 0, 3, 1))), (2, 3, 4, 5),
         expect_converters=("aten_permute_default",)),
    case("permute-copy-after-conv-to-nhwc",
         after_conv(lambda x: torch.permute_copy(x, (0, 2, 3, 1))), (1, 3, 6, 7),
         expect_converters=("aten_conv_nd", "aten_permute_default")),
    case("unbind-copy", Fn(lambda x: torch.unbind_copy(x, -1)), (2, 3, 4),
         expect_converters=("aten_unbind_int",)),
    case("unbind-copy-channels-after-conv", after_conv(lambda x: torch.unbind_copy(x, 1)),
         (1, 3, 6, 6), expect_converters=("aten_conv_nd", "aten_unbind_int")),
    case("narrow-copy", Fn(lambda x: torch.narrow_copy(x, 1, 1, 3)), (2, 5, 4),
         expect_converters=("aten_narrow_copy_default",)),
    case("narrow-copy-negative-start-and-dim", Fn(lambda x: torch.narrow_copy(x, -1, -3, 2)),
         (2, 5, 4), expect_converters=("aten_narrow_copy_default",)),
    case("narrow-copy-empty", Fn(lambda x: torch.narrow_copy(x, 1, 5, 0) + 1), (2, 5, 4),
         expect_converters=("aten_narrow_copy_default",)),
    case("narrow-copy-channels-between-convs",
         conv_fn_conv(lambda x: torch.narrow_copy(x, 1, 1, 2), c_mid=2), (1, 3, 6, 6),
         expect_converters=("aten_conv_nd", "aten_narrow_copy_default")),
    case("narrow-copy-height-after-conv", after_conv(lambda x: torch.narrow_copy(x, 2, -4, 3)),
         (1, 3, 7, 6), expect_converters=("aten_conv_nd", "aten_narrow_copy_default")),
    case("narrow-copy-beside-a-dynamic-dim", Fn(lambda x: torch.narrow_copy(x, 2, 1, 2)),
         (2, 5, 4), dynamic_dims={0: {1: "seq"}},
         expect_converters=("aten_narrow_copy_default",)),
    # slicing and indexing
    case("slice-last-dim-step", Fn(lambda x: x[..., 1:7:2]), (2, 3, 8), expect_converters=("aten_slice_tensor",)),
    case("slice-negative", Fn(lambda x: x[:, -2:, :-1]), (2, 5, 4), expect_converters=("aten_slice_tensor",)),
    case("select-int", Fn(lambda x: x[:, 1]), (2, 3, 4),
         expect_converters=("aten_select_int",)),
    case("pitfall8-slice-channels-after-conv", conv_fn_conv(lambda x: x[:, 1:3], c_mid=2),
         (1, 3, 6, 6), expect_converters=("aten_conv_nd", "aten_slice_tensor")),
    case("slice-height-after-conv", after_conv(lambda x: x[:, :, 1:-1:2]), (1, 3, 7, 6), expect_converters=("aten_conv_nd", "aten_slice_tensor")),
    case("select-channel-after-conv", after_conv(lambda x: x[:, 2]), (1, 3, 6, 6), expect_converters=("aten_conv_nd", "aten_select_int")),
    case("index-select-dim0", Fn(lambda m, x: torch.index_select(x, 0, m.idx),
                                 idx=torch.tensor([2, 0, 2])), (3, 4), expect_converters=("aten_index_select_default",)),
    case("pitfall8-index-select-channels-after-conv",
         nn.Sequential(nn.Conv2d(3, 4, 3), Fn(lambda m, x: x.index_select(1, m.idx),
                                              idx=torch.tensor([3, 0, 1])),
                       nn.Conv2d(3, 2, 1)), (1, 3, 6, 6), expect_converters=("aten_conv_nd", "aten_index_select_default")),
    case("index-select-width-after-conv",
         nn.Sequential(nn.Conv2d(3, 4, 3), Fn(lambda m, x: x.index_select(-1, m.idx),
                                              idx=torch.tensor([0, 3, 3, 1]))), (1, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_index_select_default")),
    # XNNPACK-friendly forms (crossport/to_keras/slicing.py): unit-stride slices, no GATHER
    case("roll-two-dims-after-conv", after_conv(lambda x: torch.roll(x, (-2, 3), (2, 3))),
         (1, 3, 8, 9), expect_converters=("aten_conv_nd", "aten_index_select_default")),
    case("slice-step3-ragged-end", Fn(lambda x: x[:, 1::3]), (2, 8, 3),
         expect_converters=("aten_slice_tensor",)),
    case("slice-step2-patch-merging-after-conv",
         after_conv(lambda x: torch.cat([x[:, :, 0::2, 0::2], x[:, :, 1::2, 1::2]], 1)),
         (1, 3, 10, 10), expect_converters=("aten_conv_nd", "aten_slice_tensor", "aten_cat_default")),
    case("select-negative-index", Fn(lambda x: x[:, -1] + x[2]), (4, 4, 4),
         expect_converters=("aten_select_int",)),
    case("index-select-three-runs", Fn(lambda m, x: x.index_select(1, m.idx),
                                       idx=torch.tensor([4, 5, 0, 1, 2, 3, 3])), (2, 6),
         expect_converters=("aten_index_select_default",)),
    # identity in eval
    case("dropout-eval", nn.Sequential(nn.Conv2d(3, 4, 3), nn.Dropout(0.5), nn.Dropout2d(0.3)),
         (1, 3, 6, 6), expect_converters=("aten_conv_nd", "aten_dropout_default")),
    case("contiguous-clone", Fn(lambda x: x.transpose(1, 2).contiguous().clone()), (2, 3, 4),
         expect_converters=("aten_clone_default",)),
    case("conj-physical-of-real-tensors", after_conv(lambda x: (
        torch.conj_physical(x), torch.conj_physical((x * 9).long()), torch.conj_physical(x > 0))),
         (1, 3, 6, 6), expect_converters=("aten_conv_nd", "aten_clone_default")),
    case("to-dtype", Fn(lambda x: (x * 4).to(torch.int32)), (2, 3, 4), expect_converters=("aten_mul_tensor", "aten_to_copy_default")),
    case("squeeze-channel-after-conv",
         nn.Sequential(nn.Conv2d(3, 1, 3), Fn(lambda x: x.squeeze(1))),
         (2, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_squeeze_dim")),
    case("unsqueeze-after-conv", after_conv(lambda x: x.unsqueeze(2)), (1, 3, 6, 6),
         max_transposes=None, expect_converters=("aten_conv_nd", "aten_view_default")),
    case("transpose-hw-between-convs", conv_fn_conv(lambda x: x.transpose(2, 3)), (1, 3, 6, 8),
         max_transposes=None, expect_converters=("aten_conv_nd", "aten_permute_default")),  # inherent: H and W swap places in memory
    case("channel-shuffle-between-convs", conv_fn_conv(  # ShuffleNet: a channel gather
        lambda x: x.view(1, 2, 2, 4, 6).transpose(1, 2).reshape(1, 4, 4, 6)), (1, 3, 6, 8), expect_converters=("aten_conv_nd", "aten_permute_default", "aten_view_default")),
    case("channel-shuffle-batch2", conv_fn_conv(
        lambda x: x.view(2, 2, 2, 4, 6).transpose(1, 2).reshape(2, 4, 4, 6)), (2, 3, 6, 8), expect_converters=("aten_conv_nd", "aten_permute_default", "aten_view_default")),
    case("cat-param-and-activation", nn.Sequential(
        nn.Conv2d(3, 4, 3), Fn(lambda m, x: torch.cat([x, m.p.expand(x.shape[0], -1, -1, -1)], 1),
                               p=torch.randn(1, 2, 4, 4,
                                             generator=torch.Generator().manual_seed(5))),
        nn.Conv2d(6, 2, 1)), (2, 3, 6, 6),
         max_transposes=1, expect_converters=("aten_cat_default", "aten_conv_nd")),  # the constant is transposed at run time, not pre-permuted
    case("expand-channel-after-conv", nn.Sequential(
        nn.Conv2d(3, 1, 3), Fn(lambda x: x.expand(-1, 4, -1, -1)), nn.Conv2d(4, 2, 1)),
         (1, 3, 6, 6), expect_converters=("aten_conv_nd", "aten_expand_default")),
    case("slice-end-past-size-and-negative-start", Fn(lambda x: x[:, -3:100, 1:]), (2, 5, 4),
         expect_converters=("aten_slice_tensor",)),
    case("flatten-after-conv-plus-input", FlatConvWith(torch.add, 4), [(2, 3, 5, 5), (2, 36)],
         max_transposes=1, expect_converters=("aten_add_tensor", "aten_conv_nd", "aten_view_default")),
    case("flatten-after-conv-times-vector-input", FlatConvWith(torch.mul, 2),
         [(2, 3, 4, 5), (12,)], max_transposes=1, expect_converters=("aten_conv_nd", "aten_mul_tensor", "aten_view_default")),
    case("softmax-after-flatten", nn.Sequential(
        nn.Conv2d(3, 2, 3), nn.Flatten(), nn.Softmax(-1)), (2, 3, 4, 5), expect_converters=("aten_conv_nd", "aten_softmax_int", "aten_view_default")),
    case("mean-after-flatten", nn.Sequential(
        nn.Conv2d(3, 2, 3), nn.Flatten(), Fn(lambda x: x.mean(-1, keepdim=True))), (2, 3, 4, 5), expect_converters=("aten_conv_nd", "aten_mean_dim", "aten_view_default")),
    case("select-then-conv1d", nn.Sequential(
        nn.Conv2d(3, 4, 3), Fn(lambda x: x[:, :, 0]), nn.Conv1d(4, 2, 3)), (1, 3, 6, 7), expect_converters=("aten_conv_nd", "aten_select_int")),
    case("flip-two-dims", Fn(lambda x: torch.flip(x, [0, 2])), (2, 3, 4),
         expect_converters=("aten_flip_default",)),
    case("arange-full-of-dynamic-size", Fn(
        lambda x: x + torch.arange(x.shape[1]).unsqueeze(-1) + torch.full((x.shape[1], 1), 2.0)),
         (2, 5, 3), dynamic_dims={0: {1: "seq"}},
         expect_converters=("aten_arange_start_step", "aten_full_default", "aten_sym_size_int")),
    case("scalar-tensor-of-dynamic-size", Fn(lambda x: x * torch.scalar_tensor(x.shape[1])),
         (2, 5, 3), dynamic_dims={0: {1: "seq"}},
         expect_converters=("aten_scalar_tensor_default",)),
    case("view-product-of-dynamic-sizes", Fn(
        lambda x: x.reshape(x.shape[0], x.shape[1] * x.shape[2])), (2, 5, 3),
         dynamic_dims={0: {1: "seq"}}, dynamic_batch=True,
         expect_converters=("_symbolic_result", "aten_sym_size_int")),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_shape(module, shapes, kwargs):
    assert_converts(module, inputs(shapes), **kwargs)


_SPECIALS = [float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1e-45, -3.5, 3e38]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.int32, torch.bool])
def test_copy_aliases_carry_special_values(dtype):
    """NaN, +-inf, -0.0 (its sign), subnormals and integer extremes come through the *_copy
    aliases bit for bit."""
    if dtype.is_floating_point:
        x = torch.tensor(_SPECIALS * 3, dtype=dtype).reshape(2, 3, 4)
    elif dtype == torch.bool:
        x = torch.arange(24).reshape(2, 3, 4) % 3 == 0
    else:
        info = torch.iinfo(dtype)
        x = torch.tensor([info.min, info.max, -1, 0, 1, info.min + 1] * 4,
                         dtype=dtype).reshape(2, 3, 4)
    module = Fn(lambda x: (torch.view_copy(x, (6, 4)), torch.permute_copy(x, (2, 0, 1)),
                           *torch.unbind_copy(x, 1), torch.narrow_copy(x, 2, -3, 2)))
    conversion = assert_converts(module, (x,))
    got = conversion.model(x.numpy())
    want = module(x)
    for g, w in zip(got, want, strict=True):  # -0.0 kept: compare the bits
        assert np.array_equal(np.asarray(g).view(np.uint8), w.numpy().view(np.uint8))


def test_narrow_copy_of_a_dynamic_dim_is_refused():
    """torch raises when a dynamic dim is shorter than start + length; a slice would not:
    refused before building, naming the op and the dim."""
    with pytest.raises(DynamicDimError, match=r"narrow_copy.*dim 1"):
        crossport.convert(Fn(lambda x: torch.narrow_copy(x, 1, 1, 2)).eval(), (torch.randn(2, 5, 4),),
                          dynamic_dims={0: {1: "seq"}})
