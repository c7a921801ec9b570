"""The RocksDB keyed-state store against a plain dict, on random operations: puts,
in-place changes, deletes, bins cleared, epochs written back through a cache small
enough to evict (and to write back mid-epoch), checkpoints restored into a new
database (what a crash after a checkpoint comes back to), checkpoints cut on another
thread while the epochs go on (their write-backs queued, applied after the cut: the
checkpoint holds the state at the cut, the store everything), and bins moved as SST
files to another worker and back."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
import threading
import time
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from tstate.keys import bin_of, key_hash
from tstate.state.rocksdb.settings import RocksDB
from tstate.state.rocksdb.store import MISSING
from tstate.state.rocksdb.worker import WorkerStore
from tstate.types import StateCodec

BINS = 4
CODEC = StateCodec(list[int])
keys = st.one_of(
    st.integers(-3, 6),
    st.booleans(),  # True/1 and False/0 are one key, as in a dict
    st.sampled_from([1.0, 2.5, -0.0]),
    st.text(alphabet="ab", max_size=2),
    st.tuples(st.sampled_from(["x", "y"]), st.integers(0, 2)),
    st.sampled_from([dt.date(2024, 1, 1), frozenset({1, 2}), 2**70, None, b"\x00"]),
)
values = st.lists(st.integers(-(2**40), 2**40), max_size=5)


def _bin(key: Any) -> int:
    return bin_of(key_hash(key), BINS)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="tstate-rocks-")
        self.n = 0
        # a budget of a few entries: states are evicted and re-read, epochs write back early
        self.settings = RocksDB(self.root, cache_bytes=1_000)
        self.w = WorkerStore.create(self._dir(), self.settings)
        self.ref: dict[Any, list[int]] = {}  # key -> state (dict equality: 1 == True == 1.0)
        self.meta: dict[int, bytes] = {}
        self.checkpoint: Any = None  # (dir, ref, meta) of the last checkpoint
        self.cutter: Any = None  # (thread, its result, (ref, meta) at the cut) of a cut under way

    def _dir(self) -> str:
        self.n += 1
        return os.path.join(self.root, f"db{self.n}")

    @initialize(budget=st.sampled_from([1_000, 6_000]))
    def budget(self, budget: int) -> None:
        """The cache's budget: a few entries (evicted and re-read all the time, epochs
        written back early), or a few dozen (write-backs queued behind a cut, and the
        pinned states outliving evictions)."""
        if budget != self.settings.cache_bytes:
            self.w.close()
            self.settings = RocksDB(self.root, cache_bytes=budget)
            self.w = WorkerStore.create(self._dir(), self.settings)

    @property
    def store(self) -> Any:
        return self.w.store("op", CODEC)

    @rule(key=keys, value=values)
    def put(self, key: Any, value: list[int]) -> None:
        self.store.put(_bin(key), key, list(value))
        self.ref[key] = list(value)

    @rule(pairs=st.lists(st.tuples(keys, values), max_size=12))
    def put_many(self, pairs: list[tuple[Any, list[int]]]) -> None:
        """An epoch's worth of records: more changed states than the cache holds."""
        for key, value in pairs:
            self.put(key, value)

    @rule(key=keys, item=st.integers(0, 9))
    def append_in_place(self, key: Any, item: int) -> None:
        s = self.store.get(_bin(key), key)
        if s is MISSING:
            assert key not in self.ref
            return
        s.append(item)
        self.store.put(_bin(key), key, s)
        self.ref[key].append(item)

    @rule(key=keys)
    def delete(self, key: Any) -> None:
        self.store.delete(_bin(key), key)
        self.ref.pop(key, None)

    @rule(key=keys)
    def get(self, key: Any) -> None:
        got = self.store.get(_bin(key), key)
        assert (None if got is MISSING else got) == self.ref.get(key)

    @rule(index=st.integers(0, BINS - 1), data=st.binary(min_size=1, max_size=3))
    def set_meta(self, index: int, data: bytes) -> None:
        self.store.set_meta(index, b"timers", data)
        self.meta[index] = data

    @rule(index=st.integers(0, BINS - 1))
    def clear_bin(self, index: int) -> None:
        self.store.clear_bin(index)
        for k in [k for k in self.ref if _bin(k) == index]:
            del self.ref[k]
        self.meta.pop(index, None)

    @rule()
    def end_epoch(self) -> None:
        self.w.end_epoch()
        assert self.w.cache.dirty == 0
        # (states pinned by a write-back queued behind a cut are not evicted until it is applied)
        cache = self.w.cache
        assert cache.bytes - cache._pinned_bytes() <= self.settings.cache_bytes or len(cache) <= 1

    @rule()
    def take_checkpoint(self) -> None:
        dest = os.path.join(self.root, f"ck{self.n}-{len(self.ref)}-{id(self.ref) % 997}")
        shutil.rmtree(dest, ignore_errors=True)
        files = self.w.checkpoint(dest)
        self.w.uploaded(f.name for f in files.sst)
        self.checkpoint = (files.dir, {k: list(v) for k, v in self.ref.items()}, dict(self.meta))

    @precondition(lambda self: self.cutter is None)
    @rule(hold=st.sampled_from([0.0, 0.2]))
    def cut_on_another_thread(self, hold: float) -> None:
        """A checkpoint as the engine makes one: written back and cut here, the flush
        and hard links on another thread -- at once, or when :meth:`cut_done` says so
        (at most ``hold`` seconds: an operation that must wait for the cut waits that
        long) -- while the next operations go on, their write-backs queued."""
        self.n += 1
        dest = os.path.join(self.root, f"cut{self.n}")
        finish = self.w.cut()
        at_cut = ({k: list(v) for k, v in self.ref.items()}, dict(self.meta))
        result: dict[str, Any] = {}
        go = threading.Event()

        def run() -> None:
            go.wait(hold)
            result["files"] = finish(dest)

        t = threading.Thread(target=run)
        t.start()
        self.cutter = (t, result, at_cut, go)

    @precondition(lambda self: self.cutter is not None)
    @rule(pairs=st.lists(st.tuples(keys, values), max_size=6))
    def epoch_while_cutting(self, pairs: list[tuple[Any, list[int]]]) -> None:
        """An epoch's records and write-back while the cut is (likely) still held: the
        batch is queued, the states stay readable."""
        for key, value in pairs:
            self.put(key, value)
        self.end_epoch()
        for key, _ in pairs:
            self.get(key)

    @precondition(lambda self: self.cutter is not None)
    @rule()
    def cut_done(self) -> None:
        """The cut's checkpoint is the state at the cut (what a crash comes back to)."""
        t, result, (ref, meta), go = self.cutter
        go.set()
        t.join()
        self.cutter = None
        files = result["files"]
        self.w.uploaded(f.name for f in files.sst)
        self.checkpoint = (files.dir, ref, meta)

    @precondition(lambda self: self.checkpoint is not None or self.cutter is not None)
    @rule()
    def crash_and_restore(self) -> None:
        """A crash loses everything since the checkpoint: the database is discarded and
        a new one restored from the checkpoint's files."""
        if self.cutter is not None:
            self.cut_done()
        self.w.close()
        ck, ref, meta = self.checkpoint
        self.w = WorkerStore.restore(ck, self._dir(), self.settings)
        self.ref = {k: list(v) for k, v in ref.items()}
        self.meta = dict(meta)

    @rule(index=st.integers(0, BINS - 1))
    def move_bin_away_and_back(self, index: int) -> None:
        """Export the bin to another worker's database, check it there, clear it here,
        then export it back and ingest it here."""
        other = WorkerStore.create(self._dir(), self.settings)
        try:
            sent = self.store.export_bin(index, os.path.join(self.root, f"move{self.n}.sst"))
            if sent is None:
                assert not [k for k in self.ref if _bin(k) == index] and index not in self.meta
                return
            there = other.store("op", CODEC)
            there.ingest_bin(sent)
            assert self._bin_items(there, index) == self._ref_items(index)
            self.store.clear_bin(index)
            back = there.export_bin(index, os.path.join(self.root, f"back{self.n}.sst"))
            assert back is not None
            self.store.ingest_bin(back)
        finally:
            other.close()

    def _ref_items(self, index: int) -> dict[Any, list[int]]:
        return {k: v for k, v in self.ref.items() if _bin(k) == index}

    @staticmethod
    def _bin_items(store: Any, index: int) -> dict[Any, list[int]]:
        out = {}
        for k, v in store.items(index):
            assert k not in out, f"key {k!r} twice in bin {index}"
            out[k] = v
        return out

    @rule()
    def bins_match_the_reference(self) -> None:
        """(A rule, not an invariant: reading a bin writes the cache back, and changes
        should pile up between reads.)"""
        for index in range(BINS):
            got = self._bin_items(self.store, index)
            assert got == self._ref_items(index)
            for k in got:  # keys come back as the first equal key given (as in a dict)
                assert type(k) is type(next(r for r in self.ref if r == k)) or isinstance(k, (int, float))
            assert self.store.count(index) == len(got)
            assert self.store.get_meta(index, b"timers") == self.meta.get(index)

    def teardown(self) -> None:
        try:
            if self.cutter is not None:
                self.cut_done()
            self.bins_match_the_reference()
        finally:
            self.w.close()
        shutil.rmtree(self.root, ignore_errors=True)


StoreMachine.TestCase.settings = settings(StoreMachine.TestCase.settings, stateful_step_count=30)
TestStore = StoreMachine.TestCase
