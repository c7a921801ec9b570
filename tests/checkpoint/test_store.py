"""CheckpointStore / CheckpointWriter: round trips, incremental chains, atomic commit,
retention and garbage collection, directory checks, misuse."""

from __future__ import annotations

import os
import stat

import pytest

from tstate.checkpoint.delta import apply_chain
from tstate.checkpoint.fs import LocalFS
from tstate.checkpoint.manifest import manifest_name
from tstate.checkpoint.store import CheckpointStore
from tstate.errors import CheckpointError, ConfigurationError

from .helpers import FP, SCHEMA, delta, dirs, exists, files_on_disk, listing, new_store, snap, write_raw


def state(store: CheckpointStore, manifest, op: str, b: int) -> dict:
    return apply_chain(store.read_chain(manifest, op, b), FP)["states"]


# ---------------------------------------------------------------------- round trips


def test_empty_store(where) -> None:
    store = new_store(f"{where}/ck")
    assert store.latest() is None and store.manifests() == [] and store.problems == []
    assert store.needs_snapshot("op", 0)


def test_snapshot_delta_chains_across_checkpoints(where) -> None:
    store = new_store(where, retain=10)
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=4)
    w.put_snapshot("op", 0, snap(0, {"a": [1], ("t", 1): [2]}, {5: ["a"]}))
    w.put_snapshot("op", 3, snap(3, {"z": [9]}))
    m1 = w.commit()
    assert (m1.id, m1.time) == (1, 0)

    w = store.begin(10)
    w.put_delta("op", 0, delta(0, {"a": [1, 1]}, deletes=[("t", 1)], timers={7: ["a"]}))
    m2 = w.commit()
    w = store.begin(20)
    w.put_delta("op", 0, delta(0, {"b": [3]}))
    m3 = w.commit()

    assert [r.kind for r in store.bin_chain(m3, "op", 0)] == ["snap", "delta", "delta"]
    assert store.bin_chain(m3, "op", 0)[:2] == store.bin_chain(m2, "op", 0)
    out = apply_chain(store.read_chain(m3, "op", 0), FP)
    assert out["states"] == {"a": [1, 1], "b": [3]} and out["timers"] == {}
    assert apply_chain(store.read_chain(m2, "op", 0), FP)["timers"] == {7: ["a"]}
    assert state(store, m1, "op", 0) == {"a": [1], ("t", 1): [2]}
    # bin 3 untouched: the same single file in every checkpoint (incremental)
    assert store.bin_chain(m1, "op", 3) == store.bin_chain(m2, "op", 3) == store.bin_chain(m3, "op", 3)
    assert len(store.bin_chain(m3, "op", 3)) == 1
    assert store.latest() == m3 and store.manifests() == [m1, m2, m3]
    assert m3.file_count == 4 and m3.total_size == sum(r.size for r in m3.files())
    assert store.bin_chain(m3, "op", 1) == [] and store.bin_chain(m3, "nope", 0) == []


def test_snapshot_replaces_chain_and_drop_bin(where) -> None:
    store = new_store(where)
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=2)
    w.put_snapshot("op", 0, snap(0, {"a": [1]}))
    w.put_snapshot("op", 1, snap(1, {"b": [2]}))
    w.commit()
    w = store.begin(1)
    w.put_delta("op", 0, delta(0, {"a": [2]}))
    w.commit()
    w = store.begin(2)
    w.put_snapshot("op", 0, snap(0, {"c": [3]}))
    w.drop_bin("op", 1)
    m = w.commit()
    assert [r.kind for r in store.bin_chain(m, "op", 0)] == ["snap"]
    assert state(store, m, "op", 0) == {"c": [3]}
    assert 1 not in m.operators["op"].chains and store.read_chain(m, "op", 1) == []
    assert store.needs_snapshot("op", 1) and not store.needs_snapshot("op", 0)


