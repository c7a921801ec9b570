"""Checkpoints of RocksDB keyed-state stores as files (issue 28, item 2).

A worker keeping its keyed state in RocksDB (:mod:`tstate.state.rocksdb`) is
checkpointed as its database's files, not as encoded bins: on the processing thread,
:meth:`FileCheckpoints.capture` writes every changed state back and holds the
database's further writes (:meth:`WorkerStore.cut <tstate.state.rocksdb.worker.WorkerStore.cut>`);
everything else runs on other threads, while the processing thread computes on:
the flush and the RocksDB checkpoint (hard links to the immutable SST files, copies
of the few small files) on the cut thread, never queued behind an earlier upload,
after which writes go on; then, on the upload thread, each SST file **no earlier committed
checkpoint holds** is read once, its xxh64 computed and written to the checkpoint
store (local or object store, through its :class:`~tstate.checkpoint.fs.FileSystem`);
an SST file the previous committed checkpoint of that worker uploaded is only
*referenced* (Flink's incremental RocksDB checkpoints).  The small files of a worker's
checkpoint go up as one bundle (a msgpack map ``name -> bytes``).

In the store the files are :attr:`attached <tstate.checkpoint.manifest.Manifest.attached>`
to the manifest (size and xxh64 each), under ``sst/``::

    sst/000042-<token><worker, 4 hex><file number, 8 hex>.sst   an SST file, uploaded by checkpoint 42
    sst/000042-<token><worker, 4 hex>.dbm                        worker's small files of checkpoint 42

and the manifest's ``meta["rocksdb"]`` says which files make each worker's database
(:class:`WorkerFiles`).  So what covers attached files covers these: ``latest()``
verifies each (a corrupt or missing SST file makes recovery take the previous
checkpoint, with the reason in ``problems`` naming the file), garbage collection
deletes an SST file once no kept manifest references it, replicas copy them and
``tstate checkpoints --verify`` checks them.

**Recovery** (:func:`restore_worker`) reads each file of a worker's checkpoint
(verified: :class:`~tstate.errors.CheckpointError` listing every bad file), lays them
out as a RocksDB checkpoint directory and opens the database from it -- nothing is
decoded: the first read decodes the one state it asks for.

>>> import tempfile, os
>>> from tstate.checkpoint.store import CheckpointStore
>>> from tstate.state.rocksdb.worker import WorkerStore
>>> from tstate.types import StateCodec
>>> root = tempfile.mkdtemp()
>>> ws = WorkerStore.create(os.path.join(root, "w0"))
>>> ws.store("count", StateCodec(int)).put(3, "a", 1)
>>> store = CheckpointStore(os.path.join(root, "ck"))
>>> fc = FileCheckpoints(store, os.path.join(root, "scratch"))
>>> w = store.begin(1)
>>> files = fc.capture(w, {0: ws}).result(); m = w.commit(); fc.committed(files)
>>> [f.path.startswith("sst/") for f in m.attached]
[True, True]
>>> ws.store("count", StateCodec(int)).put(4, "b", 2)
>>> w = store.begin(2); files = fc.capture(w, {0: ws}).result(); m2 = w.commit(); fc.committed(files)
>>> fc.uploaded_files, fc.referenced_files      # the first SST file only referenced
(2, 1)
>>> back = restore_worker(store, worker_files(m2)[0], os.path.join(root, "w1"))
>>> sorted(back.store("count", StateCodec(int)).items(4))
[('b', 2)]
>>> back.close(); ws.close(); fc.close()
"""

from __future__ import annotations

import os
import shutil
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Mapping, Optional

import msgpack
from attrs import frozen

from tstate.checkpoint.layout import checksum
from tstate.checkpoint.manifest import FileRef, Manifest
from tstate.errors import CheckpointError

__all__ = ["SST_DIR", "META_KEY", "WorkerFiles", "FileCheckpoints", "worker_files", "restore_worker"]

#: where the store keeps the files of RocksDB checkpoints (an attached directory)
SST_DIR = "sst/"
#: the manifest's ``meta`` key listing each worker's files
META_KEY = "rocksdb"


@frozen
class WorkerFiles:
    """The files of one worker's database in one checkpoint: each SST file's local
    name and its upload, and the bundle of the small files."""

    worker: int
    sst: tuple[tuple[str, FileRef], ...]
    small: FileRef
    #: the database incarnation whose checkpoint these files are (not stored: a
    #: listing read from a manifest has "", whose files later checkpoints never
    #: reference by name -- :attr:`CheckpointFiles.incarnation
    #: <tstate.state.rocksdb.files.CheckpointFiles.incarnation>`)
    incarnation: str = ""

    def to_meta(self) -> dict[str, Any]:
        return {"sst": [[n, r.path] for n, r in self.sst], "small": self.small.path}

    @property
    def refs(self) -> list[FileRef]:
        return [r for _, r in self.sst] + [self.small]


