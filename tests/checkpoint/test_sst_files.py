"""Checkpoints of RocksDB stores as files (tstate.checkpoint.sst_files): incremental
uploads (unchanged SST files referenced, not copied), restores equal to a plain-dict
model, garbage collection of unreferenced files, replicas, ``tstate checkpoints
--verify``, and corrupt or missing SST files detected (the previous checkpoint with
the reason, or CheckpointError listing them)."""

from __future__ import annotations

import doctest
import os
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("rocksdict", reason="the RocksDB keyed-state store needs rocksdict (the rocksdb extra)")

from tests.checkpoint.helpers import damage  # noqa: E402
from tstate.__main__ import main as cli  # noqa: E402
from tstate.checkpoint import sst_files  # noqa: E402
from tstate.checkpoint.sst_files import SST_DIR, FileCheckpoints, restore_worker, worker_files  # noqa: E402
from tstate.checkpoint.store import CheckpointStore  # noqa: E402
from tstate.errors import CheckpointError  # noqa: E402
from tstate.state.rocksdb.store import MISSING  # noqa: E402
from tstate.state.rocksdb.worker import WorkerStore  # noqa: E402
from tstate.types import StateCodec  # noqa: E402

CODEC = StateCodec(list[int])


def _apply(ws: WorkerStore, model: dict, changes: list[tuple[int, int, int]]) -> None:
    """``(bin, key, value)``: append value to key's list (value 0: clear the key)."""
    s = ws.store("lists", CODEC)
    for b, k, v in changes:
        if v == 0:
            s.delete(b, k)
            model.pop((b, k), None)
        else:
            cur = s.get(b, k)
            cur = [] if cur is MISSING else cur
            cur.append(v)
            s.put(b, k, cur)
            model[b, k] = [*model.get((b, k), []), v]
    ws.end_epoch()


def _contents(ws: WorkerStore, bins: int = 4) -> dict:
    s = ws.store("lists", CODEC)
    return {(b, k): v for b in range(bins) for k, v in s.items(b)}


def _checkpoint(store: CheckpointStore, fc: FileCheckpoints, workers: dict, t: int):
    w = store.begin(t)
    files = fc.capture(w, workers).result()
    m = w.commit()
    fc.committed(files)
    return m


def test_doctest():
    assert doctest.testmod(sst_files).failed == 0


changes = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 30), st.integers(0, 9)), max_size=40)


@settings(max_examples=15, deadline=None)
@given(epochs=st.lists(changes, min_size=1, max_size=6), workers=st.integers(1, 3), seed=st.integers(0, 99))
def test_restores_equal_the_model_and_uploads_are_incremental(tmp_path_factory, epochs, workers, seed):
    root = str(tmp_path_factory.mktemp("sst"))
    store = CheckpointStore(os.path.join(root, "ck"), retain=2, gc_scan_every=1, fsync=False)
    fc = FileCheckpoints(store, os.path.join(root, "scratch"))
    stores = {w: WorkerStore.create(os.path.join(root, f"w{w}")) for w in range(workers)}
    models: dict[int, dict] = {w: {} for w in range(workers)}
    rng = random.Random(seed)
    snapshots = []
    try:
        for t, ch in enumerate(epochs):
            for w in range(workers):
                _apply(stores[w], models[w], [c for c in ch if rng.random() < 0.7])
            before = fc.uploaded_files + fc.referenced_files
            m = _checkpoint(store, fc, stores, t + 1)
            # every SST file of a worker's database is in the checkpoint: uploaded now or referenced
            assert fc.uploaded_files + fc.referenced_files - before == sum(len(wf.sst) for wf in worker_files(m).values())
            snapshots.append((m.id, {w: {k: list(v) for k, v in models[w].items()} for w in range(workers)}))
        # the kept checkpoints restore to what the model held then (nothing decoded to open)
        assert store.latest() is not None
        for mid, expect in snapshots[-2:]:
            m = store.manifest(mid)
            assert store.verify(m) == []
            for w, wf in worker_files(m).items():
                back = restore_worker(store, wf, os.path.join(root, f"back-{mid}-{w}"))
                try:
                    assert _contents(back) == expect[w]
                finally:
                    back.close()
        # garbage collection: the store's SST directory holds exactly what kept manifests name
        kept = {r.path for m in store.manifests() for r in m.attached}
        on_disk = {f"{SST_DIR}{n}" for n in store.fs.list(SST_DIR.rstrip("/"))}
        assert on_disk == kept
    finally:
        for ws in stores.values():
            ws.close()
        fc.close()


