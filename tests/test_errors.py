"""Bad input gives one clear CrossportError naming what and where."""

import os
import re
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import torch
from torch._higher_order_ops.while_loop import while_loop

import crossport
from crossport.to_keras.registry import _REGISTRY
from tests.harness import random_inputs


@torch.library.custom_op("crossport_test::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x.sin()


@mystery.register_fake
def _(x):
    return torch.empty_like(x)


class UsesUnsupportedOps(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3))

    def forward(self, x):
        y = mystery(self.body(x))
        return torch.geqrf(y)[0] + mystery(y)


def test_unsupported_ops_are_all_listed_with_count_and_source_line():
    with pytest.raises(crossport.UnsupportedOpError) as info:
        crossport.convert(UsesUnsupportedOps().eval(), random_inputs((1, 3, 8, 8)))
    message = str(info.value)
    assert "crossport_test.mystery.default x2" in message
    assert "aten.geqrf.default x1" in message
    assert "test_errors.py" in message and "torch.geqrf(y)[0]" in message
    assert {p["op"] for p in info.value.problems} == {
        "crossport_test.mystery.default", "aten.geqrf.default"}


class ValueAsSize(torch.nn.Module):
    """A slice bound read from a tensor's value (Reformer's position encodings)."""

    def forward(self, x):
        n = x.argmax().item()
        torch._check(n >= 0)
        torch._check(n < 10)
        return x.flatten()[: n + 1].sum()


class DrawsNoise(torch.nn.Module):
    def forward(self, x):
        return x + torch.rand(x.shape), torch.randn(3)


@pytest.mark.parametrize("module, why", [
    (ValueAsSize(), r"aten._local_scalar_dense.default x1: no converter: a tensor's value "
                    r"read as a Python number \(.item\(\).*test_errors.py:\d+: n = x.argmax"),
    (DrawsNoise(), r"aten.rand.default x1: no converter: random numbers drawn in forward.*"
                   r"pass them in as an input of forward"),
], ids=["value-read-as-a-number", "random-numbers"])
def test_ops_no_converter_can_take_say_why(module, why):
    """They were a bare "no converter" (the transformers sweep: Reformer, JetMoE, UnivNet,
    ViT-MAE)."""
    with pytest.raises(crossport.UnsupportedOpError, match=re.compile(why, re.DOTALL)):
        crossport.convert(module.eval(), (torch.randn(2, 5),))


DATA_SIZED = [
    (lambda x: torch.nonzero(x > 0), "aten.nonzero.default", "nonzero_static"),
    (lambda x: torch.argwhere(x), "aten.nonzero.default", "nonzero_static"),
    (lambda x: torch.masked_select(x, x > 0), "aten.masked_select.default", "torch.where"),
    (lambda x: torch.unique(x), "aten._unique2.default", "sorted neighbours"),
    (lambda x: torch.unique_consecutive(x), "aten.unique_consecutive.default", "run starts"),
    (lambda x: torch.bincount((x.abs() * 3).long().flatten()), "aten.bincount.default",
     "scatter_add"),
]


@pytest.mark.parametrize("fn, op, instead", DATA_SIZED,
                         ids=["nonzero", "argwhere", "masked_select", "unique",
                              "unique_consecutive", "bincount"])
def test_ops_whose_output_size_depends_on_the_data_say_so(fn, op, instead):
    """They were a bare "no converter", beside two more for torch.export's checks on the
    data-dependent size (``u0 >= 0``, shown as ``<built-in function ge>``)."""

    class Module(torch.nn.Module):
        def forward(self, x):
            return fn(x)

    with pytest.raises(crossport.UnsupportedOpError) as raised:
        crossport.convert(Module().eval(), (torch.randn(3, 4),))
    message = str(raised.value)
    assert re.search(rf"{re.escape(op)} x1: no converter: its output size depends on the "
                     rf"data.*instead: .*{re.escape(instead)}", message), message
    checks = message.partition("<built-in function ge>")[2]
    assert "derives from a data-dependent value" in checks, message
    assert "no converter\n" not in message, message


def test_bincount_suggestion_converts_and_matches():
    """The way out the bincount refusal names: a fixed number of bins by scatter_add."""
    from tests.harness import assert_converts

    class Counts(torch.nn.Module):
        def forward(self, x):
            index = (x.abs() * 3).long().clamp(max=5).flatten()
            return torch.zeros(6).scatter_add(0, index, torch.ones(index.shape)), index

    x = torch.randn(3, 4)
    counts, index = Counts()(x)
    assert torch.equal(counts, torch.bincount(index, minlength=6).float())
    assert_converts(Counts(), (x,))


