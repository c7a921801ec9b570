"""``WorkerStore``: one worker's keyed state in RocksDB -- its database, its cache of
decoded states, and the :class:`~tstate.state.rocksdb.store.KeyedStore` of each of its
operators.

The worker's life with it: :meth:`WorkerStore.create` (a fresh database) or
:meth:`WorkerStore.restore` (from a checkpoint's files: nothing decoded); per epoch the
operators read and put states, then :meth:`end_epoch` writes every changed state
back in one batch; a checkpoint is :meth:`checkpoint` (write back, flush, hard links:
:class:`~tstate.state.rocksdb.files.CheckpointFiles`, the SST files no earlier upload
holds marked new), after which the uploader says what it holds (:meth:`uploaded`).

>>> import tempfile, os
>>> from tstate.types import StateCodec
>>> root = tempfile.mkdtemp()
>>> w = WorkerStore.create(os.path.join(root, "w0"))
>>> w.store("count", StateCodec(int)).put(0, "a", 1)
>>> first = w.checkpoint(os.path.join(root, "ck-1"))
>>> w.uploaded(f.name for f in first.sst)
>>> w.store("count", StateCodec(int)).put(1, "b", 2)
>>> second = w.checkpoint(os.path.join(root, "ck-2"))
>>> [f.new for f in second.sst]          # the first file is uploaded already
[False, True]
>>> w.close()
>>> back = WorkerStore.restore(second.dir, os.path.join(root, "w1"))
>>> sorted(back.store("count", StateCodec(int)).items(1))
[('b', 2)]
>>> back.close()
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from tstate.errors import StateStoreError
from tstate.state.rocksdb.cache import StateCache
from tstate.state.rocksdb.db import LocalDB
from tstate.state.rocksdb.files import CheckpointFiles
from tstate.state.rocksdb.settings import RocksDB
from tstate.state.rocksdb.store import KeyedStore

__all__ = ["WorkerStore"]

_DEFAULT = RocksDB("/")


class WorkerStore:
    """One worker's database, cache and keyed stores (see the module docstring)."""

    def __init__(self, db: LocalDB, settings: RocksDB) -> None:
        self.db = db
        self.settings = settings
        self.cache = StateCache(db, settings.cache_bytes)
        self._stores: dict[str, KeyedStore] = {}

    @classmethod
    def create(cls, path: str, settings: RocksDB = _DEFAULT) -> WorkerStore:
        """A worker store on a new, empty database in ``path``."""
        return cls(LocalDB.create(path, settings), settings)

    @classmethod
    def restore(cls, checkpoint_dir: str, path: str, settings: RocksDB = _DEFAULT,
                uploaded: Optional[Iterable[str]] = None) -> WorkerStore:
        """A worker store on the database of a checkpoint's files, in ``path``
        (:meth:`LocalDB.restore <tstate.state.rocksdb.db.LocalDB.restore>`)."""
        return cls(LocalDB.restore(checkpoint_dir, path, settings, uploaded), settings)

    def store(self, name: str, codec: Any) -> KeyedStore:
        """Operator ``name``'s keyed state (its states encoded by ``codec``)."""
        s = self._stores.get(name)
        if s is None:
            s = self._stores[name] = KeyedStore(self.db, self.cache, name, codec)
        elif s.codec is not codec and s.codec.fingerprint != codec.fingerprint:
            raise StateStoreError(
                f"keyed-state store at {self.db.path}: operator {name!r} is open with state type "
                f"{s.codec.schema.name}, not {codec.schema.name}"
            )
        return s

    def end_epoch(self) -> int:
        """Write every changed state back in one batch (then evict down to the cache's
        budget; a checkpoint being made on another thread is not waited for: the
        write-back is deferred, see :meth:`StateCache.write_back
        <tstate.state.rocksdb.cache.StateCache.write_back>`); how many states were written."""
        return self.cache.write_back(defer=True)

    def checkpoint(self, dest: str) -> CheckpointFiles:
        """Write back, flush and checkpoint into the new directory ``dest``."""
        self.cache.write_back()
        return self.db.checkpoint(dest)

    def cut(self) -> Callable[[str], CheckpointFiles]:
        """Write back, then hold further writes until the returned function has made
        the checkpoint (on another thread: :meth:`LocalDB.cut <tstate.state.rocksdb.db.LocalDB.cut>`)."""
        self.cache.write_back()
        return self.db.cut()

    def uploaded(self, names: Iterable[str]) -> None:
        """The checkpoint store holds SST files ``names`` now (later checkpoints list
        them as not new)."""
        self.db.uploaded(names)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> WorkerStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
