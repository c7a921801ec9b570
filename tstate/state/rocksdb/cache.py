"""``StateCache``: the decoded states of a worker's RocksDB, bounded, written back at once.

The cache is a :class:`BinCache` per bin of each operator (its column family): two
plain dicts keyed like the bin's states --

- ``clean``: states decoded or written before, equal to what the database holds, in
  least-recently-used order (oldest first: a state read again is moved to the end);
- ``dirty``: states changed since the last write-back (:data:`MISSING`: deleted).

A key is in at most one of them.  A :class:`~tstate.state.rocksdb.keyed_bin.RocksBin`
*takes* a key's state out of its bin's cache when the runtime first touches it in an
epoch (the runtime's own ``states`` dict then holds it) and gives every state it
touched back as dirty at the epoch's end; :class:`~tstate.state.rocksdb.store.KeyedStore`'s
``get`` / ``put`` work on the dicts directly.  So a state that stays cached across
epochs is never decoded again, and nothing per key is allocated but dict slots.

:meth:`StateCache.write_back` encodes every dirty state (checked by the operator's
codec) and writes them -- with the deletes and the bins' own records -- in **one write
batch**, moves them to ``clean``, then evicts the least recently used clean states
until the cache holds at most ``budget`` bytes.  Bytes are estimated: the number of
entries times the mean :func:`tstate.types.size.heap_size` of a key and its state
(sampled per operator) plus a dict slot.  Eviction takes the same fraction of each
bin's oldest entries (an LRU order per bin, proportional across bins).  The caller
writes back at the end of each epoch (and before a checkpoint, an export or a scan);
a cache whose entries exceed the budget between write-backs writes back by itself
(harmless: a checkpoint writes back first).

While a checkpoint's cut holds the database's writes (another thread flushes and
hard-links it), an epoch's write-back is still encoded here, in its own epoch, and
the database queues the batch for the cut's thread, which applies it right after the
checkpoint; until then the states it holds are *pinned* in ``clean`` (never evicted:
the store does not hold them yet: the cache may hold up to half its budget more
meanwhile; beyond that a write-back waits for the cut instead), and any other
write-back or scan waits for the queue first.

A state whose encoding fails (:class:`~tstate.errors.StateTypeError` naming the
operator, key and field path) fails the whole write-back: nothing of the batch is
written and every state stays dirty.

>>> import tempfile
>>> from tstate.state.rocksdb.db import LocalDB
>>> from tstate.types import StateCodec
>>> db = LocalDB.create(tempfile.mkdtemp())
>>> cache = StateCache(db, budget=1 << 20)
>>> slot = cache.slot(db.family("op"), StateCodec(list[int]), 3)
>>> slot.dirty["k"] = [1]
>>> cache.write_back()
1
>>> slot.clean, db.family("op").get(b"\\x00\\x03\\xa1k")
({'k': [1]}, b'\\x91\\x01')
>>> db.close()
"""

from __future__ import annotations

from collections import deque
from itertools import chain, islice, repeat
from operator import attrgetter
from typing import Any, Optional

from tstate.errors import StateStoreError, StateTypeError
from tstate.state.rocksdb.db import Family, LocalDB
from tstate.state.rocksdb.layout import bin_prefix, frame_value, key_suffix, pack_plain as _pack
from tstate.types import wire
from tstate.types.size import heap_size

__all__ = ["StateCache", "BinCache", "MISSING"]

#: the state of a key that has none (a cached delete, or a read that found nothing)
MISSING: Any = object()

#: what one entry costs besides its key and state: its slot in a dict (the hash table
#: and entry arrays, with their growth slack)
_ENTRY_OVERHEAD = 64
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1
_STR, _INT = {str}, {int}
_taken = attrgetter("taken")
#: states whose size is measured: the first ones of an operator, then one in this many
_SAMPLE_FIRST, _SAMPLE_EVERY = 16, 512


class BinCache:
    """The cached states of one bin of one operator (see the module docstring)."""

    __slots__ = ("family", "codec", "index", "prefix", "clean", "dirty", "gone", "taken", "sizes", "pinned")

    def __init__(self, family: Family, codec: Any, index: int, sizes: _Sizes) -> None:
        self.family = family
        self.codec = codec
        self.index = index
        #: the store keys' bin prefix (:func:`~tstate.state.rocksdb.layout.bin_prefix`)
        self.prefix = bin_prefix(index)
        #: key -> state as stored, least recently used first
        self.clean: dict[Any, Any] = {}
        #: key -> state (or MISSING: deleted) changed since the last write-back
        self.dirty: dict[Any, Any] = {}
        #: whether ``dirty`` may hold a delete (MISSING) since the last write-back
        self.gone = False
        #: states taken out (made resident by a RocksBin) since the last write-back
        self.taken = 0
        self.sizes = sizes
        #: keys of ``clean`` written in a batch the database has queued, not applied
        #: (a checkpoint's cut holds its writes): never evicted until it is
        self.pinned: set[Any] = set()

    def __len__(self) -> int:
        return len(self.clean) + len(self.dirty)

    def __repr__(self) -> str:
        return f"BinCache({self.family.name!r}, bin={self.index}, clean={len(self.clean)}, dirty={len(self.dirty)})"


