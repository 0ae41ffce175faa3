"""The op-coverage guard: every registered converter is named by at least one op-table row.

A row names converters with ``expect_converters=(...)``; the harness asserts they ran
(tests/harness.py), so a name here means a real module exercised that converter. Adding
a converter without a row that runs it fails this test.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest
import torch

import tests.ops
from crossport.capture import capture
from crossport.options import ConvertOptions
from crossport.to_keras.registry import complex_ops, native_overloads, registered_ops

# Converters torch.export never leaves in a graph today.
# test_unreachable_converters_stay_unreachable fails when that changes, so they then get a
# row like every other converter.
UNREACHABLE = {
    # run_decompositions or the in-place swap (capture/functional.py) always makes it dropout
    "aten_dropout__default": (torch.ops.aten.dropout_.default,
                              lambda x: torch.dropout_(x * 1, 0.3, False)),
}


def builtin_converter_names() -> set[str]:
    """Every built-in converter, the complex ones (``register_complex``) included."""
    converters = [*registered_ops().values(), *complex_ops().values()]
    return {c.fn.__name__ for c in converters if c.fn.__module__.startswith("crossport.")}


def rows_naming_converters() -> dict[str, list[str]]:
    """converter name -> ids of the op-table rows that expect it to run."""
    named: dict[str, list[str]] = {}
    for info in pkgutil.iter_modules(tests.ops.__path__):
        if not info.name.startswith("test_") or info.name == "test_coverage":
            continue
        module = importlib.import_module(f"tests.ops.{info.name}")
        for value in vars(module).values():
            if not isinstance(value, (list, tuple)):
                continue
            for row in value:
                for name in _expected(row):
                    named.setdefault(name, []).append(f"{info.name}::{row.id}")
    return named


def _expected(row) -> tuple[str, ...]:
    if type(row).__name__ != "ParameterSet":
        return ()
    kwargs = [v for v in row.values if isinstance(v, dict)]
    return tuple(name for k in kwargs for name in k.get("expect_converters", ()))


def test_every_registered_converter_has_a_row_that_runs_it():
    named = rows_naming_converters()
    missing = sorted(builtin_converter_names() - set(named) - set(UNREACHABLE))
    assert not missing, (
        f"{len(missing)} converter(s) without an op-table row naming them in "
        f"expect_converters: {missing}")


def test_rows_name_only_converters_that_exist():
    unknown = sorted(set(rows_naming_converters()) - builtin_converter_names())
    assert not unknown, f"rows expect converters that are not registered: {unknown}"


class Call(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize("name", sorted(UNREACHABLE))
def test_unreachable_converters_stay_unreachable(name):
    op, fn = UNREACHABLE[name]
    exported = capture(Call(fn), (torch.randn(2, 3, 4),), ConvertOptions(), native_overloads())
    assert op not in {n.target for n in exported.graph.nodes}, (
        f"{op} now reaches the converter: give {name} an op-table row and drop it from "
        "UNREACHABLE")


@pytest.mark.parametrize("name", ["aten_conv_nd", "aten_linear_default"])
def test_the_guard_sees_the_tables(name):
    assert name in rows_naming_converters()
