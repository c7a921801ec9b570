"""Encoding a captured checkpoint in bounded slices.

A :class:`Job` is one captured checkpoint: the frozen bins it must write
(:class:`BinWork`, see :mod:`tstate.engine.checkpointing.freeze`) and the files written so far.
:meth:`Job.run` encodes bins for about a given time -- a *slice* -- and hands their
files to a sink (in ``mode="async"`` a :class:`~tstate.engine.checkpointing.writer.FileWriter`
process; the store's files are written there, never under the processing thread's
interpreter lock) as one batch.  The coordinator runs slices between steps of the
processing thread, paced so that the checkpoint is written well before the next one is
due (:class:`Pacer`); ``mode="thread"`` runs the whole job on a background thread, and
``mode="sync"`` at once.  Each bin's states are encoded
by msgspec and checked a chunk at a time (:func:`tstate.state.payload.encode_checked`),
its frozen states read where they are (or as the copy made before the processing
thread changed them).

The files are named and checksummed here; the writer then *adopts* the references at
the commit (:meth:`tstate.checkpoint.store.CheckpointWriter.adopt`).
"""

from __future__ import annotations

import time as _time
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Optional, Sequence

from tstate.checkpoint.delta import encode_delta_parts
from tstate.engine.checkpointing.freeze import MISSING, Frozen
from tstate.keys import encode_keys
from tstate.state.appends import AppendLog, appendable
from tstate.state.bin import Bin
from tstate.state.payload import encode_checked, encode_keys_raw
from tstate.types.codec import encode_envelope

__all__ = ["BinWork", "Job", "Pacer"]

#: writes a batch of ``(path, bytes)``; the future completes once they are written
Sink = Callable[[Sequence[tuple[str, bytes]]], "Future[None]"]


class BinWork:
    """One bin a checkpoint writes: whole (``snapshot``) or as a delta of its frozen
    keys, with its timer set at the checkpoint's time (``timers``, ready to encode)."""

    __slots__ = ("operator", "codec", "frozen", "bin", "snapshot", "timers", "keys")

    def __init__(self, operator: str, codec: Any, frozen: Frozen, b: Bin, snapshot: bool, timers: list[Any], keys: int) -> None:
        self.operator = operator
        self.codec = codec
        self.frozen = frozen
        self.bin = b
        self.snapshot = snapshot
        self.timers = timers
        self.keys = keys  # how many states it holds at most (for pacing)


def encode_work(w: BinWork) -> bytes:
    """The file of one bin (a snapshot or a delta, :mod:`tstate.checkpoint.delta`): its
    states at the checkpoint's time (the live ones, and the copies copy-on-write made)
    encoded by msgspec and checked right after, a chunk at a time, while they are in
    the processor's cache (:func:`tstate.state.payload.encode_checked`)."""
    codec, b = w.codec, w.bin

    def encode(keys: list[Any], values: list[Any], copies: int) -> bytes:
        gone: list[Any] = []
        if values.count(MISSING):
            pairs = list(zip(keys, values))
            gone = [k for k, v in pairs if v is MISSING]
            keys = [k for k, v in pairs if v is not MISSING]
            values = [v for v in values if v is not MISSING]
        if w.snapshot:
            if appendable(codec):  # the chain starts afresh: log its long lists
                log = b.appends
                if log is None:
                    log = b.appends = AppendLog()
                log.forget()
                log.split(keys, values)
            wkeys = encode_keys_raw(keys)
            payload = {"bin": b.index, "keys": wkeys, "states": values, "timers": w.timers}
            fingerprint = codec.fingerprint

            def build(states: list[Any]) -> bytes:
                payload["states"] = states
                return encode_envelope(fingerprint, payload)
        else:
            deletes = encode_keys(gone)
            akeys: Any = None
            appended: Any = None
            if appendable(codec):  # list states: what was appended (tstate.state.appends)
                log = b.appends
                if log is None:
                    log = b.appends = AppendLog()
                for k in gone:
                    log.drop(k)
                keys, values, app_keys, suffixes = log.split(keys, values)
                if app_keys:
                    akeys = encode_keys_raw(app_keys)
                    appended = encode_checked(_raw, app_keys, suffixes, codec, w.operator)
            wkeys = encode_keys_raw(keys)

            def build(states: list[Any]) -> bytes:
                return encode_delta_parts(b.index, wkeys, states, deletes, w.timers, codec.fingerprint, akeys, appended)

        return encode_checked(build, keys, values, codec, w.operator)

    out: bytes = w.frozen.take(b, encode)
    return out


