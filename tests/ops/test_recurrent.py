"""LSTM, GRU, RNN -> Keras LSTM/GRU/SimpleRNN layers (pitfalls.md item 13)."""

from __future__ import annotations

import keras
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

import crossport
from crossport.errors import UnsupportedOpError
from tests.harness import assert_converts
from tests.ops.opcases import case


def floats(shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def rnn(cls, **kw):
    torch.manual_seed(0)
    return cls(4, 6, **kw)


class WithState(nn.Module):
    """``rnn(x, h0)`` / ``rnn(x, (h0, c0))`` with the initial states as model inputs."""

    def __init__(self, module):
        super().__init__()
        self.rnn = module

    def forward(self, x, *states):
        return self.rnn(x, states if len(states) > 1 else states[0])


def seq(batch_first, n=2, t=5, f=4, seed=0):
    return floats((n, t, f) if batch_first else (t, n, f), seed)


def with_states(batch_first, states, layers=1, directions=1):
    return lambda: (seq(batch_first),) + tuple(floats((layers * directions, 2, 6), 10 + i)
                                              for i in range(states))


# Keras recurrent layers are batch-major: a [T, N, F] input costs one transpose (the output
# keeps the batch-major layout, so torch order is restored only at the model's output).
SEQ_FIRST = 1
CASES = []
CONVERTERS = {"lstm": "aten_lstm_input", "gru": "aten_gru_input", "rnn": "aten_rnn_tanh_input"}
for cls, states, layer_name in ((nn.LSTM, 2, "LSTM"), (nn.GRU, 1, "GRU"), (nn.RNN, 1, "SimpleRNN")):
    name = cls.__name__.lower()
    CASES += [
        case(f"pitfall13-{name}-batch-first", rnn(cls, batch_first=True),
             lambda: (seq(True),), expect_layers=(layer_name,),
             expect_converters=(CONVERTERS[name],)),
        case(f"pitfall13-{name}-seq-first", rnn(cls), lambda: (seq(False),),
             expect_layers=(layer_name,), max_transposes=SEQ_FIRST),
        case(f"pitfall13-{name}-2-layers-bidirectional", rnn(cls, num_layers=2, bidirectional=True,
                                                             batch_first=True, dropout=0.2),
             lambda: (seq(True),), expect_layers=(layer_name,)),
        case(f"pitfall13-{name}-bidirectional-seq-first", rnn(cls, bidirectional=True),
             lambda: (seq(False),), max_transposes=SEQ_FIRST),
        case(f"pitfall13-{name}-no-bias", rnn(cls, bias=False, batch_first=True),
             lambda: (seq(True),)),
        case(f"pitfall13-{name}-initial-states", WithState(rnn(cls, batch_first=True)),
             with_states(True, states)),
        case(f"pitfall13-{name}-initial-states-2-layers-bidirectional",
             WithState(rnn(cls, num_layers=2, bidirectional=True)),
             with_states(False, states, layers=2, directions=2), max_transposes=SEQ_FIRST),
    ]
# torch's proj_size (h = W_hr (o * tanh c), P features; c keeps H): ProjectedLSTM layers
CASES += [
    case("lstm-proj-size-batch-first", rnn(nn.LSTM, proj_size=3, batch_first=True),
         lambda: (seq(True),), expect_layers=("ProjectedLSTM",),
         expect_converters=("aten_lstm_input",)),
    case("lstm-proj-size-2-layers-bidirectional-no-bias-seq-first",
         rnn(nn.LSTM, proj_size=2, num_layers=2, bidirectional=True, bias=False),
         lambda: (seq(False),), max_transposes=SEQ_FIRST),
    case("lstm-proj-size-initial-states",
         WithState(rnn(nn.LSTM, proj_size=3, num_layers=2, batch_first=True)),
         lambda: (seq(True), floats((2, 2, 3), 10), floats((2, 2, 6), 11))),
]
CASES += [
    case("pitfall13-rnn-relu", rnn(nn.RNN, nonlinearity="relu", batch_first=True),
         lambda: (seq(True),), expect_converters=("aten_rnn_tanh_input",)),
]




class Packed(nn.Module):
    """pack_padded_sequence -> RNN -> pad_packed_sequence(total_length=T), a sequence
    tagger's forward: lengths are an input, each sequence runs for its own length."""

    def __init__(self, module, enforce_sorted=False, padding_value=0.0, extra_steps=0):
        super().__init__()
        self.rnn, self.enforce_sorted = module, enforce_sorted
        self.padding_value, self.extra_steps = padding_value, extra_steps

    def forward(self, x, lengths):
        batch_first = self.rnn.batch_first
        packed = pack_padded_sequence(x, lengths, batch_first=batch_first,
                                      enforce_sorted=self.enforce_sorted)
        out, state = self.rnn(packed)
        steps = x.shape[1 if batch_first else 0] + self.extra_steps
        out, out_lengths = pad_packed_sequence(out, batch_first=batch_first,
                                               total_length=steps,
                                               padding_value=self.padding_value)
        return out, state, out_lengths


class PackedStack(nn.Module):
    """Two packed RNNs with a row-wise layer on the packed ``.data`` between them, and a
    classifier head on the final states only (no pad_packed_sequence)."""

    def __init__(self):
        super().__init__()
        self.first = nn.LSTM(4, 6, bidirectional=True)
        self.between = nn.Linear(12, 5)
        self.second = nn.GRU(5, 3, num_layers=2)
        self.head = nn.Linear(3, 2)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths.cpu(), enforce_sorted=False)
        out, _ = self.first(packed)
        out = PackedSequence(torch.tanh(self.between(out.data)), out.batch_sizes,
                             out.sorted_indices, out.unsorted_indices)
        _, h = self.second(out)
        return self.head(h[-1])


