"""The stages of one micro-batch from its inputs to its last boundary (driver side):
:class:`Stages` turns the inputs' DataFrames into *waves* -- per input, root
boundary or loop, the DataFrame of its task's rows -- and collects the rows the driver
needs (everything but records) for :class:`~tstate.spark.batch.MicroBatch` to reduce
and commit.  In order: **input frames** (:meth:`Stages.input_frames`), **held rows**
(:meth:`Stages.held_rows`), **input rows** (:meth:`Stages.input_rows`), then in the
plan's order **loops** (:meth:`Stages.loops`) and **boundary stages**
(:meth:`Stages.boundary_stage`)."""

from __future__ import annotations

import time as _time
from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol

from tstate.column_key import Col
from tstate.spark import local_batch
from tstate.spark.cells import decode_cell
from tstate.spark.colocated import DEST, colocated_inputs, colocated_task, partition_columns
from tstate.spark.folded import Unfolded
from tstate.spark.held import read_held
from tstate.spark.input_rows import counted, counted_kinds, passing
from tstate.spark.placed import unplaced
from tstate.spark.plan import Loop
from tstate.spark.records import decode_records
from tstate.spark.rounds import LoopRun
from tstate.spark.task import boundary_task, held_task, input_task
from tstate.spark.wire import HELD, ORDER, RECORDS, SCHEMA, SINK, STATS, TIMES, BatchInfo, read_times, row_type

if TYPE_CHECKING:  # pragma: no cover
    from tstate.spark.committed import Committed
    from tstate.spark.placed import Placement
    from tstate.spark.plan import Plan

__all__ = ["Batch", "Stages"]


class Batch(Protocol):
    """What the stages read of their micro-batch (:class:`tstate.spark.batch.MicroBatch`)."""

    @property
    def job(self) -> Any: ...
    @property
    def last(self) -> "Committed": ...
    @property
    def plan(self) -> "Plan": ...
    @property
    def timers(self) -> dict[str, dict[int, Any]]: ...
    @property
    def owners(self) -> dict[int, list[int]]: ...
    @property
    def partitions(self) -> int: ...
    @property
    def labels(self) -> tuple[int, ...]: ...
    @property
    def dfs(self) -> dict[str, Any]: ...
    @property
    def bound(self) -> Mapping[str, Any]: ...
    @property
    def hi(self) -> Optional[int]: ...
    @property
    def const_time(self) -> Optional[int]: ...
    @property
    def info(self) -> Optional[BatchInfo]: ...
    @property
    def writer(self) -> Any: ...
    @property
    def placed(self) -> Mapping[str, "Placement"]: ...


