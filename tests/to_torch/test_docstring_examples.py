"""The reverse direction's public docstring examples run and print what they claim."""

import doctest
import importlib

import pytest

MODULES = ["crossport.to_torch.api", "crossport.to_torch.modules", "crossport.to_torch.source",
           "crossport.to_torch.augment", "crossport.to_torch.noise",
           "crossport.to_torch.spectral", "crossport.to_torch.regularization"]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
