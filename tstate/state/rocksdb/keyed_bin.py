"""``RocksBin``: one bin's keyed state in a worker's RocksDB store, behind the runtime's
storage seam (:class:`tstate.state.storage.KeyedBin`).

A :class:`~tstate.state.bin.Bin` whose :attr:`states` is only the *resident* part: the
keys loaded (:meth:`RocksBin.load`, :meth:`RocksBin.get`) or written (:meth:`put`, or the
runtime's inner loop writing ``states`` directly) since the last :meth:`write_back`.
A state is *taken* out of the bin's cache in the worker's
:class:`~tstate.state.rocksdb.cache.StateCache` (decoded once, kept across epochs) or
read from the operator's :class:`~tstate.state.rocksdb.store.KeyedStore` when the
runtime first touches its key in an epoch; :meth:`write_back` gives every resident
state back to the cache as changed (the runtime changes states in place without saying
so: every resident state counts as changed) and empties ``states``; the worker's :meth:`WorkerStore.end_epoch <tstate.state.rocksdb.worker.WorkerStore.end_epoch>`
then writes them to RocksDB in one batch.  Everything else of the bin -- its timers, the
change sets a checkpoint captures (``dirty``, ``removed``, ``added``), ``full``,
``frozen`` -- is the heap bin's, so the checkpoint and copy-on-write paths see the same
thing as for a heap bin; :meth:`items` and ``len`` read the whole bin from the store
(written back first).

The embedded engine makes these when a run is given ``state=RocksDB(...)``
(``HeldBins.new_bin``), and turns the heap bins restores and migrations deliver into
them (:func:`adopt`).

>>> import tempfile
>>> from tstate.state.rocksdb.worker import WorkerStore
>>> from tstate.types import StateCodec
>>> w = WorkerStore.create(tempfile.mkdtemp())
>>> b = RocksBin(3, w.store("count", StateCodec(int)))
>>> b.put("a", 1, track=True); b.states["b"] = 2       # the runtime's inner loop writes states
>>> b.write_back(); w.end_epoch(); b.states
2
{}
>>> b.get("a"), b.get("zz") is NO_STATE, sorted(b.items()), len(b)
(1, True, [('a', 1), ('b', 2)], 2)
>>> b.clear_key("a"); sorted(b.items()), sorted(b.take_changes().removed)
([('b', 2)], [])
>>> w.close()
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from tstate.state.bin import Bin
from tstate.state.rocksdb.store import MISSING, KeyedStore
from tstate.state.storage import NO_STATE

__all__ = ["RocksBin", "adopt"]


class RocksBin(Bin):
    """One bin's keyed state in a :class:`KeyedStore` (see the module docstring)."""

    __slots__ = ("store", "cache")

    def __init__(self, index: int, store: KeyedStore) -> None:
        super().__init__(index)
        self.store = store
        #: the bin's cache in the worker's StateCache: states are taken out of it when
        #: first touched in an epoch and given back (dirty) by :meth:`write_back`
        self.cache = store.slot(index)

    def load(self, key: Any) -> Any:
        """``key``'s stored state, made resident (:data:`NO_STATE`: none): taken out of
        the bin's cache, else read from the store."""
        c = self.cache
        s = c.clean.pop(key, NO_STATE)
        if s is NO_STATE:
            if c.dirty:  # (a write-back deferred by a checkpoint, or KeyedStore.put)
                s = c.dirty.get(key, NO_STATE)
                if s is MISSING:
                    return NO_STATE  # deleted (stays dirty: written unless a state replaces it)
                if s is not NO_STATE:
                    del c.dirty[key]
            if s is NO_STATE:
                s = self.store.read(self.index, key)
                if s is MISSING:
                    return NO_STATE
        c.taken += 1
        self.states[key] = s
        return s

    def get(self, key: Any) -> Any:
        s = self.states.get(key, NO_STATE)
        return self.load(key) if s is NO_STATE else s

    def put(self, key: Any, state: Any, track: bool) -> None:
        """Set ``key``'s state (``track``: the next capture writes it; a key with no
        state, resident or stored, counts as created)."""
        if track:
            if key not in self.states and self.load(key) is NO_STATE:
                self.added[key] = None
            self.dirty[key] = state
        self.states[key] = state

    def write_back(self) -> None:
        """Every resident state given back to the bin's cache as changed (then none is
        resident); the worker's next write-back writes them."""
        states = self.states
        if states:
            c = self.cache
            if c.dirty:
                c.dirty.update(states)
            else:
                c.dirty = states
            self.states = {}

    def items(self) -> Iterable[tuple[Any, Any]]:
        """Every ``(key, state)`` of the bin, in key order (written back first)."""
        self.write_back()
        return list(self.store.items(self.index))

    def all_resident(self) -> dict[Any, Any]:
        """Every stored state of the bin loaded into ``states`` (written back at the
        epoch's end like any resident state)."""
        self.write_back()
        self.states = dict(self.store.items(self.index))
        return self.states

    def __iter__(self) -> Iterator[Any]:
        self.write_back()
        return iter(list(self.store.keys(self.index)))

    def __len__(self) -> int:
        self.write_back()
        return self.store.count(self.index)

    def is_empty(self) -> bool:
        return not self.timers and len(self) == 0

    def mark_dirty(self, key: Any) -> None:
        self.dirty[key] = self.get(key)

    def clear_key(self, key: Any, track: bool = True) -> None:
        """Drop ``key``'s state, resident or stored (its timers stay); with ``track`` the
        next delta deletes it unless it was created since the last capture."""
        if self.get(key) is NO_STATE:
            return
        self.states.pop(key, None)
        self.store.delete(self.index, key)
        self.dirty.pop(key, None)
        if self.added.pop(key, NO_STATE) is NO_STATE and track:
            self.removed[key] = None

    def estimated_size(self, sample: int = 64) -> int:
        """The bytes the bin takes in the store (keys and states, as stored)."""
        self.write_back()
        return self.store.stored_bytes(self.index)

    def __repr__(self) -> str:
        return f"RocksBin({self.index}, resident={len(self.states)}, in {self.store.db.path})"


def adopt(b: Bin, store: KeyedStore) -> RocksBin:
    """Bin ``b`` (a heap bin a restore or a migration delivered, or a bin of another
    store) as a :class:`RocksBin` of ``store``: whatever ``store`` held for its index
    dropped, its states resident (written back at the epoch's end), its timers, change
    sets and flags carried over.  A bin of ``store`` already is returned as it is."""
    if isinstance(b, RocksBin) and b.store is store:
        return b
    store.clear_bin(b.index)
    rb = RocksBin(b.index, store)
    rb.states = dict(b.items())
    rb.timers, rb.dirty, rb.removed, rb.added = b.timers, b.dirty, b.removed, b.added
    rb.timers_changed, rb.full, rb.frozen, rb.appends = b.timers_changed, b.full, b.frozen, b.appends
    return rb
