"""Fuzz: small random torch modules from a menu of ops, shapes and dtypes.

Inputs are float32 or int64; steps may turn them into int64 or bool tensors. The only
acceptable outcomes are "converts and matches torch" (checked here with plain
numpy, independently of crossport's own parity code) or a ``CrossportError``. Any other
exception leaving ``crossport.convert`` fails the test. Seeded (``derandomize``) and bounded;
the larger budget is marked slow.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from torch import nn

import crossport


class Step(nn.Module):
    """One op of the random program: ``fn(x)`` or ``fn(self.sub, x)`` with a submodule."""

    def __init__(self, name: str, fn, sub: nn.Module | None = None):
        super().__init__()
        self.name, self.fn, self.sub = name, fn, sub

    def forward(self, x):
        return self.fn(x) if self.sub is None else self.fn(self.sub, x)

    def extra_repr(self) -> str:
        return self.name


def _seeded(build, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    module = build()
    for buffer_name in ("running_mean", "running_var"):  # live statistics, not 0 / 1
        if hasattr(module, buffer_name) and getattr(module, buffer_name) is not None:
            getattr(module, buffer_name).copy_(torch.rand_like(getattr(module, buffer_name)) + 0.5)
    return module


@st.composite
def elementwise_step(draw, shape):
    choices = {
        "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "gelu": F.gelu,
        "abs": torch.abs, "neg": torch.neg, "exp-clamped": lambda x: torch.exp(x.clamp(-4, 4)),
        "sqrt-abs": lambda x: torch.sqrt(x.abs() + 0.5), "affine": lambda x: x * 2.5 - 1,
        "clamp": lambda x: x.clamp(-0.5, 0.7),
        "leaky-where": lambda x: torch.where(x > 0, x, 0.1 * x),
        "square-plus-self": lambda x: x * x + x, "reciprocal": lambda x: 1 / (x.abs() + 1),
        "bool-mask-mul": lambda x: x * (x > 0.2),
        "bool-logic": lambda x: ((x > 0) & (x < 1)).float(),
        "int-floor-div": lambda x: ((x * 4).floor().long() // 3).float(),
        "int-remainder": lambda x: ((x * 4).floor().long() % 3).float(),
    }
    name = draw(st.sampled_from(sorted(choices)))
    return Step(name, choices[name])


@st.composite
def dim_step(draw, shape):
    rank = len(shape)
    dim = draw(st.integers(-rank, rank - 1))
    keep = draw(st.booleans())
    kind = draw(st.sampled_from(["sum", "mean", "amax", "softmax", "log_softmax", "cumsum",
                                 "sort", "cat", "slice", "center", "topk"]))
    if kind in ("sum", "mean", "amax"):
        if rank < 2 and not keep:
            return None
        fn = getattr(torch, kind)
        return Step(f"{kind}-dim{dim}-keep{keep}", lambda x: fn(x, dim, keepdim=keep))
    if kind in ("softmax", "log_softmax"):
        return Step(f"{kind}-{dim}", lambda x: getattr(torch, kind)(x, dim))
    if kind == "cumsum":
        return Step(f"cumsum-{dim}", lambda x: torch.cumsum(x, dim))
    if kind == "sort":
        return Step(f"sort-{dim}", lambda x: torch.sort(x, dim, descending=keep)[0])
    if kind == "topk":
        k = draw(st.integers(1, shape[dim]))
        return Step(f"topk-{k}-{dim}", lambda x: torch.topk(x, k, dim, largest=keep)[0])
    if kind == "cat":
        return Step(f"cat-{dim}", lambda x: torch.cat([x, x * 0.5], dim))
    if kind == "center":
        return Step(f"center-{dim}", lambda x: x - x.mean(dim, keepdim=True))
    if shape[dim] < 2:
        return None
    start = draw(st.integers(0, shape[dim] - 1))
    step = draw(st.integers(1, 2))
    index = (slice(None),) * (dim % rank) + (slice(start, None, step),)
    return Step(f"slice-{dim}-{start}::{step}", lambda x: x[index])


@st.composite
def shape_step(draw, shape):
    rank = len(shape)
    kind = draw(st.sampled_from(["transpose", "permute", "flatten", "unsqueeze", "reshape"]))
    if kind == "transpose" and rank >= 2:
        a, b = draw(st.lists(st.integers(0, rank - 1), min_size=2, max_size=2, unique=True))
        return Step(f"transpose-{a}-{b}", lambda x: x.transpose(a, b))
    if kind == "permute":
        perm = draw(st.permutations(range(rank)))
        return Step(f"permute-{perm}", lambda x: x.permute(*perm))
    if kind == "flatten" and rank >= 2:
        start = draw(st.integers(0, rank - 2))
        return Step(f"flatten-{start}", lambda x: torch.flatten(x, start))
    if kind == "unsqueeze" and rank < 5:
        dim = draw(st.integers(0, rank))
        return Step(f"unsqueeze-{dim}", lambda x: x.unsqueeze(dim))
    if kind == "reshape":
        return Step("reshape-batch-rest", lambda x: x.reshape(x.shape[0], -1))
    return None


@st.composite
def layer_step(draw, shape):
    rank, seed = len(shape), draw(st.integers(0, 2**16))
    channels = shape[1] if rank >= 2 else None
    options = ["linear", "layernorm"]
    if rank == 4:
        options += ["conv2d", "maxpool2d", "avgpool2d", "batchnorm2d", "groupnorm",
                    "interpolate", "pad"]
    if rank == 3:
        options += ["conv1d"]
    kind = draw(st.sampled_from(options))
    last = shape[-1]
    if kind == "linear":
        out = draw(st.integers(1, 6))
        return Step(f"linear-{last}-{out}", lambda m, x: m(x),
                    _seeded(lambda: nn.Linear(last, out), seed))
    if kind == "layernorm":
        return Step(f"layernorm-{last}", lambda m, x: m(x),
                    _seeded(lambda: nn.LayerNorm(last), seed))
    if kind in ("conv2d", "conv1d"):
        n = 2 if kind == "conv2d" else 1
        groups = draw(st.sampled_from([g for g in (1, 2, channels) if channels % g == 0]))
        out = groups * draw(st.integers(1, 3))
        k = draw(st.integers(1, 3))
        stride = draw(st.sampled_from([1, 2] + ([(1, 2), (2, 1)] if n == 2 else [])))
        padding = draw(st.integers(0, k // 2 + 1))
        assume(all(s + 2 * padding >= k for s in shape[2:]))
        conv = nn.Conv2d if n == 2 else nn.Conv1d
        name = f"{kind}-c{channels}-o{out}-k{k}-s{stride}-p{padding}-g{groups}"
        return Step(name, lambda m, x: m(x), _seeded(
            lambda: conv(channels, out, k, stride=stride, padding=padding, groups=groups), seed))
    if kind in ("maxpool2d", "avgpool2d"):
        k = draw(st.integers(1, 3))
        padding = draw(st.integers(0, k // 2))
        ceil = draw(st.booleans())
        assume(min(shape[2:]) + 2 * padding >= k)
        pool = (nn.MaxPool2d(k, 2, padding, ceil_mode=ceil) if kind == "maxpool2d" else
                nn.AvgPool2d(k, 2, padding, ceil_mode=ceil,
                             count_include_pad=draw(st.booleans())))
        return Step(f"{kind}-k{k}-p{padding}-ceil{ceil}", lambda m, x: m(x), pool)
    if kind == "batchnorm2d":
        return Step("batchnorm2d", lambda m, x: m(x),
                    _seeded(lambda: nn.BatchNorm2d(channels), seed))
    if kind == "groupnorm":
        groups = draw(st.sampled_from([g for g in (1, 2, channels) if channels % g == 0]))
        return Step(f"groupnorm-{groups}", lambda m, x: m(x),
                    _seeded(lambda: nn.GroupNorm(groups, channels), seed))
    if kind == "interpolate":
        mode = draw(st.sampled_from(["nearest", "bilinear"]))
        return Step(f"interpolate-{mode}", lambda x: F.interpolate(x, scale_factor=2, mode=mode))
    mode = draw(st.sampled_from(["constant", "reflect", "replicate"]))
    pads = tuple(draw(st.lists(st.integers(0, 1), min_size=4, max_size=4)))
    return Step(f"pad-{mode}-{pads}", lambda x: F.pad(x, pads, mode=mode))


@st.composite
def programs(draw):
    """(module, example input): 1-4 steps valid on the running shape (checked eagerly)."""
    rank = draw(st.integers(2, 4))
    shape = [draw(st.integers(1, 2))] + [draw(st.integers(2, 6)) for _ in range(rank - 1)]
    dtype = draw(st.sampled_from([torch.float32, torch.float32, torch.int64]))
    x = random_input(shape, dtype, draw(st.integers(0, 999)))
    steps = []
    for _ in range(draw(st.integers(1, 4))):
        family = draw(st.sampled_from([elementwise_step, dim_step, shape_step, layer_step]))
        step = draw(family(tuple(x.shape)))
        if step is None:
            continue
        try:
            with torch.no_grad():
                y = step.eval()(x)
        except (RuntimeError, ValueError, IndexError):  # torch rejects it (reflect pad too wide)
            continue
        if y.dtype not in (torch.float32, torch.int64, torch.bool) or y.ndim == 0 or (
                y.numel() > 4096):
            continue
        steps.append(step)
        x = y
    assume(steps)
    module = nn.Sequential(*steps).eval()
    return module, random_input(shape, dtype, 7)


def random_input(shape, dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen, dtype=dtype)
    return torch.randint(-5, 6, shape, generator=gen, dtype=dtype)


def _matches(module: nn.Module, model, x: torch.Tensor) -> None:
    """Independent check: numpy comparison of Keras and torch on two input draws."""
    for inp in (x, random_input(tuple(x.shape), x.dtype, 11)):
        with torch.no_grad():
            ref = module(inp.clone()).numpy()
        got = np.asarray(model(inp.numpy()))
        assert got.shape == ref.shape, f"shape {got.shape} != torch {ref.shape}\n{module}"
        if ref.dtype.kind in "biu":
            assert got.dtype.kind in "biu", f"dtype {got.dtype} != torch {ref.dtype}\n{module}"
            np.testing.assert_array_equal(got, ref, err_msg=str(module))
            continue
        scale = max(1.0, float(np.abs(ref).max()))
        worst = float(np.abs(got.astype(np.float64) - ref).max()) / scale
        assert worst <= 1e-4, f"max error {worst:.2e} (relative to {scale:.2f})\n{module}"


def _run(program) -> None:
    module, x = program
    try:
        model = crossport.convert(module, (x,), check=False)
    except crossport.CrossportError as exc:
        event(f"refused: {type(exc).__name__}")
        return  # a clear, deliberate refusal is an acceptable outcome
    event("converted")
    _matches(module, model, x)


COMMON = dict(deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                     HealthCheck.data_too_large])


@settings(max_examples=25, **COMMON)
@given(programs())
def test_random_modules_convert_at_parity_or_raise_a_crossport_error(program):
    _run(program)


@pytest.mark.slow
@settings(max_examples=400, **COMMON)
@given(programs())
def test_random_modules_larger_budget(program):
    _run(program)
