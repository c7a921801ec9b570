"""``RunStores``: the RocksDB stores of one execution's workers, made as they are asked
for and closed (their files removed) when the execution ends or is dropped.

Each execution gets a fresh directory of its own under the setting's ``path`` (so a
restarted run never opens a crashed one's files, and two runs never share one); its
worker ``w``'s database is ``worker-w`` in it.  The local databases are working space:
checkpoints take the databases' files (:mod:`tstate.engine.checkpointing.file_capture`),
and a restore ingests the bins of the databases it opens from them: nothing in these
directories outlives the execution.

>>> import tempfile
>>> from tstate.state.rocksdb.settings import RocksDB
>>> from tstate.types import StateCodec
>>> stores = RunStores(RocksDB(tempfile.mkdtemp()), "sums")
>>> s = stores.keyed_store(1, "total", StateCodec(int)); s.put(0, "a", 1)
>>> sorted(stores.workers)
[1]
>>> stores.close(); stores.workers
{}
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from typing import Any

from tstate.errors import StateStoreError
from tstate.state.rocksdb.settings import RocksDB
from tstate.state.rocksdb.store import KeyedStore
from tstate.state.rocksdb.worker import WorkerStore

__all__ = ["RunStores"]


def _close(workers: dict[int, WorkerStore], root: list[str]) -> None:
    for w in list(workers.values()):
        try:
            w.close()
        except StateStoreError:
            if os.path.isdir(w.db.path):  # (files removed by someone else: nothing left to close)
                raise
    workers.clear()
    if root:
        shutil.rmtree(root.pop(), ignore_errors=True)


class RunStores:
    """One execution's worker stores (see the module docstring)."""

    def __init__(self, settings: RocksDB, name: str) -> None:
        self.settings = settings
        self.name = name
        #: worker -> its store (opened on first use)
        self.workers: dict[int, WorkerStore] = {}
        self._root: list[str] = []
        self._finalizer = weakref.finalize(self, _close, self.workers, self._root)

    def worker(self, worker: int) -> WorkerStore:
        """Worker ``worker``'s store (a new, empty database on first use)."""
        w = self.workers.get(worker)
        if w is None:
            if not self._root:
                os.makedirs(self.settings.path, exist_ok=True)
                safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in self.name)
                self._root.append(tempfile.mkdtemp(prefix=f"{safe}-", dir=self.settings.path))
            w = self.workers[worker] = WorkerStore.create(os.path.join(self._root[0], f"worker-{worker}"), self.settings)
        return w

    def keyed_store(self, worker: int, name: str, codec: Any) -> KeyedStore:
        """Operator ``name``'s keyed state on worker ``worker``."""
        return self.worker(worker).store(name, codec)

    def settle(self) -> None:
        """Wait until every worker database has applied the batches a checkpoint's cut
        queued (:meth:`LocalDB.settle <tstate.state.rocksdb.db.LocalDB.settle>`), and
        raise the first failure among them: a run that ends must not leave a failed
        write unreported (its last epochs' state is what queries read)."""
        for w in self.workers.values():
            w.db.settle()

    def close(self) -> None:
        """Close every worker's database and remove the execution's files."""
        _close(self.workers, self._root)