class Stages:
    """The waves of micro-batch ``batch`` (its inputs, plan, owners and times are
    ``batch``'s) and what its stages collected for the driver."""

    def __init__(self, batch: Batch) -> None:
        self.batch = batch
        self.job, self.last, self.plan, self.timers = batch.job, batch.last, batch.plan, batch.timers
        self.owners, self.partitions, self.labels = batch.owners, batch.partitions, batch.labels
        self.dfs, self.bound = batch.dfs, batch.bound
        #: inputs whose frames are already on the partitions of their bins (tstate.spark.placed)
        self.placed = batch.placed
        self.hi, self.const_time = batch.hi, batch.const_time
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
        #: held records this batch reaches: boundary or :class:`~tstate.spark.plan.Loop` -> rows
        self.inject: dict[Any, list[Any]] = {}
        #: sink records of a held file from before output parts existed
        self.sink_out: dict[int, dict[int, list[Any]]] = {}
        #: per loop boundary: the times of the records in flight to it
        self.loop_times: dict[int, set[Any]] = {}
        #: the state files loop rounds wrote so far (tstate.spark.rounds.Overlay)
        self.overlay: dict[str, Any] = {}
        self.loop_stats = {"rounds": 0, "stages": 0, "root_stages": 0}
        #: inputs whose input-row count is not collected yet (tstate.spark.input_rows)
        self.uncounted: set[str] = set()
        #: inputs whose stateful operators run in their own tasks (tstate.spark.colocated)
        self.colocated: dict[str, list[int]] = {}
        #: seconds the driver waited on the stages' Spark jobs
        self.waited = 0.0
        #: a folded batch's first time, as its task found it (tstate.spark.folded)
        self.first: Optional[int] = None

    @property
    def info(self) -> "BatchInfo | None":
        """What the batch's tasks get (set once the batch's checkpoint is begun)."""
        return self.batch.info

    @property
    def writer(self) -> Any:
        """The batch's checkpoint writer."""
        return self.batch.writer

    def run(self) -> None:
        """Every stage, in order (module docstring); a small batch in one task instead
        (:mod:`tstate.spark.local_batch`)."""
        assert self.info is not None
        folded = self.info.fold is not None  # (its input's size was checked: tstate.spark.folded)
        if local_batch.fits(self.plan, self.info, self.dfs, self.last.held is not None, self.job.local_loops, folded):
            self.rows += local_batch.run_local(self)
            return
        if folded:  # (a folded run takes the one-task path or is cut)
            raise Unfolded(f"batch {self.info.batch}: does not fit one task")
        self.input_frames()
        self.held_rows()
        self.input_rows()
        done: set[Any] = {b for bs in self.colocated.values() for b in bs}
        for pos, item in enumerate(self.plan.items):
            if item in done:
                continue
            done.add(item)
            if isinstance(item, Loop):  # iterate scopes: rounds until the batch is done
                self.loops(pos, item, done)
            else:
                self.boundary_stage(pos, item, done)

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
            if name in self.placed:  # (placed for the colocated path, which it does not take)
                df = unplaced(df)
            wave = df.mapInArrow(counted(task, plan.inputs[name]), row_type())
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
        at = self.const_time if self.const_time is not None else 0
        task = colocated_task(plan, info, name, boundaries, src.record, src.time, at, self.job.late)
        counted_task = counted(task, plan.inputs[name])  # (its input rows: tstate.spark.input_rows)
        owners = self.owners[boundaries[0]]
        placement = self.placed.get(name)
        if placement is not None and placement.fits(owners, self.partitions, self.labels):
            out = df.mapInArrow(counted_task, row_type())  # (its rows are on their partitions: no shuffle)
        else:
            if placement is not None:  # (placed for other owners: a rescale since)
                df = unplaced(df)
            columns = partition_columns(first.key, dict(df.dtypes), first.bins, owners, self.labels)
            framed = df.withColumns({c: F.expr(e) for c, e in columns.items()})
            out = framed.repartition(self.partitions, DEST).mapInArrow(counted_task, row_type())
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
            wave = held_df.mapInArrow(held_task(plan, info, name, where), row_type())
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
                self.inject.setdefault(node if lid is None else Loop(lid), []).append(
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
        ready = {w for w in done if not isinstance(w, Loop)}
        group = [item] + [
            it for it in plan.items[pos + 1 :]
            if isinstance(it, Loop) and it not in done
            and all(isinstance(w, str) or w in ready for w in plan.loops[it.id].feeders)
        ]  # fmt: skip
        done.update(group)
        lps = [plan.loops[it.id] for it in group]
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
            if isinstance(it, int) and it not in done
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
        out = self._exchange(inp).mapInArrow(passing(boundary_task(plan, info, tuple(stage))), row_type())
        if plan.delays or any(b in plan.feeders.get(c, ()) for b in stage for c in plan.boundaries):
            out = out.persist()
            self.persisted.append(out)
        for b in stage:
            self.waves[b] = out
            self.alias[b] = item
        self.loop_stats["root_stages"] += 1
        self.rows += self._collect(out.where(f"kind != {RECORDS}"))

    def _exchange(self, rows: Any) -> Any:
        """Task rows ``rows`` shuffled onto the partitions their ``dest`` labels, each
        with its place before the shuffle (:data:`~tstate.spark.wire.ORDER`): a shuffle
        hands a partition its blocks in no promised order (on a cluster, a remote
        executor's come when they come), and the boundary task takes the cells in that
        place's order -- the order of the frame's partitions and of each task's rows, as
        the embedded engine reads them."""
        from pyspark.sql import functions as F

        return rows.withColumn(ORDER, F.monotonically_increasing_id()).repartition(self.partitions, "dest")

    def _collect(self, df: Any) -> list[Any]:
        """``df``'s rows (task rows, :data:`~tstate.spark.wire.SCHEMA`) as dicts, its
        seconds counted as waiting on Spark (:attr:`waited`).  Collected as Arrow: the
        JVM sends column batches, where ``collect()`` pickles every row and the driver
        unpickles it into a ``Row`` (a batch's FILE, STATS and SINK rows: hundreds per
        batch, one per bin file)."""
        t = _time.perf_counter()
        try:
            return df.toArrow().to_pylist()  # type: ignore[no-any-return]
        finally:
            self.waited += _time.perf_counter() - t
