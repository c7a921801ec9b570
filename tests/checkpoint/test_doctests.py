"""The examples in the tstate.checkpoint docstrings (and the CLI's) run and say what they show."""

import doctest
import importlib

import pytest

MODULES = ["tstate.checkpoint.fs", "tstate.checkpoint.manifest", "tstate.checkpoint.delta",
           "tstate.checkpoint.store", "tstate.checkpoint.schema_check", "tstate.engine.checkpointing.forked",
           "tstate.engine.checkpointing.freeze", "tstate.checkpoint.location", "tstate.checkpoint.objectfs",
           "tstate.__main__"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
