"""Recovery never starts from empty state by surprise; garbage collection never deletes
evidence (unusable or unreadable checkpoints) nor anything through a symlink; attached
files (the Spark backend's held-back records) are verified and collected with their
checkpoint.  The corruption matrix at the store level, on a directory and on S3."""

from __future__ import annotations

import os
import warnings
from typing import Any

import pytest

from tstate.checkpoint.manifest import FileRef, manifest_name
from tstate.checkpoint.store import CheckpointSkippedWarning, CheckpointStore, unusable_name
from tstate.errors import CheckpointError

from .helpers import SCHEMA, damaged, delta, exists, files_on_disk, new_store, snap, write_raw


def attach_held(store: CheckpointStore, w: Any, body: bytes) -> FileRef:
    """Write a held-records-like file for writer ``w`` and attach it."""
    import xxhash

    path = f"held/{w.id:06d}-{w.token}.msgpack"
    store.fs.write_atomic(path, body)
    ref = FileRef(path, len(body), xxhash.xxh64_hexdigest(body))
    w.attach(ref)
    return ref


def build(where: Any) -> dict[str, str]:
    """Checkpoints 1..3 (retain 3): bin 2's snapshot (from checkpoint 1) is shared by all
    three; checkpoint 3 has its own delta (bin 0) and an attached held file."""
    store = new_store(where, retain=3)
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=4)
    for b, k in ((0, "a"), (1, "b"), (2, "c")):
        w.put_snapshot("op", b, snap(b, {k: [0]}))
    attach_held(store, w, b"held of 1")
    w.commit()
    w = store.begin(1)
    w.put_delta("op", 0, delta(0, {"a": [1]}))
    attach_held(store, w, b"held of 2")
    w.commit()
    w = store.begin(2)
    w.put_delta("op", 0, delta(0, {"a": [2]}))
    held = attach_held(store, w, b"held of 3")
    m3 = w.commit()
    shared = m3.chain("op", 2)[0].path
    own_delta = [r.path for r in m3.chain("op", 0) if r.name.startswith("000003-")][0]
    return {"manifest": manifest_name(3), "shared snapshot": shared, "delta": own_delta, "held": held.path}


def damage(where: Any, path: str, how: str) -> None:
    from tstate.checkpoint.location import open_filesystem

    fs = open_filesystem(os.fspath(where))
    if how == "delete":
        fs.delete(path)
        return
    write_raw(where, path, damaged(fs.read_bytes(path), how))


def snapshot_of(where: Any) -> dict[str, bytes]:
    from tstate.checkpoint.location import open_filesystem

    fs = open_filesystem(os.fspath(where))
    paths = set(files_on_disk(where)) | {f"manifests/{n}" for n in fs.list("manifests")}
    paths |= {f"held/{n}" for n in fs.list("held")}
    return {p: fs.read_bytes(p) for p in paths}


