"""One micro-batch on the driver, stage by stage.

:meth:`MicroBatch.run` takes the batch up to its commit; :meth:`MicroBatch.finish`
hands the committed output over and measures the batch.  The stages, in order:

1. **due timers** (:meth:`~MicroBatch.due_timers`): per root stateful operator, the bins
   with a timer before the batch's frontier (their partitions run even without records);
2. **input frames** (:meth:`~tstate.spark.stages.Stages.input_frames`): each input's DataFrame through
   its input task (:func:`~tstate.spark.task.input_task`: the fused chain, shuffle cells);
3. **held rows** (:meth:`~tstate.spark.stages.Stages.held_rows`): what earlier batches held back
   (:mod:`tstate.spark.held`): input records go in like fresh input, records a frontier
   operator gave at times this batch reaches go to their boundaries or loops;
4. **input rows** (:meth:`~tstate.spark.stages.Stages.input_rows`): the rows the driver needs from the
   input tasks (sink output references, loop times, records held back);
5. **loops** (:meth:`~tstate.spark.stages.Stages.loops`) and **boundary stages**
   (:meth:`~tstate.spark.stages.Stages.boundary_stage`), in the plan's order: a loop runs in rounds
   (:class:`~tstate.spark.rounds.LoopRun`); root boundaries whose inputs are all ready
   are one shuffle and one task per partition (:func:`~tstate.spark.task.boundary_task`);
6. **reduce rows** (:meth:`~MicroBatch.reduce_rows`): ``FILE`` rows into the checkpoint
   being written and the driver's timers, ``STATS`` into counters, ``SINK`` into output
   parts, ``HELD`` into held cells;
7. **output** (:meth:`~MicroBatch.output`): the parts whose times the batch reached, in
   the batch's output index (:mod:`tstate.spark.output`); the others wait;
8. **manifest** (:meth:`~MicroBatch.manifest`): operator schemas, the held file, the
   ``spark`` meta (:class:`Committed`);
9. **commit** (in :meth:`~MicroBatch.run`: the manifest, atomically; any failure before
   aborts the checkpoint and commits nothing);
10. **sinks** (:meth:`~MicroBatch.sinks`, after the commit): leftovers of failed tasks
    deleted, the output to the sinks and their frontier moved by the run's
    :class:`~tstate.spark.delivery.Delivery` (in the background while the next batch
    runs, which waits for it before its own commit: step 9);
11. **metrics** (:meth:`~MicroBatch.metrics`): a :class:`BatchMetrics`.

Stages 2 to 5 are :class:`~tstate.spark.stages.Stages`'.  What one run's batches share is
a :class:`Job`; what a committed batch leaves for the next is a
:class:`~tstate.spark.committed.Committed` (the manifest's ``spark`` meta).

>>> c = Committed(batch=4, frontier=10, fresh=False, timers={"count": {3: 12}})
>>> c.meta(2)["timers"], Committed.of_meta(c.meta(2), 5).timers
({'count': {'3': 12}}, {'count': {3: 12}})
"""

from __future__ import annotations

import time as _time
from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol

from attrs import frozen

from tstate.checkpoint.commit import commit, operator_schemas
from tstate.hash_kind import HashKind
from tstate.metrics import BatchMetrics
from tstate.plan import Stateful
from tstate.progress.frontier import Antichain
from tstate.spark import binstore
from tstate.spark.committed import Committed
from tstate.spark.held import held_name, write_held
from tstate.spark.input_rows import INPUT_ROWS
from tstate.spark.output import Part, clean, sink_dir, write_index, write_parts
from tstate.spark.shuffles import Shuffles
from tstate.spark.stages import Stages
from tstate.spark.wire import FILE, HELD, SINK, STATS, BatchInfo, FileReport, read_stats

if TYPE_CHECKING:  # pragma: no cover
    from tstate.spark.plan import Plan

__all__ = ["BatchMetrics", "Committed", "Job", "Shuffles", "MicroBatch"]


