"""Python branches on run-time sizes in traced custom layers (``to_torch/conditions.py``).

A layer's Python sees ``ops.shape(x)[1]`` of a ``None`` dim as the example's number, so
``if seq_len > self.max_len:`` is decided there and the trace follows that branch at every
size. The self-check's second size moves the example's (4 -> 8 here) and crosses none of
these branches. Now a condition whose outcome can change over the sizes Keras accepts
is refused naming the line and the condition; a constant one (``n > 0`` for a dim, which
is at least 1) converts, ``min`` / ``max`` of sizes compute at run time, a condition
guarding only a ``raise`` converts, and Keras' own comparisons of sizes (its shape
inference) are not the layer's branches.

Run on the code before (b9be2bb), every refusal row converted, its check at 2x4x3 and 4x8x3
passing, and the module was wrong off the example's branch: Truncate at length 20 (torch
(2, 20, 3), Keras (2, 12, 3)), OddPadded at 5 (torch (2, 5, 3), Keras (2, 6, 3)),
SingleStep at 1 (values off by 1.2: the mean subtracted), PaddedBatch at 6 (torch raised
in its reshape, Keras pads to 8); TwoLengths converted too. ``min(n, 6)`` was ``n`` at
length 4 (the check failed at 8: a loud ParityError)."""

import re
import sys

import keras
import numpy as np
import pytest
import torch
from keras import ops

import crossport
from tests.to_torch.test_runtime_sizes import assert_at_sizes

L = keras.layers


class ShapeKept(L.Layer):
    """Declares its output shape: Keras' symbolic build cannot run a Python branch on a
    ``None`` size (a symbolic tensor there), so such layers declare it."""

    def compute_output_shape(self, shape, *others):
        return shape


class Truncate(L.Layer):
    """Keeps the last ``max_len`` positions of a longer sequence."""

    def __init__(self, max_len, **kwargs):
        super().__init__(**kwargs)
        self.max_len = max_len

    def call(self, x):
        seq_len = ops.shape(x)[1]
        if seq_len > self.max_len:
            x = x[:, seq_len - self.max_len:]
        return x * 2.0

    def compute_output_shape(self, shape):
        return (shape[0], None, shape[2])


class OddPadded(L.Layer):
    """Pads an odd length to an even one."""

    def call(self, x):
        if ops.shape(x)[1] % 2 == 1:
            x = ops.pad(x, ((0, 0), (0, 1), (0, 0)))
        return ops.cumsum(x, axis=1)

    def compute_output_shape(self, shape):
        return (shape[0], None, shape[2])


class SingleStep(ShapeKept):
    """A separate path for a length-1 input (a decoding step)."""

    def call(self, x):
        if ops.shape(x)[1] == 1:
            return x
        return x - ops.mean(x, axis=1, keepdims=True)


class PaddedBatch(L.Layer):
    """A truth test of a derived size: pads only when the length is not a multiple of 4."""

    def call(self, x):
        pad = -ops.shape(x)[1] % 4
        if pad:
            x = ops.pad(x, ((0, 0), (0, pad), (0, 0)))
        return ops.sum(ops.reshape(x, (ops.shape(x)[0], -1, 4, 3)), axis=2)

    def compute_output_shape(self, shape):
        return (shape[0], None, shape[2])


class TwoLengths(ShapeKept):
    """Branches on whether two inputs' lengths are equal."""

    def call(self, a, b):
        if ops.shape(a)[1] == ops.shape(b)[1]:
            return a + b
        return a + ops.mean(b, axis=1, keepdims=True)


def _model(layer, length_inputs: int = 1):
    inputs = [keras.Input((None, 3)) for _ in range(length_inputs)]
    return keras.Model(inputs if length_inputs > 1 else inputs[0], layer(*inputs))


@pytest.mark.parametrize("layer, condition, line", [
    (Truncate(12, name="branchy"), r"`shape\(x\)\[1\] > 12` was False",
     "if seq_len > self.max_len:"),
    (OddPadded(name="branchy"), r"`\(shape\(x\)\[1\] % 2\) == 1` was False",
     "if ops.shape(x)[1] % 2 == 1:"),
    (SingleStep(name="branchy"), r"`shape\(x\)\[1\] == 1` was False",
     "if ops.shape(x)[1] == 1:"),
    (PaddedBatch(name="branchy"), r"`bool\(\(-\(shape\(x\)\[1\]\) % 4\)\)` was False",
     "if pad:"),
], ids=["longer-than-max", "odd-length", "length-one", "truth-of-a-derived-size"])
def test_a_branch_on_a_runtime_size_is_refused_naming_line_and_condition(layer, condition,
                                                                         line):
    model = _model(layer)
    with pytest.raises(crossport.UnsupportedLayerError) as err:
        crossport.to_torch(model, (torch.randn(2, 4, 3),))
    message = str(err.value)
    assert "branchy" in message and "branches on a run-time size" in message
    assert "test_size_branches.py:" in message and f"`{line}`" in message
    assert re.search(condition, message), message
    assert "fixed size" in message and "ops.where" in message


def test_truncation_was_silently_wrong_at_a_length_past_the_maximum():
    """What the refusal prevents: Keras at length 20 (the branch the trace did not take)."""
    model = _model(Truncate(12))
    assert tuple(model(np.zeros((2, 20, 3), "float32")).shape) == (2, 12, 3)
    assert tuple(model(np.zeros((2, 8, 3), "float32")).shape) == (2, 8, 3)