def worker_files(m: Manifest) -> dict[int, WorkerFiles]:
    """Each worker's :class:`WorkerFiles` in manifest ``m`` (``{}``: no RocksDB store
    was checkpointed as files); a manifest whose listing names a file it does not
    attach raises :class:`~tstate.errors.CheckpointError`."""
    listing = m.meta.get(META_KEY)
    if not listing:
        return {}
    refs = {r.path: r for r in m.attached}
    out = {}
    try:
        for w, entry in listing.items():
            sst = tuple((str(n), refs[p]) for n, p in entry["sst"])
            out[int(w)] = WorkerFiles(int(w), sst, refs[entry["small"]])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{m.name}: malformed {META_KEY!r} listing ({exc!r}: a file not attached?)") from None
    return out


class FileCheckpoints:
    """One execution's file checkpoints of its worker stores into ``store`` (see the
    module docstring).  ``scratch``: a local directory for the RocksDB checkpoints
    (hard links) while they upload.  One upload thread: uploads finish in the order
    the checkpoints were captured."""

    def __init__(self, store: Any, scratch: str) -> None:
        self.store = store
        self.scratch = os.path.abspath(scratch)
        os.makedirs(self.scratch, exist_ok=True)
        #: worker -> its files in the last committed checkpoint (their local SST names
        #: are referenced by a later checkpoint of the same database incarnation)
        self._committed: dict[int, WorkerFiles] = {}
        self._lock = threading.Lock()
        # the cuts (flush + hard links: they hold the databases' writes) on a thread of
        # their own, never queued behind an earlier checkpoint's upload; the uploads in
        # the order of the cuts
        self._cuts = ThreadPoolExecutor(1, thread_name_prefix="tstate-sst-cut")
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="tstate-sst-upload")
        self.uploaded_files = 0
        self.uploaded_bytes = 0
        self.referenced_files = 0
        self.referenced_bytes = 0

    def base_on(self, m: Manifest) -> None:
        """The run resumed from ``m``: its files stay in the store, but the databases
        this run writes are new incarnations (opened from the files, or created and
        given bins by ingestion), whose SST file numbers may name other files than
        ``m``'s did: their next checkpoints upload their files afresh (a reference by
        name alone once made a checkpoint list another database's file of that name,
        which the next restore found torn)."""
        with self._lock:
            self._committed = worker_files(m)  # (incarnation "": never referenced by name)

    def capture(self, writer: Any, workers: Mapping[int, Any], commit: bool = False) -> Future[list[WorkerFiles]]:
        """Checkpoint every worker store of ``workers`` (worker -> ``WorkerStore``) into
        ``writer``'s checkpoint: here the write-back (then the stores' writes wait for
        the flush and hard links, made on the cut thread); the upload
        (and the writer's :meth:`attach <tstate.checkpoint.writing.CheckpointWriter.attach>`
        calls and ``meta``) on the upload thread.  The future's result: what to give
        :meth:`committed` once ``writer`` committed.  A failure (a full disk, an
        unwritable store) is the future's exception, naming the path; the caller aborts
        the writer (nothing committed).  ``commit``: the upload thread commits ``writer``
        too (and :meth:`committed`), or aborts it on a failure."""
        cuts: dict[int, Any] = {}
        try:
            for w, ws in sorted(workers.items()):
                cuts[w] = ws.cut()
        except BaseException:
            self._checkpoints(writer, cuts)  # (releases the cuts made)
            raise
        with self._lock:
            known = {w: self._committed.get(w) for w in cuts}
        # the cuts hold the databases' writes until the cut thread runs them: its future
        # cannot be cancelled (an abandoned checkpoint's upload runs, then is discarded)
        done: Future[list[WorkerFiles]] = Future()
        done.set_running_or_notify_cancel()

        def upload(local: dict[int, Any]) -> None:
            try:
                done.set_result(self._upload(writer, local, known, commit))
            except BaseException as exc:  # noqa: BLE001 - the future's exception
                done.set_exception(exc)

        def cut() -> None:
            try:
                local = self._checkpoints(writer, cuts)  # flush + hard links, writes held meanwhile
            except BaseException as exc:  # noqa: BLE001 - the future's exception
                if commit:
                    writer.abort()
                done.set_exception(exc)
                return
            try:
                self._pool.submit(upload, local)
            except BaseException as exc:  # noqa: BLE001 - (shut down meanwhile)
                _remove(local)
                if commit:
                    writer.abort()
                done.set_exception(exc)

        try:
            self._cuts.submit(cut)
        except BaseException:  # (the pool shut down: the cuts still release)
            _remove(self._checkpoints(writer, cuts))
            raise
        return done

    def _checkpoints(self, writer: Any, cuts: dict[int, Any]) -> dict[int, Any]:
        """Run every cut (each releases its database's writes), then raise the first
        failure, if any."""
        local, failed = {}, None
        for w, finish in cuts.items():
            try:
                local[w] = finish(os.path.join(self.scratch, f"ck-{writer.id:06d}-{writer.token}-w{w}"))
            except BaseException as exc:
                failed = failed or exc
        if failed is not None:
            for files in local.values():
                shutil.rmtree(files.dir, ignore_errors=True)
            raise failed
        return local

    def _upload(self, writer: Any, local: dict[int, Any], known: dict[int, Optional[WorkerFiles]], commit: bool) -> list[WorkerFiles]:
        out: list[WorkerFiles] = []
        try:
            for w, files in local.items():
                out.append(self._upload_worker(writer, w, files, known[w]))
            writer.put_meta(META_KEY, {str(wf.worker): wf.to_meta() for wf in out})
            if commit:
                writer.commit()
                self.committed(out)
            return out
        except BaseException:
            if commit:
                writer.abort()
            raise
        finally:
            _remove(local)

    def _upload_worker(self, writer: Any, w: int, files: Any, before: Optional[WorkerFiles]) -> WorkerFiles:
        fs = self.store.fs
        same = before is not None and bool(files.incarnation) and before.incarnation == files.incarnation
        known = dict(before.sst) if same and before is not None else {}
        prefix = f"{SST_DIR}{writer.id:06d}-{writer.token}{w:04x}"
        sst = []
        for f in files.sst:
            ref = known.get(f.name)
            if ref is not None:
                try:
                    writer.share(ref)
                    self.referenced_files += 1
                    self.referenced_bytes += ref.size
                except CheckpointError:  # collected since that checkpoint (no kept one names it): upload it again
                    ref = None
            if ref is None:
                data = _read(files.path(f))
                number = int(f.name.split(".", 1)[0])
                ref = FileRef(f"{prefix}{number:08x}.sst", len(data), checksum(data))
                _write(fs, ref.path, data)
                writer.attach(ref)
                self.uploaded_files += 1
                self.uploaded_bytes += ref.size
            sst.append((f.name, ref))
        bundle = msgpack.packb({f.name: _read(files.path(f)) for f in files.other}, use_bin_type=True)
        small = FileRef(f"{prefix}.dbm", len(bundle), checksum(bundle))
        _write(fs, small.path, bundle)
        writer.attach(small)
        return WorkerFiles(w, tuple(sst), small, files.incarnation)

    def committed(self, files: list[WorkerFiles]) -> None:
        """The checkpoint of ``files`` committed: later ones reference its SST files."""
        with self._lock:
            for wf in files:
                self._committed[wf.worker] = wf

    def close(self) -> None:
        """Wait for the cuts and uploads under way, then remove the scratch directory."""
        self._cuts.shutdown(wait=True)
        self._pool.shutdown(wait=True)
        shutil.rmtree(self.scratch, ignore_errors=True)


