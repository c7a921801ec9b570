"""The engine side of checkpoints: choosing consistent times, capturing bins,
committing after the sinks, and restoring.

**Consistent cut through frontiers.**  A checkpoint at time ``T`` records every bin's
state after exactly the records and timers at times ``< T``.  The coordinator sets a
*barrier* at ``T`` on every stateful operator — records and timers at ``>= T`` wait —
and captures once every stateful operator is complete before ``T`` (its input frontier
passed every earlier time and nothing earlier is buffered).  No records are blocked
before ``T`` and nothing flows backwards: this is a Chandy-Lamport snapshot whose
markers are the frontiers.  Source positions at ``T`` (where to replay batches at times
``>= T``) and the worker count go into the checkpoint's metadata.

**Incremental.**  A bin's changed keys (inserted, updated, cleared, timers) since the
previous checkpoint are written as a *delta*; a bin that moved here, or whose chain of
deltas grew long (``compact_after``), is written whole (a *snapshot*); untouched bins
keep their files.

**Asynchronous.**  ``mode="async"`` (the default) keeps encoding and writing off the
processing path: at the checkpoint the processing path only freezes what changed
(copy-on-write, :mod:`tstate.engine.checkpointing.freeze`: one dict handed over per changed bin);
the bins are then encoded in bounded *slices* between steps
(:mod:`tstate.engine.checkpointing.slices`), paced to take a small share of the time until the
next checkpoint, and their files written by a helper process
(:mod:`tstate.engine.checkpointing.writer`; a thread for object stores) that never holds the
processing thread's interpreter lock.  No step absorbs the whole checkpoint.  If a
checkpoint is due while the previous one is still being encoded or its files written,
it is **skipped** (its changes go into the next one; ``skipped`` lists it and a
:class:`CheckpointSkippedWarning` reports it), never piled onto the processing path nor
queued behind a writer that cannot keep up (the newest committed checkpoint stays
recent: what recovery replays, what a pre-copy migration reads).
``mode="thread"`` encodes and writes on a background thread instead (it competes for the
interpreter lock); ``mode="fork"`` does it in a forked *snapshot process*
(:mod:`tstate.engine.checkpointing.forked`; a thread where the platform cannot fork safely); with
``mode="sync"`` all of it happens on the processing path (the baseline).  See
``benchmarks/results/checkpoints.txt``.

- *fork*: at the checkpoint the processing path hands each changed bin's change sets
  (``dirty``, ``removed``) to the capture and resets them, then forks: the fork *is*
  the freeze.  The child inherits the bins copy-on-write, encodes the changed keys
  (deltas) or whole bins (snapshots), writes the data files (same names and formats as
  the other modes) and reports their references; the coordinator polls it between
  steps and commits on a thread that only commits.  A child that dies without a
  complete report (killed, out of memory) loses its checkpoint: it and every later one
  not committed yet are abandoned (each builds on it), nothing of them is committed,
  and the next checkpoint writes every bin whole (``lost`` records what happened).
  A job error (a state value that does not match its type, a full disk) is raised like
  in the other modes.  Costs on the processing path: the ``fork`` (page tables: 20-30 ms
  per GB of heap) and a page fault for each page the parent writes first after it
  (copying the page while the child lives; see :mod:`tstate.engine.checkpointing.forked`).  A full cyclic garbage collection while a
  child lives writes to every object, so copies the whole heap: keep long-lived state
  out of the collector's reach with :func:`gc.freeze` (the benchmarks' driver does, as
  does :meth:`Coordinator.restore`).
- *thread*: the processing path freezes what changed, like ``async``, and a
  background thread encodes, writes and commits.  The thread competes with the
  processing path for the interpreter lock.

**Restoring** (:meth:`Coordinator.restore`, before the first step): the newest usable
checkpoint is verified, then by default (``restore="lazy"``) each bin goes to its owner
undecoded and is decoded when first needed, the rest between steps
(:mod:`tstate.engine.checkpointing.lazy`); ``restore="eager"`` decodes every bin first.

**Committed after the sinks.**  The manifest of ``T`` is committed only once every sink
has committed every epoch before ``T`` and the data files are durable, so recovery from
``T`` never loses output and re-computes only epochs ``>= T``, which exactly-once sinks
overwrite.

**Split by concern.**  The :class:`Coordinator` decides *when* (the barrier, the
checkpoints skipped) and drives the cycle; each mode's capture is a strategy object
(:class:`~tstate.engine.checkpointing.capture.CaptureMode`:
:mod:`~tstate.engine.checkpointing.frozen_capture` for ``sync`` and ``thread``,
:mod:`~tstate.engine.checkpointing.async_capture`,
:mod:`~tstate.engine.checkpointing.fork_capture`); which bins are written whole is
:class:`~tstate.engine.checkpointing.chains.Chains`; committing in order is
:class:`~tstate.engine.checkpointing.commits.CommitOrder`; restoring is
:func:`~tstate.engine.checkpointing.restore.restore`.
"""

