"""Every docstring example in the package runs and prints what it shows.

Public entry points carry a runnable example; without this test they drifted (seven were
broken when it was added: results printed differently, a name never imported). Each module's
examples run in a fresh namespace, with the test session's set-up (torchvision on CPU torch,
which transformers imports).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import crossport


def _modules() -> list[str]:
    names = [crossport.__name__]
    for info in pkgutil.walk_packages(crossport.__path__, prefix="crossport."):
        names.append(info.name)
    return sorted(names)


def _with_examples() -> list:
    params = []
    for name in _modules():
        module = importlib.import_module(name)
        tests = [t for t in doctest.DocTestFinder().find(module, name) if t.examples]
        if tests:
            params.append(pytest.param(name, id=name))
    return params


@pytest.mark.parametrize("name", _with_examples())
def test_docstring_examples_run(name, torchvision, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    module = importlib.import_module(name)
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in doctest.DocTestFinder().find(module, name):
        runner.run(test, out=report.append)
    assert not runner.failures, "".join(report)
