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
import warnings
from typing import Any, Callable, Iterator

from tstate.errors import (  # the warnings: re-exported here, where they were defined before
    CheckpointError,
    CheckpointRepairedWarning,
    CheckpointReplicaWarning,
    CheckpointSkippedWarning,
    ConfigurationError,
    StateTypeError,
)
from tstate.checkpoint.fs import TMP_MARK, FileSystem, LocalFS
from tstate.checkpoint.manifest import (
    ATTACHED_DIRS,
    FileRef,
    Manifest,
    OperatorEntry,
    decode_manifest,
    encode_manifest,
    manifest_name,
    parse_manifest_name,
)
from tstate.checkpoint.layout import (  # re-exported: they were defined here before
    DATA as _DATA,
    MANIFESTS as _MANIFESTS,
    UNUSABLE as _UNUSABLE,
    checksum as _checksum,
    data_file_path,
    file_ref,
    operator_dir,
    parse_attached_name,
    parse_data_name,
    unusable_name,
)
from tstate.checkpoint.writing import CheckpointWriter, write_data_file  # re-exported
from tstate.checkpoint.writing import check_packable as _check_packable
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

class CheckpointStore:
    """Checkpoints in one directory (see the module docstring for layout and guarantees).

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
        from tstate.checkpoint.location import is_url, open_filesystem, resolve

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
        if remote:
            fs = open_filesystem(self.directory)
        elif fs is None:
            if os.path.lexists(self.directory) and not os.path.isdir(self.directory):
                raise CheckpointError(f"{where}: exists and is not a directory")
            if not os.path.isdir(self.directory):
                if readonly or not create:
                    raise CheckpointError(f"{where}: does not exist")
                try:
                    os.makedirs(self.directory, exist_ok=True)
                except OSError as exc:
                    raise CheckpointError(f"{where}: cannot be created ({exc.strerror or exc})") from None
            fs = LocalFS(self.directory)
        self.fs: FileSystem = fs
        if not readonly:
            try:
                fs.check_writable()
            except OSError as exc:
                raise CheckpointError(f"{where}: not writable ({exc.strerror or exc})") from None
        self._linked = False  # garbage collection met a symlinked directory: begin() checks again
        if not readonly:
            self._refuse_links()
        self.problems: list[str] = []
        #: what the last :meth:`latest` skipped: checkpoint id -> why (each line names a file)
        self.skipped: dict[int, list[str]] = {}
        self._lock = threading.RLock()
        self._head: Manifest | None = None
        self._head_known = False
        self._head_pending: int | None = None  # committed by another process, not read yet
        self._active: dict[str, CheckpointWriter] = {}
        self._bad_ids: set[int] = set()  # checkpoints latest() found unusable (kept as evidence)
        self._refused: set[str] = set()  # paths garbage collection refused to delete (warned once)
        self._scanned = False  # has a commit of this store scanned data/ for garbage yet
        self._commits_since_scan = 0
        #: the second copy (see the module docstring), itself a store without a replica
        self.replica: CheckpointStore | None = None
        if isinstance(replica, CheckpointStore):
            self.replica = replica
        elif replica is not None:
            self.replica = CheckpointStore(
                replica, retain=retain, compact_after=compact_after, fsync=fsync, create=create, readonly=readonly
            )
        if self.replica is not None and self.replica.replica is not None:
            raise ConfigurationError(f"{where}: a replica cannot have a replica of its own")
        #: directories outside ``data/`` whose files follow the checkpoints to the replica
        #: (:meth:`CheckpointWriter.mirror`; recovery copies what either copy lacks)
        self.mirror_dirs = tuple(d if d.endswith("/") else d + "/" for d in mirror_dirs)
        #: files recovery rewrote from the other copy: ``"<path> (in <directory>)"``
        self.repaired: list[str] = []
        self._replicated: set[str] = set()  # paths known to be in the replica

    def _links(self) -> list[str]:
        """The store's own directories (``manifests/``, ``data/`` with its operator and
        bin directories, ``held/``) that are symlinks, each described with where it
        resolves; ``[]`` on a backend without symlinks."""
        linked_dirs = getattr(self.fs, "linked_dirs", None)  # (LocalFS; object stores have no links)
        if linked_dirs is None:
            return []
        tops = {_MANIFESTS: 0, _DATA: 2, **{d.rstrip("/"): 0 for d in ATTACHED_DIRS}}
        root = os.path.realpath(self.directory)
        out = []
        for rel, real in linked_dirs(tops):
            inside = real == root or real.startswith(root.rstrip(os.sep) + os.sep)
            out.append(f"{self.fs.describe(rel)} -> {real}{'' if inside else ' (outside the store)'}")
        return out

    def _refuse_links(self) -> None:
        """Refuse (:class:`~tstate.errors.CheckpointError`) a store whose own
        directories are symlinks: it would write through them, but garbage collection
        never deletes through a symlink, so the store would grow without bound."""
        links = self._links()
        if links:
            raise CheckpointError(
                f"{self._where}: {'; '.join(links)}: a symlinked directory inside a checkpoint store "
                "is written through but never garbage-collected (nothing is deleted through a symlink), "
                "so the store would grow without bound. Replace each link by a real directory (move what "
                "it points to into its place), or make the checkpoint directory itself the link"
            )
        self._linked = False

    def __repr__(self) -> str:
        return f"CheckpointStore({self.directory!r}, retain={self.retain}, compact_after={self.compact_after})"

    # ------------------------------------------------------------------ reading

    def _manifest_ids(self) -> list[int]:
        try:
            names = self.fs.list(_MANIFESTS)
        except OSError as exc:
            raise CheckpointError(f"{self.fs.describe(_MANIFESTS)}: cannot be listed ({exc})") from None
        ids = (parse_manifest_name(n) for n in names)
        return sorted(i for i in ids if i is not None)

    def _candidate_ids(self) -> list[int]:
        """The checkpoint ids of this store and of its replica (either may be
        unreachable, not both)."""
        if self.replica is None:
            return self._manifest_ids()
        try:
            mine = self._manifest_ids()
        except CheckpointError as exc:
            try:
                theirs = self.replica._manifest_ids()
            except CheckpointError:
                raise exc from None
            self.problems.append(f"{exc}: reading the replica's checkpoints")
            return theirs
        try:
            return sorted(set(mine) | set(self.replica._manifest_ids()))
        except CheckpointError as exc:
            self.problems.append(f"replica: {exc}")
            return mine

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

    def _repair(self, target: CheckpointStore, path: str, data: bytes, why: str, *, warn: bool = True) -> None:
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

    def latest(self, *, verify: Callable[[Manifest], list[str]] | None = None) -> Manifest | None:
        """The newest committed checkpoint whose manifest parses and whose every file
        verifies (size and xxh64), or ``None`` if there is none.  ``verify``: what
        checks a candidate's files, saying what is wrong like :meth:`verify` (the
        default; the Spark backend has its executors read them in parallel).  Each newer
        checkpoint skipped is explained in ``problems`` (naming the file) and in
        :attr:`skipped`; a store that may write marks it unusable on disk
        (``manifests/ckpt-000042.unusable``, the reasons as text), so garbage collection
        keeps it as evidence in every later process too.  It also becomes the base the
        next :meth:`begin` builds on (what the engine restored).  Recovery uses
        :meth:`recover`, which refuses to start from empty state when checkpoints exist
        but none is usable."""
        with self._lock:
            self.problems = []
            self.skipped = {}
            found: Manifest | None = None
            for i in reversed(self._candidate_ids()):
                try:
                    m = self._load_either(i)
                except CheckpointError as exc:
                    self._skip(i, [str(exc)])
                    continue
                bad = (verify or self.verify)(m)
                if bad:
                    self._skip(i, bad)
                    continue
                found = m
                break
            if found is not None and self.replica is not None and not self.readonly:
                self._check_replica(found)
            self._head, self._head_known, self._head_pending = found, True, None
            return found

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

    def _skip(self, checkpoint_id: int, reasons: list[str]) -> None:
        """``latest`` found checkpoint ``checkpoint_id`` unusable: note why, and (when
        this store may write) mark it on disk so no garbage collection deletes it."""
        self.problems.extend(f"checkpoint {checkpoint_id} skipped: {p}" for p in reasons)
        self.skipped[checkpoint_id] = list(reasons)
        self._bad_ids.add(checkpoint_id)
        if self.readonly:
            return
        marker = unusable_name(checkpoint_id)
        try:
            if not self.fs.exists(marker):
                text = f"checkpoint {checkpoint_id} found unusable at {_time.strftime('%Y-%m-%d %H:%M:%S')}:\n"
                self.fs.write_atomic(marker, (text + "".join(f"  {r}\n" for r in reasons)).encode(), fsync=False)
        except OSError as exc:  # the in-memory note still protects it in this process
            self.problems.append(f"{marker}: cannot be written ({exc})")

    def recover(
        self, *, fresh_if_unusable: bool = False, verify: Callable[[Manifest], list[str]] | None = None
    ) -> Manifest | None:
        """The checkpoint to resume from: :meth:`latest`, but never an empty start by
        surprise.

        - No checkpoint at all: ``None`` (a first run).
        - A usable one, with newer ones skipped: it, after a
          :class:`CheckpointSkippedWarning` naming each skipped checkpoint and why.
        - Checkpoints, none usable: :class:`~tstate.errors.CheckpointError` listing each
          one and why it is unusable, unless ``fresh_if_unusable`` (then ``None`` after a
          :class:`CheckpointSkippedWarning`: the run starts from empty state).

        Nothing is deleted either way: unusable checkpoints stay as evidence (garbage
        collection keeps them and their files) until someone removes their manifests.
        ``verify``: as for :meth:`latest`."""
        m = self.latest(verify=verify)
        skipped = dict(self.skipped)
        if not skipped:
            return m
        where = self._where
        lines = "; ".join(f"checkpoint {i}: {', '.join(r)}" for i, r in sorted(skipped.items(), reverse=True))
        if m is None:
            what = (
                f"{where} holds "
                f"{len(skipped)} checkpoint{'s' if len(skipped) > 1 else ''} and none is usable ({lines}); "
                "nothing was deleted"
            )
            if not fresh_if_unusable:
                raise CheckpointError(
                    f"{what}. Resuming would start from empty state: repair or remove the unusable checkpoints "
                    f"(`python -m tstate checkpoints {self.directory} --verify` lists them), or pass "
                    "fresh_if_unusable=True to start from empty state and keep them"
                )
            warnings.warn(CheckpointSkippedWarning(f"{what}; starting from empty state (fresh_if_unusable=True)"), stacklevel=2)
            return None
        warnings.warn(
            CheckpointSkippedWarning(
                f"{where}: resuming from "
                f"checkpoint {m.id} (time {m.time!r}); newer checkpoints are unusable and kept as evidence: {lines}"
            ),
            stacklevel=2,
        )
        return m

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

    def bin_chain(self, manifest: Manifest, operator: str, bin: int) -> list[FileRef]:
        """A bin's files in ``manifest``, snapshot first, then deltas in the order they
        apply; ``[]`` if the operator or the bin has none (an empty bin)."""
        return list(manifest.chain(operator, bin))

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
        with self._lock:
            ids = self._manifest_ids()
            top = max([0, *ids, *(w.id for w in self._active.values())])
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
            if self.fsync:
                # the data files, their renames and new directories are durable before
                # the manifest: one sync for all (a per-file fsync costs a journal commit
                # each, seconds for a thousand bins)
                self.fs.sync_all()
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
            self._active.pop(w.token, None)
            self._head, self._head_known, self._head_pending = manifest, True, None
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

    def wait_gc(self) -> None:
        """Wait for a garbage collection running in the background (``background_gc``)."""
        t = self._gc_thread
        if t is not None:
            t.join()

    def _forget(self, w: CheckpointWriter) -> None:
        with self._lock:
            self._active.pop(w.token, None)

    def _delete(self, path: str) -> None:
        """Delete one file for garbage collection; a refusal (a path through a symlink)
        or an error is noted in ``problems`` and the file left alone (with a
        ``RuntimeWarning`` the first time a path is refused)."""
        try:
            self.fs.delete(path)
        except (OSError, ValueError) as exc:
            self._linked = self._linked or isinstance(exc, PermissionError)  # (a symlink on the way)
            problem = f"{path}: not deleted ({exc})"
            self.problems.append(problem)
            if path not in self._refused:
                self._refused.add(path)
                warnings.warn(f"{self._where}: garbage collection: {problem}", RuntimeWarning, stacklevel=2)

    def _collect(self, new: Manifest) -> None:
        """Delete manifests beyond ``retain`` and files nothing kept references (module
        docs) -- never evidence of a failure:

        - an *unusable* checkpoint (one :meth:`latest` skipped, in this process or --
          marked ``ckpt-N.unusable`` -- in an earlier one) is kept with all its files,
          and does not count towards ``retain``;
        - an *unreadable* manifest (torn, corrupt) is kept, and since which files it
          names is unknown, so is every file of a checkpoint up to its id.

        Usually *incremental*: only the files of the manifests deleted now are candidates,
        which costs nothing per untouched bin.  A *full scan* of ``data/`` and of the
        attached files' directories (which also finds orphans and temporaries of crashed
        writers) runs on this store's first commit and every ``gc_scan_every`` commits.
        Every deletion checks its path stays in the store (no symlink on the way:
        :meth:`tstate.checkpoint.fs.LocalFS.delete`); a refused one is noted in
        ``problems``."""
        fs = self.fs
        kept: list[Manifest] = [new]
        evidence: list[Manifest] = []
        doomed: list[Manifest] = []
        unreadable: list[int] = []
        scan = not self._scanned or self._commits_since_scan + 1 >= self.gc_scan_every
        names = fs.list(_MANIFESTS)
        marked = {int(um.group(1)) for n in names if (um := _UNUSABLE.match(n))}
        ids = sorted(i for i in (parse_manifest_name(n) for n in names) if i is not None)
        for i in reversed(ids):
            if i >= new.id:  # new itself, or another process committed meanwhile: not ours to judge
                continue
            try:
                m = self._load(i)
            except CheckpointError as exc:
                self.problems.append(f"kept unreadable {exc} (evidence: garbage collection never deletes it)")
                unreadable.append(i)
                continue
            if i in self._bad_ids or i in marked:
                evidence.append(m)
                self.problems.append(f"kept unusable checkpoint {i} (evidence: garbage collection never deletes it)")
            elif len(kept) >= self.retain:
                doomed.append(m)
            else:
                kept.append(m)
        for m in doomed:
            self._delete(m.name)
        if doomed and self.fsync:
            fs.fsync_dir(_MANIFESTS)  # manifests are gone for good before their files go
        # files of checkpoints up to an unreadable manifest: it may name any of them
        protect = max(unreadable, default=0)
        referenced = {r.path for m in (*kept, *evidence) for r in m.files()}
        # a manifest from before attached files were listed names its held file only in
        # its metadata: that keeps it too
        referenced |= {p for m in (*kept, *evidence) for p in _attached_in(m.meta, ATTACHED_DIRS)}

        def owner(path: str) -> int | None:
            name = path.rsplit("/", 1)[-1]
            parsed = parse_data_name(name) if path.startswith(_DATA + "/") else parse_attached_name(name)
            return parsed[0] if parsed is not None else None

        if not scan:
            self._commits_since_scan += 1
            dirs: set[str] = set()
            for m in doomed:
                for ref in m.files():
                    o = owner(ref.path)
                    if ref.path in referenced or o is None or o <= protect:
                        continue
                    self._delete(ref.path)
                    if ref.path.startswith(_DATA + "/"):
                        dirs.add(ref.path.rsplit("/", 1)[0])
            for d in sorted(dirs):
                fs.remove_dir(d)
                fs.remove_dir(d.rsplit("/", 1)[0])
            return
        self._scanned, self._commits_since_scan = True, 0
        for link in self._links():  # (a listing skips a symlinked directory: say so, and stop writing)
            self._linked = True
            problem = f"{link}: a symlink, not garbage-collected; the next checkpoint is refused"
            self.problems.append(problem)
            if link not in self._refused:
                self._refused.add(link)
                warnings.warn(f"{self._where}: garbage collection: {problem}", RuntimeWarning, stacklevel=2)
        manifest_ids = set(ids)
        for name in names:
            if TMP_MARK in name:
                tmp_owner = parse_manifest_name(name.split(TMP_MARK, 1)[0])
                if tmp_owner is not None and tmp_owner <= new.id:
                    self._delete(f"{_MANIFESTS}/{name}")
            elif (u := _UNUSABLE.match(name)) and int(u.group(1)) not in manifest_ids and int(u.group(1)) <= new.id:
                self._delete(f"{_MANIFESTS}/{name}")  # its checkpoint was removed (by hand): the marker goes too
        active = set(self._active)

        def garbage(path: str, parsed: tuple[int, str] | None) -> bool:
            if path in referenced or parsed is None:  # None: not a name this store writes, leave it alone
                return False
            o, token = parsed
            if any(token.startswith(a) for a in active) or o > new.id:  # a checkpoint still being written
                return False
            return o > protect

        for op in fs.list_dirs(_DATA):
            op_path = f"{_DATA}/{op}"
            for b in fs.list_dirs(op_path):
                bin_path = f"{op_path}/{b}"
                for name in fs.list(bin_path):
                    path = f"{bin_path}/{name}"
                    if garbage(path, parse_data_name(name)):
                        self._delete(path)
                fs.remove_dir(bin_path)
            fs.remove_dir(op_path)
        for d in ATTACHED_DIRS:
            d = d.rstrip("/")
            for name in fs.list(d):
                path = f"{d}/{name}"
                if garbage(path, parse_attached_name(name)):
                    self._delete(path)
        for name in fs.list(""):
            if name.startswith(".probe" + TMP_MARK):
                self._delete(name)


def _attached_in(value: Any, dirs: tuple[str, ...], depth: int = 0) -> Iterator[str]:
    """Strings naming a file of ``dirs`` anywhere in metadata ``value``."""
    if isinstance(value, str):
        if value.startswith(dirs):
            yield value
    elif depth < 4 and (isinstance(value, (list, tuple)) or hasattr(value, "values")):
        items = value.values() if hasattr(value, "values") else value
        for v in items:
            yield from _attached_in(v, dirs, depth + 1)

