"""Bad input gives one clear CrossportError naming what and where."""

import numpy as np
import pytest
import torch

import crossport
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
        return torch.cumprod(y, 1) + mystery(y)


def test_unsupported_ops_are_all_listed_with_count_and_source_line():
    with pytest.raises(crossport.UnsupportedOpError) as info:
        crossport.convert(UsesUnsupportedOps().eval(), random_inputs((1, 3, 8, 8)))
    message = str(info.value)
    assert "crossport_test.mystery.default x2" in message
    assert "aten.cumprod.default x1" in message
    assert "test_errors.py" in message and "torch.cumprod(y, 1)" in message
    assert {p["op"] for p in info.value.problems} == {
        "crossport_test.mystery.default", "aten.cumprod.default"}


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
