"""LSTM, GRU, RNN -> Keras LSTM/GRU/SimpleRNN layers (pitfalls.md item 13)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

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
CASES += [
    case("pitfall13-rnn-relu", rnn(nn.RNN, nonlinearity="relu", batch_first=True),
         lambda: (seq(True),), expect_converters=("aten_rnn_tanh_input",)),
]


@pytest.mark.parametrize("module, shapes, kwargs", CASES)
def test_recurrent(module, shapes, kwargs):
    # Keras RNNs scan time-major: the transposes in their graph are the kernel's own
    assert_converts(module, shapes(), kernel_transposes=True, **kwargs)


def test_lstm_proj_size_is_a_clear_error():
    with pytest.raises(UnsupportedOpError, match="proj_size"):
        crossport.convert(rnn(nn.LSTM, proj_size=3, batch_first=True).eval(), (seq(True),),
                          check=False)
