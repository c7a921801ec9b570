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
memtables, so only background work -- a compaction, a flush -- can change the files,
and none changes the data: only which files hold it.  A compaction that is *running*
changes nothing a checkpoint reads: it writes new files, but the live set -- the
current version -- changes only when it is installed (RocksDB's
``VersionSet::LogAndApply``: its edit appended to the MANIFEST, then the new version and
super version installed; its input files are deleted only after that, once no version
refers to them).  So the checkpoint is taken optimistically, whatever runs, and **kept
only if it is whole**:

- every live file was linked (a file deleted before its link -- a compaction installed
  meanwhile -- fails the attempt);
- before and after, every column family's super version (bumped by every installed
  change of its files) is the same, and CURRENT names the same MANIFEST of the same
  size, equal to the copy's (nothing was installed or appended meanwhile);
- the MANIFEST copied, replayed (:class:`~tstate.state.rocksdb.manifest_files.ManifestFiles`),
  names exactly the files linked: an edit appended before the first look but not yet
  installed at the last (a compaction between its MANIFEST write and its install)
  would name output files that were not linked.

An attempt that fails leaves its directory for the caller to remove and link again
(with the new live set).  The MANIFEST copied then describes exactly the files linked.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Optional, Sequence

from attrs import frozen

from tstate.state.rocksdb.manifest_files import ManifestFiles

__all__ = ["link_checkpoint"]

#: rocksdict's own file beside RocksDB's (its raw mode and prefix extractors)
_ROCKSDICT_CONFIG = "rocksdict-config.json"


@frozen
class _Mark:
    """What must not change while a checkpoint is linked."""

    versions: tuple[int, ...]
    manifest: str
    manifest_bytes: int


def link_checkpoint(rdb: Any, families: Sequence[Any], path: str, dest: str, manifest: ManifestFiles) -> bool:
    """Make a checkpoint of the database ``rdb`` (an open ``rocksdict.Rdict`` in
    ``path``; ``families``: the ``Rdict`` of each of its column families, the default one
    included) in the new directory ``dest``, if it is whole (see the module docstring);
    whether it was (if not, ``dest`` may hold some files: the caller removes it and
    tries again, or falls back to ``create_checkpoint``).  ``manifest``: the database's
    replay of its MANIFEST, kept from one checkpoint to the next.  Writes must be held
    and the memtables flushed by the caller.  File-system errors other than a file
    deleted under it are raised."""
    before = _mark(rdb, families, path)
    if before is None:
        return False
    names = [str(f["name"]).lstrip("/") for f in rdb.live_files()]
    os.makedirs(dest)
    copied = os.path.join(dest, before.manifest)
    try:
        for n in names:
            os.link(os.path.join(path, n), os.path.join(dest, n))
        shutil.copyfile(os.path.join(path, before.manifest), copied)
        options = _latest_options(path)
        if options is not None:
            os.link(os.path.join(path, options), os.path.join(dest, options))
        if os.path.exists(os.path.join(path, _ROCKSDICT_CONFIG)):
            shutil.copyfile(os.path.join(path, _ROCKSDICT_CONFIG), os.path.join(dest, _ROCKSDICT_CONFIG))
    except FileNotFoundError:  # deleted by a compaction installed meanwhile
        return False
    if os.path.getsize(copied) != before.manifest_bytes or _mark(rdb, families, path) != before:
        return False
    named, linked = _named(manifest, copied, before.manifest), _numbers(names)
    if named is None or linked is None or named != linked:
        return False
    with open(os.path.join(dest, "CURRENT"), "w") as f:
        f.write(before.manifest + "\n")
    return True


def _mark(rdb: Any, families: Sequence[Any], path: str) -> Optional[_Mark]:
    """The database's state of files now, or ``None`` while a new MANIFEST is being
    installed."""
    versions = tuple(int(rd.property_int_value("rocksdb.current-super-version-number")) for rd in families)
    try:
        with open(os.path.join(path, "CURRENT")) as f:
            manifest = f.read().strip()
        size = os.path.getsize(os.path.join(path, manifest))
    except FileNotFoundError:
        return None
    return _Mark(versions, manifest, size)


def _named(manifest: ManifestFiles, copied: str, name: str) -> Optional[frozenset[int]]:
    """The file numbers the MANIFEST copied to ``copied`` names (``None``: cannot tell);
    only the bytes appended since ``manifest`` last replayed it are read."""
    start = manifest.resume_at(name)
    with open(copied, "rb") as f:
        f.seek(start)
        data = f.read()
    return manifest.files(name, data, start)


def _numbers(names: Sequence[str]) -> Optional[frozenset[int]]:
    """The file numbers of live-file names like ``000123.sst`` (``None`` if one is not)."""
    out = set()
    for n in names:
        stem = n.split(".", 1)[0]
        if not stem.isdigit():
            return None
        out.add(int(stem))
    return frozenset(out)


def _latest_options(path: str) -> Optional[str]:
    """The newest OPTIONS file of the database (RocksDB keeps the last two)."""
    numbered = [(int(n.split("-", 1)[1]), n) for n in os.listdir(path) if n.startswith("OPTIONS-") and n.split("-", 1)[1].isdigit()]
    return max(numbered)[1] if numbered else None
