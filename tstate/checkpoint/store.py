"""The checkpoint store: incremental, checksummed, atomically committed checkpoints.

The engine captures bins at a consistent time and hands their bytes to a
:class:`CheckpointWriter` (from :meth:`CheckpointStore.begin`); the store writes each
file as it is put, and :meth:`CheckpointWriter.commit` makes the checkpoint exist by
writing its manifest atomically.  Recovery asks :meth:`CheckpointStore.latest` for the
newest checkpoint that verifies completely and reads each bin's chain back.

**Layout on disk** (``DIR`` is the store's directory)::

    DIR/manifests/ckpt-000042.manifest                 one per committed checkpoint
    DIR/data/<operator dir>/<bin>/000042-<token>-snap.bin     a bin snapshot
    DIR/data/<operator dir>/<bin>/000042-<token>-delta.bin    a bin delta (delta2, delta3...
                                                       when one checkpoint puts several)

``<operator dir>`` is the operator name reduced to ``[A-Za-z0-9_-]`` plus 8 hex digits of
its hash (``track-1f2e3d4c``: unique, safe on any filesystem); ``000042`` is the id of
the checkpoint that wrote the file and ``<token>`` is random per writer, so two writers
never write the same name.  Manifests reference files by path, size and xxh64, so a
checkpoint re-uses, untouched, the files of every bin it did not change (**incremental**):
a bin's chain is a snapshot followed by the deltas written since, until the engine
writes a new snapshot (:meth:`CheckpointStore.needs_snapshot` says when, after
``compact_after`` files).

**Atomicity.**  Data files are written to a temporary name, fsynced and renamed; the
commit fsyncs their directories, then writes the manifest the same way and fsyncs
``manifests/``.  A crash before the manifest's rename leaves no checkpoint (the files
are orphans), after it a complete one.  A manifest ends with a checksum of itself, so a
torn one is detected and skipped, like a checkpoint with a missing, truncated or
corrupt data file: :meth:`~CheckpointStore.latest` then uses the previous good one.

**Recovery never starts from empty state by surprise.**  :meth:`~CheckpointStore.recover`
(what the embedded engine and the Spark backend resume with) resumes from the newest
usable checkpoint, with a :class:`CheckpointSkippedWarning` naming every newer one it
skipped and why; if checkpoints exist but none is usable (one damaged snapshot that
every retained checkpoint shares does that) it raises
:class:`~tstate.errors.CheckpointError` listing each checkpoint and why, unless the
caller passed ``fresh_if_unusable=True``.  An unusable checkpoint is marked
(``manifests/ckpt-000042.unusable``) and kept with its files as evidence.

**In an object store** (``CheckpointStore("s3://bucket/prefix")``, also ``gs://``,
``abfs://``, ``hdfs://``: :mod:`tstate.checkpoint.objectfs`) the layout and the format are
the same; a file is written by one PUT (atomic there), nothing is fsynced, and the
manifest is committed by one *conditional* PUT (``If-None-Match: *``, where the store
supports it), so a second writer that got the same id cannot overwrite a committed
checkpoint (:class:`~tstate.errors.CheckpointError` "committed by another writer").
Listings only say which manifests to read: each is read by name and every file it names
is verified, as on disk.  A store that stays unreachable fails the call with a
:class:`~tstate.errors.CheckpointError` naming the URL after retries; a commit whose
manifest PUT failed committed nothing.

**A replica** (``CheckpointStore(dir, replica="other dir or URL")``, for a store that is
not replicated itself: a local disk, one bucket) gets a copy of every committed
checkpoint: after each commit the files the replica does not hold yet are copied from
this store, then the manifest (last, so a replica checkpoint is complete or absent), and
the replica is garbage-collected by the same rules.  A copy that fails (replica
unreachable, full) leaves the commit committed, is noted in ``problems`` with a
:class:`CheckpointReplicaWarning`, and the next commit copies whatever is missing.
Recovery reads from whichever copy is reachable and intact: the checkpoints of both are
candidates, a manifest or data file that is missing, torn or corrupt here is read from
the replica (and the other way round), and the bad copy is repaired from the good one
(:class:`CheckpointRepairedWarning` names each file; ``repaired`` lists them).  A
checkpoint is unusable only if some file is bad in both copies.

**Garbage collection** runs after each commit: it keeps the newest ``retain`` usable
manifests, deletes the other usable ones, then deletes every file no longer referenced
by a kept manifest -- except files written by a checkpoint that is still being
written: those of this store's open writers, and any file whose checkpoint id is
greater than the one just committed (an open writer of another process).  It **never
deletes evidence**: an unusable checkpoint (marked, or skipped by this store) is kept
with its files, an unreadable manifest is kept with every file of a checkpoint up to
its id (which files it names is unknown), until someone removes them by hand; and it
never deletes through a symlink (every path is checked to stay in the store).  So that
it never keeps writing where it cannot delete, a store whose ``manifests/``, ``data/``,
operator, bin or ``held/`` directory is a symlink refuses to open for writing
(:class:`~tstate.errors.CheckpointError` naming the link and what to do; the checkpoint
directory itself may be one), and a link that appears later stops the next
:meth:`~CheckpointStore.begin` after garbage collection warned about it.  Usually
only the files of the manifests deleted are looked at (cheap with many bins); the first
commit of a store (after a restart) and every ``gc_scan_every``-th commit scan all of
``data/`` and ``held/``, which removes leftover temporary files and the orphans of a
crashed or never-aborted writer (their ids are not above the committed one).

**One writing process per directory.**  Several writers of one store may be open at
once (the engine may begin checkpoint *n+1* while *n* is still being written); they get
increasing ids and must commit in that order (a writer whose id is not above the newest
committed checkpoint cannot commit).  Readers (``latest``, ``manifests``, the CLI)
may run anywhere at any time.

>>> import tempfile
>>> store = CheckpointStore(tempfile.mkdtemp(), retain=2)
>>> w = store.begin(10)
>>> w.put_operator_schema("count", {"kind": "int", "name": "int"}, bins=4)
>>> w.put_snapshot("count", 0, b"bin 0 bytes")
>>> w.put_snapshot("count", 1, b"bin 1 bytes")
>>> m1 = w.commit()
>>> w = store.begin(20)
>>> w.put_delta("count", 1, b"bin 1 delta")      # bin 0 keeps its chain
>>> m2 = w.commit()
>>> m2.id, m2.time, [r.kind for r in store.bin_chain(m2, "count", 1)]
(2, 20, ['snap', 'delta'])
>>> store.bin_chain(m2, "count", 0) == store.bin_chain(m1, "count", 0)
True
>>> store.latest() == m2, store.read(store.bin_chain(m2, "count", 0)[0])
(True, b'bin 0 bytes')
"""