def test_second_checkpoint_references_unchanged_files(tmp_path):
    store = CheckpointStore(str(tmp_path / "ck"), fsync=False)
    fc = FileCheckpoints(store, str(tmp_path / "scratch"))
    ws = WorkerStore.create(str(tmp_path / "w"))
    model: dict = {}
    _apply(ws, model, [(b, k, 1) for b in range(4) for k in range(200)])
    m1 = _checkpoint(store, fc, {0: ws}, 1)
    big = fc.uploaded_bytes
    _apply(ws, model, [(0, 1, 5)])
    m2 = _checkpoint(store, fc, {0: ws}, 2)
    first = dict(worker_files(m1)[0].sst)
    second = dict(worker_files(m2)[0].sst)
    assert set(first) < set(second)  # the first file is still part of the database...
    assert all(second[n] == first[n] for n in first)  # ...and referenced, not uploaded again
    assert fc.uploaded_bytes - big < big / 2
    ws.close()
    fc.close()


@pytest.mark.parametrize("after", ["created again", "restored"])
def test_a_new_database_never_references_an_earlier_ones_file_by_name(tmp_path, after):
    """SST file numbers are unique within one database only: a database created again
    in the same place (a rescale giving a worker id back), or a run resumed from a
    checkpoint, writes files whose names an earlier checkpoint's files had.  Its next
    checkpoint uploads them (a reference by name listed the other database's file, and
    the restore after a SIGKILL found it torn: "Sst file size mismatch")."""
    store = CheckpointStore(str(tmp_path / "ck"), fsync=False)
    fc = FileCheckpoints(store, str(tmp_path / "scratch"))
    ws = WorkerStore.create(str(tmp_path / "w"))
    _apply(ws, {}, [(0, k, 1) for k in range(300)])
    m1 = _checkpoint(store, fc, {0: ws}, 1)
    ws.close()
    if after == "restored":
        fc.close()
        fc = FileCheckpoints(store, str(tmp_path / "scratch2"))
        fc.base_on(m1)
    ws = WorkerStore.create(str(tmp_path / "w"))  # a new database, numbering its files afresh
    model: dict = {}
    _apply(ws, model, [(1, k, 7) for k in range(3)])
    m2 = _checkpoint(store, fc, {0: ws}, 2)
    first, second = dict(worker_files(m1)[0].sst), dict(worker_files(m2)[0].sst)
    assert set(first) & set(second)  # the same names...
    assert not {r.path for r in first.values()} & {r.path for r in second.values()}  # ...other files
    back = restore_worker(store, worker_files(m2)[0], str(tmp_path / "back"))
    assert {(b, k): v for b in (0, 1) for k, v in back.store("lists", CODEC).items(b)} == model
    back.close()
    ws.close()
    fc.close()


def _two_checkpoints(tmp_path, replica=None):
    store = CheckpointStore(str(tmp_path / "ck"), fsync=False, replica=replica)
    fc = FileCheckpoints(store, str(tmp_path / "scratch"))
    ws = WorkerStore.create(str(tmp_path / "w"))
    model: dict = {}
    _apply(ws, model, [(0, k, 1) for k in range(50)])
    m1 = _checkpoint(store, fc, {0: ws}, 1)
    _apply(ws, model, [(1, k, 2) for k in range(50)])
    m2 = _checkpoint(store, fc, {0: ws}, 2)
    ws.close()
    fc.close()
    return store, m1, m2


#: the damage tests.checkpoint.helpers.damage does for each case of these tests
_HOW = {"missing": "delete", "corrupt": "flip"}