class _Sizes:
    """A running estimate of the heap bytes of one operator's entries."""

    __slots__ = ("seen", "mean", "next")

    def __init__(self) -> None:
        self.seen = 0
        self.next = 0  # the count of entries written at which one is measured next
        self.mean = float(_ENTRY_OVERHEAD + 128)

    def sample(self, key: Any, state: Any) -> None:
        n = self.seen = self.seen + 1
        size = _ENTRY_OVERHEAD + heap_size(key) + heap_size(state)
        self.mean += (size - self.mean) / min(n, _SAMPLE_FIRST)


class StateCache:
    """The cache of one worker's decoded states (see the module docstring)."""

    def __init__(self, db: LocalDB, budget: int) -> None:
        self.db = db
        self.budget = budget
        #: (family name, bin) -> the bin's cache; a bin's object lives as long as the cache
        self._bins: dict[tuple[str, int], BinCache] = {}
        self._sizes: dict[str, _Sizes] = {}
        #: the bins' own records to write with the next batch: (family, store key) -> bytes or None
        self._meta: dict[tuple[Family, bytes], Optional[bytes]] = {}
        self.write_backs = 0
        self.evictions = 0
        #: entries added since the last count (``get`` / ``put``): checked against the budget
        self._added = 0
        self._counted = 0
        #: entries that may be added before the budget is checked again
        self._room = 0.0
        #: whether some bin's ``pinned`` may be non-empty
        self._pinned = False

    # -- bins -------------------------------------------------------------------------
    def slot(self, fam: Family, codec: Any, index: int) -> BinCache:
        """Bin ``index``'s cache in ``fam`` (made if new; the same object from then on)."""
        c = self._bins.get((fam.name, index))
        if c is None:
            sizes = self._sizes.get(fam.name)
            if sizes is None:
                sizes = self._sizes[fam.name] = _Sizes()
            c = self._bins[fam.name, index] = BinCache(fam, codec, index, sizes)
        return c

    def added(self, n: int = 1) -> None:
        """``n`` entries were added to some bin's dicts: make room if over the budget."""
        self._added += n
        if self._added > self._room:
            self._make_room()

    def discard_bin(self, fam: Family, index: int) -> None:
        """Forget every cached state of bin ``index``, written or not (the bin is dropped
        or replaced)."""
        c = self._bins.get((fam.name, index))
        if c is not None:
            c.clean.clear()
            c.dirty.clear()
            c.pinned.clear()
            c.gone = False
        prefix = bin_prefix(index)
        for k in [k for k in self._meta if k[0] is fam and k[1][:2] == prefix]:
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
        return sum(len(c) for c in self._bins.values())

    @property
    def dirty(self) -> int:
        """How many states changed since they were last written."""
        return sum(len(c.dirty) for c in self._bins.values())

    @property
    def bytes(self) -> int:
        """The estimated heap bytes of the cached states."""
        return int(sum((sum(map(len, (c.clean for c in cs))) + sum(map(len, (c.dirty for c in cs)))) * sizes.mean
                       for sizes, cs in self._by_family()))

    def over_budget(self) -> bool:
        """Whether the states taken out since the last write-back (``BinCache.taken``:
        what the keys touched this epoch hold outside the cache) hold more than half the
        budget (their owner should write back before the epoch ends, so that an epoch
        touching more than the budget is written back mid-epoch)."""
        return sum(map(_taken, self._bins.values())) * self._max_mean() > self.budget >> 1

    def _max_mean(self) -> float:
        return max((s.mean for s in self._sizes.values()), default=float(_ENTRY_OVERHEAD))

    # -- writing back -----------------------------------------------------------------
    def write_back(self, defer: bool = False) -> int:
        """Write every dirty state (and the bins' own records) in one batch, then evict
        down to the budget; how many states were written.  ``defer`` (an epoch's end):
        while a checkpoint of the database is being made on another thread (its writes
        held: :meth:`LocalDB.cut <tstate.state.rocksdb.db.LocalDB.cut>`), encode the
        batch here (this epoch's share of the work, as without a checkpoint) and let
        the database queue it for the cut's thread, which applies it right after the
        checkpoint; the states written stay pinned in the cache until then.  Not
        deferred (this waits for the cut instead): a batch with deletes or bins' own
        records, or when the pinned states exceed half the budget.  Any other
        write-back first waits for the queued batches (:meth:`LocalDB.settle
        <tstate.state.rocksdb.db.LocalDB.settle>`): whoever reads the store next
        sees them."""
        for c in self._bins.values():
            c.taken = 0
        if self._pinned and not self.db.deferring():
            self._unpin()
        defer = defer and self.db.cutting() and not self._meta and self._pinned_bytes() <= self.budget >> 1
        if not defer:
            self.db.settle()
        n = self._write_dirty(defer)
        self._evict(self.budget)
        return n

    def _pinned_bytes(self) -> float:
        return sum(len(c.pinned) for c in self._bins.values()) * self._max_mean() if self._pinned else 0.0

    def _unpin(self) -> None:
        for c in self._bins.values():
            if c.pinned:
                c.pinned = set()
        self._pinned = False

    def _write_dirty(self, defer: bool = False) -> int:
        """Encode the dirty states into one batch and write it; ``defer`` (a cut holds
        the database's writes): the database queues the batch for the cut's thread
        (:meth:`LocalDB.write_batch <tstate.state.rocksdb.db.LocalDB.write_batch>`) and
        the states written are pinned in ``clean`` until it is applied.  A bin with
        deletes is never deferred (a delete would leave nothing to pin)."""
        bins = [c for c in self._bins.values() if c.dirty]
        if not bins and not self._meta:
            return 0
        if defer and any(c.gone for c in bins):
            defer = False
            self.db.settle()
        wb = self.db.batch()
        n = _put_bins(wb, bins)
        for (fam, mkey), record in self._meta.items():
            if record is None:
                wb.delete(mkey, fam.handle)
            else:
                wb.put(mkey, record, fam.handle)
        queued = self.db.write_batch(wb, defer)  # all or nothing: on an error everything stays dirty
        self._meta.clear()
        for c in bins:
            dirty, clean = c.dirty, c.clean
            if queued:
                c.pinned.update(dirty)
                self._pinned = True
            if c.gone:
                for k, s in dirty.items():
                    clean.pop(k, None)
                    if s is not MISSING:
                        clean[k] = s
                c.gone = False
            else:  # (a key is in one of the two dicts: the written ones go last, most recent)
                clean.update(dirty)
            c.dirty = {}
        self.write_backs += 1
        return n

    def _evict(self, target: int) -> None:
        """Drop the oldest clean states, the same fraction of each bin's, until the
        estimate is at most ``target`` bytes."""
        total = clean_bytes = 0.0
        count = 0
        for sizes, cs in self._by_family():
            n_clean = sum(map(len, (c.clean for c in cs)))
            n = n_clean + sum(map(len, (c.dirty for c in cs)))
            total += n * sizes.mean
            clean_bytes += n_clean * sizes.mean
            count += n
        self._counted, self._added = count, 0
        excess = total - target
        if excess > 0 and clean_bytes > 0:
            self._drop(min(1.0, excess / clean_bytes))
        self._room = max(0.0, self.budget / self._max_mean() - self._counted)

    def _by_family(self) -> list[tuple[_Sizes, list[BinCache]]]:
        """Each operator's size estimate and bin caches."""
        fams: dict[str, tuple[_Sizes, list[BinCache]]] = {}
        for (name, _i), c in self._bins.items():
            f = fams.get(name)
            if f is None:
                f = fams[name] = (c.sizes, [])
            f[1].append(c)
        return list(fams.values())

    def _drop(self, frac: float) -> None:
        """Evict the oldest ``frac`` of every bin's clean states (at least one each)."""
        for c in self._bins.values():
            clean = c.clean
            if not clean:
                continue
            n = min(len(clean), int(len(clean) * frac) + 1)
            pinned = c.pinned
            if pinned:  # (their batch is not applied yet: the store does not hold them)
                victims = [k for k in islice(clean, n + len(pinned)) if k not in pinned][:n]
                n = len(victims)
                for k in victims:
                    del clean[k]
            elif n == len(clean):
                clean.clear()
            else:
                for k in list(islice(clean, n)):
                    del clean[k]
            self.evictions += n
            self._counted -= n

    def _make_room(self) -> None:
        """Over budget: evict clean states down to 7/8 of it (so that the next ones do
        not each evict again); if the dirty ones alone exceed it, write them back first
        (mid-epoch)."""
        self._evict(self.budget - (self.budget >> 3))
        if self._room <= 0 and self.dirty:
            self.write_back()

    def clear(self) -> None:
        """Forget everything (after a restore: the database changed underneath)."""
        self.db.settle()
        self._unpin()
        for c in self._bins.values():
            c.clean.clear()
            c.dirty.clear()
        self._meta.clear()
        self._counted = self._added = 0
        self._room = 0.0


