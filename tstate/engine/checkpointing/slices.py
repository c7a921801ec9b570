"""Encoding a captured checkpoint in bounded slices.

A :class:`Job` is one captured checkpoint: the frozen bins it must write
(:class:`BinWork`, see :mod:`tstate.engine.checkpointing.freeze`) and the files written so far.
:meth:`Job.run` encodes bins for about a given time -- a *slice* -- and hands their
files to a sink (in ``mode="async"`` a :class:`~tstate.engine.checkpointing.writer.FileWriter`
process; the store's files are written there, never under the processing thread's
interpreter lock) as one batch.  The coordinator runs slices between steps of the
processing thread, paced so that the checkpoint is written well before the next one is
due (:class:`Pacer`); ``mode="thread"`` runs the whole job on a background thread, and
``mode="sync"`` at once.  Each bin is one msgspec call
(:func:`tstate.state.payload.wire_states`), its frozen states read where they are (or
as the copy made before the processing thread changed them).

The files are named and checksummed here; the writer then *adopts* the references at
the commit (:meth:`tstate.checkpoint.store.CheckpointWriter.adopt`).
"""

from __future__ import annotations

import time as _time
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Optional, Sequence

from tstate.engine.checkpointing.freeze import MISSING, Frozen, Raw
from tstate.state.bin import Bin

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
    """The file of one bin (a snapshot or a delta, :mod:`tstate.checkpoint.delta`)."""
    from tstate.checkpoint.delta import encode_delta_parts
    from tstate.keys import encode_keys
    from tstate.state.payload import raise_bad_state, wire_states
    from tstate.types.codec import encode_envelope

    codec, b = w.codec, w.bin

    def encode(keys: list[Any], values: list[Any], copies: int) -> bytes:
        gone: list[Any] = []
        if values.count(MISSING):
            pairs = list(zip(keys, values))
            gone = [k for k, v in pairs if v is MISSING]
            keys = [k for k, v in pairs if v is not MISSING]
            values = [v for v in values if v is not MISSING]
        states = values
        if copies:  # check and convert the live states only (a Raw copy was checked when made)
            live = [i for i, v in enumerate(values) if type(v) is not Raw]
            _lk, lv = wire_states([keys[i] for i in live], [values[i] for i in live], codec, w.operator)
            values = list(values)
            for i, v in zip(live, lv):
                values[i] = v
            wkeys = encode_keys(keys)
        else:
            wkeys, values = wire_states(keys, values, codec, w.operator)
        try:
            if w.snapshot:
                return encode_envelope(codec.fingerprint, {"bin": b.index, "keys": wkeys, "states": values, "timers": w.timers})
            return encode_delta_parts(b.index, wkeys, values, encode_keys(gone), w.timers, codec.fingerprint)
        except (OverflowError, TypeError):  # an int beyond 64 bits, a str subclass... in a state
            raise_bad_state(((k, v) for k, v in zip(keys, states) if type(v) is not Raw), codec, w.operator)
            raise

    out: bytes = w.frozen.take(b, encode)
    return out


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
        self.keys_left = sum(w.keys for w in work)
        self.slices = 0

    @property
    def encoded(self) -> bool:
        """Whether every bin is encoded (its files may still be being written)."""
        return not self.work

    def run(self, budget: float) -> bool:
        """Encode bins for about ``budget`` seconds (at least one bin), hand their files
        to the sink as one batch; whether every bin is encoded now."""
        from tstate.checkpoint.store import data_file_path, file_ref

        start = _time.perf_counter()
        batch: list[tuple[str, bytes]] = []
        work = self.work
        try:
            while work:
                w = work.popleft()
                data = encode_work(w)
                self.keys_left -= w.keys
                kind = "snap" if w.snapshot else "delta"
                path = data_file_path(w.operator, w.bin.index, self.id, self.token, kind)
                ref = file_ref(path, data)
                self.files.append([w.operator, w.bin.index, w.snapshot, ref.path, ref.size, ref.xxh64])
                self.bytes += ref.size
                batch.append((path, data))
                if _time.perf_counter() - start >= budget:
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
    """How long a slice may be, so that a checkpoint's encoding is spread over the
    interval until the next one and never lands on one step.

    Encoding may take a fraction of the wall time since the capture: ``share``
    (default 10%), raised while the job is behind schedule -- its remaining keys at the
    measured cost per key would not be done within ``target`` (default half) of the
    expected interval -- up to ``max_share`` (15%); one slice is at most ``max_slice``
    seconds (work is done one bin at a time, so a slice can overrun by one bin).  The
    share is the bound on what a checkpoint adds to a step: a job that needs more is
    not hurried further, the next checkpoint is skipped instead (the coordinator).

    >>> p = Pacer()
    >>> job = Job([], 1, "ab", lambda batch: None)
    >>> job.keys_left = 100_000
    >>> round(p.budget(job, 0.010, None), 6), p.budget(job, 0.100, None)   # 10% of the time since the capture
    (0.001, 0.003)
    >>> job.keys_left = 100; round(p.budget(job, 0.0, None), 6)            # small: at once
    0.0002
    """

    def __init__(
        self, share: float = 0.10, max_share: float = 0.15, max_slice: float = 0.003, target: float = 0.5, small: float = 0.0005
    ) -> None:
        self.share = share
        self.max_share = max_share
        self.max_slice = max_slice
        self.target = target
        self.small = small
        self.per_key = 2e-6  # seconds per key encoded: learned from the slices

    def budget(self, job: Job, since_capture: float, interval: Optional[float]) -> float:
        """The length of the next slice (0: not now).  A job whose rest takes at most
        ``small`` seconds is finished at once."""
        need = job.keys_left * self.per_key
        if need <= self.small:
            return need
        share = self.share
        if interval is not None and interval > 0:
            left = self.target * interval - since_capture
            if left <= 0 or need > share * left:
                share = self.max_share
        allowed = share * since_capture - job.seconds
        return min(allowed, self.max_slice) if allowed > 0 else 0.0

    def learn(self, job: Job, keys: int, seconds: float) -> None:
        """A slice encoded ``keys`` keys in ``seconds``."""
        if keys > 0:
            self.per_key = 0.7 * self.per_key + 0.3 * (seconds / keys)
