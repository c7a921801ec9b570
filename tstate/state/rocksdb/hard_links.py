"""A RocksDB checkpoint made of hard links by tstate itself, letting go of the GIL.

rocksdict's ``Checkpoint.create_checkpoint`` holds the GIL for all of its run -- the
links, the copy and fsync of the MANIFEST, the directory fsync, and the purge of the
files a compaction left obsolete (up to ~470 ms under load when it overlapped a
compaction's end: benchmarks/results/large_state_ckpt_profile.txt) -- so the
processing thread stalled for all of it.  :func:`link_checkpoint` makes the same
directory from Python: the live SST files hard-linked (``os.link``), the MANIFEST copied
(``sendfile``), the latest OPTIONS file linked, rocksdict's config copied and CURRENT
written; each of these system calls lets go of the GIL.  No fsync: the directory is a
scratch copy, read by the upload (the checkpoint store's files are what must last).

rocksdict cannot disable RocksDB's file deletions, so the files are linked while the
database may change under them.  The caller holds every write (a cut) and flushed the
memtables, so only background work -- a compaction, a flush -- can change the files;
the checkpoint is taken optimistically and **kept only if nothing changed**: before and
after, no compaction and no flush runs, every column family's super version (bumped by
every change of its files) is the same, and CURRENT names the same MANIFEST, of the same
size (every change of the files is appended to it before it is installed).  A compaction
that ran in between, or is running at the end, makes the attempt fail (its directory is
left for the caller to remove); a file deleted before its link fails it too.  The
MANIFEST copied then describes exactly the files linked.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Optional, Sequence

from attrs import frozen

__all__ = ["link_checkpoint"]

#: rocksdict's own file beside RocksDB's (its raw mode and prefix extractors)
_ROCKSDICT_CONFIG = "rocksdict-config.json"


@frozen
class _Mark:
    """What must not change while a checkpoint is linked."""

    versions: tuple[int, ...]
    manifest: str
    manifest_bytes: int


def link_checkpoint(rdb: Any, families: Sequence[Any], path: str, dest: str) -> bool:
    """Make a checkpoint of the database ``rdb`` (an open ``rocksdict.Rdict`` in
    ``path``; ``families``: the ``Rdict`` of each of its column families, the default one
    included) in the new directory ``dest``, if nothing changes the database's files
    meanwhile; whether it did (if not, ``dest`` may hold some files: the caller removes
    it and tries again later, or falls back to ``create_checkpoint``).  Writes must be
    held and the memtables flushed by the caller.  File-system errors other than a file
    deleted under it are raised."""
    before = _mark(rdb, families, path)
    if before is None:
        return False
    names = [str(f["name"]).lstrip("/") for f in rdb.live_files()]
    os.makedirs(dest)
    try:
        for n in names:
            os.link(os.path.join(path, n), os.path.join(dest, n))
        shutil.copyfile(os.path.join(path, before.manifest), os.path.join(dest, before.manifest))
        options = _latest_options(path)
        if options is not None:
            os.link(os.path.join(path, options), os.path.join(dest, options))
        if os.path.exists(os.path.join(path, _ROCKSDICT_CONFIG)):
            shutil.copyfile(os.path.join(path, _ROCKSDICT_CONFIG), os.path.join(dest, _ROCKSDICT_CONFIG))
    except FileNotFoundError:  # deleted by a compaction that ended meanwhile
        return False
    if os.path.getsize(os.path.join(dest, before.manifest)) != before.manifest_bytes:
        return False
    with open(os.path.join(dest, "CURRENT"), "w") as f:
        f.write(before.manifest + "\n")
    return _mark(rdb, families, path) == before


def _mark(rdb: Any, families: Sequence[Any], path: str) -> Optional[_Mark]:
    """The database's state of files now, or ``None`` while background work changes it."""
    if rdb.property_int_value("rocksdb.num-running-compactions") or rdb.property_int_value("rocksdb.num-running-flushes"):
        return None
    versions = tuple(int(rd.property_int_value("rocksdb.current-super-version-number")) for rd in families)
    try:
        with open(os.path.join(path, "CURRENT")) as f:
            manifest = f.read().strip()
        size = os.path.getsize(os.path.join(path, manifest))
    except FileNotFoundError:  # (a new MANIFEST being installed)
        return None
    if rdb.property_int_value("rocksdb.num-running-compactions") or rdb.property_int_value("rocksdb.num-running-flushes"):
        return None
    return _Mark(versions, manifest, size)


def _latest_options(path: str) -> Optional[str]:
    """The newest OPTIONS file of the database (RocksDB keeps the last two)."""
    numbered = [(int(n.split("-", 1)[1]), n) for n in os.listdir(path) if n.startswith("OPTIONS-") and n.split("-", 1)[1].isdigit()]
    return max(numbered)[1] if numbered else None