from __future__ import annotations

import os
import secrets
import threading
import time as _time
from typing import Any

from tstate.errors import (  # the warnings: re-exported here, where they were defined before
    CheckpointError,
    CheckpointRepairedWarning,
    CheckpointReplicaWarning,
    CheckpointSkippedWarning,
    ConfigurationError,
)
from tstate.checkpoint.fs import FileSystem, LocalFS
from tstate.checkpoint.gc import GarbageCollection
from tstate.checkpoint.manifest import Manifest, encode_manifest
from tstate.checkpoint.layout import (  # re-exported: they were defined here before
    MANIFESTS as _MANIFESTS,
    data_file_path,
    file_ref,
    operator_dir,
    parse_attached_name,
    parse_data_name,
    unusable_name,
)
from tstate.checkpoint.writing import CheckpointWriter, write_data_file  # re-exported
from tstate.checkpoint.writing import check_packable as _check_packable
from tstate.checkpoint.recovery import Recovery
from tstate.state.payload import encode_time

__all__ = [
    "CheckpointRepairedWarning",
    "CheckpointReplicaWarning",
    "CheckpointSkippedWarning",
    "CheckpointStore",
    "CheckpointWriter",
    "data_file_path",
    "file_ref",
    "operator_dir",
    "parse_attached_name",
    "parse_data_name",
    "unusable_name",
    "write_data_file",
]


def _open_local(directory: str, where: str, *, create: bool, readonly: bool) -> LocalFS:
    """The filesystem of local checkpoint directory ``directory``, created if missing
    (unless ``readonly`` or not ``create``); CheckpointError naming it otherwise."""
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise CheckpointError(f"{where}: exists and is not a directory")
    if not os.path.isdir(directory):
        if readonly or not create:
            raise CheckpointError(f"{where}: does not exist")
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(f"{where}: cannot be created ({exc.strerror or exc})") from None
    return LocalFS(directory)