def restore_worker(store: Any, wf: WorkerFiles, path: str, settings: Optional[Any] = None) -> Any:
    """Worker ``wf.worker``'s store as checkpointed, opened in ``path`` from the
    checkpoint's files (each verified: :class:`~tstate.errors.CheckpointError` listing
    every missing or corrupt one, nothing opened), no state decoded."""
    from tstate.state.rocksdb.settings import RocksDB
    from tstate.state.rocksdb.worker import WorkerStore

    staging = os.path.abspath(path) + ".from-checkpoint"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    try:
        problems = []
        for name, ref in [*wf.sst, ("", wf.small)]:
            try:
                data = store.read(ref)
            except CheckpointError as exc:
                problems.append(str(exc))
                continue
            if name:
                _write_local(os.path.join(staging, name), data)
            else:
                try:
                    small = msgpack.unpackb(data)
                    for n, content in small.items():
                        if "/" in n or n.startswith("."):
                            raise ValueError(f"file name {n!r}")
                        _write_local(os.path.join(staging, n), content)
                except (ValueError, TypeError, AttributeError, msgpack.UnpackException) as exc:
                    problems.append(f"{ref.path}: not a bundle of a database's files ({exc})")
        if problems:
            raise CheckpointError(
                f"worker {wf.worker}'s RocksDB checkpoint cannot be restored: " + "; ".join(problems)
            )
        return WorkerStore.restore(staging, path, settings or RocksDB(path), uploaded=[n for n, _ in wf.sst])
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _remove(local: dict[int, Any]) -> None:
    """Remove the local checkpoint directories of a cut (uploaded, or abandoned)."""
    for files in local.values():
        shutil.rmtree(files.dir, ignore_errors=True)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _write(fs: Any, path: str, data: bytes) -> None:
    try:
        fs.write_atomic(path, data, fsync=False)
    except OSError as exc:
        raise CheckpointError(f"{fs.describe(path)}: cannot be written ({exc.strerror or exc})") from exc


def _write_local(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