@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
@pytest.mark.parametrize("kind", ["manifest", "shared snapshot", "delta", "held"])
def test_corruption_matrix(where: Any, kind: str, how: str) -> None:
    files = build(where)
    named = {i: {m.name} | {r.path for r in m.files()} for m in new_store(where).manifests() for i in [m.id]}
    damage(where, files[kind], how)
    before = snapshot_of(where)
    store = new_store(where, retain=3)
    if kind == "shared snapshot":
        with pytest.raises(CheckpointError) as info:
            store.recover()
        msg = str(info.value)
        assert "holds 3 checkpoints and none is usable" in msg and "nothing was deleted" in msg
        assert all(f"checkpoint {i}: {files[kind]}: " in msg for i in (1, 2, 3))
        with pytest.warns(CheckpointSkippedWarning, match="starting from empty state"):
            assert store.recover(fresh_if_unusable=True) is None
        bad, used = [1, 2, 3], None
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m = store.recover()
        assert m is not None and m.id == 2  # the previous good checkpoint
        msgs = [str(w.message) for w in caught if issubclass(w.category, CheckpointSkippedWarning)]
        if (kind, how) == ("manifest", "delete"):  # indistinguishable from a commit that never happened
            assert msgs == [] and store.skipped == {}
            bad = []
        else:
            (msg,) = msgs
            assert "resuming from checkpoint 2" in msg and files[kind].rsplit("/", 1)[-1] in msg
            assert list(store.skipped) == [3]
            bad = [3]
        used = 2
    for i in bad:  # marked on disk: a later process keeps it too
        assert exists(where, unusable_name(i))
    # more checkpoints (a fresh one if none was usable), each collecting garbage, the
    # last one in a new process (no in-memory knowledge of what was unusable)
    for n in range(4):
        s = store if n < 3 else new_store(where, retain=3)
        w = s.begin(10 + n, full=used is None and n == 0)
        w.put_operator_schema("op", SCHEMA, bins=4)
        w.put_delta("op", 1, delta(1, {"z": [n]}))
        m = w.commit()
        assert s.verify(m) == []
    after = snapshot_of(where)
    # nothing deleted that was not garbage: every unusable checkpoint's manifest, marker and
    # files are there, byte for byte; what went were good checkpoints retention retired
    for i in bad:
        for p in named[i]:
            if p in before:
                assert after.get(p) == before[p], (i, p)
    gone = set(before) - set(after)
    good = {p for i, ps in named.items() if i not in bad for p in ps}
    evidence = {p for i in bad for p in named[i]}
    assert gone <= good - evidence, gone - (good - evidence)
    live = {p for m in new_store(where).manifests() for p in [m.name, *(r.path for r in m.files())]}
    assert not (gone & live)


def test_recover_on_an_empty_directory_is_a_fresh_start(tmp_path: Any) -> None:
    store = new_store(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert store.recover() is None


def test_an_unusable_checkpoint_marked_in_one_process_is_kept_by_the_next(tmp_path: Any) -> None:
    files = build(tmp_path)
    damage(tmp_path, files["delta"], "flip")
    store = new_store(tmp_path, retain=1)
    with pytest.warns(CheckpointSkippedWarning):
        assert store.recover().id == 2
    assert exists(tmp_path, unusable_name(3))
    text = (tmp_path / unusable_name(3)).read_text()
    assert "checkpoint 3 found unusable" in text and "checksum mismatch" in text
    later = new_store(tmp_path, retain=1)  # another process: knows only the marker
    for n in range(3):
        w = later.begin(20 + n)
        w.put_delta("op", 1, delta(1, {"y": [n]}))
        later_m = w.commit()
    assert any("kept unusable checkpoint 3" in p for p in later.problems)
    assert [m.id for m in later.manifests()] == [3, later_m.id]  # 3 kept as evidence, retain=1 of the good ones
    # someone removes it by hand: the next full scan collects what only it named
    os.unlink(tmp_path / manifest_name(3))
    store = new_store(tmp_path, retain=1)
    w = store.begin(30)
    w.commit()
    assert not exists(tmp_path, unusable_name(3)) and not exists(tmp_path, files["delta"])
    assert files_on_disk(tmp_path) == {r.path for m in store.manifests() for r in m.files() if r.path.startswith("data/")}


def test_attached_files_are_checked_and_collected_with_their_checkpoint(where: Any) -> None:
    store = new_store(where, retain=1)
    w = store.begin(0)
    with pytest.raises(CheckpointError, match="not an attached file of checkpoint 1"):
        w.attach(FileRef("data/x/0/000001-ab-snap.bin", 1, "0"))
    with pytest.raises(CheckpointError, match="not an attached file of checkpoint 1"):
        w.attach(FileRef(f"held/000002-{w.token}.msgpack", 1, "0"))
    with pytest.raises(CheckpointError, match="missing or -1 bytes"):
        w.attach(FileRef(f"held/000001-{w.token}.msgpack", 1, "0"))
    h1 = attach_held(store, w, b"one")
    m1 = w.commit()
    assert m1.attached == (h1,) and h1 in list(m1.files()) and store.manifest(1).attached == (h1,)
    w = store.begin(1)
    h2 = attach_held(store, w, b"two")
    w.commit()  # retires checkpoint 1: its held file goes with it
    assert not exists(where, h1.path) and exists(where, h2.path)
    w = store.begin(2)  # a writer that never commits leaves an orphan
    orphan = attach_held(store, w, b"three")
    store._forget(w)
    fresh = new_store(where, retain=1)  # its first commit scans everything
    w = fresh.begin(3)
    w.commit()
    assert not exists(where, orphan.path) and not exists(where, h2.path)


def test_a_held_file_named_only_in_old_metadata_stays_while_its_checkpoint_is_kept(tmp_path: Any) -> None:
    store = new_store(tmp_path, retain=2)
    w = store.begin(0)
    path = f"held/{w.id:06d}-{w.token}.msgpack"
    store.fs.write_atomic(path, b"held, before attached files existed")
    w.put_meta("spark", {"held": path})
    w.commit()
    fresh = new_store(tmp_path, retain=2)  # a full scan
    w = fresh.begin(1)
    w.put_meta("spark", {"held": None})
    w.commit()
    assert exists(tmp_path, path)
    for t in (2, 3):
        w = fresh.begin(t)
        w.put_meta("spark", {"held": None})
        w.commit()
    scan = new_store(tmp_path, retain=2)
    scan.begin(4).commit()
    assert not exists(tmp_path, path)  # its checkpoint was retired


def two_checkpoints_and_a_link(tmp_path: Any) -> tuple[CheckpointStore, Any, str]:
    root = tmp_path / "ck"
    store = new_store(root, retain=1)
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=2)
    w.put_snapshot("op", 0, snap(0, {"a": [0]}))
    m1 = w.commit()
    (victim,) = [r.path for r in m1.files()]
    return store, root, victim


