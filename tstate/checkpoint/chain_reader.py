"""Reading one bin's chain of checkpoint files, whichever engine and state backend wrote
it: the one reader both engines' restores use.

A bin's chain (:meth:`Manifest.chain <tstate.checkpoint.manifest.Manifest.chain>`) is
either **encoded** -- a snapshot and deltas (:mod:`tstate.checkpoint.delta`), what heap
state writes on either engine -- or **SST exports** -- a file of kind :data:`SST`, the
bin's key range as a RocksDB SST file with its timers as the bin's own record, then
files of kind :data:`SST_DELTA`, each the records of the keys changed since as they
were then (a key cleared: a delete) and the timers record -- what the Spark backend
writes with ``state=ts.RocksDB(...)`` (:mod:`tstate.spark.rocks_bins`).  An SST chain
is read by ingesting its files in order into one key range: the first replaces it,
each later one applies over it.  The reader turns either into what the reading side
keeps:

- :func:`decode_chain` / :func:`read_chain`: a heap :class:`~tstate.state.bin.Bin` (an
  SST export decoded through a small scratch database of the process's own; the bin
  is marked ``full``, so its
  next checkpoint file is a snapshot);
- :func:`load_chain`: the bin in a RocksDB :class:`~tstate.state.rocksdb.store.KeyedStore`
  (an SST export ingested as it is, nothing decoded; an encoded chain decoded and put
  into the store, marked ``full``).

An SST export holds states encoded with the schema it was written with and has no
envelope to convert them from: read with another declared schema it raises
:class:`~tstate.errors.CheckpointError` (:func:`check_sst_schema`), naming the file.

>>> from tstate.checkpoint.manifest import FileRef
>>> from tstate.types.codec import StateCodec
>>> from tstate.state.payload import encode_bin
>>> codec = StateCodec(int)
>>> b = Bin(3); b.states = {"a": 1}
>>> ref = FileRef("data/count/3/000001-ab-snap.bin", 0, "0")
>>> decode_chain((ref,), [encode_bin(b, codec)], codec, codec.fingerprint, 3).states
{'a': 1}
>>> is_sst((FileRef("data/count/3/000002-cd-sst.bin", 0, "0"),)), is_sst((ref,)), is_sst(())
(True, False, False)
"""

from __future__ import annotations

import os
import tempfile
import threading
from typing import Any, Optional, Sequence

from tstate.checkpoint.delta import restore_bin
from tstate.checkpoint.manifest import FileRef
from tstate.errors import CheckpointError
from tstate.state.bin import Bin

__all__ = ["SST", "SST_DELTA", "is_sst", "check_sst_schema", "decode_chain", "read_chain", "load_chain"]

#: the kind of a bin file that is the whole bin as a RocksDB SST file (``...-sst.bin``)
SST = "sst"
#: the kind of a bin file that is the records of its keys changed since the chain's
#: previous file, as an SST file (``...-sstd.bin``; a cleared key: a delete)
SST_DELTA = "sstd"


def is_sst(chain: Sequence[FileRef]) -> bool:
    """Whether ``chain`` is a bin's SST exports (else an encoded chain, or empty)."""
    return bool(chain) and chain[0].kind == SST


def check_sst_schema(chain: Sequence[FileRef], fingerprint: str, codec: Any) -> None:
    """Raise :class:`~tstate.errors.CheckpointError` if ``chain`` is an SST export
    written with another schema (``fingerprint``, the stored one) than ``codec``'s:
    its states cannot be converted."""
    if is_sst(chain) and fingerprint != codec.fingerprint:
        raise CheckpointError(
            f"{chain[-1].path} holds RocksDB state of another schema ({fingerprint}, not {codec.fingerprint}): "
            "an SST export is not converted to a changed state type; resume with the old state type"
        )


