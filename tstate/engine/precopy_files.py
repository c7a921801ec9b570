"""Pre-copy moves of bins whose keyed state is in RocksDB (``state=ts.RocksDB(...)``):
the copy is the bin's files, not decoded states (issue 28, item 3; the engine's
:mod:`tstate.engine.precopy` drives the tracks).

**Preload** (:meth:`FileCopies.load`): the database of the worker that held the bin in
a committed checkpoint is opened from that checkpoint's files
(:func:`~tstate.checkpoint.sst_files.restore_worker`: every file fetched and checked by
size and xxh64, nothing decoded; opened once per worker and checkpoint, shared by the
tracks loading from it), and the bin's key range -- its states and its own records, the
timers among them -- is exported from it as an SST file and ingested by the new owner's
database (:func:`~tstate.state.rocksdb.moving.preload`), replacing what it held of that
range.  The new owner does not own the bin yet: nothing reads the range until the
hand-over.  A newer committed checkpoint re-bases the copy the same way.

**Hand-over** (:meth:`FileCopies.hand_over`) at the move's time: only the keys changed
since the copy's checkpoint was captured (the track's segments plus the bin's live
change sets) travel, as their stored records and deletes
(:func:`~tstate.state.rocksdb.moving.hand_over`: one write batch for a few keys, else
one SST file), applied over the copy; the timers travel with the bin and are written
as its record at the next checkpoint (the copy's record is as of the checkpoint).
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Optional

from tstate.checkpoint.manifest import Manifest
from tstate.checkpoint.sst_files import restore_worker, worker_files
from tstate.engine.checkpointing.file_capture import BINS_KEY
from tstate.errors import CheckpointError, StateStoreError
from tstate.state.bin import Bin

__all__ = ["FileCopies"]


class FileCopies:
    """The checkpoint databases opened for pre-copy preloads of one execution ``exe``
    (see the module docstring)."""

    def __init__(self, exe: Any) -> None:
        self.exe = exe
        #: worker -> (checkpoint id, its database opened from the files, directory)
        self._open: dict[int, tuple[int, Any, str]] = {}

    def load(self, index: int, dst: int, name: str, codec: Any, m: Manifest) -> Optional[int]:
        """Preload bin ``index`` of operator ``name`` as checkpoint ``m`` holds it into
        worker ``dst``'s database; the bytes of the bin's file ingested (None: ``m``
        has no files of it, or they cannot be read: the caller tries an older one)."""
        holder = m.meta.get(BINS_KEY, {}).get(name, {}).get(str(index))
        if holder is None:
            return None
        try:
            copy = self._opened(m, int(holder))
            if copy is None:
                return None
            from tstate.state.rocksdb.moving import moves_dir, preload

            target = self.exe.state_stores.keyed_store(dst, name, codec)
            return preload(copy.store(name, codec), target, index, moves_dir(target))
        except (CheckpointError, StateStoreError):
            return None

    def _opened(self, m: Manifest, worker: int) -> Any:
        """Worker ``worker``'s database as of checkpoint ``m`` (opened once)."""
        held = self._open.get(worker)
        if held is not None and held[0] == m.id:
            return held[1]
        wf = worker_files(m).get(worker)
        if wf is None:
            return None
        if held is not None:  # an older checkpoint's: a newer one replaces it
            self._close(worker)
        stores = self.exe.state_stores
        path = os.path.join(stores.settings.path, f"precopy-{m.id}-w{worker}")
        shutil.rmtree(path, ignore_errors=True)
        ws = restore_worker(self.exe.coordinator.store, wf, path, stores.settings)
        self._open[worker] = (m.id, ws, path)
        return ws

    def hand_over(self, src: Any, index: int, t: Any, dst: int, keys: set[Any]) -> tuple[Bin, int]:
        """Worker ``src.worker`` gives bin ``index`` up at ``t``; the keys ``keys``
        changed since the copy's checkpoint go over the copy in worker ``dst``'s
        database, which installs the bin (its change sets since the last capture come
        along); the bin as installed and the bytes moved."""
        from tstate.state.rocksdb.moving import hand_over, moves_dir

        target = self.exe.peer(dst, src.index)
        old = src.remove_bin(index)
        moved, size = hand_over(old, src.store, target.store, keys, moves_dir(src.store))
        moved.dirty = dict(old.dirty)
        moved.removed = dict(old.removed)
        moved.added = dict(old.added)
        moved.timers_changed = True  # (the copy's timer record is as of its checkpoint)
        target.receive_bin(moved, t, tracked=not old.full)
        return moved, size

    def _close(self, worker: int) -> None:
        _cid, ws, path = self._open.pop(worker)
        ws.close()
        shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        """Close the databases opened (no move needs them any more)."""
        for w in list(self._open):
            self._close(w)
