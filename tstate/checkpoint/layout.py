"""Where a checkpoint store keeps its files, and how their names read.

The layout (see :mod:`tstate.checkpoint.store`)::

    manifests/ckpt-000042.manifest                     one per committed checkpoint
    manifests/ckpt-000042.unusable                     a checkpoint found unusable (evidence)
    data/<operator dir>/<bin>/000042-<token>-snap.bin  a bin snapshot (or -delta.bin, -delta2.bin...;
                                                       -sst.bin: the bin as a RocksDB SST file,
                                                       -sstd.bin: its keys changed since, as one)
    held/000042-<token>.<ext>                          an attached file

Pure naming: no I/O, nothing of the store itself.
"""

from __future__ import annotations

import re

import xxhash

from tstate.checkpoint.fs import TMP_MARK
from tstate.checkpoint.manifest import FileRef
from tstate.errors import CheckpointError

__all__ = [
    "MANIFESTS",
    "DATA",
    "UNUSABLE",
    "checksum",
    "data_file_path",
    "file_ref",
    "operator_dir",
    "parse_attached_name",
    "parse_data_name",
    "unusable_name",
]

MANIFESTS = "manifests"
DATA = "data"
_DATA_NAME = re.compile(r"^(\d+)-([0-9a-f]+)-(snap|delta\d*|sstd|sst)\.bin(?:" + re.escape(TMP_MARK) + r"[0-9a-f]+)?$")
_ATTACHED_NAME = re.compile(r"^(\d+)-([0-9a-f]+)\.[a-z]+(?:" + re.escape(TMP_MARK) + r"[0-9a-f]+)?$")
UNUSABLE = re.compile(r"^ckpt-(\d+)\.unusable$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def unusable_name(checkpoint_id: int) -> str:
    """The marker of a checkpoint found unusable: ``manifests/ckpt-000042.unusable``
    (text: when and why).  Garbage collection never deletes a marked checkpoint."""
    return f"{MANIFESTS}/ckpt-{checkpoint_id:06d}.unusable"


def parse_attached_name(name: str) -> tuple[int, str] | None:
    """``(checkpoint id, writer token)`` of an attached file's (or its temporary's)
    name, ``<id>-<token>.<ext>`` (``000042-a1b2c3d4.msgpack``), else None."""
    m = _ATTACHED_NAME.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


def operator_dir(operator: str) -> str:
    """The directory name of an operator's files under ``data/``.

    >>> operator_dir("track"), operator_dir("a/b c")
    ('track-436bcf21', 'a_b_c-ad61e642')
    """
    safe = _UNSAFE.sub("_", operator)[:40] or "_"
    return f"{safe}-{xxhash.xxh32_hexdigest(operator.encode('utf-8'))}"


def parse_data_name(name: str) -> tuple[int, str] | None:
    """``(checkpoint id, writer token)`` of a data file (or its temporary) name, else None.

    >>> parse_data_name("000042-a1b2c3d4-delta2.bin"), parse_data_name("x.bin")
    ((42, 'a1b2c3d4'), None)
    """
    m = _DATA_NAME.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


def data_file_path(operator: str, bin: int, checkpoint_id: int, token: str, kind: str) -> str:
    """The path of a data file of checkpoint ``checkpoint_id`` (see the layout above)."""
    if not token or any(c not in "0123456789abcdef" for c in token):
        raise CheckpointError(f"file token must be lowercase hex, got {token!r}")
    return f"{DATA}/{operator_dir(operator)}/{bin}/{checkpoint_id:06d}-{token}-{kind}.bin"


def file_ref(path: str, data: bytes) -> FileRef:
    """The reference of a data file holding ``data`` (its size and xxh64)."""
    return FileRef(path, len(data), checksum(data))


def checksum(data: bytes) -> str:
    """The xxh64 (hex) a manifest records for a file's bytes."""
    return xxhash.xxh64_hexdigest(data)