def _raw(states: Any) -> Any:
    """What :func:`~tstate.state.payload.encode_checked` checked and encoded, as it is."""
    return states


class Job:
    """The encoding and writing of one captured checkpoint (see the module docstring)."""

    def __init__(self, work: list[BinWork], checkpoint_id: int, token: str, sink: Sink) -> None:
        self.work = deque(work)
        self.id = checkpoint_id
        self.token = token
        self.sink = sink
        #: ``[operator, bin, snapshot, path, size, xxh64]`` of every file encoded so far
        self.files: list[list[Any]] = []
        self.batches: list[Future[None]] = []
        self.bytes = 0
        self.seconds = 0.0  # spent encoding (and handing over), all slices
        self.keys_total = self.keys_left = sum(w.keys for w in work)
        #: stop a slice once this many keys are encoded in all (the pacer's schedule; None: by time only)
        self.keys_due: Optional[int] = None
        self.slices = 0
        self._dirs: dict[str, str] = {}  # operator -> its data directory
        self.paced_at = 0.0  # the fraction of the interval elapsed at the last slice (the pacer's)

    @property
    def encoded(self) -> bool:
        """Whether every bin is encoded (its files may still be being written)."""
        return not self.work

    def run(self, budget: float) -> bool:
        """Encode bins for about ``budget`` seconds (at least one bin) -- and, when the
        pacer set :attr:`keys_due`, no further than that many keys encoded in all --
        hand their files to the sink as one batch; whether every bin is encoded now."""
        from tstate.checkpoint.store import data_file_path, file_ref

        start = _time.perf_counter()
        batch: list[tuple[str, bytes]] = []
        work = self.work
        dirs = self._dirs
        try:
            while work:
                w = work.popleft()
                data = encode_work(w)
                self.keys_left -= w.keys
                kind = "snap" if w.snapshot else "delta"
                d = dirs.get(w.operator)
                if d is None:  # data/<operator dir>/ (named once per operator)
                    d = dirs[w.operator] = data_file_path(w.operator, 0, self.id, self.token, kind).rsplit("/", 2)[0]
                path = f"{d}/{w.bin.index}/{self.id:06d}-{self.token}-{kind}.bin"
                ref = file_ref(path, data)
                self.files.append([w.operator, w.bin.index, w.snapshot, ref.path, ref.size, ref.xxh64])
                self.bytes += ref.size
                batch.append((path, data))
                if _time.perf_counter() - start >= budget:
                    break
                due = self.keys_due
                if due is not None and self.keys_total - self.keys_left >= due:
                    break
        finally:
            if batch:
                self.batches.append(self.sink(batch))
            self.seconds += _time.perf_counter() - start
            self.slices += 1
        return not work

    def release(self) -> None:
        """Abandoned: let go of the frozen bins not encoded (no more copy-on-write)."""
        while self.work:
            w = self.work.popleft()
            w.frozen.take(w.bin)

    def written(self) -> bool:
        """Whether every file is encoded and written (raises a write's error)."""
        if self.work:
            return False
        for f in self.batches:
            if not f.done():
                return False
            f.result()
        return True

    def wait(self, timeout: Optional[float] = None) -> int:
        """Wait until every file is written (after the last slice); the bytes written."""
        for f in self.batches:
            f.result(timeout)
        return self.bytes


