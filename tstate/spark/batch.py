"""One micro-batch on the driver, stage by stage.

:meth:`MicroBatch.run` takes the batch up to its commit; :meth:`MicroBatch.finish`
hands the committed output over and measures the batch.  The stages, in order:

1. **due timers** (:meth:`~MicroBatch.due_timers`): per root stateful operator, the bins
   with a timer before the batch's frontier (their partitions run even without records);
2. **input frames** (:meth:`~MicroBatch.input_frames`): each input's DataFrame through
   its input task (:func:`~tstate.spark.task.input_task`: the fused chain, shuffle cells);
3. **held rows** (:meth:`~MicroBatch.held_rows`): what earlier batches held back
   (:mod:`tstate.spark.held`): input records go in like fresh input, records a frontier
   operator gave at times this batch reaches go to their boundaries or loops;
4. **input rows** (:meth:`~MicroBatch.input_rows`): the rows the driver needs from the
   input tasks (sink output references, loop times, records held back);
5. **loops** (:meth:`~MicroBatch.loops`) and **boundary stages**
   (:meth:`~MicroBatch.boundary_stage`), in the plan's order: a loop runs in rounds
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

What one run's batches share is a :class:`Job`; what a committed batch leaves for the
next is a :class:`Committed` (the manifest's ``spark`` meta).

>>> c = Committed(batch=4, frontier=10, fresh=False, timers={"count": {3: 12}})
>>> c.meta(2)["timers"], Committed.of_meta(c.meta(2), 5).timers
({'count': {'3': 12}}, {'count': {3: 12}})
"""

from __future__ import annotations

import time as _time
from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol

from attrs import define, field, frozen

from tstate.checkpoint.commit import commit, operator_schemas
from tstate.column_key import Col
from tstate.hash_kind import HashKind
from tstate.plan import Stateful
from tstate.metrics import BatchMetrics
from tstate.progress.frontier import Antichain
from tstate.spark.cells import decode_cell
from tstate.spark.colocated import DEST, colocated_inputs, colocated_task, partition_columns
from tstate.spark.held import checked_path, held_name, read_held, write_held
from tstate.spark.input_rows import INPUT_ROWS, counted, counted_kinds, passing
from tstate.spark.output import Part, clean, sink_dir, write_index, write_parts
from tstate.spark.records import decode_records
from tstate.spark.rounds import LoopRun
from tstate.spark.task import boundary_task, held_task, input_task
from tstate.spark.wire import (
    FILE, HELD, RECORDS, SCHEMA, SINK, STATS, TICK, TIMES, BatchInfo, FileReport, read_stats, read_times,
)

if TYPE_CHECKING:  # pragma: no cover
    from tstate.spark.plan import Plan

__all__ = ["BatchMetrics", "Committed", "Job", "Shuffles", "MicroBatch"]


@define
class Committed:
    """What the last committed batch leaves for the next: its id, the frontier (None:
    the run finished), the pending timers per operator and bin (the earliest time, or
    in a loop the minimal ``[[epoch, inner], ...]``), the newest event time seen
    (event-time streaming), its held file, its output index and the output parts
    waiting for later times.  ``fresh``: nothing committed or resumed yet."""

    batch: int = -1
    frontier: Optional[int] = 0
    fresh: bool = True
    timers: dict[str, dict[int, Any]] = field(factory=dict)
    newest: Optional[int] = None
    held: Optional[str] = None
    output: Optional[str] = None
    pending: list[Part] = field(factory=list)

    @classmethod
    def of_checkpoint(cls, head: Any) -> "Committed":
        """What checkpoint ``head`` left: a Spark batch's (its ``spark`` meta) or an
        embedded run's (continue from its time)."""
        meta = head.meta.get("spark")
        if meta is None:  # an embedded run's checkpoint: continue from its time
            t = int(head.time)
            meta = {
                "batch": -1, "frontier": t,
                # which bins hold timers is not recorded: every bin is looked at once
                "timers": {op: {str(b): t for b in e.chains} for op, e in head.operators.items()},
            }
        return cls.of_meta(meta, head.id)

    @classmethod
    def of_meta(cls, meta: dict[str, Any], checkpoint_id: int) -> "Committed":
        """The inverse of :meth:`meta` (``checkpoint_id``: named in errors)."""
        return cls(
            batch=int(meta["batch"]),
            frontier=meta["frontier"],
            fresh=False,
            timers={op: {int(b): t for b, t in bins.items()} for op, bins in meta.get("timers", {}).items()},
            newest=meta.get("newest"),
            held=checked_path(meta.get("held"), checkpoint_id),
            output=meta.get("output"),
            pending=[Part.from_builtins(p) for p in meta.get("output_pending", [])],
        )

    def meta(self, partitions: int) -> dict[str, Any]:
        """The manifest's ``spark`` meta of the batch (run on ``partitions`` partitions)."""
        return {
            "batch": self.batch, "frontier": self.frontier, "partitions": partitions, "newest": self.newest,
            "held": self.held, "timers": {op: {str(b): t for b, t in tm.items()} for op, tm in self.timers.items()},
            "output": self.output, "output_pending": [p.to_builtins() for p in self.pending],
        }


