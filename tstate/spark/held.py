"""The held-back records file of a micro-batch: records a later batch takes in.

What a batch could not take in yet is durable before its manifest commits, in one file
per batch, ``held/<checkpoint:06d>-<token>.msgpack``, attached to its checkpoint (verified
with its files, deleted with its manifest; the manifest's ``spark`` meta names it).  Its
entries are

- ``bytes``: a cell of an input's records ``[[time, record], ...]`` ahead of the batch's
  frontier (allowed lateness; :func:`~tstate.spark.wire.held_row`), which the next batch
  sends through the input's task again;
- ``[kind, node, bin, time, payload]``: ``RECORDS`` for boundary ``node`` a frontier
  operator gave at a time the batch has not reached (or still in flight in a loop at a
  later epoch), and -- in files written before sink output had part files -- ``SINK``
  records; they go in with the batch that reaches ``time``.

The file is ``msgpack([xxh64(body), body])``, ``body`` = ``msgpack(entries)``.

>>> checked_path("held/000003-ab12.msgpack", 3)
'held/000003-ab12.msgpack'
"""

from __future__ import annotations

import re
from typing import Any, Optional

import msgpack
import xxhash

from tstate.checkpoint.manifest import FileRef
from tstate.errors import CheckpointError

__all__ = ["held_name", "write_held", "read_held", "checked_path"]

_HELD = re.compile(r"^held/\d+-[0-9a-f]+\.msgpack$")


def held_name(checkpoint_id: int, token: str) -> str:
    """The held file of checkpoint ``checkpoint_id`` written with ``token``."""
    return f"held/{checkpoint_id:06d}-{token}.msgpack"


def write_held(fs: Any, path: str, entries: list[Any]) -> FileRef:
    """The held-back records of a batch, durable before its manifest commits (written
    atomically by the store's filesystem, checksummed inside and referenced by the
    manifest with its size and xxh64 like every checkpoint file); returns its
    :class:`~tstate.checkpoint.manifest.FileRef`."""
    body = msgpack.packb(entries, use_bin_type=True)
    data = msgpack.packb([xxhash.xxh64(body).hexdigest(), body], use_bin_type=True)
    fs.write_atomic(path, data, fsync=True)
    return FileRef(path, len(data), xxhash.xxh64_hexdigest(data))


def read_held(fs: Any, path: str) -> list[Any]:
    """The entries of held file ``path``; :class:`~tstate.errors.CheckpointError` naming
    the file if it cannot be read or its checksum does not match."""
    try:
        digest, body = msgpack.unpackb(fs.read_bytes(path), raw=False)
        if xxhash.xxh64(body).hexdigest() != digest:
            raise ValueError("checksum mismatch")
        return list(msgpack.unpackb(body, raw=False))
    except (OSError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CheckpointError(f"{fs.describe(path)}: held-back records unreadable ({exc})") from None


def checked_path(path: Any, checkpoint_id: int) -> Optional[str]:
    """The held file named in checkpoint ``checkpoint_id``'s metadata, checked to be a
    name the backend writes (in ``held/``, no other directory, no ``..``)."""
    if path is None:
        return None
    if type(path) is not str or not _HELD.match(path):
        raise CheckpointError(f"checkpoint {checkpoint_id}: held-back records path {path!r} is not a file of held/")
    return path