class DataDependentBranch(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x


def test_uncapturable_model_is_a_capture_error_pointing_at_the_line():
    with pytest.raises(crossport.CaptureError, match=r"test_errors.py:\d+ \(if x.sum\(\) > 0"):
        crossport.convert(DataDependentBranch().eval(), random_inputs((1, 3, 4, 4)))


@pytest.mark.parametrize("bad", [[[1.0, 2.0]], "x", 3], ids=["nested-list", "string", "int"])
def test_example_args_of_wrong_type_are_an_input_error(bad):
    with pytest.raises(crossport.InputError, match="example"):
        crossport.convert(torch.nn.ReLU(), bad)


class KeywordOnly(torch.nn.Module):
    def forward(self, *, x):
        return x * 2


@pytest.mark.parametrize("module, count", [(torch.nn.ReLU(), 0), (torch.nn.ReLU(), 2),
                                           (KeywordOnly(), 1)],
                         ids=["too-few", "too-many", "keyword-only"])
def test_example_args_forward_cannot_take_are_an_input_error(module, count):
    """Found by the s17 audit: a CaptureError pointing into inspect.py, and for too few
    inputs one saying the module runs on the example inputs (it cannot)."""
    with pytest.raises(crossport.InputError, match=r"forward\(.*\) cannot take the "
                                                   rf"{count} example input"):
        crossport.convert(module, tuple(random_inputs((1, 3)) * count))


class DropsInEval(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.dropout(x, 0.5)  # training=True by default


@pytest.mark.parametrize("module, match", [
    (DropsInEval(), r"dropout with training=True in eval mode .*training=self.training"),
    (torch.nn.BatchNorm1d(3, track_running_stats=False),
     r"batch_norm with batch statistics in eval mode .*track_running_stats=False"),
], ids=["functional-dropout-default", "batchnorm-without-running-stats"])
def test_ops_that_train_in_eval_mode_are_refused_with_the_cause(module, match):
    """Found by the s17 audit: these were refused as "in training mode (call module.eval()
    before converting)" for a module already in eval mode, which eval() cannot fix."""
    with pytest.raises(crossport.UnsupportedOpError, match=match):
        crossport.convert(module.eval(), random_inputs((2, 3)))


def test_not_a_module_is_an_input_error():
    with pytest.raises(crossport.InputError, match="torch.nn.Module"):
        crossport.convert(lambda x: x, random_inputs((1, 3)))


def test_training_mode_batchnorm_is_converted_in_eval_semantics():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).train()
    x = random_inputs((2, 3, 8, 8))
    with pytest.warns(UserWarning, match="train mode"):
        model = crossport.convert(net, x)
    assert net.training and net[1].training, "the caller's training flags are restored"
    expected = net.eval()(x[0]).detach().numpy()  # running statistics, not batch statistics
    np.testing.assert_allclose(np.asarray(model(x[0].numpy())), expected, atol=1e-5)


# -- capture failures: the data-dependent hint only where it applies ------------------------

class WrongFeatureCount(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x) * 2


def test_shape_error_of_the_model_says_it_fails_on_the_inputs_without_the_control_flow_hint():
    with pytest.raises(crossport.CaptureError) as info:
        crossport.convert(WrongFeatureCount().eval(), random_inputs((2, 5)))
    message = str(info.value)
    assert "when run on the example inputs" in message
    assert "test_errors.py" in message and "self.fc(x) * 2" in message
    assert "control flow" not in message


def test_data_dependent_branch_gets_the_control_flow_hint():
    with pytest.raises(crossport.CaptureError, match="data-dependent Python control flow"):
        crossport.convert(DataDependentBranch().eval(), random_inputs((1, 3, 4, 4)))


# -- locations: file:line also for ops in the root module's forward -------------------------

class RootOp(torch.nn.Module):
    def forward(self, x):
        return torch.geqrf(x)[0]


ROOT_OP_SOURCE = '''
import torch, crossport

class RootOp(torch.nn.Module):
    def forward(self, x):
        return torch.geqrf(x)[0]

try:
    crossport.convert(RootOp().eval(), (torch.randn(2, 3),))
except crossport.UnsupportedOpError as exc:
    print(exc)
'''


def test_unsupported_op_in_root_forward_names_file_and_line():
    with pytest.raises(crossport.UnsupportedOpError) as info:
        crossport.convert(RootOp().eval(), random_inputs((2, 3)))
    assert re.search(r"in <root module> \(\S*test_errors.py:\d+: return torch.geqrf\(x\)",
                     str(info.value))


class WhileLoop(torch.nn.Module):
    def forward(self, x):
        start = torch.zeros((), dtype=torch.int64)
        _, y = while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 2), (start, x))
        return y


