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


def alter_schema(ck: str, checkpoint_id: int, schema: dict[str, Any]) -> None:
    """Rewrite a manifest (a valid one: its checksum recomputed) with operator ``sums``'s
    stored state schema replaced by ``schema``: its files no longer match it."""
    import attrs

    from tstate.checkpoint.manifest import decode_manifest, encode_manifest, manifest_name

    path = os.path.join(ck, *manifest_name(checkpoint_id).split("/"))
    m = decode_manifest(open(path, "rb").read())
    ops = dict(m.operators)
    ops["sums"] = attrs.evolve(ops["sums"], schema=schema)
    with open(path, "wb") as f:
        f.write(encode_manifest(attrs.evolve(m, operators=ops)))


ALTERED = {
    "type changed": {"kind": "str", "name": "str"},  # incompatible with the declared int
    "optional": {"kind": "optional", "name": "Optional[int]", "args": [{"kind": "int", "name": "int"}]},
    "unreadable": {"kind": "no such kind", "name": "x"},
}


@pytest.mark.parametrize("restore", ["eager", "lazy"])
@pytest.mark.parametrize("how", list(ALTERED))
def test_an_altered_stored_schema_makes_its_checkpoint_unusable(tmp_path: Any, how: str, restore: str) -> None:
    """Issue 26, item 7: a checkpoint whose stored schema was altered is unusable (with
    its reason), the previous one is used with a CheckpointSkippedWarning, and the output
    is exactly once; with every checkpoint altered, a CheckpointError lists them all."""
    ref = reference(tmp_path)
    ck, out = str(tmp_path / "ck"), str(tmp_path / "out")
    crash_after(ck, out, commits=5)
    alter_schema(ck, 5, ALTERED[how])
    cfg = ts.Checkpoints(ck, every_epochs=1, mode="sync", retain=3, compact_after=100, restore=restore)
    with pytest.warns(CheckpointSkippedWarning, match="resuming from checkpoint 4") as warned:
        ex = build(out).start(2, checkpoint=cfg)
    (w,) = [w for w in warned if issubclass(w.category, CheckpointSkippedWarning)]
    reason = "stored state schema is unreadable" if how == "unreadable" else "the stored schema was altered"
    assert "checkpoint 5: " in str(w.message) and reason in str(w.message) and "'sums'" in str(w.message)
    assert ex.restored.id == 4
    ex.run()
    assert read_output(out) == ref  # exactly once
    assert os.path.exists(os.path.join(ck, "manifests", "ckpt-000005.unusable"))  # kept as evidence


def test_every_checkpoint_altered_is_a_checkpoint_error_listing_them(tmp_path: Any) -> None:
    ck, out = str(tmp_path / "ck"), str(tmp_path / "out")
    crash_after(ck, out, commits=5)
    for i in (3, 4, 5):
        alter_schema(ck, i, ALTERED["type changed"])
    cfg = ts.Checkpoints(ck, every_epochs=1, mode="sync", retain=3, compact_after=100)
    with pytest.raises(CheckpointError) as info:
        build(out).start(2, checkpoint=cfg)
    msg = str(info.value)
    assert "holds 3 checkpoints and none is usable" in msg
    for i in (3, 4, 5):
        assert f"checkpoint {i}: " in msg
    assert msg.count("the stored schema was altered") >= 3


def test_a_file_that_decodes_as_another_bin_makes_its_checkpoint_unusable(tmp_path: Any) -> None:
    """A decode failure after every checksum passed (the newest delta replaced by another
    bin's delta, the manifest rewritten to match): that checkpoint is unusable."""
    import attrs
    import xxhash

    from tstate.checkpoint.manifest import FileRef, decode_manifest, encode_manifest

    ref = reference(tmp_path)
    ck, out = str(tmp_path / "ck"), str(tmp_path / "out")
    crash_after(ck, out, commits=5)
    path = os.path.join(ck, "manifests", "ckpt-000005.manifest")
    m = decode_manifest(open(path, "rb").read())
    entry = m.operators["sums"]
    mine = [(b, c) for b, c in sorted(entry.chains.items()) if c[-1].name.startswith("000005-")]
    (b1, c1), (_b2, c2) = mine[0], mine[1]
    alien = open(os.path.join(ck, *c2[-1].path.split("/")), "rb").read()  # bin b2's delta
    with open(os.path.join(ck, *c1[-1].path.split("/")), "wb") as f:
        f.write(alien)
    chains = dict(entry.chains)
    chains[b1] = (*c1[:-1], FileRef(c1[-1].path, len(alien), xxhash.xxh64_hexdigest(alien)))
    ops = {**m.operators, "sums": attrs.evolve(entry, chains=chains)}
    with open(path, "wb") as f:
        f.write(encode_manifest(attrs.evolve(m, operators=ops)))
    cfg = ts.Checkpoints(ck, every_epochs=1, mode="sync", retain=3, compact_after=100, restore="eager")
    with pytest.warns(CheckpointSkippedWarning, match=f"checkpoint 5: operator 'sums' bin {b1} .*belongs to bin"):
        ex = build(out).start(2, checkpoint=cfg)
    assert ex.restored.id == 4
    ex.run()
    assert read_output(out) == ref
