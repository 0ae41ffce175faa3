"""``pack_padded_sequence`` -> RNN -> ``pad_packed_sequence``, captured as a masked RNN.

A ``PackedSequence`` holds only the real steps of each sequence, so its data has
``sum(lengths)`` rows: a size read from the lengths' values, which ``torch.export`` cannot
trace (the capture failed inside the RNN's ``forward``). What the packed RNN computes is a
masked scan of the padded batch: each sequence runs for its own length (the reverse
direction starts at its last real step), the final states are the states at that step, and
the padded output holds ``padding_value`` past it. So while capturing:

* ``pack_padded_sequence`` keeps torch's own code (the sort by length and its undoing when
  ``enforce_sorted=False``) but its packing kernel keeps the padded rows: ``.data`` is the
  padded batch flattened to ``[N*T, *]`` (row-wise ops on it stay valid) and
  ``.batch_sizes`` is a :class:`PaddedBatchSizes` carrying the sorted lengths;
* the RNN modules call ``crossport::lstm_packed`` and friends (custom ops whose real kernels
  pack, run torch's packed kernel and pad again, so the exported program computes exactly
  what torch does), which convert to Keras RNN layers called with a sequence mask;
* ``pad_packed_sequence`` puts ``padding_value`` past each length. Without
  ``total_length`` its output has ``max(lengths)`` steps, a size of the data: that is
  refused (pass ``total_length``).

The eager parity check runs torch's real packed path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.modules.rnn as torch_rnn
import torch.nn.utils.rnn as torch_rnn_utils

from crossport.errors import UnsupportedOpError

Tensor = torch.Tensor


class _LongestLength:
    """``batch_sizes.size(0)`` of a padded pack, torch's ``max(lengths)``: a size of the
    data. ``pad_packed_sequence`` passes it on only when no ``total_length`` replaces it."""

    def __gt__(self, total_length) -> bool:
        # pad_packed_sequence's `total_length < max_seq_length`: a total_length shorter than
        # the padding is fine where the lengths fit it (torch checks them in the eager run)
        return False


class PaddedBatchSizes:
    """The ``batch_sizes`` of a pack kept padded: the sorted lengths and the padded shape."""

    device = torch.device("cpu")

    def __init__(self, lengths: Tensor, batch, steps, batch_first: bool):
        self.lengths, self.batch, self.steps = lengths, batch, steps
        self.batch_first = batch_first
        self._flattened: list[tuple[Tensor, Tensor]] = []

    def __getitem__(self, index):
        if index == 0:  # the RNN modules read the batch size as batch_sizes[0]
            return self.batch
        raise UnsupportedOpError(_BATCH_SIZES_READ)

    def size(self, dim: int = 0):
        if dim == 0:
            return _LongestLength()
        raise UnsupportedOpError(_BATCH_SIZES_READ)

    def flat(self, padded: Tensor, zero_past_lengths: bool = False) -> Tensor:
        """The padded batch as ``.data`` rows (``[N*T, *]``), remembered for :meth:`padded`
        (with whether its steps past the lengths are zeros: an RNN op's output)."""
        data = padded.reshape(-1, *padded.shape[2:])
        self._flattened.append((data, padded, zero_past_lengths))
        return data

    def padded(self, data: Tensor) -> tuple[Tensor, bool]:
        """``.data`` as the padded batch in the pack's own order, and whether it is zero past
        the lengths. The batch it was made from when there is one: a reshape there and back
        would cost a sequence-first layout transposes."""
        for flat, padded, zeros in self._flattened:
            if flat is data:
                return padded, zeros
        lead = (self.batch, self.steps) if self.batch_first else (self.steps, self.batch)
        return data.reshape(*lead, *data.shape[1:]), False


_BATCH_SIZES_READ = (
    "a PackedSequence's batch_sizes read in forward: crossport captures a packed sequence "
    "as its padded batch and the lengths (batch_sizes depend on the lengths' values); use "
    "the lengths instead")


def _packed_kernel(aten_op, input: Tensor, lengths: Tensor, hx, params, has_biases: bool,
                   num_layers: int, dropout: float, train: bool, bidirectional: bool,
                   batch_first: bool):
    """torch's packed RNN on a padded batch sorted by length: pack, run, pad with zeros."""
    data, batch_sizes = torch._VF._pack_padded_sequence(input, lengths.cpu(), batch_first)
    output, *states = aten_op(data, batch_sizes, hx, params, has_biases, num_layers, dropout,
                              train, bidirectional)
    steps = input.shape[1] if batch_first else input.shape[0]
    padded, _ = torch._VF._pad_packed_sequence(output, batch_sizes, batch_first, 0.0, steps)
    return (padded, *states)


def rnn_output(input: Tensor, state: Tensor, bidirectional: bool) -> Tensor:
    """An RNN's fake output ``[*, *, D * H_out]`` with the input's two leading (batch, time)
    sizes (``H_out``: the state's last size)."""
    features = (2 if bidirectional else 1) * state.shape[-1]
    return input.new_empty((input.shape[0], input.shape[1], features))


@torch.library.custom_op("crossport::lstm_packed", mutates_args=())
def lstm_packed(input: Tensor, lengths: Tensor, hx: list[Tensor], params: list[Tensor],
                has_biases: bool, num_layers: int, dropout: float, train: bool,
                bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor, Tensor]:
    """``aten.lstm.data`` of the packed ``input`` (padded, sorted by ``lengths``), padded
    back with zeros."""
    return _packed_kernel(torch.ops.aten.lstm.data, input, lengths, hx, params, has_biases,
                          num_layers, dropout, train, bidirectional, batch_first)


@lstm_packed.register_fake
def _lstm_packed_fake(input, lengths, hx, params, has_biases, num_layers, dropout, train,
                      bidirectional, batch_first):
    return (rnn_output(input, hx[0], bidirectional), hx[0].new_empty(hx[0].shape),
            hx[1].new_empty(hx[1].shape))


def _single_state_packed(name: str, aten_op):
    """gru / rnn_tanh / rnn_relu on a padded pack: outputs ``(output, h_n)``."""

    @torch.library.custom_op(f"crossport::{name}_packed", mutates_args=())
    def op(input: Tensor, lengths: Tensor, hx: Tensor, params: list[Tensor],
           has_biases: bool, num_layers: int, dropout: float, train: bool,
           bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor]:
        return _packed_kernel(aten_op, input, lengths, hx, params, has_biases, num_layers,
                              dropout, train, bidirectional, batch_first)

    @op.register_fake
    def _fake(input, lengths, hx, params, has_biases, num_layers, dropout, train,
              bidirectional, batch_first):
        return rnn_output(input, hx, bidirectional), hx.new_empty(hx.shape)

    return op


gru_packed = _single_state_packed("gru", torch.ops.aten.gru.data)
rnn_tanh_packed = _single_state_packed("rnn_tanh", torch.ops.aten.rnn_tanh.data)
rnn_relu_packed = _single_state_packed("rnn_relu", torch.ops.aten.rnn_relu.data)

_PACKED_OPS = {"lstm": torch.ops.crossport.lstm_packed, "gru": torch.ops.crossport.gru_packed,
               "rnn_tanh": torch.ops.crossport.rnn_tanh_packed,
               "rnn_relu": torch.ops.crossport.rnn_relu_packed}


def run_packed(name: str, data: Tensor, sizes: PaddedBatchSizes, hx, *rest):
    """``_VF.<name>(data, batch_sizes, hx, params, ...)`` of the RNN modules on a padded pack:
    the masked op on the padded batch, its output flattened back to ``.data`` rows."""
    padded, params = sizes.padded(data)[0], rest[0]
    # torch's packed kernel checks the features against the weights (no dynamic feature dim)
    torch._check(padded.shape[-1] == params[0].shape[1])
    output, *states = _PACKED_OPS[name](padded, sizes.lengths, hx, *rest, sizes.batch_first)
    return (sizes.flat(output, zero_past_lengths=True), *states)


class _PaddingVF:
    """Stands in for ``torch._VF`` inside ``torch.nn.utils.rnn`` during capture."""

    def __init__(self, vf):
        self._vf = vf

    def __getattr__(self, name):
        return getattr(self._vf, name)

    @staticmethod
    def _pack_padded_sequence(input: Tensor, lengths: Tensor, batch_first: bool):
        batch, steps = (input.shape[0], input.shape[1]) if batch_first else (
            input.shape[1], input.shape[0])
        sizes = PaddedBatchSizes(lengths, batch, steps, batch_first)
        return sizes.flat(input), sizes

    @staticmethod
    def _pad_packed_sequence(data: Tensor, sizes, batch_first: bool, padding_value: float,
                             total_length):
        if not isinstance(sizes, PaddedBatchSizes):
            raise UnsupportedOpError(
                "pad_packed_sequence of a PackedSequence crossport did not make: build it "
                "with pack_padded_sequence in forward")
        if type(total_length) is _LongestLength:
            raise UnsupportedOpError(
                "pad_packed_sequence without total_length: its output has max(lengths) "
                "steps, a size read from the lengths' values. Pass total_length (the padded "
                "input's length, e.g. total_length=x.shape[1]); the steps past a sequence's "
                "length hold padding_value")
        padded, zeros = sizes.padded(data)
        if not (zeros and padding_value == 0):
            padded = torch.where(_real_steps(padded, sizes), padded, padding_value)
        if sizes.batch_first != batch_first:
            padded = padded.transpose(0, 1)
        time = 1 if batch_first else 0
        extra = total_length - padded.shape[time]
        if extra:  # padding_value appended, or (negative) the steps past total_length cut
            after = [0, 0] * (padded.dim() - 1 - time)
            padded = torch.nn.functional.pad(padded, [*after, 0, extra], value=padding_value)
        return padded, sizes.lengths


def _real_steps(padded: Tensor, sizes: PaddedBatchSizes) -> Tensor:
    """Whether each step of ``padded`` is within its sequence's length, broadcastable to it
    (``[N, T, 1...]`` or ``[T, N, 1...]`` as the batch is held: no transpose meets it)."""
    steps = torch.arange(padded.shape[1 if sizes.batch_first else 0], device=padded.device)
    lengths = sizes.lengths.to(padded.device)
    real = (steps[None, :] < lengths[:, None] if sizes.batch_first
            else steps[:, None] < lengths[None, :])
    return real[(..., *([None] * (padded.dim() - 2)))]


def _rnn_check_forward_args(check):
    """``RNNBase.check_forward_args`` that lets a padded pack through (its data is the padded
    batch flattened, not torch's packed rows; torch validates it in the eager check)."""

    def checked(self, input, hidden, batch_sizes):
        if isinstance(batch_sizes, PaddedBatchSizes):
            return None
        return check(self, input, hidden, batch_sizes)

    return checked


@contextlib.contextmanager
def padded_packed_sequences() -> Iterator[None]:
    """Within the block, packed sequences stay padded and RNNs run on them masked."""
    vf, check = torch_rnn_utils._VF, torch_rnn.RNNBase.check_forward_args
    torch_rnn_utils._VF = _PaddingVF(vf)
    torch_rnn.RNNBase.check_forward_args = _rnn_check_forward_args(check)
    try:
        yield
    finally:
        torch_rnn_utils._VF = vf
        torch_rnn.RNNBase.check_forward_args = check
