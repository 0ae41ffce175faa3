"""Dynamic dims the dynamic-dims sweep found refused unclearly or crashing (session 19).

Each dim torch.export lets vary is either computed at run time (compared with torch at
several sizes here) or refused with a ``DynamicDimError`` naming the dim, the module path
and source line, and what to do.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import crossport
from crossport.errors import CaptureError, DynamicDimError
from crossport.parity.compare import compare_outputs
from crossport.parity.verify import run_keras
from tests.harness import assert_matches_at_sizes


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


class ConvFlatten(nn.Module):
    """conv -> flatten(1) -> ``head``: the head's features are 4*H*W."""

    def __init__(self, head: nn.Module):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = head

    def forward(self, x):
        return self.head(torch.flatten(self.conv(x), 1))


def _matches_at(module, conversion, inputs_per_size, atol=1e-5) -> None:
    """The converted model against torch on each of ``inputs_per_size`` (tuples of inputs)."""
    for args in inputs_per_size:
        with torch.no_grad():
            ref = module(*args)
        refs = list(ref) if isinstance(ref, tuple) else [ref]
        got = run_keras(conversion.model, args, False, like=ref)
        comparison = compare_outputs(refs, got[:len(refs)])
        shapes = [tuple(a.shape) for a in args]
        assert not comparison.mismatches and comparison.error <= atol, (shapes, comparison)


@pytest.mark.parametrize("head, what", [
    (nn.Linear(4 * 8 * 8, 5), "summed dim of 'input'"),
    (nn.LayerNorm(4 * 8 * 8), "layer_norm's normalized size 256"),
], ids=["linear", "layer_norm"])
def test_dynamic_dims_flattened_into_static_features_are_refused(head, what):
    """Found by the dynamic-dims sweep (8 rows): with H and W dynamic, torch.export keeps
    the flattened features as ``4*H*W`` under a guard ``== 256`` (no single dim it could
    refuse), and the Dense kernel / LayerNorm gamma of shape ``(None, ...)`` failed as a
    "please report" ``ConversionError``. Now a ``DynamicDimError`` naming the op, the
    product, the module path and line, the input dims and what to do."""
    with pytest.raises(DynamicDimError) as info:
        crossport.convert(ConvFlatten(head).eval(), (torch.randn(2, 3, 8, 8),),
                          dynamic_dims={"x": {0: "b", 2: "h", 3: "w"}})
    message = str(info.value)
    assert what in message and "== 256" in message, message
    assert "in head (" in message and "x dim 2" in message and "x dim 3" in message, message
    assert "Convert with those dims static" in message, message


def test_a_flatten_into_a_linear_keeps_a_dynamic_batch():
    """The refusal is about the features only: a dynamic batch converts and matches."""
    module = ConvFlatten(nn.Linear(4 * 8 * 8, 5)).eval()
    conversion = crossport.convert_with_report(module, (torch.randn(2, 3, 8, 8),),
                                               dynamic_batch=True)
    assert_matches_at_sizes(module, conversion, [(1, 3, 8, 8), (5, 3, 8, 8)])


def test_a_matmul_with_a_run_time_summed_dim_converts():
    """Both operands' summed dim dynamic (the same symbol): nothing tied, converts."""
    module = Fn(lambda a, b: a @ b.mT).eval()
    conversion = crossport.convert_with_report(
        module, (torch.randn(2, 3, 5), torch.randn(2, 4, 5)),
        dynamic_dims={0: {1: "m", 2: "k"}, 1: {1: "n", 2: "k"}})
    assert_matches_at_sizes(module, conversion, [((2, 2, 7), (2, 6, 7)),
                                                 ((2, 9, 3), (2, 2, 3))])


