"""RocksBin against the heap Bin: the same operations (puts, the inner loop's in-place
changes through ``states``, clears, captures, write-backs with a cache small enough to
evict) give the same states, items, lengths and captured change sets."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tstate.state.bin import Bin
from tstate.state.rocksdb.keyed_bin import RocksBin
from tstate.state.rocksdb.settings import RocksDB
from tstate.state.rocksdb.worker import WorkerStore
from tstate.state.storage import NO_STATE, KeyedBin
from tstate.types import StateCodec

keys = st.one_of(st.integers(0, 6), st.sampled_from(["a", "b", ("t", 1)]))
CODEC = StateCodec(list[int])


class SameAsHeap(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.w = WorkerStore.create(self.dir, RocksDB(self.dir, cache_bytes=512))  # evicts often
        self.heap = Bin(5)
        self.rocks = RocksBin(5, self.w.store("lists", CODEC))

    def teardown(self) -> None:
        self.w.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(k=keys, v=st.lists(st.integers(-9, 9), max_size=3), track=st.booleans())
    def put(self, k: Any, v: list[int], track: bool) -> None:
        self.heap.put(k, list(v), track)
        self.rocks.put(k, list(v), track)

    @rule(k=keys, x=st.integers(-9, 9))
    def inner_loop_append(self, k: Any, x: int) -> None:
        """What keyed_apply does: the resident state, else load(), else a new one."""
        for b in (self.heap, self.rocks):
            s = b.states.get(k, NO_STATE)
            if s is NO_STATE:
                s = b.load(k)
            if s is NO_STATE:
                s = []
                b.added[k] = None
            s.append(x)
            b.states[k] = s
            b.dirty[k] = s

    @rule(k=keys)
    def clear(self, k: Any) -> None:
        self.heap.clear_key(k)
        self.rocks.clear_key(k)

    @rule(k=keys, t=st.integers(0, 3))
    def timer(self, k: Any, t: int) -> None:
        assert self.heap.add_timer(t, k) == self.rocks.add_timer(t, k)
        self.heap.mark_dirty(k)
        self.rocks.mark_dirty(k)

    @rule()
    def capture(self) -> None:
        h, r = self.heap.take_changes(), self.rocks.take_changes()
        assert h.dirty == r.dirty and list(h.removed) == list(r.removed)

    @rule()
    def end_epoch(self) -> None:
        self.rocks.write_back()
        self.w.end_epoch()

    @rule(k=keys)
    def get(self, k: Any) -> None:
        assert self.heap.get(k) == self.rocks.get(k) or self.heap.get(k) is self.rocks.get(k) is NO_STATE

    @invariant()
    def same_bin(self) -> None:
        assert sorted(self.heap.items(), key=repr) == sorted(self.rocks.items(), key=repr)
        assert len(self.heap) == len(self.rocks) and self.heap.is_empty() == self.rocks.is_empty()
        assert self.heap.changed() == self.rocks.changed()


SameAsHeap.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
TestSameAsHeap = SameAsHeap.TestCase


def test_a_rocks_bin_is_a_keyed_bin(tmp_path: Any) -> None:
    w = WorkerStore.create(str(tmp_path))
    assert isinstance(RocksBin(0, w.store("x", CODEC)), KeyedBin)
    w.close()


def test_a_stored_key_put_again_and_cleared_leaves_a_tombstone() -> None:
    """A key the last capture holds, no longer resident (written back), put and then
    cleared: the next delta must delete it (it was not created since the capture)."""
    m = SameAsHeap()
    try:
        m.put("a", [1], True)
        m.capture()
        m.end_epoch()
        m.put("a", [2], True)
        m.clear("a")
        h, r = m.heap.take_changes(), m.rocks.take_changes()
        assert list(h.removed) == list(r.removed) == ["a"]
    finally:
        m.teardown()