class Pacer:
    """How much a slice may encode, so that a checkpoint's encoding is spread evenly over
    the interval until the next one and never lands on one step.

    The work is *scheduled* in keys over the interval until the next checkpoint is due:
    once the fraction ``elapsed`` of that interval has passed (the coordinator measures
    it in epochs applied when checkpoints are every N epochs, else in wall time), the
    fraction ``elapsed / target`` of the job's keys should be encoded -- the job finishes
    after ``target`` (default 80%) of the interval, so the next checkpoint finds it done
    -- and a slice encodes what the schedule is behind by (:attr:`Job.keys_due`; work is
    done one bin at a time, so a slice can overrun by one bin), in at most 1.5 times the
    time the share of the interval since the previous slice takes at the measured cost
    per key (:meth:`learn`), and at least ``max_slice`` seconds.  Every epoch then pays
    about the same share.  Whatever the schedule, a slice may also use ``share`` (10%) of
    the wall time since the capture (how the first checkpoints, before the interval is
    known, progress).  A job whose rest takes at most ``small`` seconds is finished at
    once.  A job that needs more than the interval is not hurried further: the next
    checkpoint is skipped instead (the coordinator).

    >>> p = Pacer()
    >>> job = Job([], 1, "ab", lambda batch: None)
    >>> job.keys_total = job.keys_left = 100_000     # 0.2 s of work at the initial 2 us per key
    >>> round(p.budget(job, 0.010, None), 6), p.budget(job, 0.100, None)   # 10% of the time since the capture
    (0.001, 0.003)
    >>> b = p.budget(job, 0.0, 1.0, elapsed=0.1); job.keys_due    # 10% of the interval: 1/8 of the keys
    12500
    >>> job.keys_left = 87_500; p.budget(job, 0.0, 1.0, elapsed=0.1)       # done: nothing more now
    0.0
    >>> job.keys_left = 100; p.budget(job, 0.0, None)                     # small: at once
    inf
    """

    def __init__(
        self, share: float = 0.10, max_slice: float = 0.003, target: float = 0.8, small: float = 0.0005,
        max_share: float = 0.15,
    ) -> None:
        self.share = share
        self.max_share = max_share  # (kept for callers that set it; the schedule replaces it)
        self.max_slice = max_slice
        self.target = target
        self.small = small
        self.per_key = 2e-6  # seconds per key encoded: learned from the slices

    def budget(self, job: Job, since_capture: float, interval: Optional[float], elapsed: Optional[float] = None) -> float:
        """The length of the next slice in seconds (0: not now), setting
        :attr:`Job.keys_due` when it follows the schedule.  ``since_capture``: wall
        seconds since the capture; ``interval``: the expected wall seconds between
        checkpoints (``None``: not known yet); ``elapsed``: the fraction of the interval
        passed (default ``since_capture / interval``)."""
        job.keys_due = None
        need = job.keys_left * self.per_key
        if need <= self.small:
            return float("inf")  # the rest at once
        if elapsed is None and interval is not None and interval > 0:
            elapsed = since_capture / interval
        if elapsed is not None:
            done = job.keys_total - job.keys_left
            due = int(job.keys_total * min(1.0, elapsed / self.target))
            if due > done:
                # a slice: the keys the schedule is behind by, in at most 1.5x the time of
                # its share since the previous slice (a step can be a whole epoch)
                share = job.keys_total * max(0.0, elapsed - job.paced_at) / self.target
                job.paced_at = elapsed
                job.keys_due = due
                return max(self.max_slice, 1.5 * share * self.per_key)
        allowed = self.share * since_capture - job.seconds
        return min(allowed, self.max_slice) if allowed > 0 else 0.0

    def learn(self, job: Job, keys: int, seconds: float) -> None:
        """A slice encoded ``keys`` keys in ``seconds``."""
        if keys > 0:
            self.per_key = 0.7 * self.per_key + 0.3 * (seconds / keys)
