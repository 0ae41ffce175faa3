"""The converter registry enforces itself: built-ins at import, schema-checked converters.

Each scenario runs in a fresh interpreter, because the registry is process-wide state and
the bug these guard against (a user's ``register`` before the first conversion) only shows
in a process that has not converted anything yet.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import crossport
from crossport.errors import InputError
from crossport.to_keras.registry import registered_ops, schema_mismatch

PRELUDE = """
import os, warnings
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
warnings.filterwarnings("ignore")
import keras, torch
import crossport
from crossport import Policy, register
aten = torch.ops.aten
"""


def _run(body: str) -> str:
    code = PRELUDE + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_override_before_the_first_conversion_is_used():
    out = _run("""
        calls = []

        @register(aten.relu.default, policy=Policy.AGNOSTIC, override=True, dynamic=True)
        def my_relu(ctx, self):
            calls.append(ctx.node.name)
            return keras.ops.relu(self)

        net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
        crossport.convert(net, (torch.randn(2, 4),))
        print(len(calls))
    """)
    assert out.split()[-1] == "1"


def test_registering_twice_without_override_is_an_input_error():
    out = _run("""
        try:
            register(aten.relu.default, policy=Policy.AGNOSTIC)(lambda ctx, self: self)
        except crossport.InputError as exc:
            print("refused:", exc)
    """)
    assert "refused:" in out and "override=True" in out


def test_a_converter_is_checked_against_the_aten_schema():
    out = _run("""
        try:
            @register(aten.leaky_relu.default, policy=Policy.AGNOSTIC, override=True)
            def wrong(ctx, x, slope=0.01):
                return x
        except crossport.InputError as exc:
            print("refused:", exc)
    """)
    assert "refused:" in out and "self" in out and "negative_slope" in out


def test_supports_receives_the_arguments_by_name():
    out = _run("""
        seen = {}

        def supports(node, self, negative_slope=0.01, **rest):
            seen["slope"] = negative_slope
            return "slopes above 0.5" if negative_slope > 0.5 else None

        @register(aten.leaky_relu.default, policy=Policy.AGNOSTIC, override=True,
                  supports=supports, dynamic=True)
        def leaky(ctx, self, negative_slope=0.01):
            return keras.ops.leaky_relu(self, negative_slope)

        crossport.convert(torch.nn.LeakyReLU(0.2).eval(), (torch.randn(2, 4),))
        try:
            crossport.convert(torch.nn.LeakyReLU(0.7).eval(), (torch.randn(2, 4),))
        except crossport.UnsupportedOpError as exc:
            print("unsupported:", exc)
        print("slope", seen["slope"])
    """)
    assert "unsupported:" in out and "slopes above 0.5" in out and "slope 0.7" in out


def test_user_converter_refuses_dynamic_dims_unless_it_declares_them():
    out = _run("""
        @register(aten.relu.default, policy=Policy.AGNOSTIC, override=True)
        def static_relu(ctx, self):
            return keras.ops.relu(self)

        try:
            crossport.convert(torch.nn.ReLU().eval(), (torch.randn(2, 4),), dynamic_batch=True)
        except crossport.UnsupportedOpError as exc:
            print(type(exc).__name__, exc)
    """)
    assert "DynamicDimError" in out and "aten.relu.default" in out


def test_every_builtin_converter_fits_its_schema():
    for op, converter in registered_ops().items():
        schema = getattr(op, "_schema", None)
        if schema is not None:
            assert schema_mismatch(converter.fn, schema) is None, (op, converter.fn.__name__)


def test_registering_something_that_is_not_an_op_is_an_input_error():
    with pytest.raises(InputError, match="cannot register"):
        crossport.register("relu", policy=crossport.Policy.AGNOSTIC)(lambda ctx, self: self)
