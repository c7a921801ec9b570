"""A checkpoint captured and not committed yet (:class:`Pending`), and the helpers that
see its files written, in any checkpoint mode: the coordinator commits these in
capture order once every sink has passed their time
(:mod:`tstate.engine.checkpointing.coordinator`)."""

from __future__ import annotations

import threading
import time as _time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Optional

from tstate.errors import CheckpointError
from tstate.hash_kind import HashKind

if TYPE_CHECKING:  # pragma: no cover
    from tstate.engine.checkpointing.forked import Snapshot
    from tstate.engine.checkpointing.slices import Job

__all__ = ["Pending", "files_of", "write_batch", "finish_when_written", "run_job", "wait_quietly"]


def wait_quietly(f: "Future[Any]") -> None:
    """Wait for ``f`` to finish, whatever its outcome (read later, in order)."""
    try:
        f.result()
    except BaseException:
        pass


class Pending:
    """A checkpoint captured and not committed yet: its ``writer``, the job writing its
    data (``written``: bytes written, or the job's error), the commit job once the
    sinks passed its time; in fork mode its snapshot process, the files it reported,
    and the operator schemas and metadata the commit records."""

    __slots__ = ("time", "writer", "written", "commit", "snapshot", "files", "schemas", "meta", "job", "captured", "base", "sst")

    def __init__(
        self,
        time: int,
        writer: Any,
        written: "Future[Any]",
        snapshot: "Optional[Snapshot]" = None,
        schemas: Optional[dict[str, tuple[Any, int, HashKind]]] = None,
        meta: Optional[dict[str, Any]] = None,
        job: "Optional[Job]" = None,
    ) -> None:
        self.time = time
        self.writer = writer
        self.written = written
        self.commit: Optional[Future[Any]] = None
        self.snapshot = snapshot
        self.files: list[list[Any]] = []
        self.schemas = schemas or {}
        self.meta = meta or {}
        self.job = job  # async / thread / sync: the encoding job (its files are adopted)
        self.captured = _time.perf_counter()
        self.base: Optional[int] = None  # the checkpoint it builds on (committed by the writer process)
        #: the upload of the RocksDB databases' files (tstate.engine.checkpointing.file_capture), if any
        self.sst: Optional[Future[Any]] = None


def files_of(p: Pending) -> list[list[Any]]:
    """``[operator, bin, snapshot, path, size, xxh64]`` of the files a checkpoint wrote
    (``path`` ``None``: a bin emptied since the last checkpoint, whose chain it drops)."""
    return p.files + p.job.files if p.job is not None else p.files


def write_batch(fs: Any, batch: Any) -> None:
    """Write a batch of data files (no fsync: the commit syncs once)."""
    for path, data in batch:
        try:
            fs.write_atomic(path, data, fsync=False)
        except OSError as exc:
            raise CheckpointError(f"{path}: cannot be written ({exc})") from None


def finish_when_written(p: Pending) -> None:
    """Complete ``p.written`` (with the bytes written, or the first write error) once
    every batch of its encoded job is written."""
    job = p.job
    assert job is not None
    batches = list(job.batches)
    left = [len(batches)]
    lock = threading.Lock()

    def one_done(_f: Any) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last and not p.written.done():
            try:
                p.written.set_result(job.wait())
            except BaseException as exc:
                p.written.set_exception(exc)

    if not batches:
        p.written.set_result(0)
        return
    for f in batches:
        f.add_done_callback(one_done)


def run_job(p: Pending) -> None:
    """Thread mode: encode and write the whole job on the writer thread."""
    job = p.job
    assert job is not None
    try:
        job.run(float("inf"))
    except BaseException as exc:
        job.release()
        p.written.set_exception(exc)
        return
    finish_when_written(p)