@pytest.mark.parametrize("how", ["missing", "corrupt"])
def test_a_bad_sst_file_is_detected(tmp_path, how, capsys):
    store, m1, m2 = _two_checkpoints(tmp_path)
    new_in_m2 = [r for r in m2.attached if r not in m1.attached and r.path.endswith(".sst")]
    assert new_in_m2
    bad = new_in_m2[0].path
    damage(os.path.join(store.directory, bad), _HOW[how])
    # the CLI's --verify names it and exits 1
    assert cli(["checkpoints", store.directory, "--verify"]) == 1
    assert bad in capsys.readouterr().out
    # restoring that checkpoint's files: CheckpointError listing it, nothing opened
    with pytest.raises(CheckpointError, match=bad):
        restore_worker(store, worker_files(m2)[0], str(tmp_path / "back"))
    # recovery takes the previous checkpoint, saying why
    again = CheckpointStore(store.directory, fsync=False)
    latest = again.latest()
    assert latest is not None and latest.id == m1.id
    assert any(bad in p for p in again.problems)


def test_replica_holds_the_files_and_repairs_a_bad_one(tmp_path):
    store, _m1, m2 = _two_checkpoints(tmp_path, replica=str(tmp_path / "replica"))
    for r in m2.attached:
        assert os.path.getsize(tmp_path / "replica" / r.path) == r.size
    bad = next(r.path for r in m2.attached if r.path.endswith(".sst"))
    damage(os.path.join(store.directory, bad), "flip")
    again = CheckpointStore(store.directory, fsync=False, replica=str(tmp_path / "replica"))
    back = restore_worker(again, worker_files(m2)[0], str(tmp_path / "back"))
    assert len(_contents(back)) == 100
    back.close()
    assert again.verify(m2) == []  # repaired from the replica


def test_a_failed_upload_commits_nothing(tmp_path):
    store = CheckpointStore(str(tmp_path / "ck"), fsync=False)
    fc = FileCheckpoints(store, str(tmp_path / "scratch"))
    ws = WorkerStore.create(str(tmp_path / "w"))
    _apply(ws, {}, [(0, 1, 1)])
    m1 = _checkpoint(store, fc, {0: ws}, 1)
    _apply(ws, {}, [(0, 2, 1)])
    w = store.begin(2)

    def refuse(path, data, fsync=True):
        raise OSError(28, "No space left on device")

    store.fs.write_atomic = refuse  # type: ignore[method-assign]
    with pytest.raises(CheckpointError, match="No space left"):
        fc.capture(w, {0: ws}).result()
    w.abort()
    del store.fs.write_atomic
    assert store.latest().id == m1.id
    assert store.verify(m1) == []  # the shared files of the first checkpoint survive the abort
    ws.close()
    fc.close()


def test_writes_wait_for_the_checkpoint_made_on_the_upload_thread(tmp_path):
    """The processing thread only writes back and cuts; the flush and hard links run on
    the upload thread, and a write-back meanwhile waits: the checkpoint holds exactly
    the state at the cut."""
    store = CheckpointStore(str(tmp_path / "ck"), fsync=False)
    fc = FileCheckpoints(store, str(tmp_path / "scratch"))
    ws = WorkerStore.create(str(tmp_path / "w"))
    model: dict = {}
    _apply(ws, model, [(0, k, 1) for k in range(100)])
    at_cut = {k: list(v) for k, v in model.items()}
    fut = fc.capture(store.begin(1), {0: ws}, commit=True)
    _apply(ws, model, [(0, k, 2) for k in range(100)])  # written after the cut: not in checkpoint 1
    fut.result()
    m = store.latest()
    back = restore_worker(store, worker_files(m)[0], str(tmp_path / "back"))
    assert _contents(back) == at_cut
    back.close()
    assert _contents(ws) == model
    ws.close()
    fc.close()


