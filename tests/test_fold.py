"""Constant folding of index tensors built in forward (BEiT's relative-position index).

BEiT builds its index at every call: meshgrid -> stack -> flatten(1) -> pairwise
differences -> ``permute(1, 2, 0).contiguous()`` -> in-place ``+=``/``*=`` on slices ->
``view(-1)``. Folded with torch at conversion time, the permute hands on a strided array;
the ``view`` after it must still see the row-major tensor ``.contiguous()`` made.
"""

from __future__ import annotations

import torch
from torch import nn

import crossport
from crossport.compat import import_torchvision
from tests.harness import assert_converts, random_inputs


class BeitRelativePositionBias(nn.Module):
    """The index exactly as BEiT (HF ``generate_relative_position_index``) writes it."""

    def __init__(self, window=(3, 4), heads=2):
        super().__init__()
        self.window_size = window
        distances = (2 * window[0] - 1) * (2 * window[1] - 1) + 3
        self.table = nn.Parameter(torch.randn(distances, heads,
                                              generator=torch.Generator().manual_seed(0)))

    @staticmethod
    def index(window_size):
        num_relative_distance = (2 * window_size[0] - 1) * (2 * window_size[1] - 1) + 3
        window_area = window_size[0] * window_size[1]
        coords_flatten = torch.flatten(
            torch.stack(torch.meshgrid(torch.arange(window_size[0]),
                                       torch.arange(window_size[1]), indexing="ij")),
            start_dim=1,
        )
        relative_coords = (coords_flatten[:, :, None]
                           - coords_flatten[:, None, :]).permute(1, 2, 0).contiguous()
        relative_coords[:, :, 0] += window_size[0] - 1
        relative_coords[:, :, 1] += window_size[1] - 1
        relative_coords[:, :, 0] *= 2 * window_size[1] - 1
        index = torch.zeros(size=(window_area + 1,) * 2, dtype=relative_coords.dtype)
        index[1:, 1:] = relative_coords.sum(-1)
        index[0, 0:] = num_relative_distance - 3
        index[0:, 0] = num_relative_distance - 2
        index[0, 0] = num_relative_distance - 1
        return index

    def forward(self, attn):
        w = self.window_size
        area = w[0] * w[1] + 1
        bias = self.table[self.index(w).view(-1)].view(area, area, -1)
        return attn + bias.permute(2, 0, 1).contiguous()


class PermuteThenView(nn.Module):
    """A folded permute followed by view: torch.export dropped the ``.contiguous()``."""

    def forward(self, x):
        grid = torch.arange(24).view(2, 3, 4).permute(2, 0, 1).contiguous()
        return x + grid.view(-1).to(x.dtype)


def test_beit_relative_position_index_folds_and_converts():
    module = BeitRelativePositionBias()
    conversion = assert_converts(module, random_inputs((2, 2, 13, 13)), atol=1e-6)
    assert not any("index_put" in type(layer).__name__ for layer in conversion.model.layers)


def test_folded_permute_then_view():
    assert_converts(PermuteThenView(), random_inputs((3, 24)), atol=0)


def test_hf_beit_with_relative_position_bias_converts():
    import_torchvision()  # transformers imports torchvision; make it importable on CPU torch
    from transformers import BeitConfig
    from transformers.models.beit.modeling_beit import BeitModel

    config = BeitConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64,
                        use_relative_position_bias=True, add_pooling_layer=False)
    torch.manual_seed(0)
    model = BeitModel(config).eval()
    with torch.no_grad():  # a zero table would hide a wrong index (parity.md)
        for name, p in model.named_parameters():
            if "relative_position_bias_table" in name:
                p.normal_()

    class Hidden(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(pixel_values=x).last_hidden_state

    conversion = crossport.convert_with_report(Hidden().eval(), random_inputs((1, 3, 32, 32)))
    assert conversion.report.max_error < 1e-5