def test_delta_after_drop_or_on_new_bin_applies_to_empty(where) -> None:
    store = new_store(where)
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=2)
    w.put_snapshot("op", 0, snap(0, {"a": [1]}))
    w.drop_bin("op", 0)
    w.put_delta("op", 0, delta(0, {"b": [2]}))
    w.put_delta("op", 1, delta(1, {"c": [3]}))
    w.put_delta("op", 1, delta(1, {"d": [4]}))
    m = w.commit()
    assert state(store, m, "op", 0) == {"b": [2]}
    assert [r.name.split("-")[-1] for r in store.bin_chain(m, "op", 1)] == ["delta.bin", "delta2.bin"]
    assert state(store, m, "op", 1) == {"c": [3], "d": [4]}
    # put_snapshot after deltas in the same checkpoint deletes them
    w = store.begin(1)
    w.put_delta("op", 1, delta(1, {"e": [5]}))
    written = [r.path for r in w.written()]
    w.put_snapshot("op", 1, snap(1, {"f": [6]}))
    assert not any(exists(where, p) for p in written)
    m = w.commit()
    assert state(store, m, "op", 1) == {"f": [6]}


def test_needs_snapshot_after_compact_after_files(where) -> None:
    store = new_store(where, compact_after=3)
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=1)
    assert store.needs_snapshot("op", 0)  # no chain yet
    w.put_snapshot("op", 0, snap(0, {"a": [0]}))
    w.commit()
    lengths = []
    for t in range(1, 5):
        lengths.append(store.needs_snapshot("op", 0))
        w = store.begin(t)
        if store.needs_snapshot("op", 0):
            w.put_snapshot("op", 0, snap(0, {"a": [t]}))
        else:
            w.put_delta("op", 0, delta(0, {"a": [t]}))
        m = w.commit()
    assert lengths == [False, False, True, False]
    assert state(store, m, "op", 0) == {"a": [4]}


def test_meta_schema_and_operators_carry_over(where) -> None:
    store = new_store(where)
    w = store.begin(0)
    w.put_operator_schema("a", SCHEMA, bins=2)
    w.put_operator_schema("b", SCHEMA, bins=4)
    w.put_snapshot("a", 1, snap(1, {"k": [1]}))
    w.put_snapshot("b", 3, snap(3, {"k": [1]}))
    w.put_meta("sources", {"events": 10})
    w.put_meta("workers", 2)
    w.commit()
    w = store.begin(5)
    w.put_meta("sources", {"events": 20})
    w.drop_operator("b")
    m = w.commit()
    assert dict(m.meta) == {"sources": {"events": 20}, "workers": 2}
    assert list(m.operators) == ["a"] and m.operators["a"].bins == 2 and dict(m.operators["a"].schema) == SCHEMA
    assert m.operators["a"].fingerprint == FP


def test_full_checkpoint_carries_nothing_over(where) -> None:
    store = new_store(where)
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=2)
    w.put_snapshot("op", 0, snap(0, {"old": [1]}))
    w.put_meta("x", 1)
    w.commit()
    w = store.begin(0, full=True)
    w.put_operator_schema("op", SCHEMA, bins=2)
    w.put_snapshot("op", 1, snap(1, {"new": [2]}))
    m = w.commit()
    assert sorted(m.operators["op"].chains) == [1] and dict(m.meta) == {}


def test_time_and_meta_values_round_trip(where) -> None:
    from tstate.progress.timestamp import Product

    store = new_store(where)
    w = store.begin(Product(3, 1))
    w.put_meta("positions", {"src": (1, 2)})
    w.put_meta("bytes", b"\x00\x01")
    w.commit()
    m = CheckpointStore(where, readonly=True).latest()
    assert m is not None and m.time == Product(3, 1)
    assert m.meta["positions"] == {"src": [1, 2]} and m.meta["bytes"] == b"\x00\x01"


# ---------------------------------------------------------------------- misuse


def test_writer_validation(where) -> None:
    store = new_store(where)
    w = store.begin(0)
    with pytest.raises(CheckpointError, match="bin must be an int >= 0"):
        w.put_snapshot("op", -1, b"x")
    with pytest.raises(CheckpointError, match="power of two"):
        w.put_operator_schema("op", SCHEMA, bins=3)
    with pytest.raises(CheckpointError, match="operator 'op'.*not a stored schema"):
        w.put_operator_schema("op", {"nonsense": 1}, bins=2)
    with pytest.raises(CheckpointError, match="meta 'f' cannot be stored"):
        w.put_meta("f", object())
    with pytest.raises(CheckpointError, match="checkpoint time"):
        store.begin(object())
    w.put_snapshot("op", 0, b"x")
    with pytest.raises(CheckpointError, match="operator 'op': no schema recorded"):
        w.commit()
    w.put_operator_schema("op", SCHEMA, bins=1)
    w.put_snapshot("op", 1, b"y")
    with pytest.raises(CheckpointError, match="bin 1 does not exist .*1 bins"):
        w.commit()
    w.drop_bin("op", 1)
    w.commit()
    with pytest.raises(CheckpointError, match="committed already"):
        w.put_delta("op", 0, b"z")
    w.abort()  # no-op after commit
    assert store.latest() is not None