@pytest.mark.parametrize("fn, shapes, dims", [
    (lambda x: nn.functional.pixel_shuffle(x, 2), [(2, 8, 3, 5), (1, 4, 6, 2), (3, 20, 2, 7)],
     {1: "c", 2: "h", 3: "w"}),
    (lambda x: nn.functional.pixel_unshuffle(x, 2), [(2, 3, 4, 6), (1, 5, 8, 2),
                                                     (3, 2, 6, 10)], {1: "c", 2: "h", 3: "w"}),
    (lambda x: nn.functional.pixel_unshuffle(nn.functional.pixel_shuffle(x, 3), 3),
     [(1, 18, 2, 3), (2, 9, 4, 1), (1, 27, 3, 3)], {1: "c", 2: "h", 3: "w"}),
], ids=["shuffle", "unshuffle", "roundtrip"])
def test_pixel_shuffle_with_a_run_time_channel_count(fn, shapes, dims):
    """Found by the dynamic-dims sweep (6 rows): a dynamic channel dim (torch.export keeps
    it, checking divisibility by r*r at run time) reached ``PixelShuffle``, which raised
    an ``InputError`` ("needs a static channel count") from inside Keras' shape
    inference. The channel count is now read at run time."""
    module = Fn(fn).eval()
    conversion = crossport.convert_with_report(module, (torch.randn(shapes[0]),),
                                               dynamic_batch=True, dynamic_dims={0: dims})
    assert_matches_at_sizes(module, conversion, shapes[1:])


def test_int_median_along_a_run_time_dim():
    """Found by the dynamic-dims sweep: an integer median along a dynamic dim squeezed
    the gathered axis, whose length Keras could not tell was 1 ("Cannot squeeze axis
    -1", a "please report" ``ConversionError``)."""
    module = Fn(lambda a: (*a.median(1), a.median())).eval()
    gen = torch.Generator().manual_seed(0)

    def ints(*shape):
        return torch.randint(-50, 50, shape, generator=gen, dtype=torch.int32)

    conversion = crossport.convert_with_report(module, (ints(3, 6),),
                                               dynamic_dims={0: {0: "b", 1: "n"}})
    _matches_at(module, conversion, [(ints(2, 9),), (ints(5, 4),), (ints(4, 2),)])


def test_solve_of_vectors_with_run_time_batch_dims():
    """Found by the dynamic-dims sweep: a vector right-hand side broadcast against dynamic
    batch dims lost its static trailing 1 in Keras, and the squeeze back failed
    ("Cannot squeeze axis -1", a "please report" ``ConversionError``)."""
    def solve(a, b):
        a = a + 4 * torch.eye(a.shape[-1])  # well conditioned at every size
        return torch.linalg.solve(a, b), torch.linalg.solve(a, b[0])  # 1-D: broadcast

    module = Fn(solve).eval()
    conversion = crossport.convert_with_report(
        module, (torch.randn(2, 4, 4), torch.randn(2, 4)),
        dynamic_dims={0: {0: "b", 1: "n", 2: "n"}, 1: {0: "b", 1: "n"}})
    assert_matches_at_sizes(module, conversion, [((3, 5, 5), (3, 5)), ((1, 2, 2), (1, 2)),
                                                 ((4, 7, 7), (4, 7))], atol=1e-4)


class Mul(nn.Module):
    def forward(self, a, b):
        return a * b


def test_a_broadcasting_unit_dim_asked_dynamic_is_refused_as_such():
    """Found by the dynamic-dims sweep (12 rows): a size-1 dim asked to be dynamic is traced
    at 2 (torch.export fixes a size of 1); where it broadcasts, the model fails there,
    and the ``CaptureError`` said it "fails without crossport too: give example inputs of
    the shapes forward expects", which the user's inputs are. Now a ``DynamicDimError``
    naming the dim and why."""
    with pytest.raises(DynamicDimError) as info:
        crossport.convert(Mul(), (torch.randn(2, 3, 4), torch.randn(3, 1)),
                          dynamic_dims={"b": {1: "n"}})
    message = str(info.value)
    assert "(b dim 1)" in message and "are 2" in message and "fails without" not in message
    assert "test_dynamic_refusals.py" in message, message  # the user's line


def test_a_module_that_fails_on_its_own_inputs_is_still_named_so():
    with pytest.raises(CaptureError, match="fails without crossport too"):
        crossport.convert(Mul(), (torch.randn(2, 3, 4), torch.randn(3, 2)),
                          dynamic_dims={"b": {0: "n"}})