def test_higher_order_op_names_the_users_line_not_generated_code():
    """dynamo records torch.while_loop in generated code (``<eval_with_key>.5:9``); the
    refusal named that line (found on kornia's Canny) instead of the user's call."""
    with pytest.raises(crossport.UnsupportedOpError) as info:
        crossport.convert(WhileLoop().eval(), random_inputs((2, 3)))
    assert "eval_with_key" not in str(info.value)
    assert re.search(r"in <root module> \(\S*test_errors.py:\d+: _, y = while_loop",
                     str(info.value)), str(info.value)


@pytest.mark.parametrize("where", ["stdin", "torch-named-dir"])
def test_root_op_location_from_stdin_or_a_directory_named_torch(where, tmp_path):
    """Code without a file (stdin) still has a line; a user path containing /torch/ is the
    user's, not torch's."""
    env = {**os.environ, "PYTHONPATH": str(Path(crossport.__file__).parents[1])}
    if where == "stdin":
        result = subprocess.run([sys.executable, "-"], input=ROOT_OP_SOURCE, text=True,
                                capture_output=True, env=env, timeout=300)
        assert "in <root module> (<stdin>:6)" in result.stdout, result.stdout + result.stderr
    else:
        script = tmp_path / "torch" / "model.py"
        script.parent.mkdir()
        script.write_text(ROOT_OP_SOURCE)
        result = subprocess.run([sys.executable, str(script)], text=True, capture_output=True,
                                env=env, timeout=300)
        assert f"({script}:6: return torch.geqrf(x)[0])" in result.stdout, (
            result.stdout + result.stderr)


# -- a converter's own failure is one ConversionError naming node, op, module and line ------