def test_schema_change_requires_rewriting_every_bin(where) -> None:
    from tstate.types.schema import analyse

    store = new_store(where)
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=4)
    for b in (0, 2):
        w.put_snapshot("op", b, snap(b, {b: [b]}))
    w.commit()
    other = analyse(list[str]).to_builtins()
    w = store.begin(1)
    w.put_operator_schema("op", other, bins=4)
    w.put_snapshot("op", 0, b"new")
    with pytest.raises(CheckpointError, match="schema changed.*bins 2 were not"):
        w.commit()
    w.drop_bin("op", 2)
    m = w.commit()
    assert sorted(m.operators["op"].chains) == [0]
    # a new bin count drops the old chains (keys live in other bins now)
    w = store.begin(2)
    w.put_operator_schema("op", other, bins=8)
    w.put_snapshot("op", 5, b"five")
    m = w.commit()
    assert sorted(m.operators["op"].chains) == [5] and m.operators["op"].bins == 8


def test_abort_removes_files_and_context_manager(where) -> None:
    store = new_store(where)
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=2)
    w.put_snapshot("op", 0, snap(0, {"a": [1]}))
    w.put_delta("op", 1, delta(1, {"a": [1]}))
    assert len(files_on_disk(where)) == 2
    w.abort()
    w.abort()
    assert files_on_disk(where) == set() and store.latest() is None
    with pytest.raises(CheckpointError, match="aborted already"):
        w.put_snapshot("op", 0, b"x")
    with pytest.raises(RuntimeError):
        with store.begin(0) as w2:
            w2.put_snapshot("op", 0, b"x")
            raise RuntimeError("boom")
    assert w2.state == "aborted" and files_on_disk(where) == set()
    # ids: an aborted checkpoint's id is reused
    assert store.begin(0).id == 1


# ---------------------------------------------------------------------- directory checks


def test_directory_created_with_parents(tmp_path) -> None:
    d = tmp_path / "a" / "b" / "ck"
    store = CheckpointStore(d)
    assert d.is_dir() and store.directory == str(d)