class ToFixedHeads(nn.Module):
    def forward(self, x):
        return x.reshape(2, 8, 2, 2).sum(-1)


def test_a_dim_the_model_fixes_is_named_with_its_size():
    """A dim asked dynamic that the model's code fixes (a reshape to constants) was a
    CaptureError printing torch's first line, "Constraints violated (L['x'].size()[1])",
    and a generic hint. Now a DynamicDimError naming each dim as the user knows it and
    the size the model fixes it to."""
    with pytest.raises(DynamicDimError) as info:
        crossport.convert(ToFixedHeads(), (torch.randn(2, 8, 4),),
                          dynamic_dims={"x": {0: "b", 1: "s"}})
    message = str(info.value)
    assert "x dim 0 is always 2" in message and "x dim 1 is always 8" in message, message
    assert "L['x']" not in message and "Convert with those dims static" in message, message


class Histogram(nn.Module):
    def forward(self, x):
        return torch.histogram(x, 5, range=(-1.0, 1.0))


def test_an_op_torch_traces_at_static_sizes_only_is_named():
    """torch.histogram has no symbolic-shape kernel in torch: with a dynamic dim
    torch.export raises UnsupportedOperatorException, which was a CaptureError saying
    "torch.export cannot trace this code although the module runs" (it traces it with
    static dims, and converts). Found by the dynamic-dims sweep (5 histogram rows)."""
    with pytest.raises(DynamicDimError) as info:
        crossport.convert(Histogram(), (torch.randn(20),), dynamic_dims={0: {0: "n"}})
    message = str(info.value)
    assert "aten.histogram.bin_ct" in message and "run-time sizes" in message, message
    assert "test_dynamic_refusals.py" in message, message


@pytest.mark.parametrize("example, others, dims", [
    ((2, 5, 6, 7), [(1, 3, 4, 9), (3, 8, 5, 5), (2, 2, 2, 3)], {0: "b", 1: "c", 2: "h", 3: "w"}),
    ((2, 4, 9), [(3, 7, 5), (1, 2, 12)], {0: "b", 1: "c", 2: "l"}),
    ((1, 3, 4, 5, 6), [(2, 6, 3, 3, 4)], {0: "b", 1: "c", 2: "d", 3: "h", 4: "w"}),
], ids=["2d", "1d", "3d"])
def test_instance_norm_with_a_run_time_channel_count(example, others, dims):
    """instance_norm's input statistics were a GroupNorm with the example's channel count
    as its group count, so a dynamic channel dim was refused. Without an affine (with one,
    torch.export fixes the channels) they are now per-channel moments over the spatial
    axes, which need no count."""
    module = Fn(lambda x: nn.functional.instance_norm(x * 3 + 1, eps=1e-3)).eval()
    conversion = crossport.convert_with_report(module, (torch.randn(example),),
                                               dynamic_dims={0: dims})
    assert_matches_at_sizes(module, conversion, others)


def _qkv_at(shapes, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(s, generator=gen, dtype=torch.float64).to(dtype) for s in shapes)


def _gqa(**kwargs):
    return Fn(lambda q, k, v: nn.functional.scaled_dot_product_attention(
        q, k, v, enable_gqa=True, **kwargs)).eval()


_HEADS = {0: {1: "hq"}, 1: {1: "hk"}, 2: {1: "hk"}}
_HEADS_AND_LENGTHS = {0: {0: "b", 1: "hq", 2: "l"}, 1: {0: "b", 1: "hk", 2: "s"},
                      2: {0: "b", 1: "hk", 2: "s"}}
_HEADS_APART = {0: {1: "hq"}, 1: {1: "hk"}, 2: {1: "hv"}}


