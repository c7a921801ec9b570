"""Moving a bin between two workers' RocksDB stores as a file (issue 28, item 3).

:func:`ship_bin` hands bin ``b`` of one :class:`~tstate.state.rocksdb.store.KeyedStore`
to another as RocksDB files, not objects: the bin's states are written back, its key
range is exported to an SST file as stored (``SstFileWriter``: nothing decoded), the
range is dropped at the source and the file ingested by the new owner
(``ingest_external_file``, replacing whatever it held of the bin: nothing decoded or
rewritten).  What is not in the store -- the bin's timers -- travels with the returned
:class:`~tstate.state.rocksdb.keyed_bin.RocksBin`.  The new owner treats the bin as
not tracked (its next checkpoint writes it whole), as for a bin shipped encoded.

A file that does not arrive whole (size or xxh64) raises
:class:`~tstate.errors.StateStoreError` before the new owner changes anything.

>>> import tempfile, os
>>> from tstate.state.rocksdb.worker import WorkerStore
>>> from tstate.types import StateCodec
>>> root = tempfile.mkdtemp()
>>> a, b = (WorkerStore.create(os.path.join(root, n)) for n in ("w0", "w1"))
>>> src, dst = a.store("count", StateCodec(int)), b.store("count", StateCodec(int))
>>> bin5 = RocksBin(5, src); bin5.put("x", 1, track=False); bin5.timers[7] = {"x": None}
>>> moved, size = ship_bin(bin5, src, dst, os.path.join(root, "moves"))
>>> sorted(moved.items()), moved.timers, src.count(5), size > 0
([('x', 1)], {7: {'x': None}}, 0, True)
>>> a.close(); b.close()
"""

from __future__ import annotations

import contextlib
import os
import secrets
from typing import Any, Optional, Sequence

import msgpack

from tstate.state.bin import Bin
from tstate.state.rocksdb.layout import store_key
from tstate.state.rocksdb.keyed_bin import RocksBin
from tstate.state.rocksdb.store import KeyedStore

__all__ = [
    "copy_bin", "ship_bin", "preload", "hand_over", "moves_dir", "SMALL_HAND_OVER", "ingest_bytes", "TIMERS",
]

#: the record in a bin's range holding its encoded timers (what file checkpoints and
#: the Spark backend's bin exports keep them in)
TIMERS = b"timers"


def copy_bin(src: KeyedStore, dst: KeyedStore, index: int, scratch: str, tag: Optional[str] = None) -> int:
    """Bin ``index`` as ``src`` holds it exported to an SST file under ``scratch``
    (named after ``tag``, by default ``src``'s operator) and ingested into ``dst``,
    replacing what ``dst`` held of it (an empty bin clears it there); the file's bytes.
    The file is checked before the ingest (a damaged one raises, nothing changed) and
    removed afterwards."""
    if tag is None:
        tag = src.name.replace(os.sep, "_")
    os.makedirs(scratch, exist_ok=True)
    path = os.path.join(scratch, f"{tag}-{index}-{secrets.token_hex(4)}.sst")
    try:
        exported = src.export_bin(index, path)
        if exported is None:
            dst.clear_bin(index)
            return 0
        dst.ingest_bin(exported)
        return exported.size
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)


def ship_bin(b: Bin, src: KeyedStore, dst: KeyedStore, scratch: str) -> tuple[RocksBin, int]:
    """Move bin ``b`` (given up by its owner, whose store is ``src``) into ``dst`` as an
    SST file written under ``scratch``; the bin as ``dst``'s and the bytes of the file
    moved."""
    index = b.index
    if isinstance(b, RocksBin) and b.store is src:
        b.write_back()
    else:  # (a bin that is not in src yet: its states go there first)
        for k, s in b.items():
            src.put(index, k, s)
    size = copy_bin(src, dst, index, scratch)
    src.clear_bin(index)  # only once the new owner holds it
    moved = RocksBin(index, dst)
    moved.timers = b.timers
    return moved, size


