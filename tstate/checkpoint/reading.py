"""Reading a checkpoint store: manifests and verified data files
(:class:`StoreReader`, the base of :class:`tstate.checkpoint.store.CheckpointStore`).

It also declares the state the store's concerns share -- writing
(:mod:`tstate.checkpoint.writing`), garbage collection (:mod:`tstate.checkpoint.gc`),
replicas (:mod:`tstate.checkpoint.replica`) and recovery
(:mod:`tstate.checkpoint.recovery`) -- each a base class of the store holding one
concern's methods, so every method keeps its name on ``CheckpointStore`` and none of
these modules imports the store.
"""

from __future__ import annotations

import threading
from typing import Callable

from tstate.checkpoint.fs import FileSystem
from tstate.checkpoint.layout import MANIFESTS as _MANIFESTS
from tstate.checkpoint.layout import checksum as _checksum
from tstate.checkpoint.manifest import FileRef, Manifest, decode_manifest, manifest_name, parse_manifest_name
from tstate.checkpoint.writing import CheckpointWriter
from tstate.errors import CheckpointError

__all__ = ["StoreReader"]


class StoreReader:
    """The reading half of a checkpoint store, and the state its concerns share
    (assigned by :meth:`CheckpointStore.__init__ <tstate.checkpoint.store.CheckpointStore>`)."""

    directory: str
    fs: FileSystem
    retain: int
    gc_scan_every: int
    fsync: bool
    readonly: bool
    #: what the last :meth:`latest`, :meth:`manifests` or commit found wrong
    problems: list[str]
    #: what the last ``latest`` skipped: checkpoint id -> why (each line names a file)
    skipped: dict[int, list[str]]
    #: the second copy, itself a store without a replica
    replica: StoreReader | None
    mirror_dirs: tuple[str, ...]
    #: files recovery rewrote from the other copy: ``"<path> (in <directory>)"``
    repaired: list[str]
    _where: str  # "checkpoint directory DIR" (or "location URL"), for messages
    _lock: threading.RLock
    _head: Manifest | None
    _head_known: bool
    _head_pending: int | None  # committed by another process, not read yet
    _active: dict[str, CheckpointWriter]  # open writers by token
    _bad_ids: set[int]  # checkpoints latest() found unusable (kept as evidence)
    _linked: bool  # garbage collection met a symlinked directory: begin() checks again
    _refused: set[str]  # paths garbage collection refused to delete (warned once)
    _scanned: bool  # has a commit of this store scanned data/ for garbage yet
    _commits_since_scan: int
    _replicated: set[str]  # paths known to be in the replica

    def _manifest_ids(self) -> list[int]:
        try:
            names = self.fs.list(_MANIFESTS)
        except OSError as exc:
            raise CheckpointError(f"{self.fs.describe(_MANIFESTS)}: cannot be listed ({exc})") from None
        ids = (parse_manifest_name(n) for n in names)
        return sorted(i for i in ids if i is not None)

    def _load(self, checkpoint_id: int) -> Manifest:
        """The manifest of ``checkpoint_id``; CheckpointError naming the file if it is
        missing, torn or corrupt."""
        name = manifest_name(checkpoint_id)
        try:
            data = self.fs.read_bytes(name)
        except FileNotFoundError:
            raise CheckpointError(f"{name}: missing") from None
        except OSError as exc:
            raise CheckpointError(f"{name}: cannot be read ({exc})") from None
        try:
            m = decode_manifest(data)
        except CheckpointError as exc:
            raise CheckpointError(f"{name}: {exc}") from None
        if m.id != checkpoint_id:
            raise CheckpointError(f"{name}: says it is checkpoint {m.id}")
        return m

    def manifests(self) -> list[Manifest]:
        """Every committed manifest that parses, oldest first (data files are not
        verified; use :meth:`verify`).  Unreadable manifests are listed in ``problems``."""
        with self._lock:
            self.problems = []
            out = []
            for i in self._manifest_ids():
                try:
                    out.append(self._load(i))
                except CheckpointError as exc:
                    self.problems.append(str(exc))
            return out

    def manifest(self, checkpoint_id: int) -> Manifest:
        """The manifest of one checkpoint (CheckpointError naming the file if it is
        missing or does not parse; data files are not verified)."""
        return self._load(checkpoint_id)

    def verify(
        self,
        manifest: Manifest,
        keep: dict[str, bytes] | None = None,
        check: Callable[[FileRef, bytes], str | None] | None = None,
    ) -> list[str]:
        """What is wrong with the data files of ``manifest``: one line per problem, the
        file's path then what (``missing``, a size or a checksum mismatch); ``[]`` when
        every file is present with the recorded size and xxh64.  Reads every file;
        ``keep``: filled with the bytes read (path -> bytes) when every file is good,
        emptied otherwise (a caller about to decode them reads each file once).
        ``check``: run on each good file's bytes, says what else is wrong with it
        (``None``: nothing), e.g. a schema fingerprint the manifest does not name."""
        problems = []
        if keep is not None:
            keep.clear()
        for ref in manifest.files():
            try:
                data = self.read(ref)
            except CheckpointError as exc:
                problems.append(str(exc))
                continue
            wrong = check(ref, data) if check is not None else None
            if wrong is not None:
                problems.append(wrong)
                continue
            if keep is not None and not problems:
                keep[ref.path] = data
        if problems and keep is not None:
            keep.clear()
        return problems

    def read(self, ref: FileRef) -> bytes:
        """The bytes of a data file, after checking its size and checksum
        (:class:`~tstate.errors.CheckpointError` naming the file otherwise).  With a
        replica, a copy that is bad here is read from the replica and repaired here."""
        try:
            return self._read_here(ref)
        except CheckpointError as exc:
            if self.replica is None:
                raise
            try:
                data = self.replica._read_here(ref)
            except CheckpointError as other:
                raise CheckpointError(f"{exc}; replica: {other}") from None
            self._repair(self, ref.path, data, str(exc))
            return data

    def _read_here(self, ref: FileRef) -> bytes:
        """:meth:`read` from this copy only."""
        try:
            data = self.fs.read_bytes(ref.path)
        except FileNotFoundError:
            raise CheckpointError(f"{ref.path}: missing") from None
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{ref.path}: cannot be read ({exc})") from None
        if len(data) != ref.size:
            raise CheckpointError(f"{ref.path}: size {len(data)} bytes, the manifest says {ref.size} (torn?)")
        digest = _checksum(data)
        if digest != ref.xxh64:
            raise CheckpointError(f"{ref.path}: checksum mismatch (xxh64 {digest}, the manifest says {ref.xxh64})")
        return data

    def read_chain(self, manifest: Manifest, operator: str, bin: int) -> list[bytes]:
        """The verified bytes of a bin's chain (snapshot first), ready for
        :func:`tstate.checkpoint.delta.apply_chain`; ``[]`` for an empty bin."""
        return [self.read(r) for r in self.bin_chain(manifest, operator, bin)]

    def bin_chain(self, manifest: Manifest, operator: str, bin: int) -> list[FileRef]:
        """A bin's files in ``manifest``, snapshot first, then deltas in the order they
        apply; ``[]`` if the operator or the bin has none (an empty bin)."""
        return list(manifest.chain(operator, bin))

    # -- what the other concerns provide (tstate.checkpoint.replica, tstate.checkpoint.store)

    def _repair(self, target: StoreReader, path: str, data: bytes, why: str, *, warn: bool = True) -> None:
        """Rewrite ``path`` in ``target`` with good bytes from the other copy
        (:class:`tstate.checkpoint.replica.Replication`)."""
        raise NotImplementedError

    def _collect_guarded(
        self, manifest: Manifest, after: threading.Thread | None = None, mirrored: tuple[str, ...] = ()
    ) -> None:
        """Replicate and garbage-collect after ``manifest`` was committed
        (:class:`tstate.checkpoint.store.CheckpointStore`)."""
        raise NotImplementedError