@pytest.mark.parametrize("kwargs, example, dims, others, dtype, atol", [
    ({}, [(2, 6, 5, 4), (2, 3, 7, 4), (2, 3, 7, 3)], _HEADS,
     [[(2, 4, 5, 4), (2, 2, 7, 4), (2, 2, 7, 3)], [(2, 9, 5, 4), (2, 3, 7, 4), (2, 3, 7, 3)],
      [(2, 5, 5, 4), (2, 5, 7, 4), (2, 5, 7, 3)], [(2, 7, 5, 4), (2, 1, 7, 4), (2, 1, 7, 3)]],
     torch.float32, 1e-5),
    ({"is_causal": True}, [(2, 6, 5, 4), (2, 3, 5, 4), (2, 3, 5, 4)], _HEADS_AND_LENGTHS,
     [[(1, 10, 3, 4), (1, 2, 7, 4), (1, 2, 7, 4)], [(3, 3, 9, 4), (3, 1, 2, 4), (3, 1, 2, 4)],
      [(2, 7, 1, 4), (2, 7, 4, 4), (2, 7, 4, 4)]], torch.float32, 1e-5),
    ({"scale": 0.3}, [(2, 6, 5, 4), (2, 3, 7, 4), (2, 2, 7, 3)], _HEADS_APART,
     [[(2, 12, 5, 4), (2, 4, 7, 4), (2, 6, 7, 3)], [(2, 5, 5, 4), (2, 1, 7, 4), (2, 5, 7, 3)],
      [(2, 9, 5, 4), (2, 9, 7, 4), (2, 3, 7, 3)]], torch.float32, 1e-5),
    ({}, [(2, 6, 5, 4), (2, 3, 7, 4), (2, 3, 7, 3)], _HEADS,
     [[(2, 4, 5, 4), (2, 2, 7, 4), (2, 2, 7, 3)], [(2, 9, 5, 4), (2, 3, 7, 4), (2, 3, 7, 3)],
      [(2, 7, 5, 4), (2, 7, 7, 4), (2, 7, 7, 3)]], torch.float64, 1e-12),
    ({"is_causal": True}, [(2, 6, 5, 4), (2, 3, 5, 4), (2, 3, 5, 4)], _HEADS,
     [[(2, 4, 5, 4), (2, 2, 5, 4), (2, 2, 5, 4)], [(2, 9, 5, 4), (2, 3, 5, 4), (2, 3, 5, 4)],
      [(2, 5, 5, 4), (2, 1, 5, 4), (2, 1, 5, 4)]], torch.float16, 2e-3),
    ({}, [(3, 6, 5, 4), (1, 3, 7, 4), (1, 3, 7, 4)], _HEADS,
     [[(3, 8, 5, 4), (1, 2, 7, 4), (1, 2, 7, 4)], [(3, 5, 5, 4), (1, 5, 7, 4), (1, 5, 7, 4)],
      [(3, 9, 5, 4), (1, 1, 7, 4), (1, 1, 7, 4)]], torch.float32, 1e-5),
], ids=["heads", "causal-heads-batch-lengths", "key-and-value-heads-apart", "float64",
        "float16-causal", "key-batch-broadcast"])
def test_gqa_with_run_time_head_counts(kwargs, example, dims, others, dtype, atol):
    """scaled_dot_product_attention(enable_gqa=True) with dynamic head counts was refused
    ("repeats each key/value head for a fixed number of query heads"): the repeat count
    was the example's ratio. Now the query is grouped by the key's (and the scores by the
    value's) run-time head count, so key and value broadcast over each group."""
    module = _gqa(**kwargs)
    conversion = crossport.convert_with_report(module, _qkv_at(example, dtype, 0),
                                               dynamic_dims=dims)
    _matches_at(module, conversion, [_qkv_at(s, dtype, i + 1) for i, s in enumerate(others)],
                atol=atol)


def test_gqa_heads_torch_refuses_fail_in_keras_too():
    """torch raises when the key's head count does not divide the query's; the converted
    model must not answer something else at those sizes (its grouping reshape fails)."""
    module = _gqa()
    conversion = crossport.convert_with_report(
        module, _qkv_at([(2, 6, 5, 4), (2, 3, 7, 4), (2, 3, 7, 4)], torch.float32, 0),
        dynamic_dims=_HEADS)
    for shapes in ([(2, 5, 5, 4), (2, 3, 7, 4), (2, 3, 7, 4)],
                   [(2, 3, 5, 4), (2, 6, 7, 4), (2, 6, 7, 4)]):
        args = _qkv_at(shapes, torch.float32, 1)
        with pytest.raises(RuntimeError, match="must divide"):
            module(*args)
        with pytest.raises(Exception):  # noqa: B017 - TF's reshape error, at run time
            run_keras(conversion.model, args, False)