def test_path_that_is_a_file(tmp_path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(CheckpointError, match=f"{f}: exists and is not a directory"):
        CheckpointStore(f)
    with pytest.raises(CheckpointError, match=f"{f / 'sub'}: cannot be created"):
        CheckpointStore(f / "sub")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into a read-only directory")
def test_unwritable_directory_permissions(tmp_path) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(CheckpointError, match=f"{d}: not writable"):
            CheckpointStore(d)
    finally:
        d.chmod(stat.S_IRWXU)


def test_unwritable_directory_reported_before_anything(tmp_path) -> None:
    class ReadOnlyFS(LocalFS):
        def check_writable(self) -> None:
            raise PermissionError(13, "Permission denied")

    with pytest.raises(CheckpointError, match=f"{tmp_path}: not writable \\(Permission denied\\)"):
        CheckpointStore(tmp_path, fs=ReadOnlyFS(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_readonly_and_options(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        CheckpointStore(tmp_path / "missing", readonly=True)
    with pytest.raises(CheckpointError, match="does not exist"):
        CheckpointStore(tmp_path / "missing", create=False)
    ro = CheckpointStore(tmp_path, readonly=True)
    with pytest.raises(CheckpointError, match="read-only"):
        ro.begin(0)
    for kw in ({"retain": 0}, {"compact_after": 0}, {"retain": 1.5}):
        with pytest.raises(ConfigurationError):
            CheckpointStore(tmp_path, **kw)


# ---------------------------------------------------------------------- atomic commit


def _two_checkpoints(path) -> CheckpointStore:
    store = new_store(path, retain=5)
    for t in range(2):
        w = store.begin(t)
        w.put_operator_schema("op", SCHEMA, bins=2)
        w.put_snapshot("op", t, snap(t, {t: [t]}))
        w.commit()
    return store


def test_crash_before_manifest_rename_leaves_previous_checkpoint(tmp_path, monkeypatch) -> None:
    store = _two_checkpoints(tmp_path)
    w = store.begin(2)
    w.put_delta("op", 0, delta(0, {"x": [1]}))
    real = store.fs.write_atomic

    def crash_on_manifest(path: str, data: bytes, *, fsync: bool = True) -> None:
        if path.startswith("manifests/"):
            # the temporary is written, the process dies before the rename
            (tmp_path / (path + ".tmp-0badf00d")).write_bytes(data[: len(data) // 2])
            raise OSError("simulated crash")
        real(path, data, fsync=fsync)

    monkeypatch.setattr(store.fs, "write_atomic", crash_on_manifest)
    with pytest.raises(CheckpointError, match="ckpt-000003.manifest: cannot be written"):
        w.commit()
    monkeypatch.undo()
    # a new process: the half-written checkpoint is invisible
    store2 = new_store(tmp_path, retain=5)
    m = store2.latest()
    assert m is not None and m.id == 2 and store2.problems == []
    leftovers = [p for p in files_on_disk(tmp_path) if p.endswith("-delta.bin")]
    assert len(leftovers) == 1  # the orphan of the crashed writer
    # the next successful commit (same id: nothing was committed) cleans tmp and orphans
    w = store2.begin(3)
    assert w.id == 3
    w.put_delta("op", 1, delta(1, {"y": [2]}))
    m3 = w.commit()
    assert not (tmp_path / "manifests" / "ckpt-000003.manifest.tmp-0badf00d").exists()
    assert not any((tmp_path / p).exists() for p in leftovers)
    assert files_on_disk(tmp_path) == {r.path for m in store2.manifests() for r in m.files()}
    assert state(store2, m3, "op", 0) == {0: [0]} and state(store2, m3, "op", 1) == {1: [1], "y": [2]}


def test_writer_never_committed_is_ignored_and_orphans_collected(tmp_path) -> None:
    store = _two_checkpoints(tmp_path)
    w = store.begin(2)  # "crashes": never committed nor aborted
    w.put_snapshot("op", 0, snap(0, {"lost": [1]}))
    w.put_meta("x", 1)
    orphan = next(iter(w.written())).path
    store2 = new_store(tmp_path)  # the restarted process
    m = store2.latest()
    assert m is not None and m.id == 2 and state(store2, m, "op", 0) == {0: [0]}
    (tmp_path / "data" / "stray.txt").parent.mkdir(exist_ok=True)
    (tmp_path / "data" / "stray.txt").write_text("not ours")
    w2 = store2.begin(2)
    w2.commit()
    assert not (tmp_path / orphan).exists()
    assert (tmp_path / "data" / "stray.txt").exists()  # foreign files are left alone


def test_manifest_write_is_tmp_then_rename(tmp_path, monkeypatch) -> None:
    store = new_store(tmp_path, fsync=True)
    calls: list[tuple[str, str]] = []
    real_replace, real_fsync = os.replace, os.fsync

    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append(("replace", os.path.basename(b))), real_replace(a, b))[1])
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync", "")), real_fsync(fd))[1])
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=1)
    w.put_snapshot("op", 0, snap(0, {"a": [1]}))
    w.commit()
    names = [n for k, n in calls if k == "replace"]
    assert names[-1] == "ckpt-000001.manifest" and names[0].endswith("-snap.bin")
    i = calls.index(("replace", "ckpt-000001.manifest"))
    assert calls[i - 1] == ("fsync", "") and calls[i + 1] == ("fsync", "")  # file fsync, then directory fsync
    assert not any(".tmp-" in n for n in os.listdir(tmp_path / "manifests"))


# ---------------------------------------------------------------------- retention and GC


def test_retention_deletes_old_manifests_and_unreferenced_files(where) -> None:
    store = new_store(where, retain=2)
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=2)
    w.put_snapshot("op", 0, snap(0, {"a": [0]}))
    w.put_snapshot("op", 1, snap(1, {"keep": [1]}))  # never touched again: referenced forever
    first = {r.path for r in w.written()}
    w.commit()
    for t in range(1, 6):
        w = store.begin(t)
        w.put_snapshot("op", 0, snap(0, {"a": [t]}))
        w.commit()
    assert [m.id for m in store.manifests()] == [5, 6]
    assert sorted(listing(where, "manifests")) == [f"ckpt-00000{i}.manifest" for i in (5, 6)]
    referenced = {r.path for m in store.manifests() for r in m.files()}
    assert files_on_disk(where) == referenced
    snap1 = next(p for p in first if "/1/" in p)
    assert snap1 in referenced and exists(where, snap1)
    assert len(referenced) == 3  # bin 1's first snapshot + bin 0's last two snapshots
    assert store.latest().id == 6
    # empty bin directories go away with their files
    w = store.begin(9)
    w.drop_bin("op", 1)
    w.commit()
    w = store.begin(10)
    w.commit()
    op_dir, bin_dir = snap1.split("/")[1:3]
    assert bin_dir not in dirs(where, f"data/{op_dir}")


def test_in_progress_writer_files_survive_gc(where) -> None:
    store = new_store(where, retain=1)
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=2)
    w.put_snapshot("op", 0, snap(0, {"a": [0]}))
    w.commit()
    first = store.begin(1)  # checkpoint 2, committed later
    second = store.begin(2)  # checkpoint 3, begun before 2 commits (pipelined)
    assert (first.id, second.id) == (2, 3)
    second.put_delta("op", 0, delta(0, {"b": [2]}))
    second.put_snapshot("op", 1, snap(1, {"c": [3]}))
    first.put_delta("op", 0, delta(0, {"a": [1]}))
    first.commit()  # GC with retain=1: must not touch checkpoint 3's files
    assert all(exists(where, r.path) for r in second.written())
    m3 = second.commit()
    assert store.latest() == m3 and store.problems == []
    assert state(store, m3, "op", 0) == {"a": [1], "b": [2]} and state(store, m3, "op", 1) == {"c": [3]}
    assert files_on_disk(where) == {r.path for r in m3.files()}


def test_out_of_order_commit_refused(where) -> None:
    store = new_store(where)
    a, b = store.begin(0), store.begin(1)
    b.commit()
    with pytest.raises(CheckpointError, match="checkpoint 1 cannot be committed: checkpoint 2 was committed"):
        a.commit()
    a.abort()
    assert [m.id for m in store.manifests()] == [2]


def test_gc_keeps_an_unreadable_older_manifest_as_evidence(where) -> None:
    store = _two_checkpoints(where)
    before = files_on_disk(where)
    write_raw(where, manifest_name(1), b"garbage")
    w = store.begin(5)
    m = w.commit()
    assert exists(where, manifest_name(1))  # never deleted automatically
    assert any("kept unreadable manifests/ckpt-000001.manifest" in p for p in store.problems)
    assert [x.id for x in store.manifests()] == [2, m.id]
    assert before <= files_on_disk(where)


def test_everything_synced_before_the_manifest(tmp_path) -> None:
    events: list[str] = []

    class Recording(LocalFS):
        def fsync_dir(self, directory: str) -> None:
            events.append("dir:" + directory)
            super().fsync_dir(directory)

        def sync_all(self) -> None:
            events.append("sync")
            super().sync_all()

        def write_atomic(self, path: str, data: bytes, *, fsync: bool = True) -> None:
            events.append("write:" + path)
            super().write_atomic(path, data, fsync=fsync)

    store = CheckpointStore(tmp_path, fs=Recording(tmp_path))
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=2)
    w.put_snapshot("op", 1, snap(1, {"a": [1]}))
    events.clear()
    w.commit()
    i = events.index("write:manifests/ckpt-000001.manifest")
    assert events[:i] == ["sync"]  # one sync makes every data file and directory durable
    assert events[i + 1] == "dir:manifests"