@torch.library.custom_op("crossport_test::explodes", mutates_args=())
def explodes(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@explodes.register_fake
def _(x):
    return torch.empty_like(x)


class CallsExplodes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = torch.nn.Sequential(torch.nn.Linear(3, 3))

    def forward(self, x):
        return explodes(self.block(x))


@pytest.fixture
def exploding_converter():
    def crossport_test_explodes_default(ctx, x):
        raise IndexError("tuple index out of range")

    crossport.register(torch.ops.crossport_test.explodes.default,
                       policy=crossport.Policy.AGNOSTIC)(crossport_test_explodes_default)
    yield
    del _REGISTRY[torch.ops.crossport_test.explodes.default]


def test_exception_inside_a_converter_is_a_conversion_error(exploding_converter):
    with pytest.raises(crossport.ConversionError) as info:
        crossport.convert(CallsExplodes().eval(), random_inputs((2, 3)))
    message = str(info.value)
    assert "crossport_test.explodes.default" in message
    assert "crossport_test_explodes_default" in message
    assert "IndexError: tuple index out of range" in message
    assert "test_errors.py" in message and "explodes(self.block(x))" in message
    assert isinstance(info.value.__cause__, IndexError)
    assert info.value.op == "crossport_test.explodes.default"


def test_crossport_errors_raised_by_a_converter_pass_through_unchanged():
    def crossport_test_refuses(ctx, x):
        raise ctx.unsupported("not today")

    op = torch.ops.crossport_test.explodes.default
    crossport.register(op, policy=crossport.Policy.AGNOSTIC, override=True)(crossport_test_refuses)
    try:
        with pytest.raises(crossport.UnsupportedOpError, match="not today") as info:
            crossport.convert(CallsExplodes().eval(), random_inputs((2, 3)))
        assert not isinstance(info.value, crossport.ConversionError)
    finally:
        del _REGISTRY[op]


# -- outputs and state a Keras model cannot have ---------------------------------------------

class Returns(torch.nn.Module):
    def __init__(self, extra):
        super().__init__()
        self.extra = extra

    def forward(self, x):
        return x * 2, self.extra(x)


@pytest.mark.parametrize("extra", [lambda x: None, lambda x: 3, lambda x: "label",
                                   lambda x: x.shape[1]], ids=["none", "int", "str", "size"])
def test_non_tensor_outputs_are_refused_clearly(extra):
    with pytest.raises(crossport.UnsupportedOpError,
                       match="model output 1 is .*returns tensors only"):
        crossport.convert(Returns(extra).eval(), random_inputs((2, 3)))


class ReturnsNothing(torch.nn.Module):
    def __init__(self, empty):
        super().__init__()
        self.empty = empty

    def forward(self, x):
        return self.empty


@pytest.mark.parametrize("empty", [(), [], {}], ids=["tuple", "list", "dict"])
def test_a_forward_returning_no_tensors_is_refused_clearly(empty):
    """Found by the s17 audit: ``return ()`` reached Keras' model constructor and came back
    as a ConversionError ("outputs argument cannot be empty", a crossport bug by its own
    words)."""
    with pytest.raises(crossport.UnsupportedOpError, match="forward returns no tensors"):
        crossport.convert(ReturnsNothing(empty).eval(), random_inputs((2, 3)))


class CountsCalls(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(3))

    def forward(self, x):
        self.calls.add_(1)
        return x + self.calls


def test_forward_updating_a_buffer_is_refused_and_the_buffer_untouched():
    module = CountsCalls().eval()
    with pytest.raises(crossport.UnsupportedOpError, match="'calls' in place.*self.calls.add_"):
        crossport.convert(module, random_inputs((2, 3)))
    assert torch.equal(module.calls, torch.zeros(3))


def test_forward_writing_to_its_input_converts_and_leaves_the_callers_tensor_alone():
    class AddsInPlace(torch.nn.Module):
        def forward(self, x):
            x.mul_(3)
            return x + 1

    x = random_inputs((2, 3))[0]
    before = x.clone()
    model = crossport.convert(AddsInPlace().eval(), (x,))
    assert torch.equal(x, before)
    np.testing.assert_allclose(model(before.numpy()), before.numpy() * 3 + 1, rtol=1e-6)


def test_bfloat16_input_is_a_clear_error():
    with pytest.raises(crossport.UnsupportedOpError, match="bfloat16.*module.float"):
        crossport.convert(torch.nn.ReLU(), (torch.randn(2, 3).bfloat16(),))


def test_a_buffer_returned_as_an_output_is_a_constant_output():
    class WithAnchors(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("anchors", torch.randn(4, 2))

        def forward(self, x):
            return x.relu(), self.anchors * 2

    module = WithAnchors().eval()
    x = random_inputs((2, 3))[0]
    relu, anchors = crossport.convert(module, (x,))(x.numpy())
    np.testing.assert_allclose(anchors, module.anchors.numpy() * 2)
    np.testing.assert_allclose(relu, x.relu().numpy())


def test_a_model_that_builds_but_fails_when_run_is_a_conversion_error():
    """TF rejects a bool add only at run time: the check's run is wrapped too."""
    def crossport_test_bool_add(ctx, x):
        as_bool = keras.ops.cast(x, "bool")
        return keras.ops.cast(keras.ops.add(as_bool, as_bool), "float32")

    op = torch.ops.crossport_test.explodes.default
    crossport.register(op, policy=crossport.Policy.AGNOSTIC, override=True)(crossport_test_bool_add)
    try:
        with pytest.raises(crossport.ConversionError, match="failed to run"):
            crossport.convert(CallsExplodes().eval(), random_inputs((2, 3)))
    finally:
        del _REGISTRY[op]


def test_a_converted_model_tf_cannot_run_is_a_conversion_error():
    """A converter that builds a graph TF rejects only at run time (an integer Sigmoid) makes
    the check fail with one ConversionError, not a raw TensorFlow error."""
    from crossport.to_keras.registry import replaced

    def int_sigmoid(ctx, self):
        """relu(Tensor self) -> Tensor"""
        return keras.layers.Activation("sigmoid", name=ctx.name())(keras.ops.cast(self, "int64"))

    with replaced(torch.ops.aten.relu.default, int_sigmoid), \
            pytest.raises(crossport.ConversionError, match="failed to run: InvalidArgumentError"):
        crossport.convert(torch.nn.ReLU().eval(), (torch.randn(2, 3),))


def test_transformers_eager_experts_loop_names_the_setting_that_converts():
    """A mixture of experts on transformers' eager loop (OpenAI's privacy filter defaults to
    it) cannot be captured; the error says which experts_implementation converts."""
    pytest.importorskip("transformers")
    from crossport.compat import import_torchvision

    import_torchvision()
    import transformers

    config = transformers.MixtralConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, num_local_experts=4,
        num_experts_per_tok=2, experts_implementation="eager")
    block = transformers.MixtralModel(config).layers[0].mlp.eval()
    with pytest.raises(crossport.CaptureError, match=r"MixtralExperts runs transformers' "
                                                     r"eager experts loop.*'grouped_mm'"):
        crossport.convert(block, (torch.randn(2, 5, 16),))