class RepeatKV(nn.Module):
    """transformers' ``repeat_kv`` (``[:, :, None].expand(...).reshape(...)``) before a
    plain attention, with the repeat count read from the head counts."""

    def forward(self, q, k, v):
        b, kv_heads, s, d = k.shape
        n_rep = q.shape[1] // kv_heads

        def repeat_kv(x):
            x = x[:, :, None, :, :].expand(b, kv_heads, n_rep, s, x.shape[-1])
            return x.reshape(b, kv_heads * n_rep, s, x.shape[-1])

        return nn.functional.scaled_dot_product_attention(q, repeat_kv(k), repeat_kv(v))


@pytest.mark.parametrize("dims", [
    {0: {0: "b", 2: "l"}, 1: {0: "b", 2: "s"}, 2: {0: "b", 2: "s"}},
    {0: {0: "b", 1: "hq", 2: "l"}, 1: {0: "b", 1: "hk", 2: "s"}, 2: {0: "b", 1: "hk", 2: "s"}},
], ids=["batch-and-lengths", "heads-too"])
def test_transformers_repeat_kv_under_run_time_sizes(dims):
    module = RepeatKV().eval()
    example = [(2, 6, 5, 4), (2, 3, 7, 4), (2, 3, 7, 4)]
    others = [[(1, 6, 3, 4), (1, 3, 9, 4), (1, 3, 9, 4)],
              [(3, 6, 8, 4), (3, 3, 1, 4), (3, 3, 1, 4)],
              [(2, 6, 2, 4), (2, 3, 5, 4), (2, 3, 5, 4)]]
    if "hq" in dims[0].values():
        others += [[(1, 8, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)],
                   [(2, 9, 4, 4), (2, 9, 3, 4), (2, 9, 3, 4)]]
    conversion = crossport.convert_with_report(module, _qkv_at(example, torch.float32, 0),
                                               dynamic_dims=dims)
    _matches_at(module, conversion, [_qkv_at(s, torch.float32, i + 1)
                                     for i, s in enumerate(others)])


aten = torch.ops.aten
_HW = {0: {2: "h", 3: "w"}}


