"""``CheckpointDirs``: the checkpoint directories of one open RocksDB database, and
which of their SST files the checkpoint store holds already.

:class:`~tstate.state.rocksdb.db.LocalDB` holds the writes (a cut) and flushes the
memtables; this makes the checkpoint from the database's files: linked GIL free by
:func:`~tstate.state.rocksdb.hard_links.link_checkpoint` whether or not a compaction
runs, again with the new live files whenever one was installed meanwhile, and by
rocksdict's ``create_checkpoint`` (which holds the GIL throughout: 52-157 ms under load,
benchmarks/results/large_state_ckpt_profile.txt) only after :data:`LINK_ATTEMPTS`
failed attempts.  The directory is listed as
:class:`~tstate.state.rocksdb.files.CheckpointFiles`, each SST file marked new unless
:meth:`CheckpointDirs.uploaded` was told an earlier upload holds it.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any, Iterable, Sequence

import rocksdict

from tstate.state.rocksdb.files import CheckpointFiles, OtherFile, SstFile
from tstate.state.rocksdb.hard_links import link_checkpoint
from tstate.state.rocksdb.manifest_files import ManifestFiles

__all__ = ["CheckpointDirs", "LINK_ATTEMPTS"]

#: how many times a checkpoint is linked GIL free (:meth:`CheckpointDirs.make`) before
#: it is made by rocksdict's create_checkpoint, holding the GIL.  An attempt fails only
#: when a compaction or flush is installed while it links (a few ms), so the next one,
#: with the new live files, succeeds; a running compaction does not fail it
#: (hard_links.py)
LINK_ATTEMPTS = 5
#: the pause between two attempts, in seconds (an install under way ends meanwhile)
_POLL = 0.005


class CheckpointDirs:
    """The checkpoints of one opening of a database (see the module docstring)."""

    def __init__(self, incarnation: str) -> None:
        #: the opening of the database the checkpoints are of (:attr:`CheckpointFiles.incarnation
        #: <tstate.state.rocksdb.files.CheckpointFiles.incarnation>`)
        self.incarnation = incarnation
        self._uploaded: set[str] = set()  # (told by :meth:`uploaded`)
        #: checkpoints linked again because a compaction was installed meanwhile, and
        #: made by rocksdict's create_checkpoint (holding the GIL) because LINK_ATTEMPTS
        #: attempts failed
        self.retries = 0
        self.fallbacks = 0
        #: the replay of the database's MANIFEST (hard_links.py checks each checkpoint's
        #: copy of it names exactly the files linked), kept between checkpoints
        self._manifest = ManifestFiles()

    def make(self, rdb: Any, families: Sequence[Any], path: str, dest: str) -> CheckpointFiles:
        """Make the checkpoint of the database ``rdb`` (an open ``rocksdict.Rdict`` in
        ``path``; ``families``: each of its column families' ``Rdict``, the default one
        included) in the new directory ``dest``, and list its files.  Writes must be
        held and the memtables flushed by the caller; on failure the caller removes
        ``dest``."""
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if not self._link(rdb, families, path, dest):
            rocksdict.Checkpoint(rdb).create_checkpoint(dest)
            self.fallbacks += 1
        return self._list(dest)

    def _link(self, rdb: Any, families: Sequence[Any], path: str, dest: str) -> bool:
        """Make the checkpoint in ``dest`` with
        :func:`~tstate.state.rocksdb.hard_links.link_checkpoint`, letting go of the GIL;
        again, with the new live files, whenever a compaction was installed meanwhile,
        at most :data:`LINK_ATTEMPTS` times (then ``dest`` is left absent).  Whether it
        was made.  Its contents are the same whenever it is made (the writes are held)."""
        for attempt in range(LINK_ATTEMPTS):
            if attempt:
                time.sleep(_POLL)
            if link_checkpoint(rdb, families, path, dest, self._manifest):
                return True
            shutil.rmtree(dest, ignore_errors=True)
            self.retries += 1
        return False

    def _list(self, dest: str) -> CheckpointFiles:
        sst, other = [], []
        for n in sorted(os.listdir(dest)):
            size = os.path.getsize(os.path.join(dest, n))
            if n.endswith(".sst"):
                sst.append(SstFile(n, size, n not in self._uploaded))
            else:
                other.append(OtherFile(n, size))
        return CheckpointFiles(dest, tuple(sst), tuple(other), self.incarnation)

    def uploaded(self, names: Iterable[str]) -> None:
        """SST files ``names`` are held by the checkpoint store now: later checkpoints
        list them as not new."""
        self._uploaded.update(names)
