"""Sinks: where a stream's records leave the dataflow.

A :class:`Sink` receives ``write(worker, time, records)`` for every batch that reaches
it, and ``frontier(worker, antichain)`` whenever the frontier at the sink moves (times
not ``>=`` an element are complete: nothing more will be written at them).

On the Spark backend the executors write every sink's records to files in the
checkpoint store (:mod:`tstate.spark.output`); a sink with ``on_driver = True`` (the
default: collecting, callback and printing sinks) then gets ``write`` on the driver
after each micro-batch commits, while :class:`FileSink` (``on_driver = False``) has its
epoch files written by Spark tasks (:meth:`FileSink.commit_epochs`) and :func:`keep`
delivers nowhere (read its output with ``Backend.output(stream)``).
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Iterable, Iterator, Optional, TextIO

from tstate.progress.frontier import Antichain

__all__ = ["Sink", "Kept", "Collected", "CallbackSink", "StdoutSink", "FileSink", "stdout", "callback", "files", "keep"]


class Sink:
    """Base class of sinks; override what you need."""

    #: on Spark: whether the driver delivers the committed records to ``write``
    on_driver = True

    def open(self, worker: int, workers: int) -> None:
        """Called once per worker before any write."""

    def write(self, worker: int, time: Any, records: list[Any]) -> None:
        """A batch of records at ``time`` arrived on ``worker``.  On Spark a driver sink
        gets a read-only sequence decoded when first read
        (:class:`tstate.spark.lazy_records.LazyRecords`: ``len(records)`` decodes
        nothing); keep ``list(records)`` if the sink keeps them."""

    def frontier(self, worker: int, frontier: Antichain) -> None:
        """The frontier at the sink moved; times it passed are complete."""

    def close(self, worker: int) -> None:
        """The dataflow finished."""

    def sync(self, worker: int) -> None:
        """Make durable everything this sink has committed so far (the epochs the
        frontier passed).  The embedded engine calls it before committing a checkpoint
        at ``T`` once the sink has passed every time before ``T`` (so a crash after
        that commit never loses output of a time before ``T``), and after ``close``.
        A sink whose commits are durable at once (or that keeps nothing) leaves it
        empty; one that syncs in groups does so here.  The Spark backend does not
        call it: a driver sink gets a micro-batch's records after the batch committed,
        and :class:`FileSink`'s Spark path is durable when it returns."""

    def restore(self, time: Any) -> None:
        """The execution resumes from a checkpoint at ``time``: everything before it was
        delivered and committed by an earlier run."""


class Collected(Sink):
    """Collects ``(time, record)`` pairs in memory (in arrival order)."""

    def __init__(self) -> None:
        self.items: list[tuple[Any, Any]] = []

    def write(self, worker: int, time: Any, records: list[Any]) -> None:
        self.items.extend((time, r) for r in records)

    def records(self) -> list[Any]:
        """All records, in arrival order."""
        return [r for _, r in self.items]

    def by_time(self) -> dict[Any, list[Any]]:
        """Records grouped by time, times in sorted order, records in arrival order."""
        out: dict[Any, list[Any]] = {}
        for t, r in sorted(self.items, key=lambda p: p[0]):
            out.setdefault(t, []).append(r)
        return out

    def __len__(self) -> int:
        return len(self.items)

    def __repr__(self) -> str:
        return f"Collected({len(self.items)} records)"


class CallbackSink(Sink):
    """Calls ``fn(time, records)`` for every batch."""

    def __init__(self, fn: Callable[[Any, list[Any]], Any]) -> None:
        self.fn = fn

    def write(self, worker: int, time: Any, records: list[Any]) -> None:
        self.fn(time, records if isinstance(records, list) else list(records))  # (fn gets a list, as documented)


class StdoutSink(Sink):
    """Prints ``time: record`` lines."""

    def __init__(self, file: Optional[TextIO] = None, fmt: Optional[Callable[[Any, Any], str]] = None) -> None:
        self.file = file
        self.fmt = fmt

    def write(self, worker: int, time: Any, records: list[Any]) -> None:
        out = self.file or sys.stdout
        fmt = self.fmt
        for r in records:
            print(fmt(time, r) if fmt else f"{time}: {r}", file=out)


