"""histc and transformers' grouped matmul: the ops of transformers 5's default
mixture-of-experts path (tokens sorted by expert, counted per expert, offsets by cumsum,
a segment-wise matmul), both "no converter" before.

histc is checked where its rounding decides: values at every real bin boundary and a few
ulps either side, in float16/32/64, with NaN, +-inf, -0.0 and values just outside the range
(ATen bins by ``trunc((x - lo) * bins / (hi - lo))`` in the input's dtype, not by the
real quotient). The grouped matmul is checked on MoE-like sorted offsets and on arbitrary
ones (unsorted, negative, past the end: torch's Python slices, later experts overwrite), in
both of the converter's products (per-row gathered experts for few rows, all experts then
a gather otherwise) and with a weight computed in the graph. Its rows need transformers,
which defines the op.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import crossport
from tests.harness import assert_converts, assert_matches_at_sizes
from tests.ops.opcases import ConvThen, Fn, case

HISTC = ("aten_histc_default",)
HISTOGRAM = ("aten_histogram_bin_ct",)
HISTOGRAM_EDGES = ("aten_histogram_bins_tensor",)
GROUPED = ("transformers_grouped_mm_fallback",)


def edge_probes(bins: int, lo: float, hi: float, dtype=torch.float32, ulps: int = 3):
    """Values at each real bin boundary ``lo + k (hi - lo) / bins`` and ``ulps`` steps of
    the dtype either side, the ends, values just outside, NaN, +-inf and +-0.0."""
    boundaries = lo + np.arange(bins + 1) * (hi - lo) / bins
    values = [torch.tensor(boundaries, dtype=dtype)]
    for direction in (float("inf"), float("-inf")):
        moved = values[0]
        for _ in range(ulps):
            moved = torch.nextafter(moved, torch.tensor(direction, dtype=dtype))
            values.append(moved)
    specials = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, -0.0,
                             lo - (hi - lo), hi + (hi - lo)], dtype=dtype)
    flat = torch.cat(values + [specials])
    return (flat[torch.randperm(len(flat), generator=torch.Generator().manual_seed(0))],)


def _three_histograms(x):
    return (torch.histc(x, 7, -1.3, 2.9), torch.histc(x, 10, 0, 1),
            torch.histc(x * 3, 1, -2.5, 2.5))


def _expert_counts(x, experts=4, k=2):
    """transformers' routing: the top-k expert ids of each token, sorted, counted."""
    ids = torch.sort(torch.topk(x, k).indices.reshape(-1)).values
    return torch.histc(ids.float(), bins=experts, min=0, max=experts - 1)




def _grouped_mm(x, weight, offs):
    import transformers.integrations.moe  # noqa: F401  (defines torch.ops.transformers.*)

    return torch.ops.transformers.grouped_mm_fallback(x, weight, offs)


class SortedExperts(torch.nn.Module):
    """The MoE path of ``rows`` token rows: route each row to an expert, sort by expert,
    count (histc), offsets (cumsum), grouped matmul, unsort."""

    def __init__(self, experts=4, features=6, out=5, weight_from_input=False):
        super().__init__()
        torch.manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(experts, features, out))
        self.experts, self.weight_from_input = experts, weight_from_input

    def forward(self, x):
        ids = torch.argmax(x[:, :self.experts], dim=1)
        ids_sorted, order = torch.sort(ids)
        counts = torch.histc(ids_sorted.float(), bins=self.experts, min=0,
                             max=self.experts - 1)
        offs = torch.cumsum(counts, dim=0, dtype=torch.int32)
        weight = self.weight * x.abs().mean() if self.weight_from_input else self.weight
        y = _grouped_mm(x[order], weight, offs)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.size(0))
        return y[inverse], offs


