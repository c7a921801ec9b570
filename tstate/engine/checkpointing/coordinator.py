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
"""

from __future__ import annotations

import gc
import time as _time
import warnings
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Optional, Union

from tstate.checkpoint.commit import BinFile, commit, operator_schemas
from tstate.checkpoint.fs import LocalFS
from tstate.checkpoint.manifest import FileRef
from tstate.checkpoint.settings import MODES, Checkpoints, Mode
from tstate.checkpoint.store import CheckpointStore
from tstate.engine.checkpointing.forked import fork_available
from tstate.engine.checkpointing.fork_capture import ForkedCapture
from tstate.engine.checkpointing.freeze import MISSING, Frozen
from tstate.engine.checkpointing.pending import Pending as _Pending
from tstate.engine.checkpointing.pending import files_of as _files_of
from tstate.engine.checkpointing.pending import finish_when_written as _finish_when_written
from tstate.engine.checkpointing.pending import run_job as _run_job
from tstate.engine.checkpointing.pending import wait_quietly as _wait_quietly
from tstate.engine.checkpointing.pending import write_batch as _write_batch  # (a test replaces it here)
from tstate.engine.checkpointing.restore import Driven, Restored, restore
from tstate.engine.checkpointing.slices import BinWork, Job, Pacer
from tstate.engine.checkpointing.writer import FileWriter, commit_request
from tstate.errors import CheckpointError, CheckpointLostWarning, CheckpointSkippedWarning
from tstate.hash_kind import HashKind
from tstate.plan.ends import Sink, Source
from tstate.plan.stateful import Stateful
from tstate.progress.timestamp import epoch
from tstate.state.payload import wire_timers

__all__ = ["Checkpoints", "CheckpointLostWarning", "CheckpointSkippedWarning", "Coordinator", "Driven", "Restored", "MODES"]


def _resolve_mode(mode: Mode) -> Mode:
    # "async": paced slices on the processing thread and a writer process; on the
    # 1M-key benchmark it keeps every epoch within a few percent of the no-checkpoint
    # one ("thread" and "fork" spike: the lock, the fork and its page faults)
    if mode == "fork":
        if not fork_available():
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
        #: the mode in effect: "async", "fork", "thread" or "sync"
        self.mode: Mode = _resolve_mode(self.cfg.mode)
        if self.mode == "fork" and not isinstance(self.store.fs, LocalFS):
            # an object store's client (an event loop thread, pooled connections) does
            # not survive a fork: write from a thread instead
            self.mode = "thread"
        # thread mode: one thread writes (encodes and writes data files), another
        # commits (a sync, the manifest), each in checkpoint order, so a slow sync
        # never holds up the next checkpoint's reads; fork mode: commits only
        self._pool: Optional[ThreadPoolExecutor] = (
            ThreadPoolExecutor(1, thread_name_prefix="tstate-checkpoint-write") if self.mode in ("thread", "async") else None
        )
        # async mode: the data files of a local store are written by a helper process
        self._files: Any = None
        if self.mode == "async" and isinstance(self.store.fs, LocalFS):
            try:
                self._files = FileWriter(self.store.fs.root)
                # an execution dropped before it finished (a notebook, a test) lets its
                # writer process go once collected (its threads hold the writer, not us)
                weakref.finalize(self, self._files.release)
            except OSError:  # pragma: no cover - no subprocess here: a thread writes them
                self._files = None
        self._active: Optional[_Pending] = None  # async: the checkpoint being encoded in slices
        #: fork mode: captures handed to snapshot processes (tstate.engine.checkpointing.fork_capture)
        self._fork: Optional[ForkedCapture] = ForkedCapture(self) if self.mode == "fork" else None
        self.pacer = Pacer()
        self._interval: Optional[float] = None  # wall seconds between captures (moving average)
        self._commits: Optional[ThreadPoolExecutor] = (
            ThreadPoolExecutor(1, thread_name_prefix="tstate-checkpoint-commit") if self.mode != "sync" else None
        )
        # (what a snapshot process of fork mode runs -- tstate.engine.checkpointing.fork_capture
        # and what it imports -- is imported at the top of this module, before any fork:
        # module imports take locks another thread may hold at the instant of a fork)
        self._uncommitted: list[_Pending] = []
        self._fresh = True  # the next checkpoint carries nothing over (unless restored)
        # the manifest this execution's checkpoints build on (restored from): the chains
        # of bins no checkpoint of this execution has captured yet
        self._base_manifest: Any = None
        self._last_id: Optional[int] = None  # the id of the last checkpoint captured (or restored)
        # Each checkpoint builds on the previous one: once one is not committed (a write
        # or commit failed, or the execution was abandoned), none after it may be.
        self._broken = False
        #: operator -> (schema builtins, bins), from the plan
        self._schemas: dict[str, tuple[Any, int, HashKind]] = operator_schemas(n for _, n in exe.graph.of_type(Stateful))
        self._chains: dict[tuple[str, int], int] = {}  # (operator, bin) -> chain length once captured
        self.committed: list[int] = []  # times of checkpoints committed by this execution
        #: ids of the checkpoints committed by this execution (and the one restored from),
        #: in order: what a pre-copy move may load a bin from (tstate.engine.precopy)
        self.committed_ids: list[int] = []
        self.committed_set: set[int] = set()
        self.capture_seconds: list[float] = []  # time on the processing path, per checkpoint
        self.written_bytes: list[int] = []  # bytes of data files written, per committed checkpoint
        self.fork_seconds: list[float] = []  # fork mode: the fork() itself, per checkpoint
        self.snapshot_seconds: list[float] = []  # fork mode: fork to report, per snapshot process
        self.lost: list[tuple[int, str]] = []  # fork mode: (time, why) of checkpoints lost
        self.skipped: list[int] = []  # async mode: checkpoint times skipped (the previous one was being encoded)
        self._deferred = False  # the next barrier waited for an encoding to finish
        self.slice_seconds: list[float] = []  # async mode: each slice of encoding on the processing path
        self.slice_cpu_seconds: list[float] = []  # ...and the processing thread's CPU time in it
        #: restore="lazy": the bins restored and not decoded yet (tstate.engine.checkpointing.lazy)
        self.lazy: Any = None

    @property
    def last_captured(self) -> Optional[int]:
        """The id of the last checkpoint captured (or restored from): the one the bins'
        change sets (``dirty``, ``removed``) are relative to."""
        return self._last_id

    def written_uncommitted(self) -> list[tuple[int, bool, list[list[Any]]]]:
        """The checkpoints captured after the last commit whose files are all written
        (in order, up to the first that is not): ``(id, full, files)``, ``files`` as
        ``[operator, bin, snapshot, path, size, xxh64]`` (``path`` None: the bin's chain
        dropped).  Each builds on the one before it (the first on the last committed; a
        ``full`` one on nothing): what a pre-copy move may load a bin from before the
        commit (tstate.engine.precopy; the files are checked by size and xxh64 when read)."""
        out: list[tuple[int, bool, list[list[Any]]]] = []
        for p in self._uncommitted:
            w = p.written
            if self._broken or not w.done() or w.cancelled() or w.exception() is not None:
                break
            out.append((p.writer.id, bool(p.writer.full), _files_of(p)))
        return out

    def _precopy(self) -> Any:
        """The execution's pre-copy moves (:mod:`tstate.engine.precopy`) if any are
        pending: a capture tells them which changes it took."""
        pc = getattr(self.exe, "precopy", None)
        return pc if pc is not None and pc.pending else None

    @property
    def writing(self) -> int:
        """How many captured checkpoints are still being encoded and written (fork
        mode: snapshot processes not yet reaped, as of the last step)."""
        return sum(1 for p in self._uncommitted if not p.written.done())

    # -- which operators ------------------------------------------------------------
    def _stateful(self) -> list[Any]:
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
            restored = self._restore()
            if restored is not None:
                gc.freeze()
            return restored
        finally:
            if enabled:
                gc.enable()

    def _restore(self) -> Optional[Restored]:
        resumed = restore(self.exe, self.store, self.cfg)  # (tstate.engine.checkpointing.restore)
        if resumed is None:
            return None
        manifest = resumed.manifest
        self._fresh = False
        self._base_manifest, self._last_id = manifest, manifest.id
        self.committed_ids.append(manifest.id)
        self.committed_set.add(manifest.id)
        self.lazy = resumed.lazy
        return resumed.restored

    # -- the checkpoint cycle ---------------------------------------------------------
    def after_step(self) -> None:
        """Called by the execution after every step."""
        if self.lazy is not None and not self.lazy.done:
            self.lazy.step(self.exe.activations)
        if self._active is not None:
            self._slice()
        busy = self._active is not None or self._writing()
        if busy:
            self._deferred = True  # a barrier due now waits for the encoding and writing to finish
        if self.barrier is None and not busy:
            self._maybe_set_barrier()
        if self.barrier is not None and all(op.complete_before(self.barrier) for op in self._stateful()):
            if self._sources_past(self.barrier):
                self._capture(self.barrier)
        if self._uncommitted:
            self._maybe_commit()

    def _writing(self) -> bool:
        """Async mode: whether the newest captured checkpoint's files are still being
        written (its commit may also wait for the sinks).  The next capture waits for
        the write: a writer that cannot keep up is never handed an ever longer queue.
        (Thread and fork mode bound their own work: one thread, and snapshot processes
        that see the bins as they were.)"""
        return self.mode == "async" and bool(self._uncommitted) and not self._uncommitted[-1].written.done()

    def _elapsed(self, p: _Pending, since: float) -> tuple[Optional[float], Optional[float]]:
        """``(interval, elapsed)`` for pacing ``p``'s slices: the expected wall seconds
        between checkpoints, and the fraction of it passed since ``p``'s capture -- in
        epochs applied when checkpoints are every N epochs (wall time between epochs
        varies with the input: idle time is not progress), else in wall time."""
        cfg = self.cfg
        interval = self._interval
        if cfg.every_seconds is not None:
            interval = cfg.every_seconds if interval is None else min(interval, cfg.every_seconds)
        if cfg.every_epochs is not None:
            # how far the input has come since the capture (an epoch without records counts)
            reached = self._frontier_epoch()
            applied = self._applied_max()
            if reached is None:  # every input is done: the rest at once
                return interval, 1.0
            if applied is not None:
                reached = max(reached, applied + 1)
            elapsed = max(0, reached - p.time) / cfg.every_epochs
            if cfg.every_seconds is not None:
                elapsed = max(elapsed, since / cfg.every_seconds)
            return interval, elapsed
        return interval, (since / interval if interval else None)

    def _frontier_epoch(self) -> Optional[int]:
        """The least epoch a stateful operator may still receive input at (``None``:
        none will receive any)."""
        least: Optional[int] = None
        for op in self._stateful():
            for t in op.frontier(0).elements():
                e = epoch(t)
                if least is None or e < least:
                    least = e
        return least

    def _applied_max(self) -> Optional[int]:
        # inside iterate scopes times are Products: checkpoints are at epoch boundaries
        ts = [epoch(op.max_applied) for op in self._stateful() if op.max_applied is not None]
        return max(ts) if ts else None

    def _maybe_set_barrier(self) -> None:
        ops = self._stateful()
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
        for op in self._stateful():
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

    def _schema_of(self, op: Any) -> tuple[Any, int, HashKind]:
        return self._schemas[op.name]

    def _wants_snapshot(self, name: str, index: int, full: bool) -> bool:
        """Whether the checkpoint being captured writes bin ``index`` of ``name`` whole:
        it must (``full``: it moved here, or the schema changed), it has no chain, or
        its chain reached ``compact_after`` files.  The chain is counted after every
        checkpoint captured so far, committed or not (the store's head may still lag
        behind checkpoints being written), so the choice does not depend on how fast
        earlier checkpoints commit.  A fresh checkpoint (carrying nothing over) starts
        every chain afresh."""
        key = (name, index)
        n = self._chains.get(key)
        if n is None:
            head = None if self._fresh else self._base_manifest
            n = len(head.chain(name, index)) if head is not None else 0
        snapshot = full or n == 0 or n >= self.store.compact_after
        self._chains[key] = 1 if snapshot else n + 1
        return snapshot

    def _meta_at(self, t: int) -> dict[str, Any]:
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

    def _release(self, t: int) -> None:
        """The checkpoint at ``t`` is captured: processing continues past it."""
        now = _time.perf_counter()
        if self.last_time is not None:  # how long checkpoints are apart (the pacer spreads work over it)
            gap = now - self._last_wall
            self._interval = gap if self._interval is None else 0.5 * self._interval + 0.5 * gap
        self.last_time = t
        self._last_wall = now
        self.barrier = None
        for op in self._stateful():
            op.release_barrier()

    def _capture(self, t: int) -> None:
        """Capture every changed bin at ``t`` and hand the checkpoint to its writer: a
        snapshot process (fork mode), or -- after a copy-on-write freeze (see
        :mod:`tstate.engine.checkpointing.freeze`) -- slices between steps (async), the writer
        thread (thread mode), or right here (sync)."""
        if self.mode == "fork":
            assert self._fork is not None
            self._fork.capture(t)
            return
        start = _time.perf_counter()
        precopy = self._precopy()
        if precopy is not None:
            precopy.before_capture()
        work: list[BinWork] = []
        drops: list[list[Any]] = []  # bins emptied since the last checkpoint: their chains go
        schemas: dict[str, tuple[Any, int, HashKind]] = {}
        for op in self._stateful():
            name = op.name
            codec = op.codec
            schemas.setdefault(name, self._schema_of(op))
            if op.cow is not None and op.cow.pending:  # thread mode: the previous one is still being read
                op.cow.drain()
            frozen = Frozen(codec, name)
            for b in op.bins.values():
                if not b.changed():
                    continue
                if b.is_empty():  # every key cleared, no timer: the checkpoint has no chain for it
                    drops.append([name, b.index, True, None, 0, None])
                    self._chains[name, b.index] = 0
                    b.reset_changes()
                    continue
                snapshot = self._wants_snapshot(name, b.index, b.full)
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
            op.cow = frozen if frozen.pending else None
        meta = self._meta_at(t)
        writer = self.store.begin(t, full=self._fresh)  # a fresh run ignores older checkpoints
        if self._fresh:
            self._base_manifest = None
        self._fresh = False
        job = Job(work, writer.id, writer.token, self._sink())
        pending = _Pending(t, writer, Future(), schemas=schemas, meta=meta, job=job)
        pending.files = drops
        pending.base = None if writer.full else self._last_id
        self._last_id = writer.id
        if precopy is not None:
            precopy.captured(writer.id)
        self._uncommitted.append(pending)
        # the barrier is down: processing continues while the job is encoded and written
        self._release(t)
        if self.mode == "sync":
            job.run(float("inf"))
            _finish_when_written(pending)
        elif self.mode == "thread":
            assert self._pool is not None
            self._pool.submit(_run_job, pending)
        else:
            self._active = pending
        self.capture_seconds.append(_time.perf_counter() - start)

    def _sink(self) -> Any:
        """Where a job's batches of files go: the writer process (async, local), a
        thread (async, object store), or written right away (thread and sync modes)."""
        if self.mode == "async":
            # the writer process, once started (until then a thread: the first
            # checkpoint of a run does not wait for an interpreter to start)
            if self._files is not None and self._files.alive and self._files.ready.is_set():
                return self._files.write
            assert self._pool is not None
            pool, fs = self._pool, self.store.fs
            return lambda batch: pool.submit(_write_batch, fs, batch)
        fs = self.store.fs

        def now(batch: Any) -> Future[None]:
            done: Future[None] = Future()
            try:
                _write_batch(fs, batch)
                done.set_result(None)
            except BaseException as exc:
                done.set_exception(exc)
            return done

        return now

    def _slice(self) -> None:
        """Async mode: encode the active checkpoint for as long as the pacer allows."""
        p = self._active
        assert p is not None and p.job is not None
        job = p.job
        now = _time.perf_counter()
        interval, elapsed = self._elapsed(p, now - p.captured)
        budget = self.pacer.budget(job, now - p.captured, interval, elapsed)
        if budget <= 0:
            return
        keys = job.keys_left
        cpu = _time.thread_time()
        try:
            done = job.run(budget)
        except BaseException as exc:
            self._active = None
            job.release()
            p.written.set_exception(exc)
            raise
        took = _time.perf_counter() - now
        self.slice_seconds.append(took)
        self.slice_cpu_seconds.append(_time.thread_time() - cpu)
        self.pacer.learn(job, keys - job.keys_left, took)
        if done:
            self._active = None
            _finish_when_written(p)

    def _finish_active(self) -> None:
        """Encode what is left of the active checkpoint now (the execution is ending)."""
        p = self._active
        if p is not None:
            self._active = None
            assert p.job is not None
            try:
                p.job.run(float("inf"))
            except BaseException as exc:
                p.job.release()
                p.written.set_exception(exc)
                raise
            _finish_when_written(p)

    def _discard(self, p: _Pending) -> None:
        """Delete what an abandoned checkpoint wrote."""
        p.writer.abort()
        for f in _files_of(p):  # reported by its snapshot process or encoded by its job (adopted or not)
            if f[3] is not None:
                self.store.fs.delete(f[3])

    def _sinks_past(self, t: int) -> bool:
        """Every sink has *acted on* a frontier past every time before ``t`` (it has
        committed those epochs), not merely been told the frontier moved."""
        return all(not op.committed.less_than(t) for op in self._sinks())

    def _maybe_commit(self, wait: bool = False) -> None:
        """Commit, in order, the checkpoints whose time every sink has passed.  In
        thread and fork mode the commit (a sync and the manifest) runs on the writer
        thread; this only notices when it is done."""
        if self._fork is not None:
            self._fork.poll(block=wait)
        # the writer process commits once it has started (until then the files were
        # written, and are committed, here: a commit in process is never overtaken)
        remote = self._files is not None and self._files.alive and self._files.ready.is_set()
        local: Optional[Future[Any]] = None  # the last commit submitted here, in this order
        for p in self._uncommitted:
            if p.commit is not None:
                local = p.commit
                continue
            if not (wait or self._sinks_past(p.time)):
                break
            if self.mode == "fork" and not p.written.done():
                break  # its snapshot process is still writing: later ones wait, in order
            if remote:
                # the writer process commits (in order, after the files it was sent)
                if not p.written.done():
                    if not wait:
                        break  # its files are still being written: later ones wait, in order
                    try:
                        p.written.result()
                    except BaseException:
                        pass  # (abandoned below)
                if local is not None and not local.done():
                    if not wait:
                        break  # an earlier checkpoint still commits here: later ones wait
                    _wait_quietly(local)
                p.commit = self._commit_remote(p)
                continue
            if self._commits is not None:
                # one thread, in order; it waits for the write job (thread mode)
                p.commit = local = self._commits.submit(self._commit_in_order, p)
            else:
                p.written.result()
                done: Future[Any] = Future()
                done.set_result(self._commit_in_order(p))
                p.commit = done
        while self._uncommitted:
            p = self._uncommitted[0]
            if p.commit is None or (not p.commit.done() and not wait):
                return
            self.written_bytes.append(p.written.result())  # re-raises a writer error here
            p.commit.result()
            self.committed.append(p.time)
            self.committed_ids.append(p.writer.id)
            self.committed_set.add(p.writer.id)
            self._uncommitted.pop(0)
            for op in self._stateful():  # everything was read: no more copy-on-write
                if op.cow is not None and not op.cow.pending and not self._uncommitted:
                    op.cow = None

    def finish(self) -> None:
        """The execution completed: commit what is pending, stop the writer."""
        self._finish_active()
        self._maybe_commit(wait=True)
        self._shutdown()

    def _shutdown(self) -> None:
        for pool in (self._pool, self._commits):
            if pool is not None:
                pool.shutdown(wait=True)
        if self._files is not None:
            self._files.close()
            self._files = None

    def _commit_remote(self, p: _Pending) -> Future[Any]:
        """Async mode, local store: have the writer process commit ``p`` (whose files it
        wrote) -- the manifest, the sync and the garbage collection off this process --
        unless its data or an earlier checkpoint failed."""
        writer, written = p.writer, p.written
        if self._broken or written.cancelled() or written.exception() is not None:
            self._broken = True
            writer.abort()
            failed: Future[Any] = Future()
            failed.set_exception(CheckpointError(f"checkpoint at {writer.time!r} abandoned: an earlier write or commit failed"))
            return failed
        store = self.store
        request = commit_request(writer, store, _files_of(p), p.schemas, p.meta, p.base)
        fut: Future[Any] = self._files.commit(request)

        def done(f: Future[Any]) -> None:  # (on the writer's acknowledging thread)
            if f.cancelled() or f.exception() is not None:
                self._broken = True
                return
            store.committed_elsewhere(writer)
            store.problems = list((f.result() or {}).get("problems", []))

        fut.add_done_callback(done)
        return fut

    def _commit_in_order(self, p: _Pending) -> Any:
        """Writer thread: commit ``p`` unless its data or an earlier checkpoint failed
        (then a later checkpoint, built incrementally on it, would be wrong).  In fork
        mode it first adopts the files the job or the snapshot process wrote."""
        writer, written = p.writer, p.written
        if self._broken or written.cancelled() or written.exception() is not None:
            self._broken = True
            writer.abort()
            raise CheckpointError(f"checkpoint at {writer.time!r} abandoned: an earlier write or commit failed")
        files = [
            BinFile(name, b, None if path is None else FileRef(path, size, xxh64), snapshot=snap)  # None: emptied
            for name, b, snap, path, size, xxh64 in _files_of(p)
        ]
        try:
            return commit(writer, p.schemas, files, p.meta)  # the commit path both engines share
        except BaseException:
            self._broken = True
            raise

    def abort(self) -> None:
        """The execution failed: uncommitted checkpoints are abandoned (snapshot
        processes killed and reaped, what they wrote deleted)."""
        self._broken = True  # a commit starting from now on abandons itself
        active, self._active = self._active, None
        if active is not None and active.job is not None:
            active.job.release()
            if not active.written.done():
                active.written.set_exception(CheckpointError(f"checkpoint at {active.time!r} abandoned"))
        if self._files is not None:
            # the writer process finishes what it was sent (a commit requested is valid:
            # its sinks had passed it); then what it did not commit is deleted below
            self._files.close()
            self._files = None
        for p in self._uncommitted:
            if p.snapshot is not None and not p.snapshot.done:
                p.snapshot.kill()
            for f in (p.written, p.commit):
                if f is not None:
                    f.cancel()
                    try:
                        f.result()
                    except Exception:
                        pass
            c = p.commit
            ok = c is not None and c.done() and not c.cancelled() and c.exception() is None
            if not ok:
                self._discard(p)
        self._uncommitted.clear()
        self._shutdown()