def stdout(fmt: Optional[Callable[[Any, Any], str]] = None) -> StdoutSink:
    """A sink printing each record as ``time: record`` (or ``fmt(time, record)``)."""
    return StdoutSink(fmt=fmt)


def callback(fn: Callable[[Any, list[Any]], Any]) -> CallbackSink:
    """A sink calling ``fn(time, records)`` per batch."""
    return CallbackSink(fn)


class FileSink(Sink):
    """Exactly-once output to files: one JSON-lines file per epoch,
    ``DIR/epoch-<time>.jsonl``, written when the frontier passes the epoch (written to
    a temporary file, then renamed: a reader never sees half an epoch).  After recovery
    from a checkpoint at ``T``, epochs ``>= T`` are recomputed and their files replaced,
    so the directory ends up as after an uninterrupted run: no duplicates, no gaps.
    Records must be JSON-encodable (tuples become lists).  Integer epochs only.  Other
    files in ``DIR`` are never touched (a recovery deletes only ``epoch-<digits>.jsonl``).

    **Durable in groups.**  On the embedded engine an epoch's file is renamed into place
    as soon as the frontier passes it, and made durable later, with others, at a
    barrier (:meth:`sync`: one ``syncfs`` of the filesystem -- or one ``fsync`` per file
    where there is none -- and one sync of the directory): before the engine commits a
    checkpoint covering those epochs, at :meth:`close`, and at the latest once
    ``sync_every_epochs`` files or ``sync_every_seconds`` seconds have gone un-synced
    (what a crash of a run without checkpoints may lose: such a run's rerun rewrites
    every file).  A checkpoint at ``T`` therefore commits only once every file of an
    epoch ``< T`` is durable; the files of epochs ``>= T`` a crash may have torn are the
    ones a recovery from ``T`` deletes and rewrites.

    **Deterministic bytes.**  Within a file the lines are sorted (by their JSON text), so
    an epoch's file depends only on the epoch's records -- not on how many workers
    produced them, in which order they were scheduled, or whether the run resumed from
    a checkpoint (restored state may fire timers in another order): a resumed or re-run
    job rewrites byte-identical files, on either engine.  An epoch with more than
    ``sort_run_chars`` characters of JSON is sorted in runs spilled to temporary files
    and merged, so its records need not fit in memory.

    On Spark the records never reach the driver: after a micro-batch commits, Spark
    tasks write its completed epochs' files from the batch's committed output files, a
    run of epochs per task (:func:`tstate.spark.output.finalise` calls
    :meth:`commit_epochs`, which is durable on return), while the next batch runs
    (:mod:`tstate.spark.delivery`), so ``DIR`` must be reachable from the executors at
    the same path."""

    on_driver = False
    #: the JSON characters of an epoch sorted in memory at once (larger epochs: merged runs)
    sort_run_chars = 64 << 20
    #: embedded engine: at most this many epoch files are renamed into place un-synced ...
    sync_every_epochs = 1024
    #: ... or for at most about this many seconds (checked as files are written)
    sync_every_seconds = 5.0

    def __init__(self, directory: str) -> None:
        import os

        self.directory = os.path.abspath(directory)  # (Spark tasks write it from another working directory)
        os.makedirs(self.directory, exist_ok=True)
        self._buffers: dict[Any, list[Any]] = {}
        self._done_upto: Any = None
        self._unsynced: list[str] = []  # epoch files renamed into place, not yet durable
        self._unsynced_since = 0.0
        #: durability barriers made so far (each: one syncfs or fsync set, one directory sync)
        self.syncs = 0

    def restore(self, time: Any) -> None:
        """Recovery from a checkpoint at ``time``: files of epochs ``>= time`` will be
        redone, so they are deleted, with the temporaries of a writer that crashed.
        Only names this sink writes (``epoch-<digits>.jsonl``, and
        ``epoch-<digits>.jsonl.tmp-<hex>`` while writing) are looked at: any other file
        in the directory (``epoch-backup.jsonl``, ``notes.txt``) is left alone."""
        import os
        import re

        ours = re.compile(r"^epoch-(\d+)\.jsonl(\.tmp-[0-9a-f]+)?$")
        for name in os.listdir(self.directory):
            m = ours.match(name)
            if m is not None and (m.group(2) is not None or int(m.group(1)) >= time):
                try:
                    os.remove(os.path.join(self.directory, name))
                except FileNotFoundError:
                    pass

    def write(self, worker: int, time: Any, records: list[Any]) -> None:
        self._buffers.setdefault(time, []).extend(records)

    def frontier(self, worker: int, frontier: Antichain) -> None:
        done = [t for t in self._buffers if not frontier.less_equal(t)]
        for t in sorted(done):
            self._commit(t, self._buffers.pop(t))

    def _commit(self, time: Any, records: list[Any]) -> None:
        """Embedded engine: write epoch ``time``'s file and rename it into place; it is
        made durable at the next barrier (see the class docstring)."""
        import os
        import time as _time

        path = self._path(time)
        tmp = _temporary(path)
        try:
            _write_epoch(tmp, records, self.sort_run_chars)
            os.replace(tmp, path)
        except BaseException:
            _remove_quietly(tmp)
            raise
        now = _time.monotonic()
        if not self._unsynced:
            self._unsynced_since = now
        self._unsynced.append(path)
        if len(self._unsynced) >= self.sync_every_epochs or now - self._unsynced_since >= self.sync_every_seconds:
            self.sync(0)

    def sync(self, worker: int) -> None:
        """Make every epoch file renamed into place so far durable: one ``syncfs`` (or an
        ``fsync`` per file), then one sync of the directory (nothing when none is
        pending)."""
        if not self._unsynced:
            return
        paths, self._unsynced = self._unsynced, []
        _durable(self.directory, paths)
        _sync_dir(self.directory)
        self.syncs += 1

    def _path(self, time: Any) -> str:
        import os

        return os.path.join(self.directory, f"epoch-{time:012d}.jsonl")

    def commit_epoch(self, time: Any, records: Iterable[Any]) -> None:
        """Write epoch ``time``'s file (replacing it atomically) from ``records``, one
        JSON line each, the lines sorted (see the class docstring), durably; ``records``
        are streamed: they need not fit in memory."""
        self.commit_epochs([(time, records)])

    def commit_epochs(self, epochs: Iterable[tuple[Any, Iterable[Any]]]) -> int:
        """Write the files of ``epochs`` (``(time, records)`` pairs, each epoch's
        records streamed) as :meth:`commit_epoch` does, with one durability barrier for
        all of them: each goes to a temporary file, then the data of all is made
        durable at once (Linux: one ``syncfs`` of the directory's filesystem, else one
        ``fsync`` per file), then each is renamed over its epoch's file and the
        directory is synced.  A crash leaves every epoch's file either as it was or
        complete (and temporaries that :meth:`restore` deletes).  Returns the files
        written."""
        import os

        tmps: list[tuple[str, str]] = []
        try:
            for time, records in epochs:
                path = self._path(time)
                tmp = _temporary(path)  # two attempts at one epoch (a Spark retry) never share one
                tmps.append((tmp, path))
                _write_epoch(tmp, records, self.sort_run_chars)
            _durable(self.directory, [t for t, _ in tmps])
            for tmp, path in tmps:
                os.replace(tmp, path)
            _sync_dir(self.directory)
        except BaseException:
            for tmp, _ in tmps:
                _remove_quietly(tmp)
            raise
        return len(tmps)

    def close(self, worker: int) -> None:
        """Write the epochs still buffered, then make every file durable."""
        for t in sorted(self._buffers):
            self._commit(t, self._buffers.pop(t))
        self.sync(worker)


