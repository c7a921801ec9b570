"""The captures that freeze what changed (``mode="sync"``, ``"thread"``, and the base
of ``"async"``): at the checkpoint the processing path hands each changed bin's
changed keys (a delta) or all its keys (a snapshot) to a copy-on-write
:class:`~tstate.engine.checkpointing.freeze.Frozen`, and an encoding
:class:`~tstate.engine.checkpointing.slices.Job` takes it from there: right here
(:class:`SyncCapture`, the baseline), on a background thread (:class:`ThreadCapture`,
which competes for the interpreter lock), or in paced slices between steps
(:class:`~tstate.engine.checkpointing.async_capture.AsyncCapture`).
"""

from __future__ import annotations

import time as _time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from tstate.engine.checkpointing.capture import CaptureMode, Capturing
from tstate.engine.checkpointing.freeze import MISSING, Frozen
from tstate.engine.checkpointing.pending import Pending, finish_when_written, run_job
from tstate.engine.checkpointing.slices import BinWork, Job
from tstate.hash_kind import HashKind
from tstate.state.payload import wire_timers

__all__ = ["FrozenCapture", "SyncCapture", "ThreadCapture"]


class FrozenCapture(CaptureMode):
    """A capture that freezes what changed and hands an encoding job on
    (:meth:`hand_over`: the mode's part)."""

    def capture(self, t: int) -> None:
        """Freeze every changed bin at ``t`` (see :mod:`tstate.engine.checkpointing.freeze`),
        release the barrier, and hand the job over."""
        c = self.c
        start = _time.perf_counter()
        precopy = c.precopy()
        if precopy is not None:
            precopy.before_capture()
        work: list[BinWork] = []
        drops: list[list[Any]] = []  # bins emptied since the last checkpoint: their chains go
        schemas: dict[str, tuple[Any, int, HashKind]] = {}
        for op in c.stateful():
            schemas.setdefault(op.name, c.chains.schema_of(op))
            if c.files is not None and c.files.owns(op):  # RocksDB: its database's files, not encoded
                c.files.freeze(op)
                continue
            if op.cow is not None and op.cow.pending:  # thread mode: the previous one is still being read
                op.cow.drain()
            frozen = Frozen(op.codec, op.name)
            self._freeze(op, frozen, work, drops)
            op.cow = frozen if frozen.pending else None
        meta = c.meta_at(t)
        base = c.chains.last_id  # the checkpoint this one builds on
        writer = c.chains.begin(c.store, t)
        job = Job(work, writer.id, writer.token, self.sink())
        pending = Pending(t, writer, Future(), schemas=schemas, meta=meta, job=job)
        pending.files = drops
        if c.files is not None:  # the databases cut here, uploaded off this thread
            pending.sst = c.files.capture(writer, meta)
        pending.base = None if writer.full else base
        if precopy is not None:
            precopy.captured(writer.id)
        c.commits.uncommitted.append(pending)
        # the barrier is down: processing continues while the job is encoded and written
        c.release(t)
        self.hand_over(pending, job)
        c.capture_seconds.append(_time.perf_counter() - start)

    def _freeze(self, op: Any, frozen: Frozen, work: list[BinWork], drops: list[list[Any]]) -> None:
        """Freeze operator ``op``'s changed bins into ``frozen``: a job item per bin
        written, a dropped chain per bin emptied; the bins' change sets start afresh."""
        name, codec, chains = op.name, op.codec, self.c.chains
        for b in op.bins.values():
            if not b.changed():
                continue
            if b.is_empty():  # every key cleared, no timer: the checkpoint has no chain for it
                drops.append([name, b.index, True, None, 0, None])
                chains.dropped(name, b.index)
                b.reset_changes()
                continue
            snapshot = chains.wants_snapshot(name, b.index, b.full)
            if snapshot:
                keys = dict(b.items())  # key -> its state (a heap bin: one C-level copy)
            else:
                keys = b.dirty  # key -> its state; handed over: the bin starts a fresh one below
                for k in b.removed:
                    if k not in keys:  # (a key cleared and set again is in dirty)
                        keys[k] = MISSING
            frozen.freeze(b, keys)
            work.append(BinWork(name, codec, frozen, b, snapshot, wire_timers(b.timers), len(keys)))
            b.reset_changes()

    def hand_over(self, pending: Pending, job: Job) -> None:
        """The mode's part: have ``job`` encoded and written, and ``pending.written``
        completed once it is."""
        raise NotImplementedError


class SyncCapture(FrozenCapture):
    """``mode="sync"``: encoded and written on the processing path (the baseline)."""

    name = "sync"

    def hand_over(self, pending: Pending, job: Job) -> None:
        job.run(float("inf"))
        finish_when_written(pending)


class ThreadCapture(FrozenCapture):
    """``mode="thread"``: encoded and written on a background thread, committed on
    another (a slow sync never holds up the next checkpoint's reads)."""

    name = "thread"

    def __init__(self, c: Capturing) -> None:
        super().__init__(c)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="tstate-checkpoint-write")

    def hand_over(self, pending: Pending, job: Job) -> None:
        self.pool.submit(run_job, pending)

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True)