def test_gc_is_incremental_with_periodic_full_scans(where) -> None:
    store = new_store(where, retain=1, gc_scan_every=3)
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=2)
    w.put_snapshot("op", 0, snap(0, {"a": [0]}))
    w.commit()  # the first commit of a store scans
    stray = "data/elsewhere/0/000001-deadbeef-snap.bin"
    write_raw(where, stray, b"an orphan of another process")
    for t in (1, 2):
        w = store.begin(t)
        w.put_snapshot("op", 0, snap(0, {"a": [t]}))
        m = w.commit()
        assert exists(where, stray)  # incremental: only the deleted manifest's files were looked at
        assert files_on_disk(where) - {stray} == {r.path for r in m.files()}
    w = store.begin(3)
    w.commit()  # the third commit since the last scan scans again
    assert not exists(where, stray) and "elsewhere" not in dirs(where, "data")


def test_background_gc_deletes_the_same_files_off_the_committing_thread(tmp_path):
    """background_gc: a commit returns before the garbage collection runs; once it ran,
    the directory holds exactly what the inline collection leaves."""
    dirs = {}
    for bg in (False, True):
        store = CheckpointStore(tmp_path / str(bg), retain=1, background_gc=bg)
        for i in range(4):
            w = store.begin(i)
            w.put_operator_schema("op", {"kind": "int", "name": "int"}, bins=4)
            for b in range(4):
                w.put_snapshot("op", b, f"bin {b} at {i}".encode())
            w.commit()
        store.wait_gc()
        dirs[bg] = sorted(p.name for p in (tmp_path / str(bg)).rglob("*") if p.is_file())
        assert store.latest() is not None and not store.verify(store.latest())
    strip = [n.split("-")[0] + n.rsplit("-", 1)[-1] for n in dirs[True]]
    assert strip == [n.split("-")[0] + n.rsplit("-", 1)[-1] for n in dirs[False]]
    assert len(dirs[True]) == 4 + 1  # the last checkpoint's 4 files and its manifest