class AnyOffsets(torch.nn.Module):
    """Offsets read from the input: unsorted, negative (from the end), past the end."""

    def __init__(self, experts=5, features=4, out=3, dtype=torch.int64):
        super().__init__()
        torch.manual_seed(1)
        self.weight = torch.nn.Parameter(torch.randn(experts, features, out))
        self.experts, self.dtype = experts, dtype

    def forward(self, x):
        offs = torch.round(x.flatten()[:self.experts] * x.size(0)).to(self.dtype)
        return _grouped_mm(x, self.weight, offs), offs


CASES = [
    case("histc-bin-edges-float32", Fn(lambda x: torch.histc(x, 7, -1.3, 2.9)),
         lambda: edge_probes(7, -1.3, 2.9), expect_converters=HISTC),
    case("histc-bin-edges-float64", Fn(lambda x: torch.histc(x, 13, -0.7, 1e3)),
         lambda: edge_probes(13, -0.7, 1e3, torch.float64), expect_converters=HISTC),
    case("histc-bin-edges-float16", Fn(lambda x: torch.histc(x, 6, -2.0, 3.3)),
         lambda: edge_probes(6, -2.0, 3.3, torch.float16), expect_converters=HISTC),
    case("histc-integer-bins", Fn(lambda x: torch.histc(torch.round(x * 4), 9, -4, 4)),
         lambda: edge_probes(8, -1, 1), expect_converters=HISTC),
    case("histc-three-ranges-random", Fn(_three_histograms), (40, 9), expect_converters=HISTC),
    case("histc-expert-counts", Fn(_expert_counts), (12, 4),
         expect_converters=HISTC + ("aten_topk_default", "aten_sort_default")),
    case("histc-channels-last", ConvThen(lambda y: torch.histc(y, 5, -0.5, 0.5)),
         (2, 3, 8, 7), expect_converters=HISTC + ("aten_conv_nd",)),
    # torch.histogram (was "no converter"): bins are searched among torch's own edges, at
    # each edge and ulps either side; weights, density, a fixed range of zero width, edges
    # as a run-time tensor (the fresh input's random edges are out of order: torch's
    # binary search is followed step by step), float64, channels-last
    case("histogram-bin-edges-float32", Fn(lambda x: torch.histogram(x, 7, range=(-1.3, 2.9))),
         lambda: edge_probes(7, -1.3, 2.9), expect_converters=HISTOGRAM),
    case("histogram-bin-edges-float64", Fn(lambda x: torch.histogram(x, 13, range=(-0.7, 1e3))),
         lambda: edge_probes(13, -0.7, 1e3, torch.float64), expect_converters=HISTOGRAM),
    case("histogram-weights-density-zero-width-range", Fn(lambda x, w: (
        *torch.histogram(x, 5, range=(-1.0, 1.0), weight=w, density=True),
        *torch.histogram(x, 4, range=(-2.0, 2.0), density=True),
        *torch.histogram(x[0, 0], 3, range=(0.5, 0.5)), *torch.histogram(x, 1, range=(0.0, 9.0)))),
         lambda: (torch.randn(6, 9), torch.rand(6, 9)), expect_converters=HISTOGRAM),
    case("histogram-edges-tensor", Fn(lambda x, w, e: (
        *torch.histogram(x, e), *torch.histogram(x, e, weight=w, density=True),
        *torch.histogram(x, torch.tensor([-2.0, -0.5, 0.0, 0.0, 1.0, 2.5])))),
         lambda: (torch.randn(6, 9), torch.rand(6, 9), torch.sort(torch.randn(7)).values),
         expect_converters=HISTOGRAM_EDGES),
    case("histogram-channels-last", ConvThen(lambda y: torch.histogram(y, 5, range=(-0.5, 0.5))),
         (2, 3, 8, 7), expect_converters=HISTOGRAM + ("aten_conv_nd",)),
    case("grouped-mm-moe-every-expert", SortedExperts(), (9, 6),
         expect_converters=GROUPED + HISTC + ("aten_index_put_default",)),
    case("grouped-mm-moe-gathered-experts", SortedExperts(experts=6), (3, 6),
         expect_converters=GROUPED + HISTC),
    case("grouped-mm-moe-weight-from-input", SortedExperts(weight_from_input=True), (7, 6),
         expect_converters=GROUPED),
    case("grouped-mm-any-offsets-int64", AnyOffsets(), (8, 4), expect_converters=GROUPED),
    case("grouped-mm-any-offsets-int32-gathered", AnyOffsets(experts=7, dtype=torch.int32),
         (3, 4), expect_converters=GROUPED),
]


