"""Python-number arguments beside float64 tensors keep their double value.

Keras turns a Python float into a float32 constant before promoting it, so ``x < 0.1`` on a
float64 ``x`` compared with 0.10000000149 and ``torch.where(c, x, 0.1)`` filled that value;
TF's LeakyRelu holds its alpha as a float32 attribute; and a model with no float weights
built its Keras layers in float32, so ``F.leaky_relu`` of a float64 input came out float32.
The inputs sit exactly on the constants, where float32 rounding flips a comparison.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import crossport

EDGES = torch.tensor([0.1, 2.09, 0.1000000001, 0.09999999999, -0.1, 1.0, 7.0, 3.0],
                     dtype=torch.float64)

FUNCTIONS = {
    "lt": lambda x: x < 0.1,
    "le": lambda x: x <= 0.1,
    "gt": lambda x: x > 0.1,
    "ge": lambda x: x >= 0.1,
    "eq": lambda x: x == 0.1,
    "ne": lambda x: x != 0.1,
    "scalar-first": lambda x: 0.1 < x,
    "where-scalar": lambda x: torch.where(x > 2.09, x, 0.1),
    "threshold": lambda x: F.threshold(x, 0.1, 0.3),
    "fmod": lambda x: torch.fmod(x, 0.1),
    "remainder": lambda x: x % 0.1,
    "leaky-relu": lambda x: F.leaky_relu(-x, 0.1),
}


class _Apply(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_a_python_float_beside_a_float64_tensor_keeps_its_double(name):
    module = _Apply(FUNCTIONS[name]).eval()
    model = crossport.convert(module, (EDGES,))
    got, want = np.asarray(model(EDGES.numpy())), module(EDGES).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