def test_incremental_gc_never_deletes_through_a_symlinked_directory(tmp_path: Any) -> None:
    store, root, victim = two_checkpoints_and_a_link(tmp_path)
    op_dir = root / victim.split("/")[0] / victim.split("/")[1]
    outside = tmp_path / "outside"
    os.rename(op_dir, outside)  # the operator's directory now lives elsewhere, linked
    os.symlink(outside, op_dir)
    w = store.begin(1)
    w.put_snapshot("op", 0, snap(0, {"a": [1]}))  # retires checkpoint 1's snapshot (incremental)
    with pytest.warns(RuntimeWarning, match=f"garbage collection: {victim}: not deleted .*a symlink"):
        w.commit()
    rel = os.path.join(*victim.split("/")[2:])
    assert (outside / rel).exists()
    assert any(victim in p and "not deleted" in p and "a symlink" in p for p in store.problems)


def test_a_full_scan_never_deletes_through_a_symlinked_data_directory(tmp_path: Any) -> None:
    store, root, victim = two_checkpoints_and_a_link(tmp_path)
    fresh = new_store(root, retain=1)  # opened before the link is made (opening refuses one)
    outside = tmp_path / "outside"
    os.rename(root / "data", outside)
    os.symlink(outside, root / "data")
    (outside / "stray-op").mkdir()
    (outside / "stray-op" / "0").mkdir()
    stray = outside / "stray-op" / "0" / "000001-deadbeef-snap.bin"
    stray.write_bytes(b"someone else's file with a name we write")
    w = fresh.begin(1)  # its first commit: a full scan of data/
    w.put_snapshot("op", 0, snap(0, {"a": [1]}))
    with pytest.warns(RuntimeWarning) as warned:
        w.commit()
    assert any("nothing is deleted through one" in str(x.message) for x in warned)
    assert stray.exists() and (outside / os.path.join(*victim.split("/")[1:])).exists()
    assert any("stray-op" in p and "not deleted" in p for p in fresh.problems)
    assert any("a symlink, not garbage-collected" in p for p in fresh.problems)
    with pytest.raises(CheckpointError, match="grow without bound"):
        fresh.begin(2)  # it never keeps writing where it cannot delete


