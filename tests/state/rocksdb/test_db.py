"""The database as files: checkpoints list new SST files only once, a checkpoint restores
without decoding, a bin moves as a checked SST file, and every file-system failure is a
StateStoreError naming the path, with nothing half-done."""

from __future__ import annotations

import contextlib
import os
import subprocess
import random
from pathlib import Path
from typing import Any, Iterator

import pytest

from tstate.errors import StateStoreError, StateTypeError
from tstate.state.rocksdb.db import LocalDB
from tstate.state.rocksdb.settings import RocksDB
from tstate.state.rocksdb.worker import WorkerStore
from tstate.types import StateCodec

INTS = StateCodec(list[int])


def _fill(w: WorkerStore, bins: range, keys: int, op: str = "op") -> dict[tuple[int, str], list[int]]:
    s = w.store(op, INTS)
    ref = {}
    for b in bins:
        for i in range(keys):
            ref[b, f"k{i}"] = [b, i]
            s.put(b, f"k{i}", [b, i])
    return ref


def test_an_incremental_checkpoint_lists_only_new_sst_files_as_new(tmp_path: Path) -> None:
    w = WorkerStore.create(str(tmp_path / "w"))
    _fill(w, range(4), 50)
    first = w.checkpoint(str(tmp_path / "ck1"))
    assert first.sst and all(f.new for f in first.sst)
    assert {f.name for f in first.other} >= {"CURRENT"}
    w.uploaded(f.name for f in first.sst)
    w.store("op", INTS).put(9, "late", [1])
    second = w.checkpoint(str(tmp_path / "ck2"))
    old = {f.name for f in first.sst}
    assert [f.new for f in second.sst] == [f.name not in old for f in second.sst]
    assert sum(f.new for f in second.sst) == 1
    assert second.upload_bytes < second.total_bytes
    # hard links: the checkpoint's SST files are the database's
    for f in second.sst:
        assert os.stat(second.path(f)).st_nlink >= 2
    w.close()


def test_a_restored_checkpoint_holds_exactly_the_checkpointed_state(tmp_path: Path) -> None:
    w = WorkerStore.create(str(tmp_path / "w"))
    ref = _fill(w, range(3), 20)
    ck = w.checkpoint(str(tmp_path / "ck"))
    w.store("op", INTS).put(0, "after", [7])  # after the checkpoint: not in it
    w.end_epoch()
    w.close()
    back = WorkerStore.restore(ck.dir, str(tmp_path / "back"))
    s = back.store("op", INTS)
    got = {(b, k): v for b in range(3) for k, v in s.items(b)}
    assert got == ref
    # its SST files count as uploaded: the next checkpoint uploads only what is new
    s.put(1, "new", [1])
    nxt = back.checkpoint(str(tmp_path / "ck-next"))
    assert {f.name for f in nxt.sst if not f.new} == {f.name for f in ck.sst}
    back.close()


def test_a_bin_moves_as_a_file_and_replaces_the_bin_there(tmp_path: Path) -> None:
    a = WorkerStore.create(str(tmp_path / "a"))
    b = WorkerStore.create(str(tmp_path / "b"))
    _fill(a, range(2), 30)
    sa, sb = a.store("op", INTS), b.store("op", INTS)
    sa.set_meta(1, b"timers", b"\x90")
    sb.put(1, "stale", [0])  # replaced by the ingest
    sb.put(0, "other bin", [0])  # untouched by it
    exported = sa.export_bin(1, str(tmp_path / "x" / "bin1.sst"))
    assert exported is not None and exported.entries == 31 and exported.bin == 1
    sb.ingest_bin(exported)
    assert dict(sb.items(1)) == dict(sa.items(1))
    assert sb.get_meta(1, b"timers") == b"\x90"
    assert dict(sb.items(0)) == {"other bin": [0]}
    assert not os.path.exists(exported.path)  # moved into the database
    assert sa.export_bin(5, str(tmp_path / "x" / "bin5.sst")) is None  # an empty bin: no file
    assert not os.path.exists(tmp_path / "x" / "bin5.sst")
    a.close(), b.close()


