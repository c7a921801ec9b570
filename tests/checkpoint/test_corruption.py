"""Torn and corrupt checkpoints are detected, named, and the previous good one is used."""

from __future__ import annotations

import os

import pytest

from tstate.checkpoint.delta import apply_chain
from tstate.checkpoint.manifest import manifest_name
from tstate.checkpoint.store import CheckpointStore, unusable_name
from tstate.errors import CheckpointError

from .helpers import FP, SCHEMA, damage, delta, files_on_disk, new_store, snap


def build(path) -> dict[str, str]:
    """Three checkpoints; the third writes a new snapshot (bin 1) and a new delta (bin 0)
    that no other checkpoint references.  Returns the paths of the third's own files."""
    store = new_store(path, retain=5)
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=4)
    w.put_snapshot("op", 0, snap(0, {"a": [0]}))
    w.put_snapshot("op", 1, snap(1, {"b": [0]}))
    w.put_snapshot("op", 2, snap(2, {"c": [0]}))
    w.commit()
    w = store.begin(1)
    w.put_delta("op", 0, delta(0, {"a": [1]}))
    w.commit()
    w = store.begin(2)
    w.put_delta("op", 0, delta(0, {"a": [2]}))
    w.put_snapshot("op", 1, snap(1, {"b": [2]}))
    m3 = w.commit()
    own = {r.kind: r.path for r in m3.files() if r.name.startswith("000003-")}
    own["manifest"] = manifest_name(3)
    return own


@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
@pytest.mark.parametrize("kind", ["manifest", "snap", "delta"])
def test_damaged_file_falls_back_to_previous_checkpoint(tmp_path, kind: str, how: str) -> None:
    own = build(tmp_path)
    damage(os.path.join(tmp_path, own[kind]), how)
    store = CheckpointStore(tmp_path, readonly=True)
    m = store.latest()
    assert m is not None and m.id == 2
    states = {b: apply_chain(store.read_chain(m, "op", b), FP)["states"] for b in range(3)}
    assert states == {0: {"a": [1]}, 1: {"b": [0]}, 2: {"c": [0]}}
    if kind == "manifest" and how == "delete":
        # a checkpoint whose manifest is gone was never committed, as far as anyone can tell
        assert store.problems == []
        return
    assert len(store.problems) == 1, store.problems
    problem = store.problems[0]
    name = os.path.basename(own[kind])
    assert problem.startswith("checkpoint 3 skipped: ") and name in problem
    expected = {
        ("manifest", "flip"): "checksum mismatch",
        ("manifest", "truncate"): "checksum mismatch",
        ("snap", "flip"): "checksum mismatch",
        ("delta", "flip"): "checksum mismatch",
        ("snap", "truncate"): "size",
        ("delta", "truncate"): "size",
        ("snap", "delete"): "missing",
        ("delta", "delete"): "missing",
    }[kind, how]
    assert expected in problem


def test_verify_and_read_name_the_file(tmp_path) -> None:
    own = build(tmp_path)
    store = new_store(tmp_path)
    m3 = store.manifests()[-1]
    damage(os.path.join(tmp_path, own["delta"]), "flip")
    (problem,) = store.verify(m3)
    assert problem.startswith(own["delta"] + ": checksum mismatch (xxh64 ")
    ref = next(r for r in m3.files() if r.path == own["delta"])
    with pytest.raises(CheckpointError, match=f"{own['delta']}: checksum mismatch"):
        store.read(ref)
    damage(os.path.join(tmp_path, own["snap"]), "delete")
    assert sorted(store.verify(m3)) == sorted([problem, f"{own['snap']}: missing"])
    assert store.verify(store.manifests()[0]) == []


def test_shared_file_corrupt_means_no_good_checkpoint(tmp_path) -> None:
    build(tmp_path)
    store = CheckpointStore(tmp_path, readonly=True)
    shared = store.bin_chain(store.manifests()[0], "op", 2)[0]  # bin 2: one file in all three
    damage(os.path.join(tmp_path, shared.path), "flip")
    assert store.latest() is None
    assert len(store.problems) == 3 and all(shared.name in p for p in store.problems)


def test_torn_newest_manifest_then_new_commits_continue(tmp_path) -> None:
    own = build(tmp_path)
    damage(os.path.join(tmp_path, own["manifest"]), "truncate")
    store = new_store(tmp_path, retain=2)
    assert store.latest().id == 2
    w = store.begin(3)
    assert w.id == 4  # never re-uses the id of a manifest on disk
    w.put_delta("op", 2, delta(2, {"d": [4]}))
    m = w.commit()
    # the chain continues from checkpoint 2; the torn manifest is evidence: kept, and so
    # is every file up to its id (which ones it names is unknown)
    assert os.path.exists(os.path.join(tmp_path, own["manifest"]))
    assert os.path.exists(os.path.join(tmp_path, unusable_name(3)))
    assert any("kept unreadable manifests/ckpt-000003.manifest" in p for p in store.problems)
    assert apply_chain(store.read_chain(m, "op", 0), FP)["states"] == {"a": [1]}
    assert apply_chain(store.read_chain(m, "op", 2), FP)["states"] == {"c": [0], "d": [4]}
    assert [x.id for x in store.manifests()] == [2, 4] and store.verify(m) == []
    assert os.path.exists(os.path.join(tmp_path, own["snap"]))
    # once someone removes it, a later full scan collects what only it could have named
    os.unlink(os.path.join(tmp_path, own["manifest"]))
    store = new_store(tmp_path, retain=2)
    w = store.begin(5)
    w.put_delta("op", 2, delta(2, {"e": [5]}))
    m5 = w.commit()
    assert not os.path.exists(os.path.join(tmp_path, own["snap"]))
    assert not os.path.exists(os.path.join(tmp_path, unusable_name(3)))
    assert files_on_disk(tmp_path) == {r.path for x in store.manifests() for r in x.files()}
    assert [x.id for x in store.manifests()] == [4, 5] and store.verify(m5) == []


def test_manifest_with_foreign_bytes(tmp_path) -> None:
    build(tmp_path)
    with open(os.path.join(tmp_path, manifest_name(3)), "wb") as f:
        f.write(b"PK\x03\x04 definitely not a manifest")
    store = CheckpointStore(tmp_path, readonly=True)
    assert store.latest().id == 2
    assert "ckpt-000003.manifest: corrupt manifest (bad magic" in store.problems[0]
    assert [m.id for m in store.manifests()] == [1, 2] and "ckpt-000003" in store.problems[0]
    with open(os.path.join(tmp_path, manifest_name(3)), "wb") as f:
        f.write(b"")
    assert store.latest().id == 2 and "torn manifest (only 0 bytes)" in store.problems[0]


def test_manifest_pointing_outside_data_is_rejected(tmp_path) -> None:
    from tstate.checkpoint.manifest import FileRef, Manifest, OperatorEntry, encode_manifest

    build(tmp_path)
    evil = Manifest(4, 3, 0.0, {"op": OperatorEntry(SCHEMA, 4, {0: (FileRef("data/../../etc/passwd", 1, "0"),)})})
    with open(os.path.join(tmp_path, manifest_name(4)), "wb") as f:
        f.write(encode_manifest(evil))
    store = CheckpointStore(tmp_path, readonly=True)
    assert store.latest().id == 3
    assert "ckpt-000004.manifest: malformed manifest (data file path 'data/../../etc/passwd' outside data/)" in store.problems[0]