from __future__ import annotations

import gc
import time as _time
import warnings
from typing import Any, Optional, Union

from tstate.checkpoint.commit import operator_schemas
from tstate.checkpoint.fs import LocalFS
from tstate.checkpoint.settings import MODES, Checkpoints, Mode
from tstate.checkpoint.store import CheckpointStore
from tstate.engine.checkpointing.async_capture import AsyncCapture
from tstate.engine.checkpointing.capture import CaptureMode
from tstate.engine.checkpointing.chains import Chains
from tstate.engine.checkpointing.commits import CommitOrder
from tstate.engine.checkpointing.file_capture import FileCapture
from tstate.engine.checkpointing.forked import fork_available
from tstate.engine.checkpointing.fork_capture import ForkedCapture
from tstate.engine.checkpointing.frozen_capture import SyncCapture, ThreadCapture
from tstate.engine.checkpointing.pending import Pending
from tstate.engine.checkpointing.restore import Driven, Restored, restore
from tstate.engine.checkpointing.slices import Pacer
from tstate.errors import CheckpointLostWarning, CheckpointSkippedWarning
from tstate.plan.ends import Sink, Source
from tstate.plan.stateful import Stateful
from tstate.progress.timestamp import epoch

__all__ = ["Checkpoints", "CheckpointLostWarning", "CheckpointSkippedWarning", "Coordinator", "Driven", "Restored", "MODES"]

#: each checkpoint mode's strategy
CAPTURES: dict[Mode, type[CaptureMode]] = {
    "sync": SyncCapture, "thread": ThreadCapture, "async": AsyncCapture, "fork": ForkedCapture,
}


def _resolve_mode(mode: Mode, store: CheckpointStore, files: bool = False) -> Mode:
    # "async": paced slices on the processing thread and a writer process; on the
    # 1M-key benchmark it keeps every epoch within a few percent of the no-checkpoint
    # one ("thread" and "fork" spike: the lock, the fork and its page faults)
    if mode == "fork" and (files or not (fork_available() and isinstance(store.fs, LocalFS))):
        # (nor does a RocksDB database's background threads: its files are checkpointed
        # from a thread anyway)
        # (an object store's client -- an event loop thread, pooled connections -- does
        # not survive a fork: write from a thread instead)
        return "thread"
    return mode