def test_a_directory_removed_while_a_file_is_written_is_created_again(tmp_path, monkeypatch) -> None:
    """Garbage collection removes empty directories while files are written: a
    directory above the file's, removed while ``makedirs`` creates the ones below it,
    is created again (it used to fail the checkpoint: found by a hypothesis test)."""
    fs = LocalFS(str(tmp_path))
    real = os.makedirs
    failures = {"left": 0}

    def racing(path, exist_ok=False):  # type: ignore[no-untyped-def]
        if failures["left"]:
            failures["left"] -= 1
            raise FileNotFoundError(2, "No such file or directory", path)
        return real(path, exist_ok=exist_ok)

    monkeypatch.setattr(os, "makedirs", racing)
    failures["left"] = 1
    fs.write_atomic("data/op/0/a.bin", b"a", fsync=False)
    failures["left"] = 1
    fs.write_unread("data/op/1/b.bin", b"b")
    assert (tmp_path / "data/op/0/a.bin").read_bytes() == b"a"
    assert (tmp_path / "data/op/1/b.bin").read_bytes() == b"b"


# ---------------------------------------------------------------------- adopting files written elsewhere


def _adopted_file(store: CheckpointStore, w, data: bytes):  # type: ignore[no-untyped-def]
    from tstate.checkpoint.writing import write_data_file

    return write_data_file(store.fs, "op", 0, w.id, w.token + "a1", "snap", data)


def test_adopt_checks_each_file_size_unless_the_writer_reported_it(tmp_path, monkeypatch) -> None:
    """``adopt`` stats each file (a write that did not finish has another size);
    ``reported=True`` (the size came from the writing process after its write: a
    Spark task's FILE row) takes the reference as it is, without a stat."""
    from attrs import evolve

    store = new_store(tmp_path)
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=2)
    ref = _adopted_file(store, w, snap(0, {"a": [1]}))
    with pytest.raises(CheckpointError, match=r"missing or \d+ bytes, expected"):
        w.adopt("op", 0, [evolve(ref, size=ref.size + 1)], replace=True)
    seen: list[str] = []
    size = store.fs.size
    monkeypatch.setattr(store.fs, "size", lambda p: seen.append(p) or size(p))
    w.adopt("op", 0, [ref], replace=True, reported=True)
    assert seen == []
    m = w.commit()
    assert state(store, m, "op", 0) == {"a": [1]}


def test_a_reported_file_lost_before_the_commit_is_found_by_recovery(tmp_path) -> None:
    """Without the stat, a reported file deleted after its report still commits; the
    checkpoint then fails verification and recovery falls back to the one before."""
    store = new_store(tmp_path)
    w = store.begin(0)
    w.put_operator_schema("op", SCHEMA, bins=2)
    w.put_snapshot("op", 1, snap(1, {"b": [2]}))
    first = w.commit()
    w = store.begin(1)
    ref = _adopted_file(store, w, snap(0, {"a": [1]}))
    w.adopt("op", 0, [ref], replace=True, reported=True)
    store.fs.delete(ref.path)
    w.commit()
    again = CheckpointStore(str(tmp_path), readonly=True)
    assert again.latest().id == first.id
    assert any(ref.path in p for p in again.problems)
