"""The node-by-node replay streams: values in graph order, each dropped after its last use."""

import gc
import weakref

import torch

from crossport.parity.replay import replay, stream


class Chain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.a(x).relu()
        return self.b(h).sigmoid() + h.mean()


def _exported():
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    return torch.export.export(Chain().eval(), (x,)), x


def test_stream_yields_what_replay_records_in_graph_order():
    exported, x = _exported()
    streamed = list(stream(exported, (x,), torch.float64))
    recorded = replay(exported, (x,), torch.float64)
    order = [n.name for n in exported.graph.nodes if n.op != "output"]
    assert [name for name, _ in streamed] == order
    for name, value in streamed:
        if isinstance(value, torch.Tensor):
            assert value.dtype == recorded[name].dtype
            assert torch.equal(value, recorded[name])


def test_stream_lets_go_of_a_value_once_no_later_node_reads_it():
    exported, x = _exported()
    steps = stream(exported, (x,))
    first_linear = next(n.name for n in exported.graph.nodes
                        if n.target is torch.ops.aten.linear.default)
    for name, value in steps:
        if name == first_linear:
            watched = weakref.ref(value)
            del value
            break
    next(steps)  # relu: the last reader of the first linear's value
    next(steps)
    gc.collect()
    assert watched() is None
    assert next(steps)[0]  # the stream goes on