@pytest.mark.parametrize("fn, example, dims, others, dtype, atol", [
    (lambda x: aten.upsample_nearest2d(x, [6, 7], 1.6, 1.8), (1, 2, 6, 6), _HW,
     [(1, 2, 5, 5), (1, 2, 9, 4), (2, 2, 3, 11)], torch.float32, 1e-6),
    (lambda x: aten.upsample_bilinear2d(x, [x.shape[2] * 2 + 1, x.shape[3]], False, 1.6, None),
     (1, 2, 6, 5), _HW, [(1, 2, 3, 7), (2, 2, 9, 4), (1, 2, 5, 1)], torch.float32, 1e-5),
    (lambda x: aten.upsample_bicubic2d(x, [7, x.shape[3] * 2], False, 0.6, 1.3),
     (1, 2, 6, 5), _HW, [(1, 2, 3, 7), (2, 2, 11, 4), (1, 2, 8, 9)], torch.float32, 1e-5),
    (lambda x: aten.upsample_bilinear2d(x, [5, 8], True, 0.7, 1.9), (1, 2, 6, 5), _HW,
     [(1, 2, 3, 7), (2, 2, 11, 4), (1, 2, 9, 9)], torch.float32, 1e-5),
    (lambda x: aten._upsample_nearest_exact2d(x, [x.shape[2] + 3, 9], 1.25, 2.0),
     (1, 2, 6, 5), _HW, [(1, 2, 3, 7), (2, 2, 11, 4), (1, 2, 7, 13)], torch.float32, 1e-6),
    # out = 2 * in, but sampled at i / 3 (1D nearest has no out == 2*in shortcut): not a
    # 2x UpSampling
    (lambda x: aten.upsample_nearest1d(x, [x.shape[2] * 2], 3.0), (1, 2, 6), {0: {2: "s"}},
     [(1, 2, 5), (2, 2, 9), (1, 2, 13)], torch.float32, 1e-6),
    (lambda x: aten.upsample_linear1d(x, [x.shape[2] + 4], False, 0.8), (2, 3, 7),
     {0: {0: "b", 2: "s"}}, [(1, 3, 5), (3, 3, 2), (2, 3, 11)], torch.float32, 1e-5),
    (lambda x: aten.upsample_trilinear3d(x, [x.shape[2] * 2, 5, 4], False, 1.5, 1.2, None),
     (1, 2, 4, 5, 6), {0: {2: "d", 3: "h", 4: "w"}},
     [(1, 2, 3, 7, 5), (1, 2, 5, 3, 3), (2, 2, 7, 4, 9)], torch.float32, 1e-5),
    (lambda x: aten.upsample_nearest2d(x, [6, 7], 1.6, 1.8), (1, 2, 6, 6), _HW,
     [(1, 2, 5, 5), (1, 2, 9, 4), (2, 2, 3, 11)], torch.float64, 0.0),
    (lambda x: aten.upsample_nearest2d(x, [6, 7], 1.6, 1.8), (1, 2, 6, 6), _HW,
     [(1, 2, 5, 5), (1, 2, 9, 4), (2, 2, 3, 11)], torch.float16, 0.0),
], ids=["nearest-fixed-size", "bilinear-size-expression-one-scale", "bicubic-mixed",
        "bilinear-align-corners-fixed-size", "nearest-exact-mixed", "nearest-1d-double-size",
        "linear-1d-size-plus-4", "trilinear-mixed", "nearest-float64", "nearest-float16"])
def test_upsample_with_explicit_scales_and_output_size(fn, example, dims, others, dtype, atol):
    """``aten.upsample_*`` given both an output size and scales samples output ``i`` at
    ``i / scale`` whatever the sizes. With a fixed output size over a dynamic input it was
    refused (the run-time layers took a size or a scale, not both); with an output size
    from another expression and only some scales given, the scales were dropped (sampled
    by ``in / out``). Now an ``InterpolateTo`` of the graph's sizes with those scales."""
    module = Fn(fn).eval()
    gen = torch.Generator().manual_seed(0)

    def rand(shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)

    conversion = crossport.convert_with_report(module, (rand(example),), dynamic_dims=dims)
    _matches_at(module, conversion, [(rand(s),) for s in others], atol=atol)


class GqaFromSequenceFirst(nn.Module):
    """Heads split from ``[B, L, H, E]`` (a transpose away from torch's order) with a
    boolean padding mask, as a decoder block feeds it."""

    def forward(self, q, k, v, keep):
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        return nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=keep[:, None, None, :] > 0, enable_gqa=True).transpose(1, 2)


def test_gqa_with_run_time_heads_a_mask_and_transposed_inputs():
    module = GqaFromSequenceFirst().eval()
    dims = {0: {1: "l", 2: "hq"}, 1: {1: "s", 2: "hk"}, 2: {1: "s", 2: "hk"}, 3: {1: "s"}}
    example = [(2, 5, 6, 4), (2, 7, 3, 4), (2, 7, 3, 4), (2, 7)]
    conversion = crossport.convert_with_report(module, _qkv_at(example, torch.float32, 0),
                                               dynamic_dims=dims)
    others = [[(2, 3, 4, 4), (2, 9, 2, 4), (2, 9, 2, 4), (2, 9)],
              [(2, 6, 9, 4), (2, 2, 1, 4), (2, 2, 1, 4), (2, 2)],
              [(2, 1, 5, 4), (2, 4, 5, 4), (2, 4, 5, 4), (2, 4)]]
    _matches_at(module, conversion, [_qkv_at(s, torch.float32, i + 1)
                                     for i, s in enumerate(others)])
