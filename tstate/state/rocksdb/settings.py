"""``RocksDB(path, cache_bytes=...)``: how a worker keeps its keyed state in RocksDB.

A setting, not a store: each worker opens its own database in a directory of its own
under ``path`` (:class:`~tstate.state.rocksdb.db.LocalDB`).  ``cache_bytes`` bounds the
decoded states held on the heap (:class:`~tstate.state.rocksdb.cache.StateCache`);
RocksDB's own memory is bounded apart: ``block_cache_bytes`` of its block cache (the
encoded blocks read recently) and ``memtable_bytes`` of write buffers (what was
written since the last flush), shared by the worker's operators, each buffer (a
memtable: flushed to an SST file when full) at most ``write_buffer_bytes`` -- small, so
that a write inserts into a skiplist that fits in the CPU's cache.

>>> s = RocksDB("/tmp/state", cache_bytes=64 << 20)
>>> s.cache_bytes, s.worker_path(3)
(67108864, '/tmp/state/worker-3')
>>> RocksDB("/tmp/state", cache_bytes=0)
Traceback (most recent call last):
...
tstate.errors.ConfigurationError: RocksDB(cache_bytes=0): must be a positive number of bytes
"""

from __future__ import annotations

import os
from typing import Any

from attrs import field, frozen

from tstate.errors import ConfigurationError

__all__ = ["RocksDB"]


def _positive(name: str) -> Any:
    def check(_inst: Any, _attr: Any, value: Any) -> None:
        if type(value) is not int or value <= 0:
            raise ConfigurationError(f"RocksDB({name}={value!r}): must be a positive number of bytes")

    return check


def _path(value: Any) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigurationError(f"RocksDB(path={value!r}): must be a directory path")
    return os.fspath(value)


@frozen
class RocksDB:
    """Keyed state in an embedded RocksDB per worker (see the module docstring)."""

    path: str = field(converter=_path)
    cache_bytes: int = field(default=256 << 20, validator=_positive("cache_bytes"))
    block_cache_bytes: int = field(default=64 << 20, validator=_positive("block_cache_bytes"))
    memtable_bytes: int = field(default=64 << 20, validator=_positive("memtable_bytes"))
    write_buffer_bytes: int = field(default=2 << 20, validator=_positive("write_buffer_bytes"))

    def worker_path(self, worker: int) -> str:
        """The directory of worker ``worker``'s database."""
        return os.path.join(self.path, f"worker-{worker}")
