"""``crossport::dynamic_update_slice`` (the generative KV-cache write): a block written at a
run-time offset, clamped so it fits like TFLite's DYNAMIC_UPDATE_SLICE, in torch order and
after a conv (channels-last), and with the block's length dynamic."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from crossport.capture.update_slice import dynamic_update_slice
from crossport.parity.verify import run_keras
from tests.harness import assert_converts
from tests.ops.opcases import case


class Write(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, cache, block, start):
        return dynamic_update_slice(cache, block * 2, start, self.dim) + 1


def write(dim):
    return Write(dim)


class AfterConv(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x, block, start):
        return dynamic_update_slice(self.conv(x), block, start, 2)


def args(shape, block, start):
    gen = torch.Generator().manual_seed(0)
    return lambda: (torch.randn(shape, generator=gen), torch.randn(block, generator=gen),
                    torch.tensor([start], dtype=torch.int32))


CASES = [case(f"cache-dim3-start-{start}", write(3), args((2, 1, 2, 16, 8), (2, 1, 2, 3, 8),
                                                          start),
              expect_converters=("crossport_dynamic_update_slice_default",))
         for start in (0, 5, 13)]
CASES += [
    case("start-past-the-end-is-clamped", write(3), args((2, 1, 2, 16, 8), (2, 1, 2, 3, 8), 20)),
    case("negative-start-is-clamped", write(0), args((6, 4), (2, 4), -3)),
    case("after-conv-channels-last", AfterConv(), args((1, 3, 10, 10), (1, 4, 2, 8), 3),
         max_transposes=None),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_dynamic_update_slice(module, shapes, kwargs):
    assert_converts(module, shapes(), **kwargs)


def test_block_length_is_dynamic():
    module = write(3).eval()
    example = args((2, 1, 2, 16, 8), (2, 1, 2, 3, 8), 4)()
    conversion = assert_converts(module, example, dynamic_dims={"block": {3: "chunk"}})
    for length, start in ((1, 15), (5, 2)):
        block = torch.randn(2, 1, 2, length, 8)
        start = torch.tensor([start], dtype=torch.int32)
        with torch.no_grad():
            ref = module(example[0], block, start)
        got = run_keras(conversion.model, (example[0], block, start), False, like=ref)
        torch.testing.assert_close(torch.tensor(got[0].copy()), ref)
