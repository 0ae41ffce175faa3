"""Small helpers shared by the op-table tests: a module around a function, a conv then a
function, case ids, and every table's cases (``op_cases``) for the tests that sweep them."""

from __future__ import annotations

import importlib
import pathlib

import pytest
import torch

from tests.harness import random_inputs


class Fn(torch.nn.Module):
    """``forward(*xs) = fn(*xs)``, or ``fn(self, *xs)`` with ``params`` (parameters/buffers)."""

    def __init__(self, fn, **params):
        super().__init__()
        self.fn = fn
        self.takes_self = bool(params)
        for name, value in params.items():
            if value.is_floating_point():
                self.register_parameter(name, torch.nn.Parameter(value, requires_grad=False))
            else:  # integer index tensors are buffers
                self.register_buffer(name, value)

    def forward(self, *xs):
        return self.fn(self, *xs) if self.takes_self else self.fn(*xs)


class ConvThen(torch.nn.Module):
    """``fn`` of a 3->6 channel conv's output: the op sees a channels-last activation."""

    def __init__(self, fn):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 6, 3)
        self.fn = fn

    def forward(self, x):
        return self.fn(self.conv(x))


def case(case_id, module, shapes, *, marks=(), **kwargs):
    """A ``pytest.param`` of (module, input shapes, harness kwargs) with a readable id."""
    return pytest.param(module, shapes, kwargs, id=case_id, marks=marks)


def inputs(shapes, seed: int = 0):
    return random_inputs(shapes, seed=seed)


def op_cases() -> list:
    """Every case of the op tables in tests/ops (``CASES`` and ``SHUFFLE_CASES``; known
    gaps, marked xfail or skip there, left out), ids prefixed by their table's module.

    test_dynamic's rows have their own shape (dynamic dims, run-time shapes) and are
    checked at other sizes by their own tests.
    """
    params = []
    for file in sorted(pathlib.Path(__file__).parent.glob("test_*.py")):
        if file.stem == "test_dynamic":
            continue
        module = importlib.import_module(f"tests.ops.{file.stem}")
        for table in ("CASES", "SHUFFLE_CASES"):
            for param in getattr(module, table, []):
                if any(mark.name in ("xfail", "skip") for mark in param.marks):
                    continue
                params.append(pytest.param(*param.values, id=f"{file.stem[5:]}-{param.id}"))
    return params
