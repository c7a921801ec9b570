"""Recovery never starts from empty state by surprise, and never deletes evidence.

The corruption matrix on the embedded engine: flip / truncate / delete each kind of
file of a checkpoint directory (the newest manifest, a snapshot every retained
checkpoint shares, the newest checkpoint's delta) between a crash and the restart, and
check for each: the damage is detected, which checkpoint the restart uses or which
error it raises, the exactly-once output, and that nothing was deleted that was not
garbage.  (The Spark held-records file: ``tests/spark/test_held.py``.)
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import pytest

import tstate as ts
from tstate.__main__ import main as cli
from tstate.checkpoint.store import CheckpointSkippedWarning, CheckpointStore
from tstate.errors import CheckpointError

from tests.checkpoint.helpers import damage

EPOCHS = 16
COLD = "cold"  # a key seen at epoch 0 only: its bin's snapshot is shared by every later checkpoint


def batches() -> list[tuple[int, list[tuple[str, int]]]]:
    return [(t, [(COLD, 1)] * (t == 0) + [("hot", t), ("warm", t * 10)]) for t in range(EPOCHS)]


def build(out: str) -> ts.Dataflow:
    flow = ts.Dataflow("sums")
    src = flow.source(ts.io.from_batches(batches), name="src")

    @flow.stateful(src, key=lambda r: r[0], state=int, bins=64)
    def sums(total: int, r: Any, ctx: ts.Context) -> int:
        ctx.emit([ctx.key, total + r[1]])
        return total + r[1]

    flow.sink(sums, ts.io.files(out))
    return flow


def reference(tmp: Any) -> dict[str, list[Any]]:
    out = str(tmp / "reference")
    build(out).run(workers=2)
    return read_output(out)


def read_output(out: str) -> dict[str, list[Any]]:
    return {
        n: sorted(json.loads(line) for line in open(os.path.join(out, n)))
        for n in sorted(os.listdir(out))
        if n.endswith(".jsonl")
    }


def crash_after(ck: str, out: str, commits: int) -> None:
    """Run with a checkpoint every epoch until ``commits`` are committed, then "crash"."""
    cfg = ts.Checkpoints(ck, every_epochs=1, mode="sync", retain=3, compact_after=100)
    ex = build(out).start(2, checkpoint=cfg)
    while len(ex.coordinator.committed) < commits:
        assert ex.step()
    ex.coordinator.abort()


def tree(root: str) -> dict[str, bytes]:
    found = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            found[os.path.relpath(p, root)] = open(p, "rb").read()
    return found


def files_of(ck: str) -> tuple[dict[str, str], dict[int, set[str]]]:
    """The files to damage (the newest manifest, its own delta, and the snapshot every
    retained checkpoint shares), and each checkpoint's manifest and files."""
    store = CheckpointStore(ck, readonly=True)
    ms = store.manifests()
    assert [m.id for m in ms] == [3, 4, 5]
    newest = ms[-1]
    shared = set.intersection(*({r.path for r in m.files() if r.kind == "snap"} for m in ms))
    assert shared, "the cold key's snapshot is shared by every retained checkpoint"
    own = [r.path for r in newest.files() if r.kind == "delta" and r.name.startswith(f"{newest.id:06d}-")]
    named = {m.id: {m.name} | {r.path for r in m.files()} for m in ms}
    return {"manifest": newest.name, "shared snapshot": sorted(shared)[0], "delta": own[0]}, named


@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
@pytest.mark.parametrize("kind", ["manifest", "shared snapshot", "delta"])
def test_corruption_matrix(tmp_path: Any, kind: str, how: str) -> None:
    ref = reference(tmp_path)
    ck, out = str(tmp_path / "ck"), str(tmp_path / "out")
    crash_after(ck, out, commits=5)
    targets, named = files_of(ck)
    target = targets[kind]
    damage(os.path.join(ck, target), how)
    before = tree(ck)
    # detected by the CLI (a deleted manifest is a checkpoint never committed: nothing to see)
    rc = cli(["checkpoints", ck, "--verify"])
    assert rc == (0 if (kind, how) == ("manifest", "delete") else 1)

    cfg = ts.Checkpoints(ck, every_epochs=1, mode="sync", retain=3, compact_after=100)
    if kind == "shared snapshot":
        # every retained checkpoint needs that file: resuming would start from empty state
        with pytest.raises(CheckpointError) as info:
            build(out).start(2, checkpoint=cfg)
        msg = str(info.value)
        assert "holds 3 checkpoints and none is usable" in msg and "nothing was deleted" in msg
        for i in (3, 4, 5):
            assert f"checkpoint {i}: {target}: " in msg
        assert "fresh_if_unusable=True" in msg
        assert {p: d for p, d in tree(ck).items() if not p.endswith(".unusable")} == before  # untouched
        # the explicit option starts from empty state, warns, and keeps the evidence
        fresh = ts.Checkpoints(ck, every_epochs=1, mode="sync", retain=3, compact_after=100, fresh_if_unusable=True)
        with pytest.warns(CheckpointSkippedWarning, match="none is usable.*starting from empty state"):
            ex = build(out).start(2, checkpoint=fresh)
        assert ex.restored is None
        ex.run()
        used = None
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ex = build(out).start(2, checkpoint=cfg)
        skipped = [w for w in caught if issubclass(w.category, CheckpointSkippedWarning)]
        if (kind, how) == ("manifest", "delete"):
            assert skipped == []
        else:
            (w,) = skipped
            assert "resuming from checkpoint 4" in str(w.message) and os.path.basename(target) in str(w.message)
        used = ex.restored.id
        assert used == 4  # the previous good checkpoint
        ex.run()
    assert read_output(out) == ref  # exactly once: nothing lost, nothing twice
    after = tree(ck)
    # nothing deleted that was not garbage: each unusable checkpoint's manifest, marker
    # and every file it names are still there, byte for byte (what went: the files of
    # good checkpoints retention retired, and, for a deleted manifest, its orphans)
    bad = [3, 4, 5] if kind == "shared snapshot" else [] if (kind, how) == ("manifest", "delete") else [5]
    for i in bad:
        assert os.path.join("manifests", f"ckpt-{i:06d}.unusable") in after
        for p in named[i]:
            p = p.replace("/", os.sep)
            if p in before:
                assert after.get(p) == before[p], p
    # the checkpoints written after the restart are good
    store = CheckpointStore(ck, readonly=True)
    newest = store.latest()
    assert newest is not None and newest.id > 5 and store.verify(newest) == []
    assert used is None or used == 4


def test_resume_false_ignores_unusable_checkpoints(tmp_path: Any) -> None:
    ck, out = str(tmp_path / "ck"), str(tmp_path / "out")
    crash_after(ck, out, commits=5)
    damage(os.path.join(ck, files_of(ck)[0]["shared snapshot"]), "flip")
    cfg = ts.Checkpoints(ck, every_epochs=1, mode="sync", resume=False)
    ex = build(out).start(2, checkpoint=cfg)  # asked for explicitly: no error
    assert ex.restored is None
    ex.run()
    assert read_output(out) == reference(tmp_path)