@frozen
class Job:
    """What every micro-batch of one run shares: the session and its shuffles, the
    state store, the lowered dataflow, its sinks (sink node -> sink, on the driver),
    the late-records accumulator, and the backend's settings."""

    spark: Any
    shuffles: Shuffles
    store: Any
    directory: str
    plan: "Plan"
    sinks: dict[int, Any]
    late: Any
    compact_after: int
    local_loops: int
    #: hands committed batches' output to the sinks (tstate.spark.delivery)
    delivery: Any = None
    #: where tasks keep keyed state: None (the heap) or a RocksDB setting
    #: (:mod:`tstate.spark.rocks_bins`)
    state: Any = None


#: the counters a batch sums over its tasks' stats rows (:attr:`MicroBatch.stats`)
_STATS = (
    "records", "hits", "catchups", "misses", "bytes", "take_us", "take_max_us",
    "prefetched", "read_bytes", "handover_bins", "handover_bytes", "prefetch_loads",
    INPUT_ROWS,
)


class Bound(Protocol):
    """What a batch reads of an input's binding (:class:`tstate.spark.backend.Source`)."""

    time: Optional[str]
    record: str
    lateness: int


class MicroBatch:
    """One micro-batch (module docstring): inputs ``dfs`` (input name -> the batch's
    DataFrame) bound as ``bound``, Spark batch ``batch`` covering times ``[lo, hi)``
    (``hi`` None: the inputs close, every timer fires); ``const_time``: the time of rows
    without a time column (None: 0); ``last``: what the previous batch committed;
    ``owners``: per boundary, the partition owning each bin, over ``partitions``
    partitions (``moved`` bins moved since the last batch, ``moved_bins`` which, per
    boundary; ``precopy``: they were prefetched); ``prefetch``: per stateful boundary, the
    ``(bin, next owner)`` pairs the executors load for the hand-over at batch
    ``handover`` (pre-copy, :mod:`tstate.spark.binstore`); ``newest``: the newest event
    time seen (event-time streaming); ``placed``: the inputs whose frames were
    partitioned for the colocated path once per run (:mod:`tstate.spark.placed`);
    ``fold``: the batch is a folded run's (:mod:`tstate.spark.folded`)."""

    def __init__(
        self,
        job: Job,
        last: Committed,
        owners: dict[int, list[int]],
        partitions: int,
        dfs: dict[str, Any],
        bound: Mapping[str, Bound],
        batch: int,
        lo: int,
        hi: Optional[int],
        const_time: Optional[int],
        *,
        moved: int = 0,
        newest: Optional[int] = None,
        start: Optional[float] = None,
        moved_bins: Optional[dict[int, frozenset[int]]] = None,
        prefetch: Optional[dict[int, tuple[tuple[int, int], ...]]] = None,
        handover: int = -1,
        precopy: bool = False,
        placed: Optional[Mapping[str, Any]] = None,
        fold: Any = None,
    ) -> None:
        self.job, self.last, self.plan = job, last, job.plan
        self.owners, self.partitions, self.moved = owners, partitions, moved
        self.moved_bins, self.prefetch, self.handover = dict(moved_bins or {}), dict(prefetch or {}), handover
        #: this batch is a pre-copy hand-over (its moved bins were prefetched)
        self.precopy = precopy
        self.dfs, self.bound = dfs, bound
        #: inputs whose frames are on the partitions of their bins (tstate.spark.placed)
        self.placed: Mapping[str, Any] = placed or {}
        self.batch, self.lo, self.hi, self.const_time = batch, lo, hi, const_time
        self.newest = newest
        #: a folded run's one batch (tstate.spark.folded.Fold): its ``lo`` is its input's
        #: first time, found by its task
        self.fold = fold
        self.start = _time.perf_counter() if start is None else start
        #: the driver's pending timers, updated by the batch's state files
        self.timers = {op: dict(bins) for op, bins in last.timers.items()}
        t = _time.perf_counter()
        self.labels = job.shuffles.labels(partitions)
        self._labels_wait = _time.perf_counter() - t
        self.writer: Any = None
        self.info: Optional[BatchInfo] = None
        #: the stages from the inputs to the last boundary, and what they collected
        self.stages = Stages(self)
        self.stats = dict.fromkeys(_STATS, 0)
        self.fresh_parts: list[Part] = []
        self.now: list[Part] = []
        self.index: Optional[str] = None
        self.seconds: dict[str, float] = {}
        #: seconds the driver waited on Spark jobs (the tasks, and Spark's planning and
        #: scheduling of them; the stages' are :attr:`Stages.waited`); the rest of the
        #: batch's wall time is the driver's own
        self.waited = self._labels_wait
        #: seconds waited before the commit for the previous batch's delivery
        self.delivery_wait = 0.0

    # -- up to the commit -----------------------------------------------------------
    def run(self) -> Committed:
        """The stages up to the commit (module docstring); returns what the batch
        committed.  A failure aborts the checkpoint: nothing of the batch is visible."""
        job, hi, lo = self.job, self.hi, self.lo
        head = None if self.last.fresh else job.store.head
        self.writer = job.store.begin(hi if hi is not None else lo, full=self.last.fresh)
        try:
            self.info = BatchInfo(
                self.batch, lo, hi, job.directory, head.id if head is not None else None, self.writer.id,
                self.writer.token, self.labels, {b: tuple(o) for b, o in self.owners.items()}, self.due_timers(),
                job.compact_after, self.prefetch, self.handover, self.moved_bins, job.state, self.fold,
            )
            self.stages.run()
            if self.stages.first is not None:  # a folded batch starts at its input's first time
                self.lo = self.writer.time = self.stages.first
            t_jobs = _time.perf_counter()
            held_cells = self.reduce_rows()
            pending = self.output()
            committed, schemas, meta, attached = self.manifest(held_cells, pending)
            # the previous batch's output is delivered before this batch commits (tstate.spark.delivery)
            if job.delivery is not None:  # (its Spark job's part is waiting on Spark: tstate.spark.delivery.Waited)
                waited = job.delivery.wait()
                self.delivery_wait = waited.seconds
                self.waited += waited.job_seconds
            t_driver = _time.perf_counter()
            # the commit path both engines share (the bins' files were adopted as their
            # FILE rows arrived: tstate.spark.wire.FileReport.adopt)
            manifest = commit(self.writer, schemas, (), meta, attached)
            t_commit = _time.perf_counter()
            # the next batch reads it on the driver (the one-task path's state size): from memory
            binstore.remember(job.directory, manifest)
        except BaseException:
            self.writer.abort()
            raise
        finally:
            for df in self.stages.persisted:
                df.unpersist()
        self.seconds = {"jobs": t_jobs - self.start, "driver": t_driver - t_jobs, "commit": t_commit - t_driver}
        # (the previous held file stays: its checkpoint is retained, and recovery may fall
        # back to it; garbage collection deletes it with that checkpoint's manifest)
        return committed

    def due_timers(self) -> dict[int, frozenset[int]]:
        """Per root stateful boundary: the bins with a timer due before the batch's
        frontier (loops: per round, :mod:`tstate.spark.rounds`)."""
        plan, hi = self.plan, self.hi
        due = {}
        for b in plan.boundaries:
            if plan.nodes[b].loop is not None:
                continue
            timers = self.timers.get(plan.nodes[b].name, {})
            due[b] = frozenset(bn for bn, t in timers.items() if hi is None or t < hi)
        return due

    def reduce_rows(self) -> list[Any]:
        """The rows the driver got from the tasks: ``FILE`` rows into the checkpoint
        being written and the timers, ``STATS`` into the counters, ``SINK`` references
        into the batch's output parts; returns the held-back input cells (``HELD``)."""
        plan, stats = self.plan, self.stats
        held_cells: list[Any] = []
        for r in self.stages.rows:
            kind = r["kind"]
            if kind == FILE:
                opname = plan.nodes[r["node"]].name
                FileReport.of_row(r["payload"]).adopt(self.writer, opname, r["bin"], self.timers.setdefault(opname, {}))
            elif kind == STATS:
                s = read_stats(r["payload"])
                for k in stats:
                    stats[k] += s.get(k, 0)
                stats["take_max_us"] = max(stats["take_max_us"], s.get("take_us", 0))  # the slowest task
            elif kind == SINK:
                self.fresh_parts.append(Part.of_row(r["payload"]))
            elif kind == HELD:
                held_cells.append(bytes(r["payload"]))
        return held_cells

    def output(self) -> list[Part]:
        """The batch's output: the parts' times before ``hi`` (of this batch's parts and
        of those waiting), referenced by the batch's output index; returns the parts
        that still wait for a later batch."""
        assert self.info is not None
        sink_out = self.stages.sink_out
        if sink_out:  # sink records of a held file from before output parts existed
            refs: list[Any] = []
            write_parts(self.plan, self.info, {(nd, t): r for nd, by_t in sink_out.items() for t, r in by_t.items()}, refs)
            self.fresh_parts += [Part.of_row(r[5]) for r in refs]
        later = []
        for p in [*self.last.pending, *self.fresh_parts]:
            a, b = p.split(self.hi)
            if a is not None:
                self.now.append(a)
            if b is not None:
                later.append(b)
        self.index = self.last.output
        if self.now:
            self.index = write_index(self.job.store.fs, self.batch, self.writer.token, self.lo, self.hi, self.index, self.now)
        if self.job.store.replica is not None:  # the output follows the checkpoint to the replica
            for path in sorted({p.path for p in self.fresh_parts}):
                self.writer.mirror(path)
            if self.now:
                self.writer.mirror(self.index)
        return later

    def manifest(
        self, held_cells: list[Any], pending: list[Part]
    ) -> tuple[Committed, dict[str, tuple[Any, int, HashKind]], dict[str, Any], list[Any]]:
        """What the checkpoint records besides the bins: the operator schemas, the
        ``spark`` meta and the held file (the held cells and entries still ahead,
        written here); returns what the batch commits, and those three."""
        plan, writer = self.plan, self.writer
        schemas = operator_schemas(
            op for b in plan.boundaries if isinstance(op := plan.nodes[b].op, Stateful)
        )
        held = None
        attached = []
        held_cells.extend(self.stages.keep)
        if held_cells:
            held = held_name(writer.id, writer.token)
            # attached: verified with the checkpoint's files (a damaged one makes
            # recovery fall back to the previous checkpoint), deleted with its manifest
            attached.append(write_held(self.job.store.fs, held, held_cells))
        committed = Committed(
            self.batch, self.hi, False, self.timers, self.newest, held, self.index, pending,
        )
        return committed, schemas, {"spark": committed.meta(self.partitions)}, attached

    # -- after the commit -------------------------------------------------------------
    def finish(self) -> BatchMetrics:
        """After the commit: the output to the sinks (:meth:`sinks`), and the batch's
        :class:`BatchMetrics`."""
        t_commit = _time.perf_counter()
        self.sinks()
        t_out = _time.perf_counter()
        return self.metrics(t_out - t_commit + self.delivery_wait)

    def sinks(self) -> None:
        """The commit made the output visible: leftovers of failed or replayed tasks go,
        then the sinks get it -- epoch files written by Spark tasks, driver sinks
        (in-memory, callbacks) on the driver; then the sinks' frontier moves to ``hi``
        (:class:`~tstate.spark.delivery.Delivery`: on its thread in a batch run)."""
        job, hi, fs = self.job, self.hi, self.job.store.fs
        keep = {p.path for p in self.fresh_parts} | ({self.index} if self.now and self.index else set())
        clean(fs, [sink_dir(self.plan, node) for node in self.plan.sinks], self.batch, keep)
        front = Antichain([hi]) if hi is not None else Antichain()
        self.waited += job.delivery.deliver(job.sinks, self.now, front)

    def metrics(self, output_seconds: float) -> BatchMetrics:
        """The batch's figures (``output_seconds``: handing the output to the sinks)."""
        s, sec, loops = self.stats, self.seconds, self.stages.loop_stats
        return BatchMetrics(
            self.batch, self.hi, _time.perf_counter() - self.start, self.partitions, s[INPUT_ROWS], s["hits"],
            s["misses"], s["bytes"], self.moved, s["catchups"] + s["prefetched"], sec["jobs"], sec["driver"], sec["commit"],
            loops["rounds"], loops["stages"], sum(p.records for p in self.now), output_seconds,
            stages=loops["root_stages"], take_seconds=s["take_us"] / 1e6, take_max_seconds=s["take_max_us"] / 1e6,
            bytes_read=s["read_bytes"], handover_bytes=s["handover_bytes"], prefetched_bins=s["prefetched"],
            prefetch_fallbacks=(s["handover_bins"] - s["prefetched"]) if self.precopy else 0,
            prefetch_bins=sum(len(p) for p in self.prefetch.values()), prefetch_loads=s["prefetch_loads"],
            operator_records=s["records"], job_seconds=self.waited + self.stages.waited,
        )
