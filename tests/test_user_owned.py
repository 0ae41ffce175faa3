"""Conversion never changes the user's module, rejects vacuous inputs and mistyped options."""

import warnings

import numpy as np
import pytest
import torch

import crossport
from crossport.to_keras.registry import replaced
from tests.harness import random_inputs


class CachingHead(torch.nn.Module):
    """Caches a shape-derived grid on ``self`` the first time it sees a shape (YOLO's head)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.drop = torch.nn.Dropout(0.5)
        self.shape = None
        self.anchors = torch.empty(0)
        self.register_buffer("calls", torch.zeros(1))
        self.history = []

    def forward(self, x):
        y = self.drop(self.bn(self.conv(x))).relu()
        self.history.append((x.shape, y))
        if self.shape != x.shape:
            self.anchors = torch.arange(x.shape[-1], dtype=x.dtype) / x.shape[-1]
            self.shape = x.shape
            self.seen = True
        return y + self.anchors


def _state(module: torch.nn.Module) -> dict:
    """Everything the tests promise stays the same, comparable with ==."""
    state = {}
    for name, m in module.named_modules():
        attrs = {}
        for key, value in m.__dict__.items():
            if isinstance(value, torch.Tensor):
                value = ("tensor", type(value).__name__, tuple(value.shape), value.tolist())
            elif isinstance(value, dict):
                value = ("dict", tuple(value), tuple(id(v) for v in value.values()))
            elif isinstance(value, list):
                value = ("list", id(value), len(value))
            elif not isinstance(value, (bool, int, float, str, type(None), torch.Size)):
                value = ("object", id(value))
            attrs[key] = value
        state[name] = attrs
    state["buffers"] = {k: v.tolist() for k, v in module.named_buffers()}
    state["parameters"] = {k: v.tolist() for k, v in module.named_parameters()}
    return state


def _fresh_head() -> CachingHead:
    torch.manual_seed(0)
    return CachingHead().eval()


def test_converting_a_caching_module_leaves_it_unchanged():
    head = _fresh_head()
    before = _state(head)
    x = random_inputs((1, 3, 6, 6))
    model = crossport.convert(head, x)
    assert _state(head) == before
    assert not hasattr(head, "seen") and head.shape is None
    fresh = random_inputs((1, 3, 6, 6), seed=5)[0]
    np.testing.assert_allclose(np.asarray(model(fresh.numpy())),
                               _fresh_head()(fresh).detach().numpy(), atol=1e-5)


def test_a_warm_cache_from_another_shape_is_left_as_the_user_had_it():
    head = _fresh_head()
    head(torch.randn(1, 3, 4, 4))  # the user ran it at another size: anchors for width 4
    before = _state(head)
    crossport.convert(head, random_inputs((1, 3, 6, 6)))
    assert _state(head) == before and head.shape == (1, 3, 4, 4)


def test_a_failed_conversion_leaves_the_module_unchanged_and_runnable():
    relu = torch.ops.aten.relu.default

    def leaky_by_mistake(ctx, self):
        import keras
        return keras.layers.LeakyReLU(negative_slope=0.1, name=ctx.name())(self)

    head = _fresh_head()
    before = _state(head)
    with replaced(relu, leaky_by_mistake, supports=None), pytest.raises(crossport.ParityError):
        crossport.convert(head, random_inputs((1, 3, 6, 6)))
    assert _state(head) == before
    x = torch.randn(1, 3, 6, 6)
    out = head(x)
    assert type(out) is torch.Tensor  # not a FakeTensor left by the capture
    torch.testing.assert_close(out, _fresh_head()(x))


def test_an_unsupported_op_failure_leaves_the_module_unchanged():
    class Cumulative(CachingHead):
        def forward(self, x):
            return torch.geqrf(super().forward(x))[0]

    torch.manual_seed(0)
    net = Cumulative().eval()
    before = _state(net)
    with pytest.raises(crossport.UnsupportedOpError):
        crossport.convert(net, random_inputs((1, 3, 6, 6)))
    assert _state(net) == before
    assert type(net(torch.randn(1, 3, 6, 6))) is torch.Tensor


def test_train_mode_converts_eval_warns_once_and_restores_flags():
    head = _fresh_head().train()
    head.bn.eval()  # a mixed state must come back exactly
    flags = {name: m.training for name, m in head.named_modules()}
    before = _state(head)
    x = random_inputs((2, 3, 6, 6))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        conversion = crossport.convert_with_report(head, x)
    train_warnings = [w for w in caught if "train mode" in str(w.message)]
    assert len(train_warnings) == 1, [str(w.message) for w in caught]
    assert {name: m.training for name, m in head.named_modules()} == flags
    assert _state(head) == before
    eval_out = _fresh_head()(x[0]).detach().numpy()  # dropout off, running statistics
    np.testing.assert_allclose(np.asarray(conversion.model(x[0].numpy())), eval_out, atol=1e-5)


def test_check_and_export_recheck_leave_the_module_unchanged(tmp_path):
    head = _fresh_head()
    x = random_inputs((1, 3, 6, 6))
    conversion = crossport.convert_with_report(head, x)
    head.train()
    before = _state(head)
    crossport.export(conversion, tmp_path / "head.keras")
    crossport.to_source(conversion, tmp_path / "head_keras.py")
    crossport.check(head, conversion.model, x)
    assert _state(head) == before and head.training


@pytest.mark.parametrize("shape", [(0, 3, 6, 6), (1, 3, 0, 6)])
def test_a_zero_size_input_is_an_input_error(shape):
    with pytest.raises(crossport.InputError, match="dim of size 0"):
        crossport.convert(_fresh_head(), (torch.randn(shape),))


def test_an_example_made_in_inference_mode_converts():
    """A tensor from ``torch.inference_mode()`` (a data loader, a preprocessing step) was a
    CaptureError saying inference tensors cannot be saved for backward (found by audit)."""
    head = _fresh_head().eval()
    with torch.inference_mode():
        x = torch.randn(1, 3, 6, 6)
    model = crossport.convert(head, (x,))
    with torch.no_grad():
        expected = head(x.clone()).numpy()
    np.testing.assert_allclose(np.asarray(model(x.numpy())), expected, atol=1e-5)
    assert x.is_inference()


@pytest.mark.parametrize("option,value,expected", [
    ("atol", "1e-4", "atol='1e-4'"),
    ("atol", -1.0, "atol=-1.0"),
    ("check_inputs", -1, "check_inputs=-1"),
    ("check_inputs", 1.5, "check_inputs=1.5"),
    ("check", "yes", "check='yes'"),
    ("seed", None, "seed=None"),
    ("dynamic_batch", 1, "dynamic_batch=1"),
    ("channels_last_io", "false", "channels_last_io='false'"),
    ("dynamic_dims", [0, 1], "dynamic_dims=[0, 1]"),
    ("dynamic_dims", {0: "seq"}, "dynamic_dims"),
    ("dynamic_dims", {1.5: {1: "seq"}}, "dynamic_dims"),
])
def test_a_mistyped_option_is_an_input_error_naming_it(option, value, expected):
    with pytest.raises(crossport.InputError, match="expected") as info:
        crossport.convert(torch.nn.ReLU(), random_inputs((1, 3)), **{option: value})
    assert expected in str(info.value)


def test_a_mistyped_option_in_the_dataclass_is_an_input_error():
    with pytest.raises(crossport.InputError, match="atol"):
        crossport.convert(torch.nn.ReLU(), random_inputs((1, 3)),
                          crossport.ConvertOptions(atol="1e-4"))