class TwoBranches(L.Layer):
    """Two branches and a loop: one refusal names all three."""

    def call(self, x):
        n = ops.shape(x)[1]
        if n > 6:
            x = x * 2.0
        if n < 3:
            x = x * 3.0
        for _ in range(n // 2):
            x = x + 1.0
        return x

    def compute_output_shape(self, shape):
        return shape


def test_every_branch_of_a_layer_is_named_in_one_refusal():
    model = _model(TwoBranches(name="two"))
    with pytest.raises(crossport.UnsupportedLayerError) as err:
        crossport.to_torch(model, (torch.randn(2, 4, 3),))
    message = str(err.value)
    for part in ("`if n > 6:`", "`shape(x)[1] > 6` was False", "`if n < 3:`",
                 "`shape(x)[1] < 3` was False", "taken there", "loops over a run-time size",
                 "`for _ in range(n // 2):`"):
        assert part in message, (part, message)


def test_a_branch_on_two_inputs_lengths_is_refused():
    model = _model(TwoLengths(name="two"), 2)
    with pytest.raises(crossport.UnsupportedLayerError,
                       match=r"`shape\(a\)\[1\] == shape\(b\)\[1\]` was True"):
        crossport.to_torch(model, (torch.randn(2, 4, 3), torch.randn(2, 4, 3)))


class Guards(ShapeKept):
    """Conditions with one outcome at every size a dim takes (each at least 1)."""

    def call(self, x):
        n = ops.shape(x)[1]
        if n > 0 and n >= 1 and bool(n) and n + 1 > n and n % 4 < 4 and 2 * n >= n:
            x = x * 2.0
        if n < 0 or n - n == 1:
            x = x * 0.0
        return x + ops.cast(n, "float32")


def test_a_condition_constant_over_every_size_converts():
    assert_at_sizes(_model(Guards()), (torch.randn(2, 4, 3),), [[(3, 1, 3)], [(1, 23, 3)]])


class Extremes(L.Layer):
    """``min`` / ``max`` of sizes (builtins): computed at run time, not a branch."""

    def __init__(self, window, **kwargs):
        super().__init__(**kwargs)
        self.window = window

    def call(self, x, y):
        n, m = ops.shape(x)[1], ops.shape(y)[1]
        head = x[:, :min(n, self.window)]                 # the first `window` positions
        both = x[:, :min(n, m)] + y[:, :min(m, n)]        # the shorter length
        reps = max(n // 2, 2, 1)
        tiled = ops.tile(x[:, :1], (1, reps, 1))
        return (ops.sum(head, axis=1) + ops.sum(both, axis=1)
                + ops.sum(tiled, axis=1) * ops.cast(max(n, 1), "float32"))

    def compute_output_shape(self, x_shape, y_shape):
        return (x_shape[0], x_shape[2])


def test_min_and_max_of_sizes_compute_at_run_time(tmp_path):
    """Before, ``min(n, 6)`` at length 4 was ``n``: the check failed at 8 (a ParityError).
    The written source computes them too."""
    from tests.to_torch.harness import load_written

    x, y = keras.Input((None, 3)), keras.Input((None, 3))
    model = keras.Model([x, y], Extremes(6, name="extremes")(x, y))
    conv = assert_at_sizes(model, (torch.randn(2, 4, 3), torch.randn(2, 5, 3)),
                           [[(2, 9, 3), (2, 3, 3)], [(1, 2, 3), (1, 11, 3)],
                            [(3, 7, 3), (3, 7, 3)]])
    code = conv.module.code
    assert "sym_min" in code and "sym_max" in code
    assert "min" not in vars(sys.modules[__name__])  # the builtins are back
    written = load_written(crossport.to_torch_source(conv, tmp_path / "m.py")).build_model()
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal(s).astype("float32") for s in ((2, 10, 3), (2, 7, 3)))
    np.testing.assert_allclose(written(torch.from_numpy(a), torch.from_numpy(b)).detach().numpy(),
                               np.asarray(model([a, b])), atol=1e-5)


class RaiseGuards(ShapeKept):
    """A condition guarding only a raise: the other side is a size Keras rejects."""

    def call(self, x):
        n = ops.shape(x)[1]
        if n > 16:
            raise ValueError(f"at most 16 positions, got {n}")
        assert n <= 16, "too long"
        return x * 3.0


def test_a_condition_guarding_only_a_raise_converts():
    model = _model(RaiseGuards())
    assert_at_sizes(model, (torch.randn(2, 4, 3),), [[(3, 16, 3)], [(1, 1, 3)]])
    with pytest.raises(ValueError, match="at most 16"):
        model(np.zeros((1, 17, 3), "float32"))


class KerasInside(L.Layer):
    """Keras layers and keras.ops whose own code compares sizes (shape inference,
    broadcasting, padding): no branch of this layer."""

    def build(self, shape):
        self.conv = L.Conv1D(3, 3, padding="same")
        self.attention = L.MultiHeadAttention(2, 4)
        self.norm = L.LayerNormalization()

    def call(self, x):
        y = self.conv(x)
        y = self.attention(y, y) + ops.broadcast_to(ops.mean(x, axis=1, keepdims=True),
                                                    ops.shape(x))
        return self.norm(ops.concatenate([y, x], axis=1))


def test_keras_own_size_comparisons_are_not_recorded():
    assert_at_sizes(_model(KerasInside()), (torch.randn(2, 5, 3),),
                    [[(3, 2, 3)], [(1, 12, 3)]], atol=1e-4)
