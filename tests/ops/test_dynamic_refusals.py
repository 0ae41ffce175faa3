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
from crossport.errors import DynamicDimError
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
