"""``KeyedStore``: one operator's keyed state on one worker, kept encoded in RocksDB.

What the stateful runtime asks of a bin's keyed state, by bin and key: :meth:`get`
(the decoded state, from the cache or decoded once from the store: the operator's
codec, the same checks and schema as checkpoints), :meth:`put` (the state changed, in
place or replaced), :meth:`delete`, :meth:`items` / :meth:`keys` / :meth:`count`
of a bin (its range, in key order: what ``fold_bins`` and state queries iterate),
:meth:`clear_bin`, a bin's own records (:meth:`set_meta`: its timers), and moving a
bin as a file (:meth:`export_bin` / :meth:`ingest_bin`).  States live in the worker's
:class:`~tstate.state.rocksdb.cache.StateCache` until it writes them back (one batch
per epoch); layout of keys and values: :mod:`tstate.state.rocksdb.layout`.

A state returned by :meth:`get` may be changed in place: call :meth:`put` after (a
change not put is lost when the cache evicts the state).  :meth:`items` decodes what
the cache does not hold without caching it (a scan of a large bin does not flush the
cache): change those only through :meth:`put`.

>>> import tempfile
>>> from tstate.state.rocksdb.worker import WorkerStore
>>> from tstate.types import StateCodec
>>> w = WorkerStore.create(tempfile.mkdtemp())
>>> counts = w.store("count", StateCodec(dict[str, int]))
>>> counts.get(5, "ATL") is MISSING
True
>>> counts.put(5, "ATL", {"delayed": 1})
>>> s = counts.get(5, "ATL"); s["delayed"] += 1; counts.put(5, "ATL", s)
>>> w.end_epoch()
1
>>> list(counts.items(5)), counts.count(5)
([('ATL', {'delayed': 2})], 1)
>>> w.close()
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Iterator, Optional

from tstate.errors import StateStoreError, StateTypeError
from tstate.state.rocksdb.cache import MISSING, BinCache, StateCache
from tstate.state.rocksdb.db import Family, LocalDB
from tstate.state.rocksdb.files import ExportedBin
from tstate.state.rocksdb import sst_export
from tstate.state.rocksdb.layout import is_meta, key_of, meta_key, state_bytes, store_key

__all__ = ["KeyedStore", "MISSING"]

_NONE: Any = object()  # (not in a dict)


class KeyedStore:
    """One operator's keyed state in a column family (see the module docstring)."""

    __slots__ = ("name", "codec", "db", "family", "cache", "_slots")

    def __init__(self, db: LocalDB, cache: StateCache, name: str, codec: Any) -> None:
        self.name = name
        self.codec = codec
        self.db = db
        self.family: Family = db.family(name)
        self.cache = cache
        self._slots: dict[int, BinCache] = {}

    # -- one key ----------------------------------------------------------------------
    def slot(self, index: int) -> BinCache:
        """Bin ``index``'s cache (the same object for the cache's life)."""
        c = self._slots.get(index)
        if c is None:
            c = self._slots[index] = self.cache.slot(self.family, self.codec, index)
        return c

    def read(self, index: int, key: Any) -> Any:
        """``key``'s state in bin ``index`` as stored, decoded (:data:`MISSING`: none),
        bypassing the cache (whose dirty states are not written yet: :meth:`get`)."""
        raw = self.family.get(store_key(index, key))
        return MISSING if raw is None else self._decode(key, raw)

    def get(self, index: int, key: Any) -> Any:
        """``key``'s state in bin ``index``, decoded (:data:`MISSING` if it has none)."""
        c = self.slot(index)
        s = c.dirty.get(key, _NONE) if c.dirty else _NONE
        if s is not _NONE:
            return s
        clean = c.clean
        s = clean.pop(key, _NONE)
        if s is not _NONE:
            clean[key] = s  # (now the most recently used)
            return s
        s = self.read(index, key)
        if s is not MISSING:
            clean[key] = s
            self.cache.added()
        return s

    def get_many(self, index: int, keys: list[Any]) -> list[Any]:
        """The states of ``keys`` in bin ``index`` (:data:`MISSING` where none): one
        multi-get for those not cached."""
        c = self.slot(index)
        out: list[Any] = [MISSING] * len(keys)
        todo: list[int] = []
        for i, k in enumerate(keys):
            s = c.dirty.get(k, _NONE)
            if s is _NONE:
                s = c.clean.get(k, _NONE)
            if s is _NONE:
                todo.append(i)
            else:
                out[i] = s
        if todo:
            raws = self.family.get_many([store_key(index, keys[i]) for i in todo])
            for i, raw in zip(todo, raws):
                if raw is not None:
                    k = keys[i]
                    out[i] = c.clean[k] = self._decode(k, bytes(raw))
            self.cache.added(len(todo))
        return out

    def put(self, index: int, key: Any, state: Any) -> None:
        """``key``'s state in bin ``index`` is ``state`` now (changed in place or new)."""
        c = self.slot(index)
        c.clean.pop(key, None)
        c.dirty[key] = state
        if state is MISSING:
            c.gone = True
        self.cache.added()

    def delete(self, index: int, key: Any) -> None:
        """Drop ``key``'s state in bin ``index`` (written with the next batch)."""
        self.put(index, key, MISSING)

    def contains(self, index: int, key: Any) -> bool:
        return self.get(index, key) is not MISSING

    # -- one bin ----------------------------------------------------------------------
    def items(self, index: int) -> Iterator[tuple[Any, Any]]:
        """``(key, state)`` of every key of bin ``index``, in key order (the worker's
        cache written back first; cached states as cached, others decoded)."""
        self.cache.write_back()
        cached = self.slot(index).clean
        for skey, value in self.family.bin_items(index):
            if is_meta(skey):
                continue
            key = key_of(skey, value)
            s = cached.get(key, _NONE)
            yield key, (s if s is not _NONE else self._decode(key, value))

    def keys(self, index: int) -> Iterator[Any]:
        """The keys of bin ``index`` in key order (nothing decoded but the keys)."""
        self.cache.write_back()
        for skey, value in self.family.bin_items(index):
            if not is_meta(skey):
                yield key_of(skey, value)

    def count(self, index: int) -> int:
        """How many keys of bin ``index`` have a state."""
        self.cache.write_back()
        return sum(1 for skey, _ in self.family.bin_items(index) if not is_meta(skey))

    def stored_bytes(self, index: int) -> int:
        """The bytes bin ``index`` takes in the store, keys and values (after writing back)."""
        self.cache.write_back()
        return sum(len(k) + len(v) for k, v in self.family.bin_items(index))

    def clear_bin(self, index: int) -> None:
        """Drop every state and record of bin ``index`` (one range delete)."""
        self.cache.discard_bin(self.family, index)
        self.db.drop_bin(self.family, index)

    def set_meta(self, index: int, name: bytes, data: Optional[bytes]) -> None:
        """Bin ``index``'s own record ``name`` (e.g. its encoded timers) is ``data``
        (``None``: none), written with the next batch, moved with the bin."""
        self.cache.set_meta(self.family, meta_key(index, name), data)

    def get_meta(self, index: int, name: bytes) -> Optional[bytes]:
        return self.cache.get_meta(self.family, meta_key(index, name))

    # -- moving a bin -----------------------------------------------------------------
    def export_bin(self, index: int, dest: str) -> Optional[ExportedBin]:
        """Bin ``index`` as an SST file at ``dest``, as stored (nothing decoded; the
        cache written back first); ``None`` when the bin holds nothing."""
        self.cache.write_back()
        return sst_export.export_bin(self.family, index, dest)

    def export_changes(self, index: int, keys: Iterable[Any], dest: str) -> Optional[ExportedBin]:
        """The states of ``keys`` in bin ``index`` as they are now (a key without one as
        a delete) as an SST file at ``dest`` (the cache written back first); ``None``
        for no keys.  With the bin's copy from a checkpoint at the new owner, this is
        all a pre-copy hand-over moves (:func:`tstate.state.rocksdb.moving.hand_over`)."""
        self.cache.write_back()
        return sst_export.export_changes(self.family, index, (store_key(index, k) for k in keys), dest)

    def ingest_bin(self, exported: ExportedBin, replace: bool = True) -> None:
        """Replace bin ``exported.bin`` here by an exported file (checked first; what
        the cache held of the bin is dropped); ``replace=False``: apply the file's
        records and deletes over what the bin holds (:meth:`export_changes`)."""
        if exported.family != self.name:
            raise StateStoreError(
                f"keyed-state store at {self.db.path}: export {exported.path} holds operator "
                f"{exported.family!r}'s bin {exported.bin}, not {self.name!r}'s"
            )
        sst_export.verify_export(exported)
        self.cache.discard_bin(self.family, exported.bin)
        self.db.ingest_bin(self.family, exported, replace=replace)

    # -- decoding ---------------------------------------------------------------------
    def _decode(self, key: Any, raw: bytes) -> Any:
        try:
            return self.codec.decode(state_bytes(raw))
        except StateTypeError as exc:
            raise StateStoreError(
                f"keyed-state store at {os.path.join(self.db.path, '')}: operator {self.name!r}, key {key!r}: "
                f"the stored state cannot be read: {exc}"
            ) from exc

    def __repr__(self) -> str:
        return f"KeyedStore({self.name!r} in {self.db.path})"
