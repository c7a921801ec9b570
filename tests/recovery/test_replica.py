"""Recovery from a replicated checkpoint store on the embedded engine: whichever copy is
intact is used, the other repaired, and the output is exactly once."""

from __future__ import annotations

import os
import shutil
import warnings
from typing import Any

import pytest

import tstate as ts
from tstate.checkpoint.store import CheckpointRepairedWarning, CheckpointStore

from tests.checkpoint.helpers import damage
from tests.recovery.test_unusable import build, read_output, reference, tree


def crash_after(ck: str, replica: str, out: str, commits: int) -> None:
    cfg = ts.Checkpoints(ck, every_epochs=1, mode="sync", retain=3, compact_after=100, replica=replica)
    ex = build(out).start(2, checkpoint=cfg)
    while len(ex.coordinator.committed) < commits:
        assert ex.step()
    ex.coordinator.abort()


@pytest.mark.parametrize("loss", ["primary lost", "primary corrupt", "replica corrupt"])
def test_resume_with_one_good_copy_is_exactly_once(tmp_path: Any, loss: str) -> None:
    ref = reference(tmp_path)
    ck, rep, out = str(tmp_path / "ck"), str(tmp_path / "rep"), str(tmp_path / "out")
    crash_after(ck, rep, out, commits=5)
    assert tree(ck) == tree(rep)  # every commit was copied
    m = CheckpointStore(ck, readonly=True).latest()
    assert m is not None and m.id == 5
    if loss == "primary lost":
        shutil.rmtree(ck)
    else:
        for ref_ in m.files():  # every file of the newest checkpoint, in one copy
            damage(os.path.join(ck if loss == "primary corrupt" else rep, ref_.path), "flip")
    cfg = ts.Checkpoints(ck, every_epochs=1, mode="sync", retain=3, compact_after=100, replica=rep)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ex = build(out).start(2, checkpoint=cfg)
    assert ex.restored is not None and ex.restored.id == 5  # nothing fell back to an older checkpoint
    assert any(issubclass(w.category, CheckpointRepairedWarning) for w in caught)
    ex.run()
    assert read_output(out) == ref
    newest = CheckpointStore(ck, readonly=True).latest()
    assert newest is not None and newest.id > 5
    for d in (ck, rep):
        assert CheckpointStore(d, readonly=True).verify(newest) == []