class Shuffles:
    """How rows reach partitions on one Spark session: labels ``l[p]`` whose Spark hash
    puts them on partition ``p``, and ``TICK`` rows (cached across batches)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._labels: dict[int, tuple[int, ...]] = {}
        self._ticks: dict[tuple[int, int], Any] = {}

    def labels(self, n: int) -> tuple[int, ...]:
        """Labels ``l[p]`` with ``pmod(hash(l[p]), n) == p``: Spark's hash partitioning
        of an int column, computed by Spark itself."""
        if n not in self._labels:
            found: dict[int, int] = {}
            size = 64 * n
            while len(found) < n:
                rows = self.spark.range(0, size).selectExpr(
                    "cast(id as int) as id", f"pmod(hash(cast(id as int)), {n}) as p"
                ).collect()
                for r in rows:
                    found.setdefault(int(r["p"]), int(r["id"]))
                size *= 4
            self._labels[n] = tuple(found[p] for p in range(n))
        return self._labels[n]

    def ticks(self, nodes: "int | tuple[int, ...]", labels: tuple[int, ...]) -> Any:
        """One ``TICK`` row per partition (for the first of ``nodes``, a stage's
        boundaries): every partition runs the stage, so due timers fire everywhere."""
        if isinstance(nodes, int):
            nodes = (nodes,)
        key = (nodes[0], len(labels))
        if key not in self._ticks:
            self._ticks[key] = self.spark.createDataFrame([(TICK, lab, nodes[0], 0, 0, b"") for lab in labels], SCHEMA)
        return self._ticks[key]


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
    time seen (event-time streaming)."""

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
    ) -> None:
        self.job, self.last, self.plan = job, last, job.plan
        self.owners, self.partitions, self.moved = owners, partitions, moved
        self.moved_bins, self.prefetch, self.handover = dict(moved_bins or {}), dict(prefetch or {}), handover
        #: this batch is a pre-copy hand-over (its moved bins were prefetched)
        self.precopy = precopy
        self.dfs, self.bound = dfs, bound
        self.batch, self.lo, self.hi, self.const_time = batch, lo, hi, const_time
        self.newest = newest
        self.start = _time.perf_counter() if start is None else start
        #: the driver's pending timers, updated by the batch's state files
        self.timers = {op: dict(bins) for op, bins in last.timers.items()}
        t = _time.perf_counter()
        self.labels = job.shuffles.labels(partitions)  # (a Spark job the first time a session needs them)
        self._labels_wait = _time.perf_counter() - t
        self.writer: Any = None
        self.info: Optional[BatchInfo] = None
        #: DataFrames cached for the batch (unpersisted at its end)
        self.persisted: list[Any] = []
        #: per wave (input name, root boundary, loop item): the DataFrame of its task's rows;
        #: ``alias``: a boundary -> the wave holding its records (a stage's or loop's)
        self.waves: dict[Any, Any] = {}
        self.alias: dict[Any, Any] = {}
        #: the rows the driver collected from the tasks (everything but records)
        self.rows: list[Any] = []
        #: held entries ``[kind, node, bin, time, payload]`` still ahead of the batch
        self.keep: list[Any] = []
        #: held records this batch reaches: boundary or ``("loop", id)`` -> rows
        self.inject: dict[Any, list[Any]] = {}
        #: sink records of a held file from before output parts existed
        self.sink_out: dict[int, dict[int, list[Any]]] = {}
        #: per loop boundary: the times of the records in flight to it
        self.loop_times: dict[int, set[Any]] = {}
        #: the state files loop rounds wrote so far (tstate.spark.rounds.Overlay)
        self.overlay: dict[str, Any] = {}
        self.loop_stats = {"rounds": 0, "stages": 0, "root_stages": 0}
        self.stats = {
            "records": 0, "hits": 0, "catchups": 0, "misses": 0, "bytes": 0, "take_us": 0, "take_max_us": 0,
            "prefetched": 0, "read_bytes": 0, "handover_bins": 0, "handover_bytes": 0, "prefetch_loads": 0,
            INPUT_ROWS: 0,
        }
        #: inputs whose input-row count is not collected yet (tstate.spark.input_rows)
        self.uncounted: set[str] = set()
        self.fresh_parts: list[Part] = []
        self.now: list[Part] = []
        self.index: Optional[str] = None
        self.seconds: dict[str, float] = {}
        #: seconds the driver waited on Spark jobs (the tasks, and Spark's planning and
        #: scheduling of them); the rest of the batch's wall time is the driver's own
        self.waited = self._labels_wait
        #: seconds waited before the commit for the previous batch's delivery
        self.delivery_wait = 0.0
        #: inputs whose stateful operators run in their own tasks (tstate.spark.colocated)
        self.colocated: dict[str, list[int]] = {}

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
                job.compact_after, self.prefetch, self.handover, self.moved_bins,
            )
            self.input_frames()
            self.held_rows()
            self.input_rows()
            done: set[Any] = {b for bs in self.colocated.values() for b in bs}
            for pos, item in enumerate(self.plan.items):
                if item in done:
                    continue
                done.add(item)
                if isinstance(item, tuple):  # iterate scopes: rounds until the batch is done
                    self.loops(pos, item, done)
                else:
                    self.boundary_stage(pos, item, done)
            t_jobs = _time.perf_counter()
            held_cells = self.reduce_rows()
            pending = self.output()
            committed, schemas, meta, attached = self.manifest(held_cells, pending)
            # the previous batch's output is delivered before this batch commits (tstate.spark.delivery)
            self.delivery_wait = job.delivery.wait() if job.delivery is not None else 0.0
            t_driver = _time.perf_counter()
            # the commit path both engines share (the bins' files were adopted as their
            # FILE rows arrived: tstate.spark.wire.FileReport.adopt)
            commit(self.writer, schemas, (), meta, attached)
            t_commit = _time.perf_counter()
        except BaseException:
            self.writer.abort()
            raise
        finally:
            for df in self.persisted:
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

    def input_frames(self) -> None:
        """Each input's DataFrame through its input task: a wave of shuffle cells (and
        sink references, held records, loop times); cached when read more than once."""
        plan, info = self.plan, self.info
        assert info is not None
        self.colocated = colocated_inputs(
            plan, self.dfs, {n: b.lateness for n, b in self.bound.items()}, self.owners, self.last.held is not None
        )
        for name, bs in self.colocated.items():
            self.colocated_stage(name, bs)
        for name, df in self.dfs.items():
            if name in self.colocated:
                continue
            src = self.bound[name]
            at = self.const_time if self.const_time is not None else 0  # rows without a time column
            task = input_task(plan, info, name, src.record, src.time, at, self.job.late)
            wave = df.mapInArrow(counted(task, plan.inputs[name]), SCHEMA)
            self.uncounted.add(name)
            uses = sum(name in plan.feeders.get(b, ()) for b in plan.boundaries) + bool(plan.sink_reach.get(name))
            if uses > 1 or plan.delays or any(name in lp.feeders for lp in plan.loops.values()):
                wave = wave.persist()
                self.persisted.append(wave)
            self.waves[name] = wave

    def colocated_stage(self, name: str, boundaries: list[int]) -> None:
        """Input ``name`` and the stateful operators it reaches, keyed by columns, as one
        stage: its rows repartitioned by the key's bin computed in the JVM, one task per
        partition running the fused chain and the operators
        (:mod:`tstate.spark.colocated`)."""
        from pyspark.sql import functions as F

        plan, info, src, df = self.plan, self.info, self.bound[name], self.dfs[name]
        assert info is not None
        first = plan.nodes[boundaries[0]]
        assert isinstance(first.key, Col)
        columns = partition_columns(first.key, dict(df.dtypes), first.bins, self.owners[boundaries[0]], self.labels)
        at = self.const_time if self.const_time is not None else 0
        task = colocated_task(plan, info, name, boundaries, src.record, src.time, at, self.job.late)
        counted_task = counted(task, plan.inputs[name])  # (its input rows: tstate.spark.input_rows)
        out = df.withColumns({c: F.expr(e) for c, e in columns.items()}).repartition(self.partitions, DEST).mapInArrow(counted_task, SCHEMA)
        if any(b in plan.feeders.get(c, ()) for b in boundaries for c in plan.boundaries):
            out = out.persist()
            self.persisted.append(out)
        self.waves[name] = out
        for b in boundaries:
            self.alias[b] = name
        self.loop_stats["root_stages"] += 1
        self.rows += self._collect(out.where(f"kind != {RECORDS}"))  # (timed as a Spark job)

    def held_rows(self) -> None:
        """Records held back by earlier batches: input rows (allowed lateness) go in
        first, through the input's task; records and sink output a frontier operator
        gave at later times go in once the batch reaches their time."""
        plan, info, hi, fs = self.plan, self.info, self.hi, self.job.store.fs
        assert info is not None
        path = self.last.held
        entries = read_held(fs, path) if path is not None else []
        where = fs.describe(path) if path is not None else ""
        cells = [c for c in entries if isinstance(c, bytes)]
        if cells:
            (name,) = [n for n in self.dfs] or list(self.bound)
            held_df = self.job.spark.createDataFrame([(c,) for c in cells], "payload binary")
            wave = held_df.mapInArrow(held_task(plan, info, name, where), SCHEMA)
            self.waves[name] = self.waves[name].unionAll(wave) if name in self.waves else wave
        for e in entries:
            if isinstance(e, bytes):
                continue
            kind, node, bin_, t, payload = e
            if hi is not None and t >= hi:
                self.keep.append(e)
            elif kind == SINK:
                self.sink_out.setdefault(node, {}).setdefault(t, []).extend(
                    decode_records(payload, plan.records, f"{where} (sink {plan.nodes[node].name!r}, time {t})")
                )
            else:
                lid = plan.nodes[node].loop
                self.inject.setdefault(node if lid is None else ("loop", lid), []).append(
                    (RECORDS, self.labels[self.owners[node][bin_]], node, bin_, t, payload)
                )
                if lid is not None:
                    self.loop_times.setdefault(node, set()).add(
                        decode_cell(payload, plan.records, f"{where} (operator {plan.nodes[node].name!r})")[0]
                    )

    def input_rows(self) -> None:
        """The rows the driver needs of the input tasks: sink output references, the
        times of records entering loops, and records held back (allowed lateness)."""
        plan = self.plan
        holding = any(self.bound[n].lateness for n in self.dfs)
        if holding:
            for name in self.dfs:
                self.waves[name] = self.waves[name].persist()
                self.persisted.append(self.waves[name])
        for name in self.dfs:
            if name in self.colocated:  # (its rows came with its stage)
                continue
            kinds = [str(SINK)] if plan.sink_reach.get(name) else []
            if any(name in lp.feeders for lp in plan.loops.values()):
                kinds.append(str(TIMES))
            if holding:
                kinds.append(str(HELD))
            if kinds:  # (with the input's row count: tstate.spark.input_rows)
                self.rows += self._collect(self.waves[name].where(f"kind in ({counted_kinds(kinds)})"))
                self.uncounted.discard(name)

    def _frames(self, feeders: Any) -> list[Any]:
        """The DataFrames holding the records of waves ``feeders`` (each once)."""
        keys = dict.fromkeys(self.alias.get(w, w) for w in feeders)
        return [self.waves[k] for k in keys if k in self.waves]

    def loops(self, pos: int, item: Any, done: set[Any]) -> None:
        """Loop ``item`` (at ``pos`` in the plan's items), with the later loops whose
        inputs are all ready, in rounds until the batch's times are done
        (:class:`~tstate.spark.rounds.LoopRun`); records leaving them are a new wave,
        records still in flight at later epochs are held."""
        plan, spark = self.plan, self.job.spark
        assert self.info is not None
        ready = {w for w in done if not isinstance(w, tuple)}
        group = [item] + [
            it for it in plan.items[pos + 1 :]
            if isinstance(it, tuple) and it not in done
            and all(isinstance(w, str) or w in ready for w in plan.loops[it[1]].feeders)
        ]  # fmt: skip
        done.update(group)
        lps = [plan.loops[it[1]] for it in group]
        inside = {b for lp in lps for b in lp.boundaries}
        for r in self.rows:
            if r["kind"] == TIMES and r["node"] in inside:
                self.loop_times.setdefault(r["node"], set()).update(read_times(r["payload"]))
        cells = self._frames(w for lp in lps for w in lp.feeders)
        cells += [spark.createDataFrame(self.inject[it], SCHEMA) for it in group if it in self.inject]
        run = LoopRun(
            plan, lps, self.info, self.writer, self.overlay, self.timers, self.job.shuffles.ticks, self.job.local_loops
        )
        try:
            t = _time.perf_counter()
            exits, got, left = run.run(cells, self.loop_times, self.labels)
            self.waited += _time.perf_counter() - t  # (its rounds' own driver work included)
        finally:
            self.persisted.extend(run.persisted)
        self.loop_stats["rounds"] += run.rounds
        self.loop_stats["stages"] += run.stages
        if exits is not None:
            self.waves[item] = exits
        for b in inside:
            self.alias[b] = item
        self.rows += got
        self.keep.extend([r["kind"], r["node"], r["bin"], r["time"], bytes(r["payload"])] for r in left)

    def boundary_stage(self, pos: int, item: int, done: set[Any]) -> None:
        """Root boundary ``item`` (at ``pos`` in the plan's items) and the later ones
        whose inputs are all ready: one shuffle onto the partitions owning their bins,
        one task per partition (:func:`~tstate.spark.task.boundary_task`)."""
        plan, spark, hi, info = self.plan, self.job.spark, self.hi, self.info
        assert info is not None
        stage: list[int] = [item] + [
            it for it in plan.items[pos + 1 :]
            if not isinstance(it, tuple) and it not in done
            and all(isinstance(w, str) or w in self.waves or w in self.alias for w in plan.feeders.get(it, ()))
        ]  # fmt: skip
        done.update(stage)
        nodes = ", ".join(map(str, stage))
        feeders = [w for b in stage for w in plan.feeders.get(b, ())]
        parts = []
        for key in dict.fromkeys(self.alias.get(w, w) for w in feeders):
            if key not in self.waves:
                continue
            want = f"kind = {RECORDS} and node in ({nodes})"
            if key in self.uncounted:  # the input's row count comes out with this stage's rows
                self.uncounted.discard(key)
                want = f"({want}) or (kind = {STATS} and node = {plan.inputs[key]})"
            parts.append(self.waves[key].where(want))
        parts += [spark.createDataFrame(self.inject[b], SCHEMA) for b in stage if b in self.inject]
        if plan.delays and hi is not None and parts:  # records a frontier operator gave at later times wait
            late = parts[0]
            for p in parts[1:]:
                late = late.unionAll(p)
            self.keep.extend(
                [RECORDS, r["node"], r["bin"], r["time"], bytes(r["payload"])]
                for r in self._collect(late.where(f"kind = {RECORDS} and time >= {hi}"))
            )
            parts = [p.where(f"kind != {RECORDS} or time < {hi}") for p in parts]
        inp = self.job.shuffles.ticks(tuple(stage), self.labels)
        for p in parts:
            inp = inp.unionAll(p)
        out = inp.repartition(self.partitions, "dest").mapInArrow(passing(boundary_task(plan, info, tuple(stage))), SCHEMA)
        if plan.delays or any(b in plan.feeders.get(c, ()) for b in stage for c in plan.boundaries):
            out = out.persist()
            self.persisted.append(out)
        for b in stage:
            self.waves[b] = out
            self.alias[b] = item
        self.loop_stats["root_stages"] += 1
        self.rows += self._collect(out.where(f"kind != {RECORDS}"))

    def _collect(self, df: Any) -> list[Any]:
        """``df.collect()``, its seconds counted as waiting on Spark (:attr:`waited`)."""
        t = _time.perf_counter()
        try:
            return df.collect()  # type: ignore[no-any-return]
        finally:
            self.waited += _time.perf_counter() - t

    def reduce_rows(self) -> list[Any]:
        """The rows the driver got from the tasks: ``FILE`` rows into the checkpoint
        being written and the timers, ``STATS`` into the counters, ``SINK`` references
        into the batch's output parts; returns the held-back input cells (``HELD``)."""
        plan, stats = self.plan, self.stats
        held_cells: list[Any] = []
        for r in self.rows:
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
        if self.sink_out:  # sink records of a held file from before output parts existed
            refs: list[Any] = []
            write_parts(self.plan, self.info, {(nd, t): r for nd, by_t in self.sink_out.items() for t, r in by_t.items()}, refs)
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
        held_cells.extend(self.keep)
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
        s, sec, loops = self.stats, self.seconds, self.loop_stats
        return BatchMetrics(
            self.batch, self.hi, _time.perf_counter() - self.start, self.partitions, s[INPUT_ROWS], s["hits"],
            s["misses"], s["bytes"], self.moved, s["catchups"] + s["prefetched"], sec["jobs"], sec["driver"], sec["commit"],
            loops["rounds"], loops["stages"], sum(p.records for p in self.now), output_seconds,
            stages=loops["root_stages"], take_seconds=s["take_us"] / 1e6, take_max_seconds=s["take_max_us"] / 1e6,
            bytes_read=s["read_bytes"], handover_bytes=s["handover_bytes"], prefetched_bins=s["prefetched"],
            prefetch_fallbacks=(s["handover_bins"] - s["prefetched"]) if self.precopy else 0,
            prefetch_bins=sum(len(p) for p in self.prefetch.values()), prefetch_loads=s["prefetch_loads"],
            operator_records=s["records"], job_seconds=self.waited,
        )