def test_an_abandoned_checkpoint_still_releases_the_databases(tmp_path):
    """A checkpoint abandoned while its upload waits in the queue (the execution failed:
    its coordinator cancels what is pending) cannot be cancelled: the cuts hold the
    databases' writes until the upload runs them, so the upload runs and closing the
    stores does not wait forever (the RocksDB property test hung on exactly this)."""
    import threading

    store = CheckpointStore(str(tmp_path / "ck"), fsync=False)
    fc = FileCheckpoints(store, str(tmp_path / "scratch"))
    ws = WorkerStore.create(str(tmp_path / "w"))
    _apply(ws, {}, [(0, k, 1) for k in range(50)])
    gate = threading.Event()
    fc._pool.submit(gate.wait)  # the upload thread is busy: the next upload waits in the queue
    w = store.begin(1)
    fut = fc.capture(w, {0: ws})
    assert not fut.cancel()  # what Commits.abort tries
    gate.set()
    fut.result(timeout=60)
    w.abort()
    closer = threading.Thread(target=ws.close)
    closer.start()
    closer.join(timeout=60)
    assert not closer.is_alive(), "closing the store waited for a cut that never ran"
    fc.close()



def _committed_sst(store: CheckpointStore) -> tuple[Any, bytes]:
    """Checkpoint 1 committed in ``store`` with one attached SST file: its ref and bytes."""
    from tstate.checkpoint.layout import checksum
    from tstate.checkpoint.manifest import FileRef

    first = store.begin(1)
    data = b"sst bytes"
    ref = FileRef(f"{SST_DIR}{first.id:06d}-{first.token}0000{10:08x}.sst", len(data), checksum(data))
    store.fs.write_atomic(ref.path, data, fsync=False)
    first.attach(ref)
    first.commit()
    return ref, data


def test_a_collection_keeps_the_files_an_open_checkpoint_shares(tmp_path):
    """A checkpoint shares an SST file of an earlier one; before it commits, another
    commit dooms that earlier checkpoint: the collection keeps the shared file (the
    open writer will name it), and a share of a file already collected raises, so
    the uploader sends its own copy (the race a pipelined RocksDB checkpoint met)."""
    store = CheckpointStore(str(tmp_path / "ck"), retain=1, gc_scan_every=1, fsync=False)
    ref, data = _committed_sst(store)
    sharing, other = store.begin(2), store.begin(3)
    sharing.share(ref)  # (open: not committed yet)
    other.commit()  # dooms the first checkpoint (retain=1), which alone names the file
    store.wait_gc()
    assert store.fs.size(ref.path) == len(data)  # kept: the open writer shares it
    late = store.begin(4)
    sharing.abort()
    store.begin(5).commit()  # nothing open shares it now: collected
    store.wait_gc()
    with pytest.raises(CheckpointError, match="missing"):
        late.share(ref)


def test_a_share_and_an_abort_of_the_same_checkpoint_do_not_deadlock(tmp_path):
    """An upload thread shares a file into a checkpoint while the processing thread
    aborts that checkpoint (a crash, a failed checkpoint): both finish.  ``share``
    once took the store's lock before the writer's and ``abort`` the writer's before
    the store's, so the two waited for each other forever (a hang of the whole run)."""
    import threading
    import time

    store = CheckpointStore(str(tmp_path / "ck"), retain=3, fsync=False)
    ref, data = _committed_sst(store)
    w = store.begin(2)
    held, errors = threading.Event(), []

    def aborter() -> None:  # the processing thread: abort() holds the writer's lock, then takes the store's
        with w._lock:
            held.set()
            time.sleep(0.3)  # (the sharer reaches its locks meanwhile)
            w.abort()

    def sharer() -> None:  # the upload thread
        held.wait()
        try:
            w.share(ref)
        except CheckpointError as exc:  # (aborted first: refused, which the uploader handles)
            errors.append(exc)

    threads = [threading.Thread(target=f, daemon=True) for f in (aborter, sharer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert not any(t.is_alive() for t in threads), "share and abort of one checkpoint deadlocked"
    assert w.state == "aborted"
    assert [str(e) for e in errors] == [f"checkpoint {w.id} was aborted already"]
    assert store.fs.size(ref.path) == len(data)  # (a shared file is an earlier checkpoint's: abort keeps it)