#: the records' JSON encoder (``json.dumps`` with ``separators`` builds one per call)
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def _line_encoder() -> Callable[[Any], str]:
    """A function giving a record's line, exactly ``json.dumps(record, separators=(",",
    ":"))``, for one epoch's records: CPython's C encoder made once (``encode`` makes
    one per record; its circular-reference markers are per epoch: an error ends the
    epoch), else :data:`_ENCODER`'s ``encode``."""
    import json.encoder as encoder

    make = getattr(encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - a Python without the C accelerator
        return _ENCODER.encode
    chunks = make({}, _ENCODER.default, encoder.encode_basestring_ascii, None, ":", ",", False, False, True)
    join = "".join
    return lambda record: join(chunks(record, 0))


def _write_epoch(path: str, records: Iterable[Any], run_chars: int) -> None:
    """Write ``records`` to ``path`` as sorted JSON lines (``json.dumps(record,
    separators=(",", ":"))`` each, newline-terminated; ASCII, as JSON escapes the
    rest): in one write when they are a list of fewer than ``run_chars`` characters,
    else streamed through :func:`sorted_lines`."""
    encode = _line_encoder()
    if isinstance(records, list):
        lines = [encode(r) for r in records]
        if sum(map(len, lines)) + len(lines) < run_chars:
            lines.sort()
            if lines:
                lines.append("")  # (the last line's newline)
            _write_bytes(path, "\n".join(lines).encode("ascii"))
            return
        source: Iterable[str] = lines
    else:
        source = map(encode, records)
    with open(path, "w", encoding="ascii", newline="\n") as f:
        for line in sorted_lines(source, run_chars):
            f.write(line)
            f.write("\n")


def _write_bytes(path: str, data: bytes) -> None:
    """Create (or truncate) ``path`` holding ``data``: the OS calls only (no Python
    file object: the embedded engine writes one small file per epoch)."""
    import os

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _temporary(path: str) -> str:
    """A fresh temporary name beside ``path`` (``<path>.tmp-<hex>``)."""
    import secrets

    return f"{path}.tmp-{secrets.token_hex(4)}"


def _remove_quietly(path: str) -> None:
    import os

    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _syncfs() -> Any:
    """libc's ``syncfs`` (Linux), or None."""
    global _SYNCFS
    if _SYNCFS is False:
        try:
            import ctypes
            import ctypes.util

            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            _SYNCFS = getattr(libc, "syncfs", None)
        except (OSError, AttributeError):  # pragma: no cover - not a libc platform
            _SYNCFS = None
    return _SYNCFS


_SYNCFS: Any = False


def _durable(directory: str, paths: list[str]) -> None:
    """Make the data of the files ``paths`` (in ``directory``) durable: one ``fsync``
    for a single file, one ``syncfs`` of the filesystem for several (where there is
    one: a sync per file costs a journal commit each), else an ``fsync`` per file."""
    import os

    if not paths:
        return
    sync = _syncfs() if len(paths) > 1 else None
    if sync is not None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            if sync(fd) == 0:
                return
        finally:
            os.close(fd)
    for p in paths:  # (no syncfs, or it failed: one by one)
        try:
            fd = os.open(p, os.O_RDONLY)
        except FileNotFoundError:  # (deleted since: nothing of it to keep)
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _sync_dir(directory: str) -> None:
    """Make renames in ``directory`` durable (where directories can be synced)."""
    import os

    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - a filesystem without directory sync
        pass
    finally:
        os.close(fd)


def sorted_lines(lines: Iterable[str], run_chars: int) -> Iterator[str]:
    """``lines`` (strings without a newline) in sorted order, holding at most about
    ``run_chars`` characters in memory: longer inputs are sorted in runs written to
    anonymous temporary files, then merged."""
    import heapq
    import tempfile

    runs: list[TextIO] = []
    chunk: list[str] = []
    size = 0
    try:
        for line in lines:
            chunk.append(line)
            size += len(line) + 1
            if size >= run_chars:
                chunk.sort()
                run = tempfile.TemporaryFile("w+", encoding="utf-8", errors="surrogatepass", newline="\n")
                run.writelines(x + "\n" for x in chunk)
                run.seek(0)
                runs.append(run)
                chunk, size = [], 0
        chunk.sort()
        if not runs:
            yield from chunk
            return
        readers = [(x[:-1] for x in run) for run in runs]
        yield from heapq.merge(*readers, iter(chunk))
    finally:
        for spilled in runs:
            spilled.close()


def files(directory: str) -> FileSink:
    """An exactly-once sink writing one JSON-lines file per epoch (see :class:`FileSink`)."""
    return FileSink(directory)


class Kept(Sink):
    """Delivers nowhere: on Spark its records are kept only in the micro-batches'
    output files (read them as a DataFrame with ``Backend.output(stream)``); on the
    embedded engine they are dropped."""

    on_driver = False


def keep() -> Kept:
    """A sink whose output is only kept on Spark, for ``Backend.output`` (see :class:`Kept`)."""
    return Kept()