def _uses_transformers(module) -> bool:
    return isinstance(module, (SortedExperts, AnyOffsets))


@pytest.mark.parametrize("module, make_inputs, kwargs", CASES)
def test_experts_ops_match_torch(module, make_inputs, kwargs):
    if _uses_transformers(module):
        pytest.importorskip("transformers")
    args = make_inputs() if callable(make_inputs) else (torch.randn(make_inputs),)
    assert_converts(module, args, max_transposes=None, **kwargs)


def test_grouped_mm_rows_follow_a_dynamic_token_count():
    """A dynamic number of rows: the row positions and slice bounds are computed at run
    time; sizes on both sides of the gathered/all-experts choice are compared."""
    pytest.importorskip("transformers")
    module = SortedExperts().eval()
    conversion = crossport.convert_with_report(module, (torch.randn(9, 6),),
                                               dynamic_dims={0: {0: "rows"}})
    assert conversion.model.inputs[0].shape[0] is None
    assert_matches_at_sizes(module, conversion, [(1, 6), (2, 6), (5, 6), (31, 6)])


@pytest.mark.parametrize("fn, reason", [
    (lambda x: torch.histc(x, 5), "data's own range"),
    (lambda x: torch.histc(x.half(), 100, -1000, 1000), "overflows torch.float16"),
    (lambda x: torch.histc(x, 4, 1.0, 1.00000001), "equal in torch.float32"),
], ids=["min-equals-max", "float16-bin-index-overflows", "range-empty-in-float32"])
def test_histc_without_an_exact_form_is_refused(fn, reason):
    with pytest.raises(crossport.UnsupportedOpError, match=reason):
        crossport.convert(Fn(fn).eval(), (torch.randn(3, 4),))


def test_histogram_over_the_data_range_is_refused():
    """Without range the edges are torch's linspace of each input's min and max."""
    with pytest.raises(crossport.UnsupportedOpError, match="histogram over the data's own"):
        crossport.convert(Fn(lambda x: torch.histogram(x, 5)).eval(), (torch.randn(3, 4),))


def test_histogram_exports_to_tflite(tmp_path):
    """Builtin ops only (GATHER, FLOOR_DIV, comparisons, SUM)."""
    module = Fn(lambda x, e: (*torch.histogram(x, 7, range=(-1.3, 2.9)),
                              *torch.histogram(x, e, weight=x.abs(), density=True))).eval()
    conversion = crossport.convert_with_report(
        module, (edge_probes(7, -1.3, 2.9)[0], torch.sort(torch.randn(6)).values))
    result = crossport.export(conversion, tmp_path / "histogram.tflite")
    assert result.max_error < 1e-5, result


def test_a_refused_grouped_matmul_says_how_to_convert():
    """Whatever the converter refuses in transformers' grouped matmul, the error names the
    experts setting that converts (batched_mm: a weight gather and batched matmuls)."""
    pytest.importorskip("transformers")
    from crossport.to_keras.ops.grouped_mm import GROUPED_MM_FALLBACK
    from crossport.to_keras.registry import lookup, replaced

    refusing = lookup(GROUPED_MM_FALLBACK)
    with replaced(GROUPED_MM_FALLBACK, refusing.fn, supports=lambda node: "a refusal"), \
            pytest.raises(crossport.UnsupportedOpError,
                          match=r"a refusal \(HF mixture-of-experts: build it with "
                                r"experts_implementation='batched_mm'"):
        crossport.convert(SortedExperts().eval(), (torch.randn(9, 6),))