def test_a_corrupt_or_foreign_export_changes_nothing(tmp_path: Path) -> None:
    a = WorkerStore.create(str(tmp_path / "a"))
    b = WorkerStore.create(str(tmp_path / "b"))
    _fill(a, range(1), 10)
    b.store("op", INTS).put(0, "mine", [1])
    exported = a.store("op", INTS).export_bin(0, str(tmp_path / "bin0.sst"))
    assert exported is not None
    data = bytearray(Path(exported.path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(exported.path).write_bytes(bytes(data))
    with pytest.raises(StateStoreError, match="bin0.sst.*corrupt"):
        b.store("op", INTS).ingest_bin(exported)
    with pytest.raises(StateStoreError, match="holds operator 'op'"):
        b.store("other", INTS).ingest_bin(exported)
    assert dict(b.store("op", INTS).items(0)) == {"mine": [1]}
    a.close(), b.close()


def test_a_directory_with_other_files_is_refused_never_emptied(tmp_path: Path) -> None:
    d = tmp_path / "mine"
    d.mkdir()
    (d / "notes.txt").write_text("keep me")
    with pytest.raises(StateStoreError, match=r"mine.*notes\.txt.*directory of its own"):
        LocalDB.create(str(d))
    assert (d / "notes.txt").read_text() == "keep me"


def test_a_database_left_by_a_crash_is_replaced_by_a_fresh_one(tmp_path: Path) -> None:
    w = WorkerStore.create(str(tmp_path / "w"))
    _fill(w, range(1), 5)
    w.end_epoch()
    w.db.flush()
    w.close()
    again = WorkerStore.create(str(tmp_path / "w"))
    assert list(again.store("op", INTS).items(0)) == []
    again.close()


def test_a_path_that_cannot_be_a_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StateStoreError, match=r"keyed-state store at .*file/db"):
        LocalDB.create(str(tmp_path / "file" / "db"))


def test_a_checkpoint_into_an_existing_directory_is_refused(tmp_path: Path) -> None:
    w = WorkerStore.create(str(tmp_path / "w"))
    (tmp_path / "ck").mkdir()
    with pytest.raises(StateStoreError, match="ck exists already"):
        w.checkpoint(str(tmp_path / "ck"))
    w.close()


def test_a_checkpoint_that_is_not_one_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ck").mkdir()
    with pytest.raises(StateStoreError, match="no CURRENT file"):
        WorkerStore.restore(str(tmp_path / "ck"), str(tmp_path / "w"))


def test_a_wrongly_typed_state_fails_the_write_back_and_writes_nothing(tmp_path: Path) -> None:
    w = WorkerStore.create(str(tmp_path / "w"))
    s = w.store("op", INTS)
    s.put(0, "good", [1])
    s.put(0, "bad", [1, "x"])  # type: ignore[list-item]
    with pytest.raises(StateTypeError, match=r"operator 'op', key 'bad'.*\[1\]"):
        w.end_epoch()
    assert w.cache.dirty == 2
    assert w.db.family("op").get(b"\x00\x00\xa4good") is None  # nothing of the batch
    s.put(0, "bad", [2])
    assert w.end_epoch() == 2
    assert dict(s.items(0)) == {"bad": [2], "good": [1]}
    w.close()


def test_a_closed_store_says_so(tmp_path: Path) -> None:
    w = WorkerStore.create(str(tmp_path / "w"))
    w.close()
    with pytest.raises(StateStoreError, match="is closed"):
        w.store("op", INTS).put(0, "k", [1]) or w.end_epoch()


# -- faults of the file system: a read-only and a full file system (tmpfs mounts) --------

@contextlib.contextmanager
def _tmpfs(path: Path, options: str) -> Iterator[Path]:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _mount_allowed() -> bool:
    return os.geteuid() == 0 and os.path.exists("/bin/mount") or os.path.exists("/usr/bin/mount")


@pytest.mark.skipif(not _mount_allowed(), reason="mounting a tmpfs needs root")
def test_a_read_only_file_system_is_named(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "ro", "ro,size=1m") as ro:
        with pytest.raises(StateStoreError, match=rf"keyed-state store at {ro}/db: .*failed: .*(Read-only|read-only)"):
            LocalDB.create(str(ro / "db"))


@pytest.mark.skipif(not _mount_allowed(), reason="mounting a tmpfs needs root")
def test_a_full_disk_fails_the_checkpoint_naming_the_path_and_keeps_the_last_one(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "tiny", "size=3m") as tiny:
        w = WorkerStore.create(str(tiny / "db"), RocksDB(str(tiny), memtable_bytes=64 << 20))
        ref = _fill(w, range(2), 10)
        good = w.checkpoint(str(tiny / "ck-good"))
        s = w.store("op", INTS)
        rng = random.Random(7)
        for i in range(30):  # ~6 MB of random (incompressible) ints for a 3 MB disk
            s.put(3, f"big{i}", [rng.getrandbits(32) for _ in range(40_000)])
        with pytest.raises(StateStoreError, match=rf"keyed-state store at {tiny}.*(No space left|space)"):
            w.checkpoint(str(tiny / "ck-full"))
        assert not os.path.exists(tiny / "ck-full") and not os.path.exists(str(tiny / "ck-full") + ".tmp")
        with contextlib.suppress(StateStoreError):
            w.close()
        # the checkpoint taken before is whole and restores (elsewhere: this disk is full)
        back = WorkerStore.restore(good.dir, str(tmp_path / "back"))
        s2 = back.store("op", INTS)
        assert {(b, k): v for b in range(2) for k, v in s2.items(b)} == ref
        back.close()


def _failing_links(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[int]:
    """The GIL-free link fails its first ``failures`` attempts (as when a compaction is
    installed while it links), then links for real; the attempts, counted."""
    from tstate.state.rocksdb import checkpoint_dirs

    attempts: list[int] = []
    real = checkpoint_dirs.link_checkpoint

    def link_checkpoint(*args: Any) -> bool:
        attempts.append(1)
        return real(*args) if len(attempts) > failures else False

    monkeypatch.setattr(checkpoint_dirs, "link_checkpoint", link_checkpoint)
    return attempts


def test_a_failed_link_is_linked_again_not_made_by_create_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # create_checkpoint holds the GIL (it stalled the processing thread up to 470 ms
    # overlapping a compaction's end): an attempt that a compaction's install failed is
    # made again with the new live files, GIL free
    from tstate.state.rocksdb import checkpoint_dirs

    w = WorkerStore.create(str(tmp_path / "w"))
    ref = _fill(w, range(2), 50)
    attempts = _failing_links(monkeypatch, failures=checkpoint_dirs.LINK_ATTEMPTS - 1)
    monkeypatch.setattr(checkpoint_dirs.rocksdict, "Checkpoint", None)  # (never used)
    ck = w.checkpoint(str(tmp_path / "ck"))
    assert len(attempts) == checkpoint_dirs.LINK_ATTEMPTS
    assert (w.db.checkpoints.retries, w.db.checkpoints.fallbacks) == (checkpoint_dirs.LINK_ATTEMPTS - 1, 0)
    w.close()
    back = WorkerStore.restore(ck.dir, str(tmp_path / "back"))
    assert {(b, k): v for b in range(2) for k, v in back.store("op", INTS).items(b)} == ref
    back.close()


def test_links_failing_link_attempts_times_fall_back_to_create_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tstate.state.rocksdb import checkpoint_dirs

    w = WorkerStore.create(str(tmp_path / "w"))
    ref = _fill(w, range(1), 20)
    attempts = _failing_links(monkeypatch, failures=10**9)
    ck = w.checkpoint(str(tmp_path / "ck"))
    assert len(attempts) == checkpoint_dirs.LINK_ATTEMPTS and w.db.checkpoints.fallbacks == 1
    w.close()
    back = WorkerStore.restore(ck.dir, str(tmp_path / "back"))
    assert {(0, k): v for k, v in back.store("op", INTS).items(0)} == ref
    back.close()


def test_a_write_back_while_the_cut_applies_the_queued_batches_is_queued_not_held(tmp_path: Path) -> None:
    # the cut applied its queued batches holding the writes: a write-back meanwhile
    # waited for all of them (up to 600 ms under load); it is queued behind them now,
    # and applied in order
    import threading

    db = LocalDB.create(str(tmp_path / "w"))
    fam = db.family("op")
    finish = db.cut()
    first = db.batch()
    first.put(b"k", b"1", fam.handle)
    assert db.write_batch(first, defer=True)
    real, queued = db._db, []

    class Writing:  # the database, with a write-back from the processing thread amid the first apply
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def write(self, wb: Any, opts: Any) -> None:
            if not queued:
                later = db.batch()
                later.put(b"k", b"2", fam.handle)
                t = threading.Thread(target=lambda: queued.append(db.write_batch(later, defer=True)), daemon=True)
                t.start()
                t.join(timeout=5)
                queued.append(t.is_alive())
            real.write(wb, opts)

    db._db = Writing()
    finish(str(tmp_path / "ck"))
    db._db = real
    db.settle()
    assert queued[:2] == [True, False]  # queued at once, not held until the cut's end
    assert fam.get(b"k") == b"2" and not db.deferring() and not db.cutting()
    db.close()


def test_a_family_added_by_the_owner_while_a_cut_flushes_does_not_break_the_checkpoint(tmp_path: Path) -> None:
    # the cut's thread flushes every family (RocksDB's flush lets the GIL go) while the
    # owner may open a new operator's family: the cut iterated the live dict ("changed
    # size during iteration")
    db = LocalDB.create(str(tmp_path / "w"))
    fam = db.family("a")
    db.write([(fam, b"k", b"v")])
    real = fam.rdict

    class Flushing:
        def __init__(self) -> None:
            self.added = False

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def flush(self, wait: bool) -> None:
            if not self.added:
                self.added = True
                db.family("b")  # (the owner, meanwhile)
            real.flush(wait)

    fam.rdict = Flushing()
    ck = db.checkpoint(str(tmp_path / "ck"))
    fam.rdict = real
    db.close()
    back = LocalDB.restore(ck.dir, str(tmp_path / "back"))
    assert back.family("a").get(b"k") == b"v"
    back.close()