def _open_fs(
    directory: str, fs: FileSystem | None, remote: bool, where: str, *, create: bool, readonly: bool
) -> FileSystem:
    """The filesystem of the store at ``directory``: an object store's if ``remote``,
    else ``fs`` if given, else the local directory's (:func:`_open_local`); unless
    ``readonly``, checked writable (a CheckpointError naming ``where`` otherwise)."""
    from tstate.checkpoint.location import open_filesystem

    if remote:
        fs = open_filesystem(directory)
    elif fs is None:
        fs = _open_local(directory, where, create=create, readonly=readonly)
    if not readonly:
        try:
            fs.check_writable()
        except OSError as exc:
            raise CheckpointError(f"{where}: not writable ({exc.strerror or exc})") from None
    return fs


class CheckpointStore(Recovery, GarbageCollection):
    """Checkpoints in one directory (see the module docstring for layout and guarantees).

    Each concern lives in its own module, as a base class: reading
    (:mod:`tstate.checkpoint.reading`), replicas (:mod:`tstate.checkpoint.replica`),
    recovery (:mod:`tstate.checkpoint.recovery`), garbage collection
    (:mod:`tstate.checkpoint.gc`); writing one checkpoint is
    :class:`~tstate.checkpoint.writing.CheckpointWriter`.  This class opens the store,
    begins writers and commits them.

    ``directory``: a local path or an object-store URL (``s3://bucket/prefix``...;
    :mod:`tstate.checkpoint.location`).  A local ``directory`` is created if missing
    (parents too) unless ``create=False``; a path
    that is not a directory, or a directory in which a file cannot be created, raises
    :class:`~tstate.errors.CheckpointError` naming the path, here, before anything runs.
    ``retain``: how many committed checkpoints to keep (>= 1).  ``compact_after``: the
    chain length at which :meth:`needs_snapshot` asks for a snapshot (>= 1).
    ``gc_scan_every``: every how many commits garbage collection scans all of
    ``data/`` (see :meth:`_collect`; the first commit always does).  ``fsync=False``
    skips fsyncs (tests, throw-away runs: a power loss may then tear a checkpoint,
    which is still detected).  ``background_gc=True`` runs the garbage collection after
    a commit on a thread (under the store's lock: the next begin or commit waits for it),
    so a commit that retires thousands of files returns at once.  ``readonly=True`` opens an existing
    directory for reading only (no creation, no probe; :meth:`begin` refuses): what the
    inspection CLI does.  ``fs`` replaces the local filesystem by another
    :class:`~tstate.checkpoint.fs.FileSystem` (``directory`` then only names it in
    messages).

    ``problems`` lists what the last :meth:`latest`, :meth:`manifests` or
    :meth:`CheckpointWriter.commit` found wrong (torn manifests, missing or corrupt
    files, each naming the file); each of these calls resets it.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "file")
    >>> open(path, "w").close()
    >>> CheckpointStore(path)   # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tstate.errors.CheckpointError: checkpoint directory .../file: exists and is not a directory
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        retain: int = 3,
        compact_after: int = 8,
        *,
        fsync: bool = True,
        create: bool = True,
        readonly: bool = False,
        fs: FileSystem | None = None,
        gc_scan_every: int = 16,
        background_gc: bool = False,
        replica: str | os.PathLike[str] | CheckpointStore | None = None,
        mirror_dirs: tuple[str, ...] = (),
    ) -> None:
        for name, value in (("retain", retain), ("compact_after", compact_after), ("gc_scan_every", gc_scan_every)):
            if type(value) is not int or value < 1:
                raise ConfigurationError(f"CheckpointStore {name} must be an int >= 1, got {value!r}")
        from tstate.checkpoint.location import is_url, resolve

        remote = fs is None and is_url(directory)
        self.directory = resolve(directory) if remote else os.fspath(directory)
        self.retain = retain
        self.compact_after = compact_after
        self.gc_scan_every = gc_scan_every
        self.background_gc = background_gc
        self._gc_thread: threading.Thread | None = None
        self.fsync = fsync
        self.readonly = readonly
        where = self._where = f"checkpoint {'location' if remote else 'directory'} {self.directory}"
        self.fs: FileSystem = _open_fs(self.directory, fs, remote, where, create=create, readonly=readonly)
        self._linked = False  # garbage collection met a symlinked directory: begin() checks again
        if not readonly:
            self._refuse_links()
        self.problems: list[str] = []
        #: what the last :meth:`latest` skipped: checkpoint id -> why (each line names a file)
        self.skipped: dict[int, list[str]] = {}
        self._lock = threading.RLock()
        self._begin_lock = threading.Lock()  # (begin against begin only: see begin)
        self._head: Manifest | None = None
        self._head_known = False
        self._head_pending: int | None = None  # committed by another process, not read yet
        self._active: dict[str, CheckpointWriter] = {}
        self._bad_ids: set[int] = set()  # checkpoints latest() found unusable (kept as evidence)
        self._refused: set[str] = set()  # paths garbage collection refused to delete (warned once)
        self._scanned = False  # has a commit of this store scanned data/ for garbage yet
        self._commits_since_scan = 0
        #: the second copy (see the module docstring), itself a store without a replica
        self.replica = self._open_replica(replica, create=create)
        #: directories outside ``data/`` whose files follow the checkpoints to the replica
        #: (:meth:`CheckpointWriter.mirror`; recovery copies what either copy lacks)
        self.mirror_dirs = tuple(d if d.endswith("/") else d + "/" for d in mirror_dirs)
        #: files recovery rewrote from the other copy: ``"<path> (in <directory>)"``
        self.repaired: list[str] = []
        self._replicated: set[str] = set()  # paths known to be in the replica

    def _open_replica(
        self, replica: str | os.PathLike[str] | CheckpointStore | None, *, create: bool
    ) -> CheckpointStore | None:
        """The store ``replica`` names (opened like this one), or ``replica`` itself."""
        if replica is None:
            return None
        if not isinstance(replica, CheckpointStore):
            replica = CheckpointStore(
                replica,
                retain=self.retain,
                compact_after=self.compact_after,
                fsync=self.fsync,
                create=create,
                readonly=self.readonly,
            )
        if replica.replica is not None:
            raise ConfigurationError(f"{self._where}: a replica cannot have a replica of its own")
        return replica

    def __repr__(self) -> str:
        return f"CheckpointStore({self.directory!r}, retain={self.retain}, compact_after={self.compact_after})"

    @property
    def head(self) -> Manifest | None:
        """The checkpoint the next :meth:`begin` builds on: the last one committed
        through this store, else :meth:`latest` (computed once, on first use)."""
        if self._head_pending is not None:
            with self._lock:
                pending, self._head_pending = self._head_pending, None
                if pending is not None:
                    self._head, self._head_known = self._load(pending), True
        if not self._head_known:
            with self._lock:
                if not self._head_known:
                    self.latest()
        return self._head

    def needs_snapshot(self, operator: str, bin: int) -> bool:
        """Whether the next checkpoint should write a full snapshot of this bin rather
        than a delta: its chain in :attr:`head` has ``compact_after`` files or more, or it
        has no chain at all."""
        head = self.head
        chain = head.chain(operator, bin) if head is not None else ()
        return not chain or len(chain) >= self.compact_after

    # ------------------------------------------------------------------ writing

    def begin(self, time: Any, *, full: bool = False) -> CheckpointWriter:
        """Start checkpoint ``head.id + 1`` at logical time ``time`` (msgpack-able; an
        ``int`` or a ``Product``), or one above any checkpoint still being written.

        Bins the writer neither puts nor drops keep their chain from the checkpoint
        committed last when :meth:`CheckpointWriter.commit` runs (so is the metadata,
        and every operator not dropped).  ``full=True`` carries nothing over: the
        checkpoint holds exactly what the writer puts (a fresh run writing into a
        directory that holds checkpoints of an earlier one).
        """
        if self.readonly:
            raise CheckpointError(f"checkpoint directory {self.directory}: opened read-only")
        if self._linked:  # never keep writing where garbage collection cannot delete
            self._refuse_links()
        _check_packable(f"checkpoint time {time!r}", encode_time(time))
        # (a head committed by another process is not read here: the ids on disk cover it)
        head = self._head if self._head_pending is not None else self.head
        # not under the store's lock, which a commit holds through the manifest's fsync
        # and a garbage collection through its deletions (this runs on the processing
        # thread); ids race-free: a commit sets _head before it drops its writer from
        # _active, and this reads _active, then _head, then the manifests on disk
        with self._begin_lock:
            top = max([0, *(w.id for w in list(self._active.values()))])
            now = self._head
            if now is not None:
                top = max(top, now.id)
            ids = self._manifest_ids()
            top = max([top, *ids])
            if head is not None:
                top = max(top, head.id)
            token = secrets.token_hex(4)
            while token in self._active:  # pragma: no cover - 1 in 4 billion
                token = secrets.token_hex(4)
            writer = CheckpointWriter(self, top + 1, time, token, full)
            self._active[token] = writer
            return writer

    def writer_for(self, checkpoint_id: int, time: Any, token: str, full: bool) -> CheckpointWriter:
        """A writer for checkpoint ``checkpoint_id`` begun by another process's
        :meth:`begin` (a helper process commits it: :mod:`tstate.engine.checkpointing.writer`);
        its files were written there and are :meth:`adopted <CheckpointWriter.adopt>`."""
        with self._lock:
            writer = CheckpointWriter(self, checkpoint_id, time, token, full)
            self._active[token] = writer
            return writer

    def base_on(self, checkpoint_id: int) -> None:
        """The next commit builds on checkpoint ``checkpoint_id`` (its manifest is read,
        not its files verified: the caller knows it is good -- it restored from it or
        committed it)."""
        with self._lock:
            self._head_pending = None
            if self._head_known and self._head is not None and self._head.id == checkpoint_id:
                return
            self._head, self._head_known = self._load(checkpoint_id), True

    def committed_elsewhere(self, w: CheckpointWriter) -> None:
        """``w`` was committed by another process (:meth:`writer_for` there): it is
        closed here, and :attr:`head` is its manifest -- read when first asked for (not
        now: reading it would cost the processing thread what committing elsewhere
        saves)."""
        with w._lock:
            w.state = "committed"
        with self._lock:
            self._active.pop(w.token, None)
            self._head_pending = w.id

    def _commit(self, w: CheckpointWriter) -> Manifest:
        if self.fsync:
            # the data files, their renames and new directories are durable before
            # the manifest: one sync for all (a per-file fsync costs a journal commit
            # each, seconds for a thousand bins) -- outside the lock, which the next
            # checkpoint's begin (on the processing thread) takes
            self.fs.sync_all()
        with self._lock:
            newest = max(self._manifest_ids(), default=0)
            if newest >= w.id:
                raise CheckpointError(
                    f"checkpoint {w.id} cannot be committed: checkpoint {newest} was committed meanwhile "
                    "(writers must commit in the order they began; abort this one)"
                )
            base = None if w.full else self.head
            operators = w._build(base)
            meta = {} if base is None or w.full else dict(base.meta)
            meta.update(w._meta)
            manifest = Manifest(w.id, w.time, _time.time(), operators, meta, attached=tuple(w._attached))
            data = encode_manifest(manifest)
            write_new = getattr(self.fs, "write_new", None)  # a conditional PUT (object stores)
            try:
                if write_new is not None:
                    write_new(manifest.name, data, fsync=self.fsync)
                else:
                    self.fs.write_atomic(manifest.name, data, fsync=self.fsync)
                if self.fsync:
                    self.fs.fsync_dir(_MANIFESTS)
            except FileExistsError:
                raise CheckpointError(
                    f"{self.fs.describe(manifest.name)}: committed by another writer meanwhile "
                    "(two processes write this store; abort this checkpoint)"
                ) from None
            except OSError as exc:
                raise CheckpointError(f"{self.fs.describe(manifest.name)}: cannot be written ({exc})") from None
            self._head, self._head_known, self._head_pending = manifest, True, None
            self._active.pop(w.token, None)  # (after _head is set: begin reads them in the other order)
            self.problems = []
            if self.background_gc:  # off the committing thread (it may delete thousands of files)
                previous = self._gc_thread
                self._gc_thread = threading.Thread(
                    target=self._collect_guarded,
                    args=(manifest, previous, tuple(w._mirrored)),
                    name="tstate-checkpoint-gc",
                    daemon=True,
                )
                self._gc_thread.start()
            else:
                self._collect_guarded(manifest, None, tuple(w._mirrored))
            return manifest

    def _collect_guarded(self, manifest: Manifest, after: threading.Thread | None = None, mirrored: tuple[str, ...] = ()) -> None:
        if after is not None:
            after.join()  # copies and collections run in commit order
        with self._lock:
            if self.replica is not None:
                self._replicate(manifest, mirrored)
            try:
                self._collect(manifest)
            except (OSError, CheckpointError) as exc:  # the checkpoint is committed; garbage stays for the next commit
                self.problems.append(f"garbage collection after checkpoint {manifest.id} failed: {exc}")

    def wait_gc(self) -> None:
        """Wait for a garbage collection running in the background (``background_gc``)."""
        t = self._gc_thread
        if t is not None:
            t.join()

    def _forget(self, w: CheckpointWriter) -> None:
        with self._lock:
            self._active.pop(w.token, None)