def _put_bins(wb: Any, bins: list[BinCache]) -> int:
    """Put the dirty states (encoded, checked) and deletes of bin caches ``bins`` into
    batch ``wb``; how many.  The states of every bin of an operator are checked in one
    vectorised pass and encoded in one comprehension; the puts of a bin whose keys are
    all ``str`` (or all 64-bit ``int``) go through C iterators."""
    groups: dict[int, list[BinCache]] = {}
    for c in bins:
        if c.gone:
            _put_checked(wb, c)
        else:
            groups.setdefault(id(c.codec), []).append(c)
    put = wb.put
    for cs in groups.values():
        codec = cs[0].codec
        datas = _encode_all(codec, cs)
        if datas is None:  # a state the codec refuses: the slow path says which, and where
            for c in cs:
                _put_checked(wb, c)
            continue
        it = iter(datas)
        for c in cs:
            dirty, prefix, handle = c.dirty, c.prefix, c.family.handle
            mine = islice(it, len(dirty))
            if _plain_keys(dirty):
                deque(map(put, map(prefix.__add__, map(_pack, dirty)), mine, repeat(handle)), maxlen=0)
            else:
                for k, data in zip(dirty, mine):
                    put(prefix + key_suffix(k), frame_value(k, data), handle)
    for cs in groups.values():
        _sample(cs)
    for c in bins:
        if c.gone:
            _sample([c])
    return sum(len(c.dirty) for c in bins)


