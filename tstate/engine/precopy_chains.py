"""Where a bin's chain of files stands in each checkpoint a pre-copy move may load the
bin from (:class:`CheckpointChains`, read by :mod:`tstate.engine.precopy`): a
committed checkpoint's manifest says it; for a checkpoint whose files are written and
not committed yet (commits may lag behind captures) the chain is built as the commit
will build it, from the last committed manifest's chain.  Manifests and their schema
fingerprints are read once and kept (the last two).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Protocol

from tstate.errors import CheckpointError

if TYPE_CHECKING:  # pragma: no cover
    from tstate.checkpoint.manifest import FileRef, Manifest
    from tstate.checkpoint.store import CheckpointStore

__all__ = ["CheckpointChains"]


class _Checkpointed(Protocol):
    @property
    def coordinator(self) -> Any: ...


class CheckpointChains:
    """The chains of execution ``exe``'s checkpoints (see the module docstring)."""

    def __init__(self, exe: _Checkpointed) -> None:
        self.exe = exe
        self._manifests: dict[int, Any] = {}
        self._fingerprints: dict[tuple[int, str], str] = {}
        #: the chains of the written, uncommitted checkpoints for the bin being loaded
        #: (None: not read yet; set to None before each load)
        self.written: Optional[dict[int, tuple["FileRef", ...]]] = None

    @property
    def store(self) -> "CheckpointStore":
        """The store the checkpoints are in."""
        store: CheckpointStore = self.exe.coordinator.store
        return store

    def chain(self, cid: int, name: str, index: int, fingerprint: str) -> Optional[tuple["FileRef", ...]]:
        """Bin ``index`` of operator ``name``'s chain in checkpoint ``cid`` (None: not
        known, or written with another schema than ``fingerprint``: its files would be
        rewritten anyway)."""
        if cid in self.exe.coordinator.committed_set:
            m = self.manifest(cid)
            if m is None:
                return None
            fp = self.fingerprint(m, name)
            if fp is not None and fp != fingerprint:
                return None
            return m.chain(name, index)
        if self.written is None:
            self.written = self.written_chains(name, index, fingerprint)
        return self.written.get(cid)

    def manifest(self, checkpoint_id: int) -> "Optional[Manifest]":
        """Checkpoint ``checkpoint_id``'s manifest (None: it cannot be read)."""
        m = self._manifests.get(checkpoint_id)
        if m is None:
            try:
                m = self.store.manifest(checkpoint_id)
            except CheckpointError:
                return None
            if len(self._manifests) >= 2:
                del self._manifests[min(self._manifests)]
            self._manifests[checkpoint_id] = m
        return m

    def written_chains(self, name: str, index: int, fingerprint: str) -> dict[int, tuple["FileRef", ...]]:
        """Bin ``index``'s chain in each checkpoint captured after the last commit whose
        files are written (not committed yet: commits may lag behind captures), built as
        the commit will build it from the last committed manifest's chain."""
        from tstate.checkpoint.manifest import FileRef

        coord = self.exe.coordinator
        out: dict[int, tuple[FileRef, ...]] = {}
        pending = coord.written_uncommitted()
        if not pending or not coord.committed_ids:
            return out
        m = self.manifest(coord.committed_ids[-1])
        if m is None:
            return out
        fp = self.fingerprint(m, name)
        if fp is not None and fp != fingerprint:
            return out  # another schema: not a base
        chain: tuple[FileRef, ...] = m.chain(name, index)
        for cid, full, files in pending:
            if full:
                chain = ()  # a fresh checkpoint carries nothing over
            for f in files:
                if f[1] != index or f[0] != name:
                    continue
                _op, _bin, snapshot, path, size, xxh64 = f
                if path is None:
                    chain = ()
                elif snapshot:
                    chain = (FileRef(path, size, xxh64),)
                else:
                    chain = chain + (FileRef(path, size, xxh64),)
            out[cid] = chain
        return out

    def fingerprint(self, m: "Manifest", name: str) -> Optional[str]:
        """The schema fingerprint operator ``name`` has in manifest ``m`` (None: none)."""
        entry = m.operators.get(name)
        if entry is None:
            return None
        fp = self._fingerprints.get((m.id, name))
        if fp is None:
            fp = self._fingerprints[m.id, name] = entry.fingerprint
        return fp