def decode_chain(
    chain: Sequence[FileRef], data: Sequence[bytes], codec: Any, fingerprint: str, index: Optional[int] = None
) -> Bin:
    """Bin ``index`` as the heap holds it, from ``data``, the bytes of ``chain``'s files
    (checked by the caller; ``fingerprint``: the stored schema's).  An SST export is
    decoded whole and marked ``full``; an encoded chain as
    :func:`~tstate.checkpoint.delta.restore_bin` decodes it (an empty one: an empty bin).
    ``index`` None: the bin the files say (an SST export: the bin directory it is filed
    under, ``data/<operator>/<bin>/...``).  SST exports are ingested into a small
    database of the process's own (one reader at a time) and read from it."""
    if not is_sst(chain):
        return restore_bin(list(data), codec, fingerprint=fingerprint, index=index)
    from tstate.state.rocksdb.moving import ingest_bytes, timers_of  # (rocksdict: only for a RocksDB run's files)

    check_sst_schema(chain, fingerprint, codec)
    index = _filed_under(chain[0]) if index is None else index
    with _reading:
        scratch = _scratch().store(f"read/{codec.fingerprint}", codec)
        try:
            ingest_bytes(scratch, index, data)
            b = Bin(index)
            for k, st in scratch.items(index):
                b.put(k, st, track=False)
            b.timers = timers_of(scratch, index)
            b.full = True
            return b
        finally:
            scratch.clear_bin(index)


_reading = threading.Lock()
_reader: list[Any] = []


def _scratch() -> Any:
    """The process's scratch database for decoding SST exports (made on first use)."""
    from tstate.state.rocksdb.settings import RocksDB
    from tstate.state.rocksdb.worker import WorkerStore

    if not _reader:
        settings = RocksDB(tempfile.mkdtemp(prefix="tstate-sst-read-"), cache_bytes=16 << 20,
                           block_cache_bytes=8 << 20, memtable_bytes=8 << 20)
        _reader.append(WorkerStore.create(os.path.join(settings.path, "db"), settings))
    return _reader[0]


def _filed_under(ref: FileRef) -> int:
    """The bin whose directory holds ``ref`` (``data/<operator>/<bin>/<name>``)."""
    try:
        return int(ref.path.split("/")[-2])
    except (IndexError, ValueError):
        raise CheckpointError(f"{ref.path}: not under a bin's directory (data/<operator>/<bin>/...)") from None


def read_chain(store: Any, chain: Sequence[FileRef], codec: Any, fingerprint: str, index: Optional[int] = None) -> Bin:
    """:func:`decode_chain` of ``chain`` read from ``store`` (a
    :class:`~tstate.checkpoint.store.CheckpointStore`: each file's size and xxh64
    checked)."""
    return decode_chain(chain, [store.read(r) for r in chain], codec, fingerprint, index)


def load_chain(store: Any, chain: Sequence[FileRef], kstore: Any, fingerprint: str, index: int) -> Any:
    """Bin ``index`` of ``chain`` (read from ``store``) as a
    :class:`~tstate.state.rocksdb.keyed_bin.RocksBin` of ``kstore``, replacing whatever
    ``kstore`` held of it: SST exports ingested as stored (nothing decoded), its
    timers from its record; an encoded chain decoded and put into ``kstore``, marked
    ``full`` (its next file is written whole)."""
    from tstate.state.rocksdb.keyed_bin import RocksBin, adopt  # (rocksdict: only with RocksDB state)
    from tstate.state.rocksdb.moving import ingest_bytes, timers_of

    kstore.clear_bin(index)
    if not chain:
        return RocksBin(index, kstore)
    if not is_sst(chain):
        rb = adopt(read_chain(store, chain, kstore.codec, fingerprint, index), kstore)
        rb.full = True
        return rb
    check_sst_schema(chain, fingerprint, kstore.codec)
    ingest_bytes(kstore, index, [store.read(r) for r in chain])
    rb = RocksBin(index, kstore)
    rb.timers = timers_of(kstore, index)
    return rb