def preload(copy: KeyedStore, dst: KeyedStore, index: int, scratch: str) -> int:
    """Pre-copy, before the move: bin ``index`` as ``copy`` holds it (a store opened
    from the latest checkpoint's files, :func:`tstate.checkpoint.sst_files.restore_worker`)
    exported and ingested into ``dst``, replacing what ``dst`` held of it; the bytes."""
    return copy_bin(copy, dst, index, scratch, "pre")


def hand_over(b: Bin, src: KeyedStore, dst: KeyedStore, changed: Any, scratch: str) -> tuple[RocksBin, int]:
    """Pre-copy, the move itself: bin ``b`` whose copy as of the checkpoint ``dst``
    holds already (:func:`preload`) -- only the keys ``changed`` since that checkpoint
    (set, changed or cleared) travel, as their stored records and deletes applied
    over the copy: one SST file ingested, or for at most :data:`SMALL_HAND_OVER` keys
    one message applied as a write batch; the bin as ``dst``'s and the bytes moved."""
    index = b.index
    if isinstance(b, RocksBin) and b.store is src:
        b.write_back()
    changed = list(changed)
    if len(changed) <= SMALL_HAND_OVER:
        size = _hand_over_records(src, dst, index, changed)
        src.clear_bin(index)
        moved = RocksBin(index, dst)
        moved.timers = b.timers
        return moved, size
    os.makedirs(scratch, exist_ok=True)
    path = os.path.join(scratch, f"delta-{index}-{secrets.token_hex(4)}.sst")
    try:
        exported = src.export_changes(index, changed, path)
        size = 0
        if exported is not None:
            dst.ingest_bin(exported, replace=False)
            size = exported.size
        src.clear_bin(index)
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)
    moved = RocksBin(index, dst)
    moved.timers = b.timers
    return moved, size


#: a pre-copy hand-over of at most this many keys travels as their stored records in
#: one message applied as a write batch, not as an SST file (a file's index and
#: properties blocks, about a kilobyte, would outweigh a few records; and each ingest
#: of a tiny file is one more file in level 0)
SMALL_HAND_OVER = 256


def _hand_over_records(src: KeyedStore, dst: KeyedStore, index: int, keys: list[Any]) -> int:
    """The stored records of ``keys`` (``None``: a delete) as one msgpack message,
    applied to ``dst`` in one write batch (nothing decoded); the message's bytes."""
    skeys = sorted({store_key(index, k) for k in keys})
    src.cache.write_back()
    message = msgpack.packb(list(zip(skeys, src.family.get_many(skeys))), use_bin_type=True)
    pairs = msgpack.unpackb(message)
    dst.cache.write_back()
    dst.cache.discard_bin(dst.family, index)
    dst.db.write((dst.family, k, v) for k, v in pairs)
    return len(message)


def moves_dir(store: Any) -> str:
    """Where ``store``'s exports wait for their ingest: beside its database."""
    return os.path.join(os.path.dirname(store.db.path), "moves")


def ingest_bytes(dst: KeyedStore, index: int, data: Sequence[bytes]) -> None:
    """Bin ``index`` of ``dst`` replaced by the SST files whose bytes are ``data`` (exports
    read back from a checkpoint store, their checksums checked there), in order: the
    first replaces the bin, each later one applies over it.  Each is written under
    :func:`moves_dir` and ingested (nothing decoded)."""
    import xxhash

    from tstate.state.rocksdb.files import ExportedBin

    scratch = moves_dir(dst)
    os.makedirs(scratch, exist_ok=True)
    for i, d in enumerate(data):
        path = os.path.join(scratch, f"in-{index}-{secrets.token_hex(4)}.sst")
        try:
            with open(path, "wb") as f:
                f.write(d)
            dst.ingest_bin(ExportedBin(dst.name, index, path, -1, len(d), xxhash.xxh64_intdigest(d)), replace=i == 0)
        finally:
            with contextlib.suppress(OSError):
                os.remove(path)


def timers_of(store: KeyedStore, index: int) -> dict[Any, dict[Any, None]]:
    """Bin ``index``'s timers as its :data:`TIMERS` record in ``store`` holds them."""
    from tstate.state.payload import _timers
    from tstate.types import wire

    raw = store.get_meta(index, TIMERS)
    return {} if raw is None else _timers(wire.decode_any(raw))
