"""``StateCache``: the decoded states of a worker's RocksDB, bounded, written back at once.

A key's state is decoded when it is first read and kept here, so the records of an
epoch that touch a key again find the object they changed.  A changed state is only
marked (*dirty*); :meth:`StateCache.write_back` encodes every dirty state (checked by
the operator's codec) and writes them -- with the deletes and the bins' own records --
in **one write batch**, then evicts the least recently used clean states until the
cache holds at most ``budget`` bytes (estimated: :func:`tstate.types.size.heap_size`
of a sample of entries).  The caller writes back at the end of each epoch (and before
a checkpoint, an export or a scan); a cache whose dirty states exceed the budget
writes back by itself, mid-epoch (harmless: a checkpoint writes back first).

A state whose encoding fails (:class:`~tstate.errors.StateTypeError` naming the
operator, key and field path) fails the whole write-back: nothing of the batch is
written and every state stays dirty.

>>> import tempfile
>>> from tstate.state.rocksdb.db import LocalDB
>>> from tstate.types import StateCodec
>>> db = LocalDB.create(tempfile.mkdtemp())
>>> cache = StateCache(db, budget=1 << 20)
>>> fam, codec = db.family("op"), StateCodec(list[int])
>>> e = cache.insert(fam, codec, 3, "k", [1], dirty=True)
>>> cache.lookup(fam, 3, "k").state.append(2); cache.mark(e)
>>> cache.write_back()
1
>>> fam.get(b"\\x00\\x03\\xa1k")
b'\\x92\\x01\\x02'
>>> db.close()
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Optional

from tstate.errors import StateStoreError, StateTypeError
from tstate.state.rocksdb.db import Family, LocalDB
from tstate.state.rocksdb.layout import frame_value, store_key
from tstate.types.size import heap_size

__all__ = ["StateCache", "Entry", "MISSING"]

#: the state of a key that has none (a cached delete, or a read that found nothing)
MISSING: Any = object()

#: what one entry costs besides its key and state (the entry, its slots in two dicts)
_ENTRY_OVERHEAD = 200
#: entries whose size is measured: the first ones, then one in this many
_SAMPLE_FIRST, _SAMPLE_EVERY = 16, 64


class Entry:
    """A cached state: its family, bin, key, decoded state (or :data:`MISSING`), and
    whether it changed since it was last written."""

    __slots__ = ("family", "codec", "bin", "key", "state", "dirty", "size", "skey")

    def __init__(self, family: Family, codec: Any, index: int, key: Any, state: Any, dirty: bool, size: int,
                 skey: Optional[bytes] = None) -> None:
        self.family = family
        #: the store key (:func:`~tstate.state.rocksdb.layout.store_key`), once computed
        self.skey = skey
        self.codec = codec
        self.bin = index
        self.key = key
        self.state = state
        self.dirty = dirty
        self.size = size

    def __repr__(self) -> str:
        return f"Entry({self.family.name!r}, bin={self.bin}, key={self.key!r}, dirty={self.dirty})"


class _Sizes:
    """A running estimate of the heap bytes of one family's entries."""

    __slots__ = ("seen", "mean")

    def __init__(self) -> None:
        self.seen = 0
        self.mean = float(_ENTRY_OVERHEAD)

    def estimate(self, key: Any, state: Any) -> int:
        n = self.seen = self.seen + 1
        if n <= _SAMPLE_FIRST or n % _SAMPLE_EVERY == 0:
            size = _ENTRY_OVERHEAD + heap_size(key) + heap_size(state)
            weight = 1.0 / min(n, _SAMPLE_FIRST)
            self.mean += (size - self.mean) * weight
            return size
        return int(self.mean)


