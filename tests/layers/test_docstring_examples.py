"""Every public layer's docstring example runs and prints what it claims."""

from __future__ import annotations

import doctest
import importlib

import pytest

import crossport.layers as L

MODULES = ["constant", "padding", "pooling", "conv", "normalization", "recurrent", "resize",
           "shuffle", "linalg", "reduction", "special", "fused_norm", "dynamic"]


def test_every_public_layer_has_an_example():
    for name in L.__all__:
        assert ">>>" in (getattr(L, name).__doc__ or ""), f"{name} has no example"


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module):
    mod = importlib.import_module(f"crossport.layers.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