class Coordinator:
    """Drives checkpoints for one execution (see the module docstring)."""

    def __init__(self, exe: "Driven", cfg: Union[Checkpoints, str]) -> None:
        self.exe = exe
        self.cfg = cfg if isinstance(cfg, Checkpoints) else Checkpoints(cfg)
        self.store = CheckpointStore(
            self.cfg.directory, retain=self.cfg.retain, compact_after=self.cfg.compact_after, replica=self.cfg.replica
        )
        self.barrier: Optional[int] = None
        self.last_time: Optional[int] = None
        self._last_wall = _time.perf_counter()
        self.interval: Optional[float] = None  # wall seconds between captures (moving average)
        #: the mode in effect: "async", "fork", "thread" or "sync"
        #: the RocksDB operators' checkpoints as files (None: the state is on the heap)
        self.files: Optional[FileCapture] = FileCapture.of(exe, self.store)
        self.mode: Mode = _resolve_mode(self.cfg.mode, self.store, self.files is not None)
        self.pacer = Pacer()
        #: operator -> (schema builtins, bins, hash kind), from the plan; chain lengths
        self.chains = Chains(operator_schemas(n for _, n in exe.graph.of_type(Stateful)), self.store.compact_after)
        # thread, async and fork mode commit on a thread that only commits (a slow sync
        # never holds up the next checkpoint's reads)
        self.commits = CommitOrder(self.store, threaded=self.mode != "sync")
        self.commits.files = self.files
        self.capture_seconds: list[float] = []  # time on the processing path, per checkpoint
        self.fork_seconds: list[float] = []  # fork mode: the fork() itself, per checkpoint
        self.snapshot_seconds: list[float] = []  # fork mode: fork to report, per snapshot process
        self.lost: list[tuple[int, str]] = []  # fork mode: (time, why) of checkpoints lost
        self.skipped: list[int] = []  # async mode: checkpoint times skipped (the previous one was being encoded)
        self._deferred = False  # the next barrier waited for an encoding to finish
        self.slice_seconds: list[float] = []  # async mode: each slice of encoding on the processing path
        self.slice_cpu_seconds: list[float] = []  # ...and the processing thread's CPU time in it
        #: restore="lazy": the bins restored and not decoded yet (tstate.engine.checkpointing.lazy)
        self.lazy: Any = None
        #: the mode's strategy (what a snapshot process of fork mode runs is imported at
        #: the top of this module, before any fork: module imports take locks another
        #: thread may hold at the instant of a fork)
        self.capturer: CaptureMode = CAPTURES[self.mode](self)

    # -- what the commit order knows ------------------------------------------------
    @property
    def committed(self) -> list[int]:
        """Times of the checkpoints committed by this execution, in order."""
        return self.commits.committed

    @property
    def committed_ids(self) -> list[int]:
        """Ids of the checkpoints committed by this execution (and the one restored
        from), in order: what a pre-copy move may load a bin from (tstate.engine.precopy)."""
        return self.commits.committed_ids

    @property
    def committed_set(self) -> set[int]:
        return self.commits.committed_set

    @property
    def written_bytes(self) -> list[int]:
        """Bytes of data files written, per committed checkpoint."""
        return self.commits.written_bytes

    @property
    def uncommitted(self) -> list[Pending]:
        """The checkpoints captured and not committed yet, in order."""
        return self.commits.uncommitted

    @property
    def last_captured(self) -> Optional[int]:
        """The id of the last checkpoint captured (or restored from): the one the bins'
        change sets (``dirty``, ``removed``) are relative to."""
        return self.chains.last_id

    def written_uncommitted(self) -> list[tuple[int, bool, list[list[Any]]]]:
        """See :meth:`CommitOrder.written_uncommitted <tstate.engine.checkpointing.commits.CommitOrder.written_uncommitted>`."""
        return self.commits.written_uncommitted()

    @property
    def writing(self) -> int:
        """How many captured checkpoints are still being encoded and written (fork
        mode: snapshot processes not yet reaped, as of the last step)."""
        return self.commits.writing

    def precopy(self) -> Any:
        """The execution's pre-copy moves (:mod:`tstate.engine.precopy`) if any are
        pending: a capture tells them which changes it took."""
        pc = getattr(self.exe, "precopy", None)
        return pc if pc is not None and pc.pending else None

    # -- which operators ------------------------------------------------------------
    def stateful(self) -> list[Any]:
        """Every worker's stateful operator runtimes."""
        return [op for ops in self.exe.operators for op in ops if isinstance(op.node, Stateful)]

    def _sources(self) -> list[Any]:
        return [op for op in self.exe.operators[0] if isinstance(op.node, Source)]

    def _sinks(self) -> list[Any]:
        return [op for ops in self.exe.operators for op in ops if isinstance(op.node, Sink)]

    # -- recovery -------------------------------------------------------------------
    def restore(self) -> Optional[Restored]:
        """Install the latest committed checkpoint's bins (before the first step).

        The cyclic garbage collector is paused meanwhile: decoding creates millions of
        container objects, each batch of which would otherwise trigger a collection
        that walks everything restored so far (quadratic: it was most of the time).
        Then the restored state is moved out of its reach (:func:`gc.freeze`): it is
        long-lived, and acyclic (reference counting frees it), so a full collection
        walking all of it -- half a second per million keys, at some random later step
        -- would find nothing to free."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            resumed = restore(self.exe, self.store, self.cfg)  # (tstate.engine.checkpointing.restore)
            if resumed is None:
                return None
            self.chains.restored(resumed.manifest)
            self.commits.restored(resumed.manifest.id)
            self.lazy = resumed.lazy
            if self.files is not None:
                self.files.restored(resumed.manifest)
            gc.freeze()
            return resumed.restored
        finally:
            if enabled:
                gc.enable()

    # -- the checkpoint cycle ---------------------------------------------------------
    def after_step(self) -> None:
        """Called by the execution after every step."""
        if self.lazy is not None and not self.lazy.done:
            self.lazy.step(self.exe.activations)
        self.capturer.step()
        busy = self.capturer.busy()
        if not busy and self.files is not None and self.mode != "sync" and self.files.cutting():
            # the last cut (flush + hard links) is still being made: a capture now would
            # wait for it on this thread (sync mode waits: everything is on this path)
            busy = True
        if busy:
            self._deferred = True  # a barrier due now waits for the encoding and writing to finish
        if self.barrier is None and not busy:
            self._maybe_set_barrier()
        if self.barrier is not None and all(op.complete_before(self.barrier) for op in self.stateful()):
            if self._sources_past(self.barrier):
                self.capturer.capture(self.barrier)
        if self.commits.uncommitted:
            self._maybe_commit()

    def _frontier_epoch(self) -> Optional[int]:
        """The least epoch a stateful operator may still receive input at (``None``:
        none will receive any)."""
        least: Optional[int] = None
        for op in self.stateful():
            for t in op.frontier(0).elements():
                e = epoch(t)
                if least is None or e < least:
                    least = e
        return least

    def _applied_max(self) -> Optional[int]:
        # inside iterate scopes times are Products: checkpoints are at epoch boundaries
        ts = [epoch(op.max_applied) for op in self.stateful() if op.max_applied is not None]
        return max(ts) if ts else None

    def _maybe_set_barrier(self) -> None:
        ops = self.stateful()
        if not ops or all(op.frontier(0).is_empty() for op in ops):
            return  # nothing more will change: no checkpoint needed
        applied = self._applied_max()
        floor = max(x for x in (applied, self.last_time, -1) if x is not None) + 1
        cfg = self.cfg
        t: Optional[int] = None
        if cfg.every_epochs is not None:
            n = cfg.every_epochs
            t = max(floor, ((self.last_time or 0) // n + 1) * n)
            t = -(-t // n) * n  # a multiple of n
        if cfg.every_seconds is not None and _time.perf_counter() - self._last_wall >= cfg.every_seconds:
            t = floor if t is None else min(t, floor)
        if t is None:
            return
        self._note_skipped(t)
        self.barrier = t
        for op in self.stateful():
            op.barrier = t

    def _note_skipped(self, t: int) -> None:
        """Report the checkpoints that were due before ``t`` while the previous one was
        still being encoded or written (async mode defers the next barrier until it is done)."""
        cfg, last = self.cfg, self.last_time
        deferred, self._deferred = self._deferred, False
        if last is None or not deferred:
            # (without a deferral, times passed over were never consistent cuts: the
            # dataflow moved past them in one step -- nothing was skipped)
            return
        missed: list[int] = []
        if cfg.every_epochs is not None:
            n = cfg.every_epochs
            missed = list(range((last // n + 1) * n, t, n))
        elif cfg.every_seconds is not None and _time.perf_counter() - self._last_wall >= 2 * cfg.every_seconds:
            missed = [t]
        if missed:
            self.skipped.extend(missed)
            warnings.warn(
                CheckpointSkippedWarning(
                    f"checkpoint{'s' if len(missed) > 1 else ''} at {', '.join(map(str, missed))} skipped: the "
                    f"checkpoint at {last} was still being encoded or written (the next one, at {t}, holds their changes)"
                ),
                stacklevel=3,
            )

    def _sources_past(self, t: int) -> bool:
        for op in self._sources():
            if op.cap is not None and op.cap.time < t:
                return False
        return True

    def meta_at(self, t: int) -> dict[str, Any]:
        """The checkpoint's metadata (source positions at ``t``, workers, time, and the
        sources' epoch unit when they declare one)."""
        positions = {op.name: op.position_at(t) for op in self._sources()}
        for op in self._sources():
            op.forget_before(t)
        meta: dict[str, Any] = {"sources": positions, "workers": self.exe.workers, "time": t}
        # what an epoch is, if the sources agree (tstate.io.sources.EpochUnit): the CLI shows dates
        units = {u for u in (getattr(getattr(op, "source", None), "epoch_unit", None) for op in self._sources()) if u}
        if len(units) == 1:
            meta["epoch_unit"] = units.pop().to_builtins()
        return meta

    def release(self, t: int) -> None:
        """The checkpoint at ``t`` is captured: processing continues past it."""
        now = _time.perf_counter()
        if self.last_time is not None:  # how long checkpoints are apart (the pacer spreads work over it)
            gap = now - self._last_wall
            self.interval = gap if self.interval is None else 0.5 * self.interval + 0.5 * gap
        self.last_time = t
        self._last_wall = now
        self.barrier = None
        for op in self.stateful():
            op.release_barrier()

    def _sinks_past(self, t: int) -> bool:
        """Every sink has *acted on* a frontier past every time before ``t`` (it has
        committed those epochs), not merely been told the frontier moved; if so, each
        is first made to sync what it committed (``Sink.sync``: the checkpoint at ``t``
        may commit only once those epochs' output is durable)."""
        sinks = self._sinks()
        if any(op.committed.less_than(t) for op in sinks):
            return False
        for op in sinks:
            op.make_durable(t)
        return True

    def _maybe_commit(self, wait: bool = False) -> None:
        """Commit, in order, the checkpoints whose time every sink has passed
        (:class:`~tstate.engine.checkpointing.commits.CommitOrder`)."""
        self.capturer.poll(block=wait)
        c = self.capturer
        remote = None if self.files is not None else c.remote()  # (the files' refs are attached here)
        if self.commits.advance(self._sinks_past, remote, c.after_report, wait) and not self.commits.uncommitted:
            for op in self.stateful():  # everything was read: no more copy-on-write
                if op.cow is not None and not op.cow.pending:
                    op.cow = None

    def finish(self) -> None:
        """The execution completed: commit what is pending, stop the writer."""
        self.capturer.finish()
        self._maybe_commit(wait=True)
        self._shutdown()

    def _shutdown(self) -> None:
        self.capturer.shutdown()
        self.commits.shutdown()
        if self.files is not None:
            self.files.close()

    def abort(self) -> None:
        """The execution failed: uncommitted checkpoints are abandoned (snapshot
        processes killed and reaped, what they wrote deleted)."""
        self.commits.broken = True  # a commit starting from now on abandons itself
        self.capturer.abort()
        self.commits.abort()
        self._shutdown()
