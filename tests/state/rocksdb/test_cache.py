"""The cache's write-back while a checkpoint's cut holds the database: the epoch's batch
is encoded on the caller's thread and queued, the cut's thread applies it right after
its checkpoint (which does not hold it), the states stay readable and pinned in the
cache until then, and a failure to apply it is raised by the owner's next call."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tstate.errors import StateStoreError
from tstate.state.rocksdb.store import MISSING
from tstate.state.rocksdb.worker import WorkerStore
from tstate.types import StateCodec

INTS = StateCodec(list[int])


def test_a_write_back_during_a_cut_is_queued_and_applied_after_the_checkpoint(tmp_path: Path) -> None:
    w = WorkerStore.create(str(tmp_path / "w"))
    s = w.store("op", INTS)
    for i in range(10):
        s.put(0, f"k{i}", [i])
    finish = w.cut()  # epoch 1 written back, writes held
    for i in range(10, 20):
        s.put(0, f"k{i}", [i])
    assert w.end_epoch() == 10  # not waited for: queued
    assert w.db.deferring() and w.db.cutting()
    # readable (cached, pinned) though the store does not hold them yet
    assert [s.get(0, f"k{i}") for i in range(10, 20)] == [[i] for i in range(10, 20)]
    assert s.read(0, "k15") is MISSING  # bypassing the cache: not applied yet
    # eviction to nothing keeps the pinned states (the store does not hold them)
    w.cache._evict(0)
    assert set(s.slot(0).clean) >= {f"k{i}" for i in range(10, 20)}
    files = finish(str(tmp_path / "ck"))
    assert not w.db.deferring()
    assert s.read(0, "k15") == [15]  # applied right after the checkpoint
    w.cache.write_back()
    w.cache._evict(0)
    assert not s.slot(0).clean  # unpinned: evictable now
    w.close()
    # the checkpoint holds the cut's state, not the queued batch
    back = WorkerStore.restore(files.dir, str(tmp_path / "back"))
    b = back.store("op", INTS)
    assert sorted(k for k, _ in b.items(0)) == sorted(f"k{i}" for i in range(10))
    back.close()


def test_a_read_of_the_store_waits_for_the_queued_batches(tmp_path: Path) -> None:
    w = WorkerStore.create(str(tmp_path / "w"))
    s = w.store("op", INTS)
    s.put(1, "a", [1])
    finish = w.cut()
    s.put(1, "b", [2])
    w.end_epoch()
    assert w.db.deferring()
    t = threading.Timer(0.2, finish, args=(str(tmp_path / "ck"),))
    t.start()
    assert dict(s.items(1)) == {"a": [1], "b": [2]}  # (waited for the cut and its queued batch)
    t.join()
    w.close()


def test_a_delete_during_a_cut_waits_for_it_instead_of_queueing(tmp_path: Path) -> None:
    w = WorkerStore.create(str(tmp_path / "w"))
    s = w.store("op", INTS)
    s.put(1, "a", [1])
    finish = w.cut()
    s.delete(1, "a")
    t = threading.Timer(0.2, finish, args=(str(tmp_path / "ck"),))
    t.start()
    w.end_epoch()
    assert not w.db.deferring() and not w.db.cutting()
    t.join()
    assert list(s.items(1)) == []
    w.close()


def test_a_queued_batch_that_cannot_be_applied_fails_the_next_call_naming_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = WorkerStore.create(str(tmp_path / "w"))
    s = w.store("op", INTS)
    s.put(1, "a", [1])
    finish = w.cut()
    s.put(1, "b", [2])
    w.end_epoch()
    real = w.db._db

    class Failing:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def write(self, *a: Any) -> None:
            raise OSError(28, "No space left on device")

    checkpoint = w.db._checkpoint

    def then_a_full_disk(dest: str) -> Any:
        made = checkpoint(dest)
        monkeypatch.setattr(w.db, "_db", Failing())  # (ENOSPC at the write of the queued batch)
        return made

    monkeypatch.setattr(w.db, "_checkpoint", then_a_full_disk)
    finish(str(tmp_path / "ck"))  # the checkpoint itself is made (of the state before)
    monkeypatch.setattr(w.db, "_db", real)
    s.put(1, "c", [3])
    with pytest.raises(StateStoreError, match=rf"keyed-state store at {tmp_path / 'w'}: writing a batch .*deferred.*No space left"):
        w.end_epoch()
    with pytest.raises(StateStoreError, match="No space left"):
        w.checkpoint(str(tmp_path / "ck2"))  # never a checkpoint missing the lost batch
    assert not (tmp_path / "ck2").exists()
    w.close()
