"""Checkpoints and restores of a run whose keyed state is in RocksDB
(``state=ts.RocksDB(...)``) as the databases' files (issue 28, items 2 and 3).

**Capture** (:meth:`FileCapture.capture`, called by every capture mode at the barrier,
before processing goes on): the RocksDB operators' bins are *not* encoded -- each
changed bin's timers (the only part of a :class:`~tstate.state.rocksdb.keyed_bin.RocksBin`
not in the store) are written as the bin's own record ``timers``
(:meth:`KeyedStore.set_meta <tstate.state.rocksdb.store.KeyedStore.set_meta>`), its
change sets reset, and :meth:`FileCheckpoints.capture
<tstate.checkpoint.sst_files.FileCheckpoints.capture>` cuts every worker's database
(write-back here; flush, hard links and the upload of new SST files on its upload
thread).  Which worker holds which bin goes into the checkpoint's metadata
(``meta["rocksdb_bins"]``: operator -> bin -> worker).  The commit waits for the
upload (:meth:`FileCapture.wait`): a failed upload abandons the checkpoint like a
failed write.

**Restore** (:func:`restore_files`): each old worker's database is opened from the
checkpoint's files (:func:`~tstate.checkpoint.sst_files.restore_worker`, nothing
decoded) in a scratch directory, each bin it held is exported from it as an SST file
(``export_bin``: as stored, nothing decoded) and ingested by the database of the bin's
owner now (``ingest_bin``: on any number of workers), and installed there as a
``RocksBin`` with its timers; the scratch databases are then removed.  (The
execution's databases exist already -- its operators hold their stores -- so the
checkpoint's databases are not opened in their place.)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import Future
from typing import Any, Optional

from tstate.checkpoint.manifest import Manifest
from tstate.checkpoint.sst_files import FileCheckpoints, WorkerFiles, restore_worker, worker_files
from tstate.errors import CheckpointError, StateStoreError
from tstate.plan.stateful import Stateful
from tstate.state.payload import _timers, wire_timers
from tstate.types import wire

__all__ = ["FileCapture", "restore_files", "BINS_KEY", "TIMERS"]

#: the manifest's ``meta`` key: operator -> bin -> the worker whose database holds it
BINS_KEY = "rocksdb_bins"
#: the bin's own record holding its encoded timers
TIMERS = b"timers"


def _rocks_ops(exe: Any) -> list[Any]:
    return [op for ops in exe.operators for op in ops if isinstance(op.node, Stateful) and getattr(op, "store", None) is not None]


class FileCapture:
    """One execution's checkpoints of its RocksDB operators as files (see the module
    docstring); :meth:`of` makes one for a run with ``state=RocksDB(...)``."""

    def __init__(self, exe: Any, store: Any) -> None:
        self.exe = exe
        stores = exe.state_stores
        try:
            os.makedirs(stores.settings.path, exist_ok=True)
            scratch = tempfile.mkdtemp(prefix="sst-upload-", dir=stores.settings.path)
        except OSError as exc:  # (an unwritable or full RocksDB directory: named, nothing run yet)
            raise StateStoreError(
                f"keyed-state store at {stores.settings.path}: preparing the checkpoints' scratch directory "
                f"failed: {exc.strerror or exc}"
            ) from exc
        self.files = FileCheckpoints(store, scratch)

    @classmethod
    def of(cls, exe: Any, store: Any) -> Optional[FileCapture]:
        """A file capture for ``exe`` if its keyed state is in RocksDB, else None."""
        return cls(exe, store) if getattr(exe, "state_stores", None) is not None else None

    @staticmethod
    def owns(op: Any) -> bool:
        """Whether operator runtime ``op``'s bins are checkpointed as files (not encoded)."""
        return getattr(op, "store", None) is not None

    def freeze(self, op: Any) -> None:
        """Operator ``op``'s part at the barrier: its resident states written back, each
        changed bin's timers written as its record, the change sets reset."""
        op.write_back()
        for b in op.bins.values():
            if not b.changed():
                continue
            if b.timers_changed or b.full:
                b.store.set_meta(b.index, TIMERS, wire.encode(wire_timers(b.timers)) if b.timers else None)
            b.reset_changes()

    def capture(self, writer: Any, meta: dict[str, Any]) -> Future[list[WorkerFiles]]:
        """Cut every worker's database into ``writer``'s checkpoint (the upload goes on
        off the processing thread) and record the bins' holders in ``meta``."""
        holders: dict[str, dict[str, int]] = {}
        for w, ops in enumerate(self.exe.operators):
            for op in ops:
                if isinstance(op.node, Stateful) and self.owns(op):
                    held = holders.setdefault(op.name, {})
                    for i in op.bins:
                        held[str(i)] = w
        meta[BINS_KEY] = holders
        return self.files.capture(writer, self.exe.state_stores.workers)

    def cutting(self) -> bool:
        """Whether a checkpoint's cut still holds a worker database's writes (its flush
        and hard links not made yet, on the upload thread): the next checkpoint's
        write-back would wait for it on the processing thread, so the coordinator
        defers the next barrier instead (the checkpoints due meanwhile are skipped)."""
        return any(ws.db.cutting() for ws in self.exe.state_stores.workers.values())

    def wait(self, sst: Future[list[WorkerFiles]]) -> None:
        """Before the commit of the checkpoint whose upload is ``sst``: wait for it
        (its error raised here)."""
        sst.result()

    def committed(self, sst: Future[list[WorkerFiles]]) -> None:
        """That checkpoint committed: later ones reference its SST files."""
        self.files.committed(sst.result())

    def restored(self, m: Manifest) -> None:
        """The run resumed from ``m``: later checkpoints reference its files."""
        self.files.base_on(m)

    def close(self) -> None:
        self.files.close()


