"""tstate/errors.py: one class per thing reported, every warning in one place."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

import tstate as ts
from tstate import errors
from tstate.checkpoint import store as store_module
from tstate.engine.checkpointing import coordinator


def test_one_checkpoint_skipped_warning_for_recovery_and_for_a_due_checkpoint() -> None:
    """The store (recovery skipped an unusable checkpoint) and the coordinator (a due
    checkpoint was skipped) report the same class, defined in tstate.errors."""
    assert store_module.CheckpointSkippedWarning is errors.CheckpointSkippedWarning
    assert coordinator.CheckpointSkippedWarning is errors.CheckpointSkippedWarning
    assert coordinator.CheckpointLostWarning is errors.CheckpointLostWarning
    assert store_module.CheckpointRepairedWarning is errors.CheckpointRepairedWarning


def test_every_public_warning_is_defined_in_errors() -> None:
    """No module of tstate defines a warning class of its own: they are all in
    tstate/errors.py, derived from TstateWarning."""
    root = Path(ts.__file__).parent
    defined = [
        f"{p.relative_to(root.parent)}: {line.strip()}"
        for p in root.rglob("*.py") if p.name != "errors.py"
        for line in p.read_text().splitlines()
        if line.startswith("class ") and "Warning)" in line
    ]
    assert not defined, defined
    names = [n for n in dir(errors) if n.endswith("Warning") and n != "TstateWarning"]
    assert len(names) >= 4 and all(issubclass(getattr(errors, n), errors.TstateWarning) for n in names)


def test_recovery_warns_with_the_one_class(tmp_path: Any) -> None:
    """A torn newest checkpoint is skipped for the older one with the one class."""
    flow = ts.Dataflow("w")
    inp = flow.input("in")

    @flow.stateful(inp, key=lambda x: x, state=int)
    def count(n: int, x: int, ctx: ts.Context) -> int:
        return n + 1

    ex = flow.start(checkpoint=ts.Checkpoints(str(tmp_path), every_epochs=2, mode="sync"))
    for t in range(8):
        inp.advance_to(t)
        inp.send([t % 3])
        ex.step_while(lambda: True)
    inp.close()
    ex.run()
    manifests = sorted((tmp_path / "manifests").glob("*.manifest"))
    assert len(manifests) >= 2
    manifests[-1].write_bytes(manifests[-1].read_bytes()[:-3])  # torn
    again = ts.Dataflow("w")
    inp2 = again.input("in")
    again.stateful(inp2, key=lambda x: x, state=int, name="count")(lambda n, x, ctx: n + 1)
    inp2.close()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        again.start(checkpoint=str(tmp_path))
    assert [w.category for w in seen if issubclass(w.category, errors.TstateWarning)] == [errors.CheckpointSkippedWarning]


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