def link_out(tmp_path: Any, root: Any, layout: str, victim: str) -> tuple[str, Any]:
    """Move one of the store's own directories out of it and leave a symlink in its
    place: ``data/``, a bin directory (``data/<op>/<bin>``) or ``manifests/``."""
    rel = {"data": "data", "bin": victim.rsplit("/", 1)[0], "manifests": "manifests"}[layout]
    outside = tmp_path / f"outside-{layout}"
    os.rename(root / rel, outside)
    os.symlink(outside, root / rel)
    return rel, outside


@pytest.mark.parametrize("layout", ["data", "bin", "manifests"])
def test_a_store_with_a_symlinked_directory_is_refused_when_opened(tmp_path: Any, layout: str) -> None:
    """Issue 26, item 4: writes would go through the link and every deletion be refused,
    so the store would grow without bound; opening it names the link and what to do."""
    _, root, victim = two_checkpoints_and_a_link(tmp_path)
    rel, outside = link_out(tmp_path, root, layout, victim)
    before = sorted(str(p) for p in outside.rglob("*"))
    with pytest.raises(CheckpointError) as info:
        new_store(root, retain=1)
    message = str(info.value)
    assert os.path.join(str(root), *rel.split("/")) in message and str(outside) in message
    assert "(outside the store)" in message and "Replace each link by a real directory" in message
    assert sorted(str(p) for p in outside.rglob("*")) == before  # nothing written or deleted there
    # reading (the inspection CLI) still works: it neither writes nor deletes
    ro = CheckpointStore(root, readonly=True)
    assert [m.id for m in ro.manifests()] == [1]
    # put back as a real directory, the store opens and collects as usual
    os.unlink(root / rel)
    os.rename(outside, root / rel)
    store = new_store(root, retain=1)
    for t in (1, 2):
        w = store.begin(t)
        w.put_snapshot("op", 0, snap(0, {"a": [t]}))
        m = w.commit()
    assert store.problems == [] and files_on_disk(root) == {r.path for r in m.files()}


def test_a_symlink_that_stays_inside_the_store_is_refused_too(tmp_path: Any) -> None:
    """Garbage collection deletes through no symlink, wherever it points."""
    _, root, _ = two_checkpoints_and_a_link(tmp_path)
    os.rename(root / "data", root / "elsewhere")
    os.symlink(root / "elsewhere", root / "data")
    with pytest.raises(CheckpointError, match="data -> .*elsewhere: a symlinked directory") as info:
        new_store(root, retain=1)
    assert "outside the store" not in str(info.value)


def test_a_link_made_while_running_stops_the_next_checkpoint(tmp_path: Any) -> None:
    """A directory replaced by a symlink after the store was opened: the commit that
    cannot collect through it warns, and the next begin() refuses."""
    store, root, victim = two_checkpoints_and_a_link(tmp_path)
    rel, outside = link_out(tmp_path, root, "bin", victim)
    w = store.begin(1)
    w.put_snapshot("op", 0, snap(0, {"a": [1]}))
    with pytest.warns(RuntimeWarning, match="a symlink"):
        w.commit()
    with pytest.raises(CheckpointError, match=f"{rel} -> {outside} \\(outside the store\\)"):
        store.begin(2)


def test_a_symlinked_root_is_the_store(tmp_path: Any) -> None:
    """The checkpoint directory itself may be a symlink (the user named it): garbage
    collection works below it as usual."""
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    store = new_store(tmp_path / "link", retain=1)
    for t in range(3):
        w = store.begin(t)
        w.put_operator_schema("op", SCHEMA, bins=2)
        w.put_snapshot("op", 0, snap(0, {"a": [t]}))
        m = w.commit()
    assert store.problems == []
    assert files_on_disk(real) == {r.path for r in m.files()}
