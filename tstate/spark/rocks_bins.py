"""Executor side of the Spark backend's RocksDB state (issue 28, item 4):
``Backend(spark, checkpoint, state=ts.RocksDB(path, cache_bytes=...))``.

Each executor (Python worker) process keeps the keyed state of the bins its tasks own
in **one local RocksDB** -- a :class:`~tstate.state.rocksdb.worker.WorkerStore` in a
directory of its own under the setting's ``path`` (``spark-<pid>-<random>``) -- the
cache of those bins across micro-batches, as :mod:`tstate.spark.binstore` caches heap
bins.  The durable state is the checkpoint store's: after a task changed a bin, the
bin is **exported as stored** (``SstFileWriter``: nothing encoded again; its timers a
record in its range) and that SST file is the batch's file for the bin
(``data/<operator>/<bin>/<checkpoint>-<token>-sst.bin``, kind ``"sst"``), reported to
the driver like a snapshot: it replaces the bin's chain in the manifest, with its
size and xxh64, so the checksums, ``tstate checkpoints --verify``, garbage collection
and replicas cover it as any bin file.

**Take and give** (the rule of :func:`tstate.spark.binstore.take`): a task takes a bin
from the process's database only if the version it was given back at (the path of the
last file written for it) is the one the committed manifest names and it was given by
the same partition; else the bin is loaded from the store -- its SST file ingested
(nothing decoded), or, for a chain a heap run wrote (snapshot and deltas), decoded and
put into the database.  Taking removes the bin from the process's table; only a task
that finished gives it back, so a failed task, a retry or a restarted driver never
takes a half-applied bin: it reloads it, replacing whatever the database held of it.
A bin that moved to another partition (a rescale) is loaded by its new owner from its
file in the store.

Loading a bin from the store, and a heap reader of an ``"sst"`` chain (a heap run on
either engine resuming from a RocksDB run's checkpoint, state queries; a RocksDB run of
the embedded engine ingests it), go through the one chain reader both engines use,
:mod:`tstate.checkpoint.chain_reader`.

The process's database is working space: it is removed when the process exits, and
directories left by processes that are gone are removed when the next one opens.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import threading
from typing import Any, Callable

from tstate.checkpoint.chain_reader import SST, SST_DELTA, is_sst, load_chain
from tstate.spark.binstore import ANY, Taken, chain, store
from tstate.spark.wire import BatchInfo, FileReport, Row
from tstate.state.payload import wire_timers
from tstate.state.rocksdb.settings import RocksDB
from tstate.types import wire

__all__ = ["ExecutorStores", "worker", "take", "write_bins", "give", "clear", "SST"]

#: the prefix of an executor process's database directory under the setting's path
_PREFIX = "spark-"

_lock = threading.Lock()
#: setting -> this process's worker store for it
_workers: dict[RocksDB, Any] = {}
_Key = tuple[str, str, int]
#: (directory, operator, bin) -> (version, the bin, partition that gave it)
_bins: dict[_Key, tuple[str, Any, int]] = {}


class ExecutorStores:
    """The keyed-state stores of a task's one-worker execution
    (``Execution(stores=...)``): every operator's store in the process's database for
    ``settings``, which outlives the task (closing the execution leaves it open)."""

    def __init__(self, settings: RocksDB) -> None:
        self.settings = settings
        self.worker_store = worker(settings)

    @property
    def workers(self) -> dict[int, Any]:
        return {0: self.worker_store}

    def keyed_store(self, _worker: int, name: str, codec: Any) -> Any:
        """Operator ``name``'s store in the process's database."""
        return self.worker_store.store(name, codec)

    def close(self) -> None:
        """The task's execution ended: the process's database stays for the next task."""


def worker(settings: RocksDB) -> Any:
    """This process's worker store for ``settings`` (opened on first use, in a fresh
    directory under ``settings.path``; removed when the process exits)."""
    from tstate.state.rocksdb.worker import WorkerStore  # (rocksdict: only with state=RocksDB(...))

    with _lock:
        ws = _workers.get(settings)
        if ws is None:
            os.makedirs(settings.path, exist_ok=True)
            _remove_orphans(settings.path)
            path = os.path.join(settings.path, f"{_PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
            ws = _workers[settings] = WorkerStore.create(path, settings)
            atexit.register(_close, ws)
        return ws


def _close(ws: Any) -> None:
    with contextlib.suppress(Exception):
        ws.close()
    shutil.rmtree(ws.db.path, ignore_errors=True)


def _remove_orphans(root: str) -> None:
    """Remove the databases of executor processes on this host that are gone."""
    for name in os.listdir(root):
        if not name.startswith(_PREFIX):
            continue
        pid = name[len(_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        except OSError:  # (alive, another user's)
            pass


def take(
    directory: str, m: Any, kstore: Any, index: int, fingerprint: str, partition: int = ANY
) -> tuple[Any, Taken]:
    """Bin ``index`` of ``kstore`` (an operator's store in the process's database) as of
    manifest ``m`` for a task of ``partition`` (:data:`~tstate.spark.binstore.ANY`: any
    partition's), and how it was found: ``"hit"`` (the database holds that version) or
    ``"miss"`` (loaded from the store: ``read`` bytes)."""
    refs = chain(m, kstore.name, index)
    version = refs[-1].path if refs else ""
    key = (directory, kstore.name, index)
    with _lock:
        cached = _bins.pop(key, None)
    if cached is not None and cached[0] == version and cached[1].store is kstore and (
        partition == ANY or cached[2] in (partition, ANY)
    ):
        return cached[1], Taken("hit")
    # (replaces whatever a failed task or an older version left of the bin; an SST
    # export of another schema raises CheckpointError: not converted)
    b = load_chain(store(directory), refs, kstore, fingerprint, index)
    return b, Taken("miss", sum(r.size for r in refs))


def write_bins(
    info: BatchInfo, m: Any, pn: Any, loaded: dict[int, Any], rows: list[Row],
    timers: Callable[[Any], Any], partition: int = ANY,
) -> int:
    """Write each changed bin of ``loaded`` (RocksBins of one operator's store) to the
    store as the batch's file for the bin -- the bin's export (kind ``"sst"``, which
    replaces its chain) or the records of its keys changed in this task (kind
    ``"sstd"``, which extends it: :func:`_export`) -- and report it in a ``FILE`` row
    (``timers(bin)``: what the driver keeps of its pending timers); an emptied bin's
    chain is dropped.  Every bin is given back to the process's table, tagged with its
    version and ``partition``.  Returns the bytes written."""
    from tstate.checkpoint.store import write_data_file
    from tstate.state.rocksdb.moving import TIMERS

    if not loaded:
        return 0
    kstore = next(iter(loaded.values())).store
    fs = store(info.directory).fs
    token = info.token + secrets.token_hex(3)
    scratch = os.path.join(os.path.dirname(kstore.db.path), "moves")
    written = 0
    for b, bin_ in loaded.items():
        refs = chain(m, pn.name, b)
        version = refs[-1].path if refs else ""
        touched = list(bin_.states)  # (resident: the runtime may have changed them in place)
        bin_.write_back()
        if bin_.changed():
            kstore.set_meta(b, TIMERS, wire.encode(wire_timers(bin_.timers)) if bin_.timers else None)
            path = os.path.join(scratch, f"out-{b}-{secrets.token_hex(4)}.sst")
            try:
                exported, kind = (None, SST) if bin_.is_empty() else _export(bin_, refs, touched, info.compact_after, path)
                if exported is None:  # no state, no timer
                    if refs:
                        rows.append(FileReport.dropped().row(pn.node, b))
                    version = ""
                else:
                    with open(path, "rb") as f:
                        data = f.read()
                    ref = write_data_file(fs, pn.name, b, info.checkpoint, token, kind, data)
                    written += ref.size
                    version = ref.path
                    report = "snap" if kind == SST else "delta"
                    rows.append(FileReport(ref.path, ref.size, ref.xxh64, report, timers(bin_)).row(pn.node, b))
            finally:
                with contextlib.suppress(OSError):
                    os.remove(path)
        give(info.directory, bin_, version, partition)
    return written


def _export(bin_: Any, refs: Any, touched: list[Any], compact_after: int, path: str) -> tuple[Any, str]:
    """Bin ``bin_`` (changed, not empty) as an SST file at ``path`` and its kind: the
    records of the keys changed since its chain's last file -- ``touched`` (resident
    in this task), set or cleared (a delete) -- and its timers record, extending its
    chain (``"sstd"``); or, when it must be written whole (``full``: it was loaded from
    a heap run's chain or moved here; no SST chain yet; the chain reached
    ``compact_after`` files), its export (``"sst"``)."""
    kstore, b = bin_.store, bin_.index
    if bin_.full or not is_sst(refs) or len(refs) + 1 > compact_after:
        return kstore.export_bin(b, path), SST
    from tstate.state.rocksdb import sst_export
    from tstate.state.rocksdb.layout import meta_key, store_key
    from tstate.state.rocksdb.moving import TIMERS

    kstore.cache.write_back()
    skeys = [store_key(b, k) for k in {*touched, *bin_.dirty, *bin_.removed}] + [meta_key(b, TIMERS)]
    return sst_export.export_changes(kstore.family, b, skeys, path), SST_DELTA


def give(directory: str, b: Any, version: str, partition: int = ANY) -> None:
    """Keep RocksBin ``b`` for the next batch, as of ``version``, given by ``partition``."""
    b.reset_changes()
    with _lock:
        _bins[directory, b.store.name, b.index] = (version, b, partition)


def clear() -> None:
    """Forget every bin the process's databases hold (tests; the databases stay)."""
    with _lock:
        _bins.clear()

