"""The examples in the tstate.types docstrings run and say what they show."""

import doctest
import importlib

import pytest

MODULES = ["__init__", "schema", "tracked", "check", "copier", "codec", "size", "arrow", "strategies"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module("tstate.types" if name == "__init__" else f"tstate.types.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