def restore_files(exe: Any, store: Any, m: Manifest) -> int:
    """Open ``exe``'s worker databases from checkpoint ``m``'s files and install the
    RocksDB operators' bins on their owners (see the module docstring); how many bins
    were installed.  A checkpoint without files (``meta["rocksdb"]``) installs none; one
    with files restored into a run without ``state=RocksDB(...)`` raises
    :class:`~tstate.errors.CheckpointError`."""
    listing = worker_files(m)
    stores = getattr(exe, "state_stores", None)
    if not listing:
        return 0
    if stores is None:
        raise CheckpointError(
            f"checkpoint {m.id} holds keyed state as RocksDB files: resume it with state=ts.RocksDB(...)"
        )
    from tstate.state.rocksdb.keyed_bin import RocksBin  # (rocksdict: only with state=RocksDB(...))
    from tstate.state.rocksdb.moving import copy_bin

    holders: dict[str, dict[str, int]] = m.meta.get(BINS_KEY, {})
    old: dict[int, Any] = {}
    scratch = tempfile.mkdtemp(prefix="restore-", dir=stores.settings.path)
    try:
        for w, wf in sorted(listing.items()):
            old[w] = restore_worker(store, wf, os.path.join(scratch, f"worker-{w}"), stores.settings)
        installed = 0
        for index, node in exe.graph.of_type(Stateful):
            ops = [exe.operators[w][index] for w in range(exe.workers)]
            if not FileCapture.owns(ops[0]):
                continue
            owners = exe.configs[index].initial
            codec = ops[0].codec
            for key, w_old in sorted(holders.get(node.name, {}).items(), key=lambda kv: int(kv[0])):
                i, o = int(key), owners[int(key)]
                src = old[w_old].store(node.name, codec)
                dst = stores.keyed_store(o, node.name, codec)
                copy_bin(src, dst, i, os.path.join(scratch, "moves"))
                b = RocksBin(i, dst)
                timers = dst.get_meta(i, TIMERS)
                if timers is not None:
                    b.timers = _timers(wire.decode_any(timers))
                ops[o].install_bin(b)
                installed += 1
        return installed
    finally:
        for ws in old.values():
            ws.close()
        shutil.rmtree(scratch, ignore_errors=True)