def lengths(*values):
    return torch.tensor(values)


# Packed sequences (capture/packed.py): the real steps only, as torch's packed kernels run
PACKED_CONVERTERS = {nn.LSTM: "crossport_lstm_packed", nn.GRU: "crossport_gru_packed",
                     nn.RNN: "crossport_gru_packed"}
for cls in (nn.LSTM, nn.GRU, nn.RNN):
    name, converter = cls.__name__.lower(), PACKED_CONVERTERS[cls]
    CASES += [
        case(f"packed-{name}-batch-first", Packed(rnn(cls, batch_first=True)),
             lambda: (seq(True, n=3, t=6), lengths(6, 2, 4)),
             expect_converters=(converter,)),
        case(f"packed-{name}-2-layers-bidirectional-seq-first",
             Packed(rnn(cls, num_layers=2, bidirectional=True)),
             lambda: (seq(False, n=3, t=6), lengths(3, 6, 1)), max_transposes=SEQ_FIRST),
    ]
CASES += [
    case("packed-lstm-proj-size-bidirectional",
         Packed(rnn(nn.LSTM, proj_size=3, bidirectional=True, batch_first=True)),
         lambda: (seq(True, n=3, t=6), lengths(6, 2, 4)), expect_layers=("ProjectedLSTM",),
         expect_converters=("crossport_lstm_packed",)),
    case("packed-lstm-sorted-padding-value-longer-total",
         Packed(rnn(nn.LSTM, batch_first=True), enforce_sorted=True, padding_value=-2.0,
                extra_steps=2),
         lambda: (seq(True, n=3, t=5), lengths(5, 5, 5))),
    case("packed-rnn-relu", Packed(rnn(nn.RNN, nonlinearity="relu", batch_first=True)),
         lambda: (seq(True, n=2, t=5), lengths(2, 5))),
    case("packed-stack-rowwise-data-and-states", PackedStack(),
         # .data rows of a sequence-first batch are time-major: back to batch-major once more
         lambda: (seq(False, n=4, t=7), lengths(7, 1, 3, 5)), max_transposes=SEQ_FIRST + 1),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_recurrent(module, shapes, kwargs):
    # Keras RNNs scan time-major: the transposes in their graph are the kernel's own
    assert_converts(module, shapes(), kernel_transposes=True, **kwargs)



def test_packed_sequence_with_a_dynamic_length_and_batch():
    """One conversion, right at every padded length and batch size torch accepts."""
    module = Packed(rnn(nn.LSTM, batch_first=True, bidirectional=True)).eval()
    model = crossport.convert(module, (seq(True, n=3, t=6), lengths(6, 2, 4)),
                                   dynamic_dims={"x": {0: "n", 1: "t"}, "lengths": {0: "n"}})
    gen = torch.Generator().manual_seed(1)
    for n, t in ((1, 9), (4, 2), (5, 12)):
        x = torch.randn(n, t, 4, generator=gen)
        steps = torch.randint(1, t + 1, (n,), generator=gen)
        with torch.no_grad():
            want = module(x, steps)
        got = model([x.numpy(), steps.numpy()], training=False)
        want, got = torch.utils._pytree.tree_leaves(want), keras.tree.flatten(got)
        assert len(want) == len(got) == 4
        for w, g in zip(want, got):
            g = torch.as_tensor(keras.ops.convert_to_numpy(g))
            assert w.shape == g.shape and w.dtype == g.dtype, (n, t)
            assert torch.allclose(w, g, atol=1e-5), (n, t)


def test_pad_packed_sequence_without_total_length_is_a_clear_error():
    class Untotalled(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(4, 6, batch_first=True)

        def forward(self, x, lengths):
            out, _ = self.rnn(pack_padded_sequence(x, lengths, batch_first=True,
                                                   enforce_sorted=False))
            return pad_packed_sequence(out, batch_first=True)[0]

    with pytest.raises(UnsupportedOpError, match=r"(?s)Untotalled at .*test_recurrent.py:\d+ "
                       r".*without total_length.*max\(lengths\).*total_length=x.shape\[1\]"):
        crossport.convert(Untotalled().eval(), (seq(True, n=2, t=5), lengths(5, 3)))
