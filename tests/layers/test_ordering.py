"""torch's sort order on the Keras side (crossport.layers.ordering), every dtype, against
torch.sort(stable=True): NaN above +inf, -0.0 tied with +0.0, subnormals and int extremes."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch

from crossport.layers.dynamic import DynamicTopK
from crossport.layers.ordering import top_k_torch_order

SPECIAL = [1.0, float("nan"), -float("inf"), -0.0, 0.0, float("inf"), -3.5, 2.0, float("nan"),
           -1e-40, 0.0, -0.0, 1e-41, 3e38, -3e38, 1.0]


def _rows(dtype: torch.dtype) -> torch.Tensor:
    special = torch.tensor(SPECIAL)
    noise = torch.randn(3, len(SPECIAL), generator=torch.Generator().manual_seed(0)) * 4
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype) if dtype != torch.bool else None
        if dtype == torch.bool:
            return torch.cat([noise > 0, (noise < 1)])
        values = torch.cat([noise.round(), (noise * 50).round()]).clamp(info.min, info.max)
        values = values.to(dtype)
        values[0, :2] = torch.tensor([info.min, info.max], dtype=dtype)  # no overflow
        return values
    return torch.cat([special[None], noise, noise.round()]).to(dtype)  # rounded: many ties


def _keras(x: torch.Tensor):
    if x.dtype == torch.bfloat16:
        return keras.ops.cast(x.float().numpy(), "bfloat16")
    return keras.ops.convert_to_tensor(x.numpy())


def _numpy(t) -> np.ndarray:
    """bfloat16 through its bits and torch (numpy has no bfloat16; TF's casts flush
    subnormals to zero, torch's do not)."""
    if "bfloat16" in str(t.dtype):
        bits = torch.from_numpy(keras.ops.convert_to_numpy(keras.ops.view(t, "int16")))
        return bits.view(torch.bfloat16).double().numpy()
    return keras.ops.convert_to_numpy(t)


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
          torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("largest", [True, False])
def test_full_sort_is_torchs_stable_sort(dtype, largest):
    x = _rows(dtype)
    values, indices = top_k_torch_order(_keras(x), x.shape[-1], largest)
    want_values, want_indices = torch.sort(x, descending=largest, stable=True)
    np.testing.assert_array_equal(_numpy(indices), want_indices.numpy())
    np.testing.assert_array_equal(_numpy(values), want_values.double().numpy()
                                  if dtype == torch.bfloat16 else want_values.numpy())


@pytest.mark.parametrize("largest", [True, False])
def test_run_time_k_takes_the_same_order(largest):
    """DynamicTopK (k a run-time size): the same order, NaN first among the largest."""
    x = _rows(torch.float32)
    values, indices = DynamicTopK(largest)(_keras(x), keras.ops.convert_to_tensor(5))
    want = torch.sort(x, descending=largest, stable=True)
    np.testing.assert_array_equal(_numpy(indices), want.indices[:, :5].numpy())
    np.testing.assert_array_equal(_numpy(values), want.values[:, :5].numpy())
