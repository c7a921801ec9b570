"""``mode="async"`` (the default): encoding and writing kept off the processing path.

At the checkpoint the processing path only freezes what changed (like
:class:`~tstate.engine.checkpointing.frozen_capture.ThreadCapture`); the bins are then
encoded in bounded *slices* between steps (:mod:`tstate.engine.checkpointing.slices`),
paced to take a small share of the time until the next checkpoint, and their files
written -- and the checkpoint committed -- by a helper process
(:class:`~tstate.engine.checkpointing.writer.FileWriter`; a thread for object stores,
and until the process has started) that never holds the processing thread's
interpreter lock.  The next barrier waits while a checkpoint is still being encoded or
written (:meth:`AsyncCapture.busy`: the coordinator reports the checkpoints it skips).
"""

from __future__ import annotations

import time as _time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from tstate.checkpoint.fs import LocalFS
from tstate.engine.checkpointing import pending as _pending
from tstate.engine.checkpointing.capture import Capturing
from tstate.engine.checkpointing.frozen_capture import FrozenCapture
from tstate.engine.checkpointing.pending import Pending, finish_when_written
from tstate.engine.checkpointing.slices import Job
from tstate.engine.checkpointing.writer import FileWriter
from tstate.errors import CheckpointError

__all__ = ["AsyncCapture"]


class AsyncCapture(FrozenCapture):
    """``mode="async"`` for coordinator ``c`` (see the module docstring)."""

    name = "async"

    def __init__(self, c: Capturing) -> None:
        super().__init__(c)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="tstate-checkpoint-write")
        #: the helper process writing a local store's data files (None: a thread writes them)
        self.files: Optional[FileWriter] = None
        if isinstance(c.store.fs, LocalFS):
            try:
                self.files = FileWriter(c.store.fs.root)
                # an execution dropped before it finished (a notebook, a test) lets its
                # writer process go once collected (its threads hold the writer, not us)
                weakref.finalize(c, self.files.release)
            except OSError:  # pragma: no cover - no subprocess here: a thread writes them
                self.files = None
        self.active: Optional[Pending] = None  # the checkpoint being encoded in slices

    def hand_over(self, pending: Pending, job: Job) -> None:
        self.active = pending

    def _ready(self) -> bool:
        return self.files is not None and self.files.alive and self.files.ready.is_set()

    def remote(self) -> Optional[FileWriter]:
        # the writer process commits once it has started (until then the files were
        # written, and are committed, here: a commit in process is never overtaken)
        return self.files if self._ready() else None

    def sink(self) -> Any:
        """The writer process, once started (until then a thread: the first checkpoint
        of a run does not wait for an interpreter to start)."""
        if self._ready():
            assert self.files is not None
            return self.files.write
        pool, fs = self.pool, self.c.store.fs
        return lambda batch: pool.submit(_pending.write_batch, fs, batch)

    def busy(self) -> bool:
        """Whether the active checkpoint is still being encoded, or the newest one's
        files written (its commit may also wait for the sinks).  The next capture waits
        for the write: a writer that cannot keep up is never handed an ever longer
        queue."""
        return self.active is not None or self.c.commits.newest_writing()

    def step(self) -> None:
        """Encode the active checkpoint for as long as the pacer allows."""
        p = self.active
        if p is None:
            return
        assert p.job is not None
        job, c = p.job, self.c
        now = _time.perf_counter()
        interval, elapsed = self._elapsed(p, now - p.captured)
        budget = c.pacer.budget(job, now - p.captured, interval, elapsed)
        if budget <= 0:
            return
        keys = job.keys_left
        cpu = _time.thread_time()
        try:
            done = job.run(budget)
        except BaseException as exc:
            self.active = None
            job.release()
            p.written.set_exception(exc)
            raise
        took = _time.perf_counter() - now
        c.slice_seconds.append(took)
        c.slice_cpu_seconds.append(_time.thread_time() - cpu)
        c.pacer.learn(job, keys - job.keys_left, took)
        if done:
            self.active = None
            finish_when_written(p)

    def _elapsed(self, p: Pending, since: float) -> tuple[Optional[float], Optional[float]]:
        """``(interval, elapsed)`` for pacing ``p``'s slices: the expected wall seconds
        between checkpoints, and the fraction of it passed since ``p``'s capture -- in
        epochs applied when checkpoints are every N epochs (wall time between epochs
        varies with the input: idle time is not progress), else in wall time."""
        c = self.c
        cfg = c.cfg
        interval = c.interval
        if cfg.every_seconds is not None:
            interval = cfg.every_seconds if interval is None else min(interval, cfg.every_seconds)
        if cfg.every_epochs is not None:
            # how far the input has come since the capture (an epoch without records counts)
            reached = c._frontier_epoch()
            applied = c._applied_max()
            if reached is None:  # every input is done: the rest at once
                return interval, 1.0
            if applied is not None:
                reached = max(reached, applied + 1)
            elapsed = max(0, reached - p.time) / cfg.every_epochs
            if cfg.every_seconds is not None:
                elapsed = max(elapsed, since / cfg.every_seconds)
            return interval, elapsed
        return interval, (since / interval if interval else None)

    def finish(self) -> None:
        """Encode what is left of the active checkpoint now (the execution is ending)."""
        p = self.active
        if p is not None:
            self.active = None
            assert p.job is not None
            try:
                p.job.run(float("inf"))
            except BaseException as exc:
                p.job.release()
                p.written.set_exception(exc)
                raise
            finish_when_written(p)

    def abort(self) -> None:
        active, self.active = self.active, None
        if active is not None and active.job is not None:
            active.job.release()
            if not active.written.done():
                active.written.set_exception(CheckpointError(f"checkpoint at {active.time!r} abandoned"))
        if self.files is not None:
            # the writer process finishes what it was sent (a commit requested is valid:
            # its sinks had passed it); then what it did not commit is deleted
            self.files.close()
            self.files = None

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True)
        if self.files is not None:
            self.files.close()
            self.files = None
