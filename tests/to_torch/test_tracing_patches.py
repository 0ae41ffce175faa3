"""Tracing a custom layer patches Keras process-wide (``to_torch/patching.py``): every patch
is undone whatever ends the trace, another thread sees Keras unchanged meanwhile, and two
conversions in one process trace one after the other."""

import threading

import keras
import numpy as np
import pytest
import torch
from keras import ops

import crossport
from crossport.errors import UnsupportedLayerError

L = keras.layers
_ORIGINAL_CALL = keras.layers.Layer.__call__


def _patchable() -> dict:
    """Every attribute a trace replaces, by identity."""
    owners = [keras.ops, keras.ops.numpy, keras.ops.nn, keras.src.ops, keras.layers.Layer,
              keras.src.ops.operation.Operation, keras.KerasTensor,
              keras.src.backend.common.variables.Variable, keras.src.backend,
              keras.src.backend.common, keras.src.backend.common.variables]
    return {(id(owner), name): value for owner in owners for name, value in vars(owner).items()}


class Raises(L.Layer):
    """A custom layer whose call raises ``error`` once armed (after the model is built)."""

    def __init__(self, error, **kwargs):
        super().__init__(**kwargs)
        self.error, self.armed = error, False

    def call(self, x):
        y = ops.multiply(x, 2.0)
        if self.armed:
            raise self.error
        return y


def _model(layer):
    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, layer(inputs))
    layer.armed = True
    return model


@pytest.mark.parametrize("error", [KeyboardInterrupt(), ValueError("no")],
                         ids=["keyboard-interrupt", "exception"])
def test_every_patch_is_undone_when_the_traced_call_raises(error):
    before = _patchable()
    model = _model(Raises(error))
    expected = KeyboardInterrupt if isinstance(error, KeyboardInterrupt) else \
        UnsupportedLayerError
    with pytest.raises(expected):
        crossport.to_torch(model, (torch.randn(2, 5, 3),))
    after = _patchable()
    changed = [key for key in before if after.get(key) is not before[key]]
    added = [key for key in set(after) - set(before) if key[1] != "__annotations__"]
    assert not changed and not added  # (Python creates a class's __annotations__ lazily)


class Plain(L.Layer):
    def call(self, x):
        return ops.add(x, 1.0)


class Waits(L.Layer):
    """Holds its trace open until released, so another thread runs meanwhile."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.entered, self.release, self.armed = threading.Event(), threading.Event(), False

    def call(self, x):
        if self.armed and not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(60)
        return ops.multiply(x, ops.cast(ops.shape(x)[1], x.dtype))


def test_another_thread_sees_keras_unchanged_during_a_trace():
    """While a trace is open on one thread, another builds and runs a functional model with
    a custom layer: it is a node of that model (the tracing thread would inline it) and
    keras.ops on a size compute eagerly."""
    layer = Waits()
    model = _model(layer)
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype("float32")
    result = {}

    def convert():
        try:
            result["module"] = crossport.to_torch(model, (x,))
        except BaseException as exc:  # noqa: BLE001  (reported to the test thread)
            result["error"] = exc

    worker = threading.Thread(target=convert)
    worker.start()
    try:
        assert layer.entered.wait(120), "the trace never started"
        assert keras.layers.Layer.__call__ is not _ORIGINAL_CALL  # a trace is open
        inputs, plain = keras.Input((4,)), Plain(name="plain")
        plain(np.zeros((1, 4), "float32"))  # built: the tracing thread would inline it
        other = keras.Model(inputs, plain(inputs))
        assert [type(lay).__name__ for lay in other.layers] == ["InputLayer", "Plain"]
        np.testing.assert_allclose(np.asarray(other(np.ones((1, 4), "float32"))), 2.0)
        assert not isinstance(ops.arange(3), keras.KerasTensor)
    finally:
        layer.release.set()
        worker.join(120)
    assert "error" not in result, result.get("error")
    got = result["module"](torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, x * 5, rtol=1e-6)


def test_two_conversions_in_threads_trace_one_after_the_other():
    """A second conversion started while the first is tracing waits for it, then converts
    (its trace would otherwise run on the first one's patches)."""
    first, second = Waits(), Waits()
    models = [_model(first), _model(second)]
    second.release.set()  # records that its trace started, does not hold it
    x = np.random.default_rng(1).standard_normal((2, 4, 3)).astype("float32")
    results = [None, None]

    def convert(i):
        results[i] = crossport.to_torch(models[i], (x,))

    threads = [threading.Thread(target=convert, args=(i,)) for i in range(2)]
    threads[0].start()
    assert first.entered.wait(120)
    threads[1].start()
    threads[1].join(3)
    assert not second.entered.is_set()  # waiting for the first trace to end
    first.release.set()
    for thread in threads:
        thread.join(120)
    for module in results:
        np.testing.assert_allclose(module(torch.from_numpy(x)).detach().numpy(), x * 4,
                                   rtol=1e-6)
