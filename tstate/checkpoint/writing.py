"""Writing one checkpoint: :class:`CheckpointWriter` (from
:meth:`tstate.checkpoint.store.CheckpointStore.begin`) and :func:`write_data_file`.

A writer writes each data file as it is put (temporary name, rename) and keeps only
the references; :meth:`CheckpointWriter.commit` hands itself to the store that began
it, which writes the manifest atomically (see :mod:`tstate.checkpoint.store`).  The
writer knows its store only through :class:`WriterHost` (what it calls), so this
module does not import the store.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator, Protocol

import msgpack
from attrs import define, field

from tstate.hash_kind import HashKind
from tstate.checkpoint.fs import FileSystem
from tstate.checkpoint.layout import DATA, checksum, data_file_path, operator_dir, parse_attached_name
from tstate.checkpoint.manifest import FileRef, Manifest, OperatorEntry
from tstate.errors import CheckpointError, ConfigurationError, StateTypeError

__all__ = ["CheckpointWriter", "WriterHost", "check_packable", "next_operators", "write_data_file"]


class WriterHost(Protocol):
    """What a :class:`CheckpointWriter` needs of the store that began it
    (:class:`~tstate.checkpoint.store.CheckpointStore`)."""

    fs: FileSystem
    mirror_dirs: tuple[str, ...]
    #: held by a garbage collection throughout (:meth:`CheckpointWriter.share` takes it)
    _lock: threading.RLock

    def _commit(self, w: CheckpointWriter) -> Manifest: ...

    def _forget(self, w: CheckpointWriter) -> None: ...


def write_data_file(fs: FileSystem, operator: str, bin: int, checkpoint_id: int, token: str, kind: str, data: bytes) -> FileRef:
    """Write one data file of checkpoint ``checkpoint_id`` (temporary name, rename; no
    fsync: the commit syncs once) and return its reference.  ``token`` (hex) must be
    unique per writer: :class:`CheckpointWriter` uses its own; processes writing files
    for a writer elsewhere (Spark tasks) extend it, and the writer :meth:`adopts
    <CheckpointWriter.adopt>` the references."""
    path = data_file_path(operator, bin, checkpoint_id, token, kind)
    data = bytes(data)
    try:
        fs.write_atomic(path, data, fsync=False)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be written ({exc})") from None
    return FileRef(path, len(data), checksum(data))



def check_packable(what: str, value: Any) -> None:
    """CheckpointError unless ``value`` (named ``what``) is msgpack-encodable."""
    try:
        msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise CheckpointError(f"{what} cannot be stored: not msgpack-encodable ({exc})") from None



@define
class _BinOps:
    """What one writer did to one bin: ``replace`` the chain by ``files`` (snapshot or
    drop), or append ``files`` (deltas) to the chain carried over."""

    replace: bool
    files: list[FileRef] = field(factory=list)


def next_operators(
    base: Manifest | None,
    schemas: dict[str, tuple[dict[str, Any], int, HashKind]],
    dropped: set[str],
    written: dict[tuple[str, int], _BinOps],
) -> dict[str, OperatorEntry]:
    """The operators of the manifest a writer commits: ``base``'s (the previous
    manifest's) without the ``dropped`` ones, with the operator ``schemas`` it put
    (an operator whose bin count or hash changed starts without chains; one whose
    schema changed must have every bin with a chain rewritten) and what it wrote to
    each bin (``written``: a chain replaced or extended)."""
    from tstate.types.schema import Schema

    ops: dict[str, tuple[dict[str, Any], int, dict[int, tuple[FileRef, ...]], HashKind]] = {}
    if base is not None:
        for name, e in base.operators.items():
            if name not in dropped:
                ops[name] = (dict(e.schema), e.bins, dict(e.chains), e.hash)
    for name, (schema, bins, hash) in schemas.items():
        old = ops.get(name)
        chains: dict[int, tuple[FileRef, ...]] = {}
        if old is not None and old[1] == bins and old[3] is hash:
            chains = old[2]
            if Schema.from_builtins(old[0]).fingerprint != Schema.from_builtins(schema).fingerprint:
                stale = [
                    b for b in sorted(chains) if not ((o := written.get((name, b))) is not None and o.replace)
                ]
                if stale:
                    raise CheckpointError(
                        f"operator {name!r}: its state schema changed since checkpoint {base.id if base else '?'}, "
                        f"so every bin with state must be rewritten with put_snapshot or drop_bin; "
                        f"bins {', '.join(map(str, stale[:10]))}{' ...' if len(stale) > 10 else ''} were not"
                    )
        ops[name] = (schema, bins, chains, hash)
    for (name, b), bin_ops in sorted(written.items()):
        entry = ops.get(name)
        if entry is None:
            raise CheckpointError(
                f"operator {name!r}: no schema recorded (call put_operator_schema in its first checkpoint)"
            )
        if b >= entry[1]:
            if bin_ops.replace and not bin_ops.files:
                continue  # dropping a bin that does not exist: nothing to do
            raise CheckpointError(f"operator {name!r}: bin {b} does not exist (the operator has {entry[1]} bins)")
        chains = entry[2]
        chain = tuple(bin_ops.files) if bin_ops.replace else chains.get(b, ()) + tuple(bin_ops.files)
        if chain:
            chains[b] = chain
        else:
            chains.pop(b, None)
    return {name: OperatorEntry(s, bins, chains, h) for name, (s, bins, chains, h) in ops.items()}


class CheckpointWriter:
    """One checkpoint being written (from :meth:`CheckpointStore.begin`).

    Data files are written when put (temporary name, fsync, rename), so memory holds
    only the references.  Nothing is visible to readers before :meth:`commit`.  Use it
    from one thread at a time (the engine's background thread); its methods hold a lock,
    so a call from another thread is safe, just serialised.  ``id``, ``time`` and
    ``token`` (random, in every file name it writes) identify it.  As a context manager
    it aborts on exit unless committed.

    >>> import tempfile
    >>> from tstate.checkpoint.store import CheckpointStore
    >>> store = CheckpointStore(tempfile.mkdtemp(), fsync=False)
    >>> with store.begin(0) as w:
    ...     w.put_operator_schema("op", {"kind": "int", "name": "int"}, bins=2)
    ...     w.put_snapshot("op", 1, b"x")
    ...     w.put_meta("sources", {"flights": 1200})
    ...     m = w.commit()
    >>> m.id, dict(m.meta), dict(m.operators["op"].chains)[1][0].size
    (1, {'sources': {'flights': 1200}}, 1)
    """

    def __init__(self, store: WriterHost, checkpoint_id: int, time: Any, token: str, full: bool) -> None:
        self.store = store
        self.id = checkpoint_id
        self.time = time
        self.token = token
        self.full = full
        self.state = "open"  # "open" | "committed" | "aborted"
        self._lock = threading.RLock()
        self._bins: dict[tuple[str, int], _BinOps] = {}
        self._schemas: dict[str, tuple[dict[str, Any], int, HashKind]] = {}
        self._dropped_ops: set[str] = set()
        self._meta: dict[str, Any] = {}
        self._attached: list[FileRef] = []
        self._mirrored: list[str] = []
        self._dirs: set[str] = set()

    def __repr__(self) -> str:
        return f"CheckpointWriter(id={self.id}, time={self.time!r}, {self.state}, bins touched={len(self._bins)})"

    def __enter__(self) -> CheckpointWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.state == "open":
            self.abort()

    def _check_open(self) -> None:
        if self.state != "open":
            raise CheckpointError(f"checkpoint {self.id} was {self.state} already")

    @staticmethod
    def _check_bin(operator: str, bin: int) -> None:
        if type(operator) is not str or not operator:
            raise CheckpointError(f"operator name must be a non-empty str, got {operator!r}")
        if type(bin) is not int or bin < 0:
            raise CheckpointError(f"operator {operator!r}: bin must be an int >= 0, got {bin!r}")

    def _write(self, operator: str, bin: int, kind: str, data: bytes) -> FileRef:
        # no fsync per file: the commit makes all of them durable with one sync
        ref = write_data_file(self.store.fs, operator, bin, self.id, self.token, kind, data)
        self._dirs.add(ref.path.rsplit("/", 1)[0])
        return ref

    def _discard(self, ops: _BinOps | None) -> None:
        """Delete files this writer wrote for a bin and no longer needs."""
        if ops is not None:
            for ref in ops.files:
                self.store.fs.delete(ref.path)

    def put_snapshot(self, operator: str, bin: int, data: bytes) -> None:
        """Write a full snapshot of a bin (``encode_bin`` bytes): its chain becomes this
        one file.  Putting again replaces what this writer put for the bin before."""
        with self._lock:
            self._check_open()
            self._check_bin(operator, bin)
            self._discard(self._bins.pop((operator, bin), None))
            self._bins[operator, bin] = _BinOps(True, [self._write(operator, bin, "snap", data)])

    def put_delta(self, operator: str, bin: int, data: bytes) -> None:
        """Write a delta of a bin (:func:`~tstate.checkpoint.delta.encode_delta` bytes):
        appended to the bin's chain from the previous checkpoint (or to what this writer
        put for the bin already; after :meth:`drop_bin`, or for a bin without a chain,
        it applies to an empty bin)."""
        with self._lock:
            self._check_open()
            self._check_bin(operator, bin)
            ops = self._bins.get((operator, bin))
            if ops is None:
                ops = self._bins[operator, bin] = _BinOps(False)
            n = sum(1 for r in ops.files if r.kind == "delta")
            ops.files.append(self._write(operator, bin, "delta" if n == 0 else f"delta{n + 1}", data))

    def adopt(self, operator: str, bin: int, refs: list[FileRef], *, replace: bool, reported: bool = False) -> None:
        """Take data files of this checkpoint written by another process (with
        :func:`write_data_file`, under this writer's id and a token extending its own):
        ``replace=True`` makes them the bin's chain (a snapshot first), else they are
        appended to it like :meth:`put_delta`.  Each file must exist with its size: it
        is checked here (one ``stat`` per file, a request on an object store) unless
        ``reported``: the process that wrote the file sent its size after the write
        returned (a Spark task's ``FILE`` row), so the reference is the write's own; a
        file lost after that is found where every data file is checked, when it is
        read (size and xxh64) and by recovery's verification of the checkpoint."""
        with self._lock:
            self._check_open()
            self._check_bin(operator, bin)
            prefix = f"{DATA}/{operator_dir(operator)}/{bin}/{self.id:06d}-{self.token}"
            for ref in refs:
                if not ref.path.startswith(prefix):
                    raise CheckpointError(f"{ref.path}: not a file of checkpoint {self.id} (expected {prefix}...)")
                if not reported:
                    self._check_size(ref)
            if replace:
                self._bins.pop((operator, bin), None)
                self._bins[operator, bin] = _BinOps(True, list(refs))
            else:
                ops = self._bins.get((operator, bin))
                if ops is None:
                    ops = self._bins[operator, bin] = _BinOps(False)
                ops.files.extend(refs)
            self._dirs.add(f"{DATA}/{operator_dir(operator)}/{bin}")

    def mirror(self, path: str) -> None:
        """Copy ``path`` (a file outside ``data/`` written through the store's
        filesystem, under one of the store's ``mirror_dirs``: the Spark backend's output
        parts and index) to the store's replica with this checkpoint.  Unlike an
        attached file it is neither verified nor deleted with the manifest: it only
        follows the checkpoint to the replica.  Without a replica it is a no-op."""
        with self._lock:
            self._check_open()
            if not path.startswith(self.store.mirror_dirs):
                raise CheckpointError(f"{path}: not under the store's mirrored directories {self.store.mirror_dirs}")
            self._mirrored.append(path)

    def attach(self, ref: FileRef) -> None:
        """Make a file outside ``data/`` part of this checkpoint only (the Spark
        backend's held-back records): its size and xxh64 are verified with the data
        files (a checkpoint whose attached file is damaged is skipped by
        :meth:`CheckpointStore.latest`), and it is deleted with the manifest.  It must
        exist with its size, live in one of ``held/`` and be named
        ``<id>-<token>.<ext>`` with this writer's id and a token extending its own."""
        from tstate.checkpoint.manifest import ATTACHED_DIRS

        with self._lock:
            self._check_open()
            name = ref.path.rsplit("/", 1)[-1]
            parsed = parse_attached_name(name)
            if (
                not ref.path.startswith(ATTACHED_DIRS)
                or ref.path.count("/") != 1
                or parsed is None
                or parsed[0] != self.id
                or not parsed[1].startswith(self.token)
            ):
                raise CheckpointError(
                    f"{ref.path}: not an attached file of checkpoint {self.id} "
                    f"(expected {ATTACHED_DIRS[0]}{self.id:06d}-{self.token}....)"
                )
            self._check_size(ref)
            self._attached.append(ref)

    def share(self, ref: FileRef) -> None:
        """Make an attached file of an earlier checkpoint part of this one too (an SST
        file of a RocksDB store that did not change since: :mod:`tstate.checkpoint.sst_files`):
        verified with this checkpoint, kept while a manifest names it, never deleted by
        :meth:`abort`.  Under the store's lock, which a garbage collection holds
        throughout: the file is either shared before a collection runs (which then
        keeps it: it keeps what open writers share) or found missing after (a
        ``CheckpointError``: the caller uploads its own copy).  The writer's lock is
        taken before the store's, as :meth:`commit` and :meth:`abort` take them: the
        other order deadlocked an upload thread's share against an abort of the same
        writer on the processing thread (a crash or a failed checkpoint)."""
        with self._lock, self.store._lock:
            self._check_open()
            parsed = parse_attached_name(ref.path.rsplit("/", 1)[-1])
            if parsed is None or parsed[0] >= self.id:
                raise CheckpointError(f"{ref.path}: not an attached file of a checkpoint before {self.id}")
            self._check_size(ref)
            self._attached.append(ref)

    def _check_size(self, ref: FileRef) -> None:
        """The file exists with the size ``ref`` says (a write that did not finish)."""
        try:
            size = self.store.fs.size(ref.path)
        except OSError:
            size = -1
        if size != ref.size:
            raise CheckpointError(f"{ref.path}: missing or {size} bytes, expected {ref.size}")

    def drop_bin(self, operator: str, bin: int) -> None:
        """The bin is empty now (no keys, no timers): the checkpoint has no chain for it."""
        with self._lock:
            self._check_open()
            self._check_bin(operator, bin)
            self._discard(self._bins.pop((operator, bin), None))
            self._bins[operator, bin] = _BinOps(True)

    def drop_operator(self, operator: str) -> None:
        """The operator is gone from the dataflow: the checkpoint has no entry for it
        (what this writer put for it is discarded; a later
        :meth:`put_operator_schema` starts it afresh)."""
        with self._lock:
            self._check_open()
            for key in [k for k in self._bins if k[0] == operator]:
                self._discard(self._bins.pop(key))
            self._schemas.pop(operator, None)
            self._dropped_ops.add(operator)

    def put_operator_schema(
        self, operator: str, schema_builtins: dict[str, Any], bins: int, hash: HashKind = HashKind.KEY_HASH
    ) -> None:
        """Record an operator's state schema (``Schema.to_builtins()``), bin count and
        the ``hash`` its keys are binned with.

        Required for an operator's first checkpoint; later ones carry it over.  If the
        bin count or the hash changes, the old chains are not carried over (keys live in
        other bins now: put every non-empty bin).  If the schema's fingerprint changes, every bin
        with a chain must be rewritten by :meth:`put_snapshot` or :meth:`drop_bin` in
        this checkpoint (files of one chain share a fingerprint); :meth:`commit` checks."""
        from tstate.keys import check_bins
        from tstate.types.schema import Schema

        with self._lock:
            self._check_open()
            self._check_bin(operator, 0)
            try:
                check_bins(bins)
                Schema.from_builtins(schema_builtins)
            except (ConfigurationError, StateTypeError) as exc:
                raise CheckpointError(f"operator {operator!r}: {exc}") from None
            check_packable(f"operator {operator!r} schema", schema_builtins)
            if not isinstance(hash, HashKind):
                raise CheckpointError(f"operator {operator!r}: hash must be a HashKind, got {hash!r}")
            self._schemas[operator] = (dict(schema_builtins), bins, hash)

    def put_meta(self, key: str, value: Any) -> None:
        """Store msgpack-encodable metadata under ``key`` (source positions, sink
        progress, worker count...); read back as ``Manifest.meta[key]`` (tuples come back
        as lists).  Keys not put again keep their value from the previous checkpoint."""
        with self._lock:
            self._check_open()
            if type(key) is not str:
                raise CheckpointError(f"meta key must be a str, got {key!r}")
            check_packable(f"meta {key!r}", value)
            self._meta[key] = value

    def _build(self, base: Manifest | None) -> dict[str, OperatorEntry]:
        """The operators of the new manifest: ``base``'s, with this writer's changes."""
        return next_operators(base, self._schemas, self._dropped_ops, self._bins)

    def commit(self) -> Manifest:
        """Commit the checkpoint and return its manifest.

        Fsyncs the directories of the files written, writes the manifest atomically
        (temporary file, fsync, rename, fsync of ``manifests/``), then garbage-collects
        (see the module docstring).  Raises :class:`~tstate.errors.CheckpointError`,
        committing nothing and leaving the writer open (to :meth:`abort`), if the put
        data is inconsistent (a bin without an operator schema, a bin index out of
        range, a schema change without rewritten bins) or a later checkpoint was
        committed meanwhile."""
        with self._lock:
            self._check_open()
            m = self.store._commit(self)
            self.state = "committed"
            return m

    def abort(self) -> None:
        """Delete what this writer wrote and close it (nothing is committed).  No-op if
        it was committed or aborted already."""
        with self._lock:
            if self.state != "open":
                return
            self.state = "aborted"
            for ops in self._bins.values():
                self._discard(ops)
            for ref in self._attached:
                parsed = parse_attached_name(ref.path.rsplit("/", 1)[-1])
                if parsed is not None and parsed[0] == self.id:  # (a shared one is an earlier checkpoint's)
                    self.store.fs.delete(ref.path)
            self._bins.clear()
            self._attached.clear()
            self.store._forget(self)

    def written(self) -> Iterator[FileRef]:
        """The files this writer has written or attached (and not discarded) so far."""
        for ops in self._bins.values():
            yield from ops.files
        yield from self._attached