def _encode_all(codec: Any, cs: list[BinCache]) -> Optional[list[bytes]]:
    """The encodings of the dirty states of ``cs`` (bin caches with no deletes), in
    order; ``None`` if any fails the codec's check or encoding."""
    if not codec.all_encodable(chain.from_iterable(c.dirty.values() for c in cs)):
        return None
    encode = wire.encode if codec.encodes_natively else _wired(codec)
    try:
        return list(map(encode, chain.from_iterable(c.dirty.values() for c in cs)))
    except (OverflowError, TypeError):  # (an int beyond 64 bits)
        return None


def _plain_keys(d: dict[Any, Any]) -> bool:
    """Whether every key of ``d`` is a ``str``, or every key a 64-bit ``int``: stored
    as ``prefix + pack_plain(key)``, the value unframed."""
    types = set(map(type, d))
    if types == _STR:
        return True
    return types == _INT and _INT_MIN <= min(d) and max(d) <= _INT_MAX


def _sample(cs: list[BinCache]) -> None:
    """Measure a few of the dirty states of ``cs`` (bins of one operator) now and then
    (the size estimate)."""
    if not cs:
        return
    sizes = cs[0].sizes
    if sizes.seen < _SAMPLE_FIRST or sizes.next <= 0:
        for c in cs[:4]:
            for k, s in islice(c.dirty.items(), 4):
                if s is not MISSING:
                    sizes.sample(k, s)
        sizes.next = _SAMPLE_EVERY
    sizes.next -= sum(map(len, (c.dirty for c in cs)))


def _wired(codec: Any) -> Any:
    to_wire, encode = codec.to_wire, wire.encode
    return lambda v: encode(to_wire(v))


def _put_checked(wb: Any, c: BinCache) -> None:
    """:func:`_put_bin` one state at a time, each checked by the codec (the errors name
    the operator, key and field path)."""
    handle, prefix, encode = c.family.handle, c.prefix, c.codec.encode
    put, delete = wb.put, wb.delete
    k: Any = None
    try:
        for k, s in c.dirty.items():
            skey = prefix + key_suffix(k)
            if s is MISSING:
                delete(skey, handle)
            else:
                put(skey, frame_value(k, encode(s)), handle)
    except StateTypeError as exc:
        raise StateTypeError(f"operator {c.family.name!r}, key {k!r}: {exc}") from None
    except StateStoreError:
        raise
    except Exception as exc:  # pragma: no cover - the codec raises StateTypeError
        raise StateStoreError(f"operator {c.family.name!r}, key {k!r}: cannot encode the state: {exc!r}") from exc