class StateCache:
    """The cache of one worker's decoded states (see the module docstring)."""

    def __init__(self, db: LocalDB, budget: int) -> None:
        self.db = db
        self.budget = budget
        self.bytes = 0
        #: (family name, bin) -> key -> entry: where a key's cached state is found
        self._bins: dict[tuple[str, int], dict[Any, Entry]] = {}
        #: every entry, least recently used first
        self._lru: OrderedDict[Entry, None] = OrderedDict()
        self._dirty = 0
        #: the entries that became dirty since the last write-back (some may be gone since)
        self._pending: list[Entry] = []
        self._sizes: dict[str, _Sizes] = {}
        #: the bins' own records to write with the next batch: (family, store key) -> bytes or None
        self._meta: dict[tuple[Family, bytes], Optional[bytes]] = {}
        self.write_backs = 0
        self.evictions = 0
        #: bytes of the entries made since the last write-back: what the keys touched
        #: this epoch hold (resident in their bins too, so an epoch that touches more
        #: than the budget is written back mid-epoch: :meth:`over_budget`)
        self.fresh = 0

    # -- entries --------------------------------------------------------------------
    def lookup(self, fam: Family, index: int, key: Any) -> Optional[Entry]:
        """The cached entry of ``key`` in bin ``index`` (now the most recently used)."""
        d = self._bins.get((fam.name, index))
        if d is None:
            return None
        e = d.get(key)
        if e is not None:
            self._lru.move_to_end(e)
        return e

    def insert(self, fam: Family, codec: Any, index: int, key: Any, state: Any, dirty: bool,
               skey: Optional[bytes] = None) -> Entry:
        """Cache ``state`` (or :data:`MISSING`) as ``key``'s in bin ``index`` (``skey``:
        its store key, if known)."""
        sizes = self._sizes.get(fam.name)
        if sizes is None:
            sizes = self._sizes[fam.name] = _Sizes()
        e = Entry(fam, codec, index, key, state, dirty, sizes.estimate(key, state), skey)
        d = self._bins.get((fam.name, index))
        if d is None:
            d = self._bins[fam.name, index] = {}
        old = d.get(key)
        if old is not None:
            self._forget(old)
        d[key] = e
        self._lru[e] = None
        self.bytes += e.size
        self.fresh += e.size
        if dirty:
            self._dirty += 1
            self._pending.append(e)
        if self.bytes > self.budget:
            self._make_room()
        return e

    def mark(self, e: Entry) -> None:
        """``e``'s state changed (in place, or was replaced: set ``e.state`` first).  An
        entry evicted meanwhile is cached again."""
        if not e.dirty:
            if e not in self._lru:
                self._adopt(e)
            e.dirty = True
            self._dirty += 1
            self._pending.append(e)

    def _adopt(self, e: Entry) -> None:
        d = self._bins.get((e.family.name, e.bin))
        if d is None:
            d = self._bins[e.family.name, e.bin] = {}
        old = d.get(e.key)
        if old is not None:
            self._forget(old)
        d[e.key] = e
        self._lru[e] = None
        self.bytes += e.size

    def _forget(self, e: Entry) -> None:
        """Drop ``e`` from the accounting (a dirty one is then never written)."""
        if self._lru.pop(e, MISSING) is MISSING:
            return
        self.bytes -= e.size
        if e.dirty:
            e.dirty = False
            self._dirty -= 1

    def entries(self, fam: Family, index: int) -> dict[Any, Entry]:
        """The cached entries of bin ``index`` (key -> entry; do not change the dict)."""
        return self._bins.get((fam.name, index), {})

    def discard_bin(self, fam: Family, index: int) -> None:
        """Forget every cached entry of bin ``index``, written or not (the bin is dropped
        or replaced)."""
        d = self._bins.pop((fam.name, index), None)
        if d:
            for e in d.values():
                self._forget(e)
        for k in [k for k in self._meta if k[0] is fam and k[1][:2] == index.to_bytes(2, "big")]:
            del self._meta[k]

    def set_meta(self, fam: Family, skey: bytes, data: Optional[bytes]) -> None:
        """Write a bin's own record ``skey`` (``None``: delete it) with the next batch."""
        self._meta[fam, skey] = data

    def get_meta(self, fam: Family, skey: bytes) -> Optional[bytes]:
        try:
            return self._meta[fam, skey]
        except KeyError:
            return fam.get(skey)

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def dirty(self) -> int:
        """How many entries changed since they were last written."""
        return self._dirty

    # -- writing back -----------------------------------------------------------------
    def write_back(self, defer: bool = False) -> int:
        """Write every dirty state (and the bins' own records) in one batch, then evict
        down to the budget; how many states were written.  ``defer`` (an epoch's end):
        while a checkpoint of the database is being made on another thread (its writes
        held: :meth:`LocalDB.cut <tstate.state.rocksdb.db.LocalDB.cut>`), keep the
        dirty states here instead of waiting for it -- unless the cache is over its
        budget -- and write them with a later write-back (the next epoch's end, or the
        next checkpoint's cut, which waits)."""
        if defer and self.db.cutting() and self.bytes <= self.budget:
            self.fresh = 0
            return 0
        n = self._write_dirty()
        self.fresh = 0
        self._evict()
        return n

    def over_budget(self) -> bool:
        """Whether the keys touched since the last write-back hold more than half the
        budget (their owner should write back before the epoch ends)."""
        return self.fresh > self.budget >> 1

    def _write_dirty(self) -> int:
        if not self._dirty and not self._meta:
            return 0
        wb = self.db.batch()
        written: list[Entry] = []
        gone: list[Entry] = []
        pending = list(dict.fromkeys(e for e in self._pending if e.dirty))
        put, delete = wb.put, wb.delete
        for e in pending:
            skey = e.skey
            if skey is None:
                skey = e.skey = store_key(e.bin, e.key)
            if e.state is MISSING:
                delete(skey, e.family.handle)
                gone.append(e)
            else:
                k = e.key
                t = type(k)
                data = _encode(e)
                put(skey, data if t is str else frame_value(k, data), e.family.handle)
            written.append(e)
        for (fam, mkey), record in self._meta.items():
            if record is None:
                wb.delete(mkey, fam.handle)
            else:
                wb.put(mkey, record, fam.handle)
        self.db.write_batch(wb)  # all or nothing: on an error everything stays dirty
        self._meta.clear()
        self._pending = []
        for e in written:
            e.dirty = False
        self._dirty -= len(written)
        for e in gone:  # a delete written: nothing left to cache
            d = self._bins.get((e.family.name, e.bin))
            if d is not None and d.get(e.key) is e:
                del d[e.key]
            self._forget(e)
        self.write_backs += 1
        return len(written)

    def _evict(self, target: Optional[int] = None) -> None:
        excess = self.bytes - (self.budget if target is None else target)
        if excess <= 0:
            return
        victims = []
        for e in self._lru:  # oldest first: collected, then dropped (no copy of the whole order)
            if excess <= 0:
                break
            if not e.dirty:
                victims.append(e)
                excess -= e.size
        for e in victims:
            self._forget(e)
            d = self._bins.get((e.family.name, e.bin))
            if d is not None and d.get(e.key) is e:
                del d[e.key]
                if not d:
                    del self._bins[e.family.name, e.bin]
            self.evictions += 1

    def _make_room(self) -> None:
        """Over budget: evict clean entries; if the dirty ones alone exceed it, write
        them back first (mid-epoch).  Evicts down to 7/8 of the budget, so that the
        next entries do not each scan the LRU order again."""
        self._evict(self.budget - (self.budget >> 3))
        if self.bytes > self.budget and self._dirty:
            self.write_back()

    def clear(self) -> None:
        """Forget everything (after a restore: the database changed underneath)."""
        self._bins.clear()
        self._lru.clear()
        self._meta.clear()
        self.bytes = 0
        self._dirty = 0
        self._pending = []


def _encode(e: Entry) -> bytes:
    try:
        data: bytes = e.codec.encode(e.state)
    except StateTypeError as exc:
        raise StateTypeError(f"operator {e.family.name!r}, key {e.key!r}: {exc}") from None
    except Exception as exc:  # pragma: no cover - the codec raises StateTypeError
        raise StateStoreError(f"operator {e.family.name!r}, key {e.key!r}: cannot encode the state: {exc!r}") from exc
    return data
