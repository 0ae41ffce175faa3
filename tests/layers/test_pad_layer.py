"""crossport.layers.Pad against torch.nn.functional.pad: every mode, negative pads, layouts."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from crossport.errors import InputError
from crossport.layers import Pad

MODES = ("constant", "reflect", "replicate", "circular")
HYP = settings(max_examples=25, deadline=None, derandomize=True)


def _torch_pad(x, pad, mode, value):
    try:
        return F.pad(torch.from_numpy(x), pad, mode=mode, value=value if mode == "constant" else None)
    except (RuntimeError, ValueError, NotImplementedError):
        return None


@HYP
@given(
    mode=st.sampled_from(MODES),
    rank=st.integers(3, 5),
    data=st.data(),
    seed=st.integers(0, 2**16),
    data_format=st.sampled_from(("channels_last", "channels_first")),
)
def test_pad_matches_torch(lt, mode, rank, data, seed, data_format):
    shape = data.draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank))
    n_pairs = data.draw(st.integers(1, rank - 2 if mode != "constant" else rank))
    pad = tuple(data.draw(st.lists(st.integers(-2, 3), min_size=2 * n_pairs, max_size=2 * n_pairs)))
    if mode == "circular":  # torch wraps around the cropped tensor; larger pads read garbage
        dims = shape[::-1]
        for i in range(n_pairs):
            cropped = dims[i] + min(pad[2 * i], 0) + min(pad[2 * i + 1], 0)
            assume(max(pad[2 * i], pad[2 * i + 1]) <= cropped)
    x = lt.randn(seed, *shape)
    ref = _torch_pad(x, pad, mode, 1.25)
    assume(ref is not None and ref.numel() > 0)
    out = lt.keras_run(Pad(pad, mode, 1.25 if mode == "constant" else 0.0,
                           data_format=data_format), x, data_format)
    np.testing.assert_array_equal(out, ref.numpy())


@pytest.mark.parametrize("perm", [(0, 1, 2), (2, 0, 1), (1, 2, 0), (0, 2, 1)])
@pytest.mark.parametrize("mode", MODES)
def test_pad_with_explicit_perm(lt, perm, mode):
    x = lt.randn(0, 2, 4, 5)
    pad = (1, 2)
    ref = F.pad(torch.from_numpy(x), pad, mode=mode).numpy()
    out = Pad(pad, mode, perm=perm)(np.transpose(x, perm))
    np.testing.assert_array_equal(np.asarray(out), np.transpose(ref, perm))


@pytest.mark.parametrize("mode", MODES)
def test_pad_roundtrip_dynamic_dims(lt, mode, tmp_path):
    x = lt.to_keras(lt.randn(1, 2, 3, 5, 6), "channels_last")
    lt.roundtrip(Pad((1, 2, 2, 1), mode, name="pad"), x, tmp_path)
    # spatial dims dynamic too (index padding computed in-graph)
    lt.roundtrip(Pad((1, 2, 2, 1), mode, name="pad"), x, tmp_path, dynamic=(0, 1, 2))


@pytest.mark.parametrize(
    "module",
    [
        torch.nn.ZeroPad2d((1, 2, 0, 3)),
        torch.nn.ConstantPad1d((2, 1), 0.5),
        torch.nn.ReflectionPad2d(2),
        torch.nn.ReplicationPad3d((1, 0, 2, 1, 0, 1)),
        torch.nn.CircularPad2d((1, 2, 2, 1)),
    ],
    ids=lambda m: type(m).__name__,
)
def test_from_torch(lt, module, data_format):
    rank = 2 + int(type(module).__name__[-2])
    x = lt.randn(3, *([2, 3, 4, 5, 6][:rank]))
    ref = lt.torch_run(module, x)
    out = lt.keras_run(Pad.from_torch(module, data_format=data_format), x, data_format)
    np.testing.assert_array_equal(out, ref)


def test_invalid_arguments():
    with pytest.raises(InputError):
        Pad((1, 2, 3))
    with pytest.raises(InputError):
        Pad((1, 1), mode="symmetric")
    with pytest.raises(InputError):
        Pad((3, 0), mode="reflect", data_format="channels_first")(np.zeros((1, 2, 3), np.float32))


def test_default_layout_is_channels_last():
    x = np.random.default_rng(5).standard_normal((1, 4, 5, 3)).astype(np.float32)  # NHWC
    for pad in itertools.product((0, 1), repeat=4):
        assert Pad(pad)(x).shape == (1, 4 + pad[2] + pad[3], 5 + pad[0] + pad[1], 3)


def _run_dynamic_pad(mode, pads):
    """A graph-mode ``DynamicPad(pads, mode)``: any input shape, run-time amounts."""
    import tensorflow as tf

    from crossport.layers.dynamic import DynamicPad

    layer = DynamicPad(pads, mode=mode)
    count = sum(a is None for pair in pads for a in pair)
    signature = [tf.TensorSpec([None] * len(pads), tf.float32)] + [
        tf.TensorSpec([], tf.int32)] * count
    return tf.function(lambda x, *amounts: layer(x, *amounts), input_signature=signature)


@pytest.mark.parametrize("mode", ("reflect", "replicate", "circular"))
def test_dynamic_pad_matches_torch_at_every_amount_torch_accepts(mode):
    """DynamicPad's index rules, traced once with unknown sizes and amounts, against
    F.pad at every size 1..6 and amounts -7..7 torch accepts (negative ones crop)."""
    run = _run_dynamic_pad(mode, [[0, 0], [None, None]])
    checked = 0
    for size in range(1, 7):
        x = torch.arange(size, dtype=torch.float32)[None] + 10
        for before, after in itertools.product(range(-7, 8), repeat=2):
            kept = size - max(-before, 0) - max(-after, 0)
            if mode == "circular" and kept <= 0:
                continue  # torch returns uninitialised memory
            try:
                ref = F.pad(x[None], (before, after), mode=mode)[0]
            except RuntimeError:
                continue
            if ref.numel() == 0:
                continue
            out = run(x.numpy(), np.int32(before), np.int32(after))
            np.testing.assert_array_equal(np.asarray(out), ref.numpy(),
                                          err_msg=f"{mode} size {size} pad {before, after}")
            checked += 1
    assert checked > 200, checked


@pytest.mark.parametrize("mode", ("reflect", "replicate", "circular"))
def test_dynamic_pad_two_axes_channels_last_int(mode):
    """Corners of two padded axes, one amount static; NHWC held axes; int32 kept."""
    from crossport.layers.dynamic import DynamicPad

    x = torch.arange(2 * 3 * 5 * 6, dtype=torch.int32).reshape(2, 3, 5, 6)
    ref = F.pad(x.float(), (2, 3, 1, 4), mode=mode).to(torch.int32)
    nhwc = np.transpose(x.numpy(), (0, 2, 3, 1))
    layer = DynamicPad([[0, 0], [1, None], [None, 3], [0, 0]], mode=mode)
    out = np.asarray(layer(nhwc, np.int32(4), np.int32(2)))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(np.transpose(out, (0, 3, 1, 2)), ref.numpy())
    clone = DynamicPad.from_config(layer.get_config())
    assert clone.mode == mode and clone.pads == layer.pads


def test_dynamic_pad_refuses_an_unknown_mode():
    from crossport.layers.dynamic import DynamicPad

    with pytest.raises(ValueError, match="symmetric"):
        DynamicPad([[None, 0]], mode="symmetric")
