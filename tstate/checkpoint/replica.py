"""A checkpoint store's replica (:class:`Replication`, a base of
:class:`tstate.checkpoint.store.CheckpointStore`): copying each committed checkpoint to
the second copy, reading a bad file or manifest from the other copy, and repairing the
bad copy from the good one (see the module docstring of :mod:`tstate.checkpoint.store`).
"""

from __future__ import annotations

import warnings

from tstate.checkpoint.fs import TMP_MARK, FileSystem
from tstate.checkpoint.layout import MANIFESTS as _MANIFESTS
from tstate.checkpoint.manifest import Manifest, encode_manifest
from tstate.checkpoint.reading import StoreReader
from tstate.errors import CheckpointError, CheckpointRepairedWarning, CheckpointReplicaWarning

__all__ = ["Replication"]


class Replication(StoreReader):
    """Copy to, read from and repair from the replica (``replica``)."""

    def _load_either(self, checkpoint_id: int) -> Manifest:
        """:meth:`_load`, from the replica when this copy of the manifest is missing or
        bad (then repaired here, unless read-only)."""
        try:
            return self._load(checkpoint_id)
        except CheckpointError as exc:
            if self.replica is None:
                raise
            try:
                m = self.replica._load(checkpoint_id)
            except CheckpointError as other:
                raise CheckpointError(f"{exc}; replica: {other}") from None
            self._repair(self, m.name, encode_manifest(m), str(exc))
            return m

    def _repair(self, target: StoreReader, path: str, data: bytes, why: str, *, warn: bool = True) -> None:
        """Rewrite ``path`` in ``target`` (this store or its replica) with good bytes
        from the other copy."""
        if target.readonly:
            return
        try:
            target.fs.write_atomic(path, data, fsync=target.fsync)
        except OSError as exc:
            self.problems.append(f"{target.fs.describe(path)}: not repaired ({exc})")
            return
        note = f"{path} (in {target.directory})"
        self.repaired.append(note)
        if not warn:
            return
        warnings.warn(
            CheckpointRepairedWarning(f"{target.fs.describe(path)} was bad ({why}): rewritten from the other copy"),
            stacklevel=3,
        )

    def _sync_dir(self, directory: str) -> None:
        """Copy every file under ``directory`` that one copy lacks from the other (the
        mirrored directories at recovery: their files are written once, never changed)."""
        replica = self.replica
        assert replica is not None

        def walk(fs: FileSystem, d: str) -> set[str]:
            try:
                found = {f"{d}/{n}" for n in fs.list(d) if TMP_MARK not in n}
                for sub in fs.list_dirs(d):
                    found |= walk(fs, f"{d}/{sub}")
            except FileNotFoundError:
                return set()
            return found

        mine, theirs = walk(self.fs, directory), walk(replica.fs, directory)
        for path in sorted(theirs - mine):
            self._repair(self, path, replica.fs.read_bytes(path), "missing", warn=False)
        for path in sorted(mine - theirs):
            self._repair(replica, path, self.fs.read_bytes(path), "missing", warn=False)
        for target, n in ((self, len(theirs - mine)), (replica, len(mine - theirs))):
            if n and not target.readonly:
                warnings.warn(
                    CheckpointRepairedWarning(
                        f"{target.fs.describe(directory)}: {n} file{'s' if n > 1 else ''} missing, copied from the other copy"
                    ),
                    stacklevel=4,
                )

    def _check_replica(self, m: Manifest) -> None:
        """Make the replica's copy of checkpoint ``m`` whole: each file that is missing
        or bad there is rewritten from this copy (verified), then the manifest."""
        replica = self.replica
        assert replica is not None
        try:
            for ref in m.files():
                try:
                    replica._read_here(ref)
                except CheckpointError as exc:
                    self._repair(replica, ref.path, self._read_here(ref), str(exc))
                self._replicated.add(ref.path)
            try:
                replica._load(m.id)
            except CheckpointError as exc:
                self._repair(replica, m.name, encode_manifest(m), str(exc))
            for d in self.mirror_dirs:
                self._sync_dir(d.rstrip("/"))
        except (OSError, CheckpointError) as exc:
            self._replicated.clear()
            self.problems.append(f"replica {replica.directory}: not checked ({exc})")

    def _replicate(self, m: Manifest, mirrored: tuple[str, ...] = ()) -> None:
        """Copy committed checkpoint ``m`` to the replica: the files it does not hold
        yet and the ``mirrored`` ones, then the manifest, then the replica's garbage
        collection.  A failure is
        reported (``problems``, :class:`CheckpointReplicaWarning`), never raised: ``m``
        is committed here; the next commit copies what is still missing."""
        replica = self.replica
        assert replica is not None
        rfs = replica.fs
        try:
            for ref in m.files():
                if ref.path in self._replicated:
                    continue
                if not (rfs.exists(ref.path) and rfs.size(ref.path) == ref.size):
                    rfs.write_atomic(ref.path, self._read_here(ref), fsync=False)
                self._replicated.add(ref.path)
            for path in mirrored:
                rfs.write_atomic(path, self.fs.read_bytes(path), fsync=False)
            if replica.fsync:
                rfs.sync_all()
            rfs.write_atomic(m.name, encode_manifest(m), fsync=replica.fsync)
            if replica.fsync:
                rfs.fsync_dir(_MANIFESTS)
        except (OSError, CheckpointError) as exc:
            self._replicated.clear()  # re-check on the next copy
            problem = f"checkpoint {m.id} not copied to the replica {replica.directory} ({exc})"
            self.problems.append(problem)
            warnings.warn(CheckpointReplicaWarning(f"{self._where}: {problem}; the next commit copies it"), stacklevel=2)
            return
        replica._collect_guarded(m)
        self.problems.extend(f"replica: {p}" for p in replica.problems)
        # what later checkpoints can name of what is there: m's files (they build on m)
        self._replicated = {r.path for r in m.files()}
