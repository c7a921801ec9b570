"""The Spark backend: run a dataflow on PySpark micro-batches (driver side).

>>> backend = Backend(spark, checkpoint="/data/ckpt", partitions=2)   # doctest: +SKIP
>>> backend.run(flow, {"events": Source(static_df, time="hour")})     # batch # doctest: +SKIP
>>> query = backend.start(flow, {"events": stream_df})                # streaming # doctest: +SKIP
>>> query.awaitTermination()                                          # doctest: +SKIP
>>> backend.output(op).write.parquet("out")   # an operator's committed output # doctest: +SKIP

**Micro-batches are epochs.**  A streaming run is a real ``StreamingQuery``
(``foreachBatch``): without a time column, the rows of micro-batch ``b`` are records at
time ``b`` and the frontier moves to ``b + 1`` after it; with ``Source(df, time=col)``
(an integer column of event times) the frontier moves past the batch's largest time,
and rows behind the frontier are late: dropped and counted (``metrics.late``).  A
batch run (:meth:`Backend.run`) cuts a static DataFrame into epochs of its time column
(``epochs_per_batch`` epochs per micro-batch), then closes the inputs: every pending
timer fires, as at the end of an embedded run.

**One batch** (:meth:`Backend._batch`): the inputs' rows go through the fused stateless
chain and are grouped by ``(boundary, bin, time)``; each boundary is one shuffle onto
the partitions owning its bins (``repartition`` on a label column chosen so that
Spark's hash partitioning puts label ``p`` on partition ``p``), then one task per
partition runs the operator over its bins (:mod:`tstate.spark.task`) and writes the
changed bins to the checkpoint store.  The records that reach sinks are written by the
tasks too (:mod:`tstate.spark.output`): the driver sees only file references and
counters.  It commits the batch's manifest (meta ``spark.batch``, ``spark.output``:
the batch's output references), and only then hands the output to the sinks (epoch
files written by Spark tasks, in-memory sinks fed on the driver);
:meth:`Backend.output` reads it back as a DataFrame.  A micro-batch Spark replays after
a driver restart whose manifest is already committed is skipped, so state and sinks see
each batch once; a run that resumes says so on stderr (:mod:`tstate.spark.progress`).

**Iterate scopes and frontier operators.**  A loop runs in rounds within the batch:
each round, the loop's keyed operators process the minimal times that still have work,
until no time of the batch's epochs is left (:mod:`tstate.spark.rounds`); records
leaving the loop go on to the operators after it.  Frontier operators run fused where
their records are (:mod:`tstate.spark.frontier`); records or sink output they give at a
time the batch has not reached are *held* (records in the batch's held file, sink output
in its part file; both referenced by the manifest) and go in with the batch that reaches
their time.

**Rescaling.**  State belongs to bins, and every bin is durable after each batch, so
the bin→partition map may change between any two batches: :meth:`Backend.rescale`
(all at once, or fluid: a few bins per batch), or a restart with another
``partitions``.  The state store is the embedded engine's checkpoint format, so either
engine resumes from the other's checkpoints.  A moved bin is read by its new owner from the store; a bin whose
owner did not change usually comes from the executor's cache
(:mod:`tstate.spark.binstore`; ``metrics.cache_hit_rate``).
"""

from __future__ import annotations

import os
import re
import time as _time
from typing import TYPE_CHECKING, Any, Optional

from attrs import define, field

from tstate.errors import CheckpointError, ConfigurationError, SparkError

if TYPE_CHECKING:  # pragma: no cover
    from tstate.dataflow import Dataflow, Stream

__all__ = ["Backend", "Source", "BatchMetrics"]

_INT_TYPES = ("tinyint", "smallint", "int", "bigint")


@define
class Source:
    """A DataFrame bound to a dataflow input.

    ``time``: an integer column of event times (None: each micro-batch is one epoch,
    numbered by its batch id; a static DataFrame without it is epoch 0);
    ``lateness``: with ``time`` in a streaming run, how far (in epochs) the frontier
    stays behind the largest time seen: a row up to ``lateness`` epochs older than the
    newest one is still on time (rows ahead of the frontier are held back, durably,
    until it reaches them);
    ``record``: what a row becomes — ``"dict"`` (column → value), ``"tuple"`` or
    ``"value"`` (the first column); ``columns``: the columns and Spark types the
    dataflow expects (``{"key": "string", "hour": "bigint"}``), checked before the
    first batch."""

    df: Any
    time: Optional[str] = None
    record: str = "dict"
    columns: Optional[dict[str, str]] = None
    lateness: int = 0


@define
class BatchMetrics:
    """One committed micro-batch: its id, frontier, duration and counters."""

    batch: int
    frontier: Optional[int]
    seconds: float
    partitions: int
    records: int
    cache_hits: int
    cache_misses: int
    bytes_written: int
    moved_bins: int
    #: bins found cached at an older version and brought forward by their newer files
    cache_catchups: int = 0
    #: seconds in Spark jobs (the tasks), on the driver (files, sinks), and committing
    spark_seconds: float = 0.0
    driver_seconds: float = 0.0
    commit_seconds: float = 0.0
    #: iterate scopes: rounds run (all loops) and Spark stages they took
    loop_rounds: int = 0
    loop_stages: int = 0
    #: records the batch's sinks got (written by the executors), and seconds the driver
    #: spent after the commit handing them over (epoch files by Spark tasks, driver sinks)
    output_records: int = 0
    output_seconds: float = 0.0
    #: Spark stages of the root boundaries (those whose inputs are ready together share one)
    stages: int = 0


@define
class _Metrics:
    batches: list[BatchMetrics] = field(factory=list)
    late: int = 0
    skipped: list[int] = field(factory=list)
    #: who checked the files of the last checkpoint recovery looked at ("driver" /
    #: "executors", tstate.spark.restore; "" if none)
    verified_by: str = ""

    @property
    def cache_hit_rate(self) -> float:
        """Bins found in an executor's cache at the committed version, of all bins taken."""
        h = sum(b.cache_hits for b in self.batches)
        c = sum(b.cache_catchups for b in self.batches)
        m = sum(b.cache_misses for b in self.batches)
        return h / (h + c + m) if h + c + m else 1.0

    @property
    def cache_reuse_rate(self) -> float:
        """Bins taken from a cache, at the committed version or caught up by reading only
        the files written since, of all bins taken."""
        h = sum(b.cache_hits + b.cache_catchups for b in self.batches)
        m = sum(b.cache_misses for b in self.batches)
        return h / (h + m) if h + m else 1.0


class Backend:
    """Runs dataflows on a SparkSession (see the module docstring).

    ``checkpoint``: the state store's location (also holds the streaming query's own
    checkpoint under ``spark-query/``): an object-store URL (``s3://bucket/prefix``,
    ``gs://``, ``abfs://``, ``hdfs://``; :mod:`tstate.checkpoint.location`), which
    executors open with the same credentials from their environment, or a local path,
    which must be the same directory on every executor (``local`` / ``local-cluster``
    masters, a shared mount).  A location that cannot be written raises
    :class:`~tstate.errors.CheckpointError` here, before anything runs.
    ``partitions``: Spark partitions (= tstate workers) the bins are spread over
    (default: Spark's default parallelism).  ``resume``: continue from the latest
    usable committed batch of the directory: newer unusable ones (a damaged state or
    held-records file, a torn manifest) are skipped with a
    :class:`~tstate.checkpoint.store.CheckpointSkippedWarning`; if checkpoints exist but
    none is usable, :class:`~tstate.errors.CheckpointError` lists them, unless
    ``fresh_if_unusable=True`` (start from empty state).  A streaming query whose
    Spark checkpoint has moved past the batch tstate resumes from (it fell back over an
    unusable one) is refused: the batches in between would be lost.  ``progress``: ``True`` draws a bar per
    micro-batch on stderr, ``None`` (default) prints only whether the run resumed,
    ``False`` nothing (:mod:`tstate.spark.progress`).  ``local_loops``: an iterate scope
    whose operators' stored state is at most this many bytes runs all its rounds of a
    batch in one task (one Spark stage instead of one per round; 0: always spread, see
    :mod:`tstate.spark.rounds`).  ``replica``: a second location that receives a copy
    of every committed batch's checkpoint (copied by the driver after the commit); a
    restart reads whichever copy is intact and repairs the other before executors read
    state (:mod:`tstate.checkpoint.store`).  ``verify``: who checks every file of the
    checkpoint a restart resumes from -- ``"executors"`` (one Spark job, a task per
    partition), ``"driver"``, or ``"auto"`` (executors for a large checkpoint; see
    :mod:`tstate.spark.restore`); the bins themselves are always read and decoded by
    the executors, in parallel, as batches need them."""

    def __init__(
        self,
        spark: Any,
        checkpoint: str,
        partitions: Optional[int] = None,
        *,
        sources: Optional[dict[str, Any]] = None,
        compact_after: int = 8,
        retain: int = 3,
        resume: bool = True,
        progress: Optional[bool] = None,
        local_loops: int = 64 << 20,
        fresh_if_unusable: bool = False,
        replica: Optional[str] = None,
        verify: str = "auto",
    ) -> None:
        from tstate.checkpoint.location import resolve
        from tstate.checkpoint.store import CheckpointStore
        from tstate.spark.progress import Progress
        from tstate.spark.session import require_pyspark

        require_pyspark()

        self.spark = spark
        self.directory = resolve(checkpoint)  # an absolute path, or a URL (s3://...)
        n = partitions if partitions is not None else spark.sparkContext.defaultParallelism
        if not isinstance(n, int) or n < 1:
            raise ConfigurationError(f"partitions must be an integer >= 1, got {partitions!r}")
        self.partitions = n
        self.sources = dict(sources or {})
        self.compact_after = compact_after
        self.resume = resume
        self.fresh_if_unusable = fresh_if_unusable
        self.local_loops = local_loops
        from tstate.spark.restore import check_verify

        self.verify = check_verify(verify)
        # with a replica, the driver copies each committed checkpoint there and, when it
        # resumes, repairs either copy from the other before any executor reads a bin
        self.store = CheckpointStore(
            self.directory, retain=retain, compact_after=compact_after, background_gc=True, replica=replica
        )
        self.metrics = _Metrics()
        self._plan: Any = None
        self._flow: Any = None
        self._owners: dict[int, list[int]] = {}
        self._steps: list[dict[int, int]] = []  # pending rescale steps (bin -> partition, for every boundary)
        self._target_partitions: Optional[int] = None
        self._labels: dict[int, tuple[int, ...]] = {}
        self._ticks: dict[tuple[int, int], Any] = {}
        self._fresh = True
        self._last_batch = -1
        self._frontier = 0
        self._timers: dict[str, dict[int, int]] = {}
        self._late: Any = None
        #: event-time streaming: the largest time seen, and records held back (the
        #: held file of the last committed batch: cells of [[time, record], ...])
        self._newest: Any = None
        self._held: Optional[str] = None
        #: this batch's Spark work: loop rounds and their stages, root-boundary stages
        self._loop_stats: dict[str, int] = {"rounds": 0, "stages": 0, "root_stages": 0}
        #: sink output (tstate.spark.output): the last committed index, and the parts
        #: whose times a later batch reaches
        self._output_index: Optional[str] = None
        self._pending: list[Any] = []
        self._progress = Progress(progress)

    def __repr__(self) -> str:
        return f"Backend({self.directory!r}, partitions={self.partitions})"

    # -- setting up -------------------------------------------------------------------
    def _prepare(self, flow: "Dataflow", sources: dict[str, Any]) -> dict[str, Source]:
        from tstate.checkpoint.schema_check import check_compatible
        from tstate.migration.planner import balanced_map
        from tstate.spark.output import Part
        from tstate.spark.plan import Plan

        plan = Plan.of(flow)
        bound = {k: (v if isinstance(v, Source) else Source(v)) for k, v in {**self.sources, **sources}.items()}
        for name in bound:
            if name not in plan.inputs:
                raise SparkError(f"a DataFrame is bound to {name!r}, but the dataflow has no such input (inputs: {', '.join(plan.inputs) or 'none'})")
        for name in plan.inputs:
            if name not in bound:
                raise SparkError(f"input {name!r} of dataflow {flow.name!r} has no DataFrame: pass {{{name!r}: df}}")
        for name, src in bound.items():
            _check_schema(name, src)
        self._plan, self._flow = plan, flow
        self._owners = {b: balanced_map(plan.nodes[b].bins, self.partitions) for b in plan.boundaries}
        self._late = self.spark.sparkContext.accumulator(0)
        # (a CheckpointError if checkpoints exist but none is usable: never empty by surprise)
        head = self.store.recover(fresh_if_unusable=self.fresh_if_unusable, verify=self._verifier()) if self.resume else None
        if head is not None:
            meta = head.meta.get("spark")
            if meta is None:  # an embedded run's checkpoint: continue from its time
                t = int(head.time)
                meta = {
                    "batch": -1, "frontier": t,
                    # which bins hold timers is not recorded: every bin is looked at once
                    "timers": {op: {str(b): t for b in e.chains} for op, e in head.operators.items()},
                }
            for b in plan.boundaries:
                pn = plan.nodes[b]
                entry = head.operators.get(pn.name)
                if pn.kind != "stateful" or entry is None:
                    continue
                spec = flow._nodes[b]
                check_compatible(pn.name, entry.schema, spec.options["schema"])
                if entry.bins != pn.bins:
                    raise ConfigurationError(
                        f"operator {pn.name!r}: checkpoint {head.id} has {entry.bins} bins, the dataflow {pn.bins}"
                    )
            self._fresh = False
            self._last_batch = int(meta["batch"])
            self._frontier = meta["frontier"]
            self._timers = {op: {int(b): t for b, t in bins.items()} for op, bins in meta.get("timers", {}).items()}
            self._newest = meta.get("newest")
            self._held = _held_path(meta.get("held"), head.id)
            self._output_index = meta.get("output")
            self._pending = [Part.from_builtins(p) for p in meta.get("output_pending", [])]
            if self._frontier is not None:  # (None: the run finished; its output is complete)
                for spec in flow._nodes:
                    if spec.kind == "sink":
                        spec.options["sink"].restore(self._frontier)
        for spec in flow._nodes:
            if spec.kind == "sink":
                spec.options["sink"].open(0, 1)
        self._recover_output()
        return bound

    def _verifier(self) -> Any:
        """How recovery checks a candidate checkpoint's files: by the executors when
        ``verify`` says so (:mod:`tstate.spark.restore`), else on the driver."""
        from tstate.checkpoint.fs import LocalFS
        from tstate.spark.restore import use_executors, verify_on_executors

        owners = {self._plan.nodes[b].name: list(o) for b, o in self._owners.items()}
        local = isinstance(self.store.fs, LocalFS)

        def verify(m: Any) -> list[str]:
            if not use_executors(self.verify, m, local=local):
                self.metrics.verified_by = "driver"
                return self.store.verify(m)
            self.metrics.verified_by = "executors"
            bad = verify_on_executors(self.spark, self.directory, m, owners, self.partitions)
            if bad and self.store.replica is not None:
                return self.store.verify(m)  # the driver reads the bad files from the replica and repairs them
            return bad

        return verify

    def _recover_output(self) -> None:
        """At a (re)start: delete the output an uncommitted batch left, and write the last
        committed batch's epoch files again (the driver may have died between its commit
        and them; the same bytes again otherwise)."""
        from tstate.spark.output import clean, finalise, read_index

        fs = self.store.fs
        keep = {p.path for p in self._pending}
        last: list[Any] = []
        if self._output_index is not None:
            b, _prev, parts = read_index(fs, self._output_index)
            if b == self._last_batch:
                keep |= {p.path for p in parts} | {self._output_index}
                last = parts
        clean(fs, self._sink_dirs(), max(self._last_batch, 0), keep)
        files = {
            spec.index: spec.options["sink"] for spec in self._flow._nodes
            if spec.kind == "sink" and not spec.options["sink"].on_driver and hasattr(spec.options["sink"], "commit_epoch")
        }  # fmt: skip
        finalise(self.spark, self.directory, files, last, self._plan.records)

    def _labels_for(self, n: int) -> tuple[int, ...]:
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

    def _ticks_for(self, nodes: "int | tuple[int, ...]", labels: tuple[int, ...]) -> Any:
        """One ``TICK`` row per partition (for the first of ``nodes``, a stage's
        boundaries): every partition runs the stage, so due timers fire everywhere."""
        from tstate.spark.task import SCHEMA, TICK

        if isinstance(nodes, int):
            nodes = (nodes,)
        key = (nodes[0], len(labels))
        if key not in self._ticks:
            self._ticks[key] = self.spark.createDataFrame(
                [(TICK, lab, nodes[0], 0, 0, b"") for lab in labels], SCHEMA
            )
        return self._ticks[key]

    # -- rescaling --------------------------------------------------------------------
    def rescale(self, partitions: int, strategy: str = "all-at-once", steps: int = 4) -> int:
        """Spread the bins over ``partitions`` partitions from the next micro-batch on,
        moving as few bins as possible: ``"all-at-once"`` in one batch, ``"fluid"``
        spread evenly over ``steps`` batches (a moved bin costs its new owner one read
        from the store, so fluid spreads that cost).  ``"batched"`` is accepted as
        ``"fluid"`` (every step here is already a batch boundary).  Returns the number
        of batches the move takes."""
        from tstate.migration.planner import rescale_map

        if not isinstance(partitions, int) or partitions < 1:
            raise ConfigurationError(f"partitions must be an integer >= 1, got {partitions!r}")
        if strategy not in ("all-at-once", "fluid", "batched"):
            raise ConfigurationError(f"strategy must be 'all-at-once' or 'fluid', got {strategy!r}")
        if not isinstance(steps, int) or steps < 1:
            raise ConfigurationError(f"steps must be an integer >= 1, got {steps!r}")
        if self._plan is None:
            self.partitions = partitions
            return 0
        moves = [
            ((b << 20) | bin_, p)
            for b, owners in sorted(self._owners.items())
            for bin_, p in enumerate(rescale_map(owners, partitions))
            if owners[bin_] != p
        ]
        k = 1 if strategy == "all-at-once" else min(steps, max(1, len(moves)))
        self._steps = [dict(moves[i::k]) for i in range(k)] if moves else []
        self.partitions = max(partitions, max((max(o) + 1 for o in self._owners.values()), default=1))
        self._target_partitions = partitions
        return len(self._steps)

    def _next_owners(self) -> int:
        """Apply the next rescale step; returns how many bins moved."""
        if not self._steps:
            target = self._target_partitions
            if target is not None:
                self.partitions = target
                self._target_partitions = None
            return 0
        step = self._steps.pop(0)
        for code, p in step.items():
            self._owners[code >> 20][code & ((1 << 20) - 1)] = p
        if not self._steps and self._target_partitions is not None:
            self.partitions = self._target_partitions
            self._target_partitions = None
        return len(step)

    # -- running ----------------------------------------------------------------------
    def run(
        self,
        flow: "Dataflow",
        sources: Optional[dict[str, Any]] = None,
        *,
        epochs_per_batch: Optional[int] = None,
        rows_per_batch: int = 500_000,
        reconfigure: Any = (),
    ) -> None:
        """Run ``flow`` over static DataFrames to completion (see the module docstring).

        ``epochs_per_batch``: how many epochs each micro-batch covers; by default (None)
        the epochs are cut into micro-batches of about ``rows_per_batch`` input rows
        each (from one count of the rows per epoch), so that Spark's fixed cost per
        micro-batch is paid a few times, not once per epoch.  The output is the same
        for any cut: a micro-batch only decides when state is committed.
        ``reconfigure``: ``(time, tstate.Rescale(partitions, strategy=...))`` pairs, like
        the embedded engine's: from the first micro-batch at or after ``time``, the
        bins move to the new partitions (per the strategy, over one or more batches);
        with automatic cuts a micro-batch starts at each such time."""
        from pyspark.sql import functions as F

        from tstate.migration.commands import Rescale

        pending = sorted(reconfigure, key=lambda p: p[0])
        for _, cmd in pending:
            if not isinstance(cmd, Rescale):
                raise ConfigurationError(f"the Spark backend rescales by partitions: use tstate.Rescale, not {cmd!r}")

        if epochs_per_batch is not None and (not isinstance(epochs_per_batch, int) or epochs_per_batch < 1):
            raise ConfigurationError(f"epochs_per_batch must be an integer >= 1, got {epochs_per_batch!r}")
        if not isinstance(rows_per_batch, int) or rows_per_batch < 1:
            raise ConfigurationError(f"rows_per_batch must be an integer >= 1, got {rows_per_batch!r}")
        bound = self._prepare(flow, sources or {})
        done = self._last_batch + 1  # batches committed by earlier runs
        if self._frontier is None:  # a finished run was committed: nothing left to do
            self._progress.finished_already(self.directory, done)
            return
        counts: dict[int, int] = {}  # epoch -> input rows
        untimed = False
        for name, src in bound.items():
            if getattr(src.df, "isStreaming", False):
                raise SparkError(f"input {name!r} is a streaming DataFrame: use Backend.start for streaming runs")
            if src.time is None:
                untimed = True
            else:
                for r in src.df.groupBy(src.time).count().collect():
                    if r[0] is not None:
                        counts[int(r[0])] = counts.get(int(r[0]), 0) + int(r[1])
        if untimed:
            counts.setdefault(0, 0)
        lo: int = (min(counts) if counts else 0) if self._fresh else self._frontier
        top = max(counts) if counts else -1
        cuts = _cuts(counts, lo, top, epochs_per_batch, rows_per_batch, [t for t, _ in pending])
        batch = self._last_batch + 1
        total = done + len(cuts) + 1  # (+1: the batch closing the inputs)
        if done:
            self._progress.resumed(self.directory, done, total)
        self._progress.start(total, done)
        # each micro-batch filters its epochs out of the sources: read them once
        cached = {name: src.df.persist() for name, src in bound.items() if src.time is not None and len(cuts) > 1}
        try:
            for lo, hi in cuts:
                while pending and pending[0][0] <= lo:
                    cmd = pending.pop(0)[1]
                    self.rescale(cmd.workers, cmd.strategy)
                dfs = {}
                for name, src in bound.items():
                    if src.time is None:
                        dfs[name] = src.df if lo <= 0 < hi else src.df.limit(0)
                    else:
                        df = cached.get(name, src.df)
                        dfs[name] = df.where((F.col(src.time) >= lo) & (F.col(src.time) < hi))
                self._batch(dfs, bound, batch, lo, hi, None)
                batch += 1
            lo = cuts[-1][1] if cuts else lo
            self._batch({}, bound, batch, lo, None, None)  # the inputs close: remaining timers fire
        finally:
            for df in cached.values():
                df.unpersist()
            self._progress.close()
        for spec in flow._nodes:
            if spec.kind == "sink":
                spec.options["sink"].close(0)

    def start(
        self,
        flow: "Dataflow",
        sources: Optional[dict[str, Any]] = None,
        *,
        trigger: Optional[dict[str, Any]] = None,
        query_name: Optional[str] = None,
    ) -> Any:
        """Start ``flow`` as a Structured Streaming query over its one streaming input;
        returns the ``StreamingQuery`` (``awaitTermination``, ``stop``,
        ``recentProgress``...).  ``trigger``: ``DataStreamWriter.trigger`` arguments,
        e.g. ``{"availableNow": True}`` or ``{"processingTime": "5 seconds"}``."""
        from pyspark.sql import functions as F

        bound = self._prepare(flow, sources or {})
        if self._last_batch >= 0:
            self._progress.resumed(self.directory, self._last_batch + 1, None)
        if len(bound) != 1:
            raise SparkError(f"a streaming run needs exactly one input; dataflow {flow.name!r} has {len(bound)}")
        (name, src), = bound.items()
        if not getattr(src.df, "isStreaming", False):
            raise SparkError(f"input {name!r} is not a streaming DataFrame: use Backend.run for static DataFrames")

        def on_batch(df: Any, batch_id: int) -> None:
            if batch_id <= self._last_batch:
                self.metrics.skipped.append(batch_id)  # committed before a restart
                return
            if batch_id > self._last_batch + 1 and not self._fresh:
                # Spark committed batches tstate's state does not include (it resumed from
                # an older checkpoint, the newer ones being unusable): their rows will not
                # come again, so going on would lose them
                raise CheckpointError(
                    f"{self.directory}: Spark's streaming query is at micro-batch {batch_id}, but the tstate "
                    f"checkpoint it resumed from holds batches up to {self._last_batch}; the input of batches "
                    f"{self._last_batch + 1}..{batch_id - 1} is committed in Spark's query checkpoint "
                    f"(spark-query/) and will not be replayed, so resuming would lose it (exactly-once). "
                    "Repair the newer tstate checkpoints (python -m tstate checkpoints DIR --verify) or "
                    "start the query afresh"
                )
            lo = self._frontier
            if src.time is None:
                hi: Optional[int] = max(lo, batch_id) + 1
                const = max(lo, batch_id)
            else:
                top = df.agg(F.max(src.time).alias("t")).collect()[0]["t"]
                newest = self._newest
                if top is not None:
                    newest = int(top) if newest is None else max(newest, int(top))
                self._newest = newest
                hi = max(lo, newest + 1 - src.lateness) if newest is not None else lo
                const = None
            self._batch({name: df}, bound, batch_id, lo, hi, const)

        from tstate.checkpoint.location import spark_uri

        writer = src.df.writeStream.foreachBatch(on_batch).option(
            "checkpointLocation", os.path.join(spark_uri(self.directory), "spark-query")
        )
        if trigger:
            writer = writer.trigger(**trigger)
        if query_name:
            writer = writer.queryName(query_name)
        return writer.start()

    def _batch(
        self,
        dfs: dict[str, Any],
        bound: dict[str, Source],
        batch: int,
        lo: int,
        hi: Optional[int],
        const_time: Optional[int],
    ) -> None:
        """One micro-batch: run it, deliver the sinks' records, commit (module docs)."""
        import msgpack

        from tstate.progress.timestamp import Product
        from tstate.spark import task as T
        from tstate.spark.output import Part, clean, write_index, write_parts
        from tstate.spark.records import decode_records
        from tstate.spark.rounds import TIMES, LoopRun, decode_cell

        start = _time.perf_counter()
        plan = self._plan
        moved = self._next_owners()
        n = self.partitions
        labels = self._labels_for(n)
        head = None if self._fresh else self.store.head
        writer = self.store.begin(hi if hi is not None else lo, full=self._fresh)
        persisted: list[Any] = []
        try:
            due = {}
            for b in plan.boundaries:
                if plan.nodes[b].loop is not None:
                    continue  # loops: per round (tstate.spark.rounds)
                timers = self._timers.get(plan.nodes[b].name, {})
                due[b] = frozenset(bn for bn, t in timers.items() if hi is None or t < hi)
            info = T.BatchInfo(
                batch, lo, hi, self.directory, head.id if head is not None else None, writer.id, writer.token,
                labels, {b: tuple(o) for b, o in self._owners.items()}, due, self.compact_after,
            )
            waves: dict[Any, Any] = {}
            for name, df in dfs.items():
                src = bound[name]
                at = const_time if const_time is not None else 0  # rows without a time column
                wave = df.mapInArrow(T.input_task(plan, info, name, src.record, src.time, at, self._late), T.SCHEMA)
                uses = sum(name in plan.feeders.get(b, ()) for b in plan.boundaries) + bool(plan.sink_reach.get(name))
                if uses > 1 or plan.delays or any(name in lp.feeders for lp in plan.loops.values()):
                    wave = wave.persist()
                    persisted.append(wave)
                waves[name] = wave
            # records held back by earlier batches: input rows (allowed lateness) go in
            # first; records and sink output a frontier operator gave at later times
            # go in once the batch reaches their time
            entries = _read_held(self.store.fs, self._held) if self._held is not None else []
            held_where = self.store.fs.describe(self._held) if self._held is not None else ""
            cells = [c for c in entries if isinstance(c, bytes)]
            if cells:
                (name,) = [n for n in dfs] or list(bound)
                held_df = self.spark.createDataFrame([(c,) for c in cells], "payload binary")
                wave = held_df.mapInArrow(T.held_task(plan, info, name, held_where), T.SCHEMA)
                waves[name] = waves[name].unionAll(wave) if name in waves else wave
            keep: list[Any] = []  # held entries [kind, node, bin, time, payload] still ahead
            inject: dict[Any, list[Any]] = {}  # boundary or ("loop", id) -> rows
            sink_out: dict[int, dict[int, list[Any]]] = {}
            loop_times: dict[int, set[Any]] = {}
            for e in entries:
                if isinstance(e, bytes):
                    continue
                kind, node, bin_, t, payload = e
                if hi is not None and t >= hi:
                    keep.append(e)
                elif kind == T.SINK:
                    sink_out.setdefault(node, {}).setdefault(t, []).extend(
                        decode_records(payload, plan.records, f"{held_where} (sink {plan.nodes[node].name!r}, time {t})")
                    )
                else:
                    lid = plan.nodes[node].loop
                    inject.setdefault(node if lid is None else ("loop", lid), []).append(
                        (T.RECORDS, labels[self._owners[node][bin_]], node, bin_, t, payload)
                    )
                    if lid is not None:
                        loop_times.setdefault(node, set()).add(
                            decode_cell(payload, plan.records, f"{held_where} (operator {plan.nodes[node].name!r})")[0]
                        )
            holding = any(bound[n].lateness for n in dfs)
            if holding:
                for name in dfs:
                    waves[name] = waves[name].persist()
                    persisted.append(waves[name])
            rows: list[Any] = []
            for name in dfs:
                kinds = [str(T.SINK)] if plan.sink_reach.get(name) else []
                if any(name in lp.feeders for lp in plan.loops.values()):
                    kinds.append(str(TIMES))
                if holding:
                    kinds.append(str(T.HELD))
                if kinds:
                    rows += waves[name].where(f"kind in ({', '.join(kinds)})").collect()
            overlay: dict[str, Any] = {}
            self._loop_stats = {"rounds": 0, "stages": 0, "root_stages": 0}
            # a wave (input, boundary) -> the key of the DataFrame holding its records
            # (the boundaries of loops run together share one)
            alias: dict[Any, Any] = {}

            def sources(feeders: Any) -> list[Any]:
                keys = dict.fromkeys(alias.get(w, w) for w in feeders)
                return [waves[k] for k in keys if k in waves]

            done: set[Any] = set()
            for pos, item in enumerate(plan.items):
                if item in done:
                    continue
                done.add(item)
                if isinstance(item, tuple):  # iterate scopes: rounds until the batch is done
                    # later loops whose inputs are all ready run in the same rounds
                    ready = {w for w in done if not isinstance(w, tuple)}
                    group = [item] + [
                        it for it in plan.items[pos + 1 :]
                        if isinstance(it, tuple) and it not in done
                        and all(isinstance(w, str) or w in ready for w in plan.loops[it[1]].feeders)
                    ]
                    done.update(group)
                    lps = [plan.loops[it[1]] for it in group]
                    inside = {b for lp in lps for b in lp.boundaries}
                    for r in rows:
                        if r["kind"] == TIMES and r["node"] in inside:
                            loop_times.setdefault(r["node"], set()).update(Product(*v) for v in msgpack.unpackb(r["payload"]))
                    cells = sources(w for lp in lps for w in lp.feeders)
                    cells += [self.spark.createDataFrame(inject[it], T.SCHEMA) for it in group if it in inject]
                    run = LoopRun(self, lps, info, writer, overlay)
                    try:
                        exits, got, left = run.run(cells, loop_times, labels)
                    finally:
                        persisted.extend(run.persisted)
                    self._loop_stats["rounds"] += run.rounds
                    self._loop_stats["stages"] += run.stages
                    if exits is not None:
                        waves[item] = exits
                    for b in inside:
                        alias[b] = item
                    rows += got
                    keep.extend([r["kind"], r["node"], r["bin"], r["time"], bytes(r["payload"])] for r in left)
                    continue
                # root boundaries whose inputs are all ready run in one stage
                stage: list[int] = [item] + [
                    it for it in plan.items[pos + 1 :]
                    if not isinstance(it, tuple) and it not in done
                    and all(isinstance(w, str) or w in waves or w in alias for w in plan.feeders.get(it, ()))
                ]
                done.update(stage)
                nodes = ", ".join(map(str, stage))
                feeders = [w for b in stage for w in plan.feeders.get(b, ())]
                parts = [w.where(f"kind = {T.RECORDS} and node in ({nodes})") for w in sources(feeders)]
                parts += [self.spark.createDataFrame(inject[b], T.SCHEMA) for b in stage if b in inject]
                if plan.delays and hi is not None and parts:  # records a frontier operator gave at later times wait
                    late = parts[0]
                    for p in parts[1:]:
                        late = late.unionAll(p)
                    keep.extend(
                        [T.RECORDS, r["node"], r["bin"], r["time"], bytes(r["payload"])]
                        for r in late.where(f"time >= {hi}").collect()
                    )
                    parts = [p.where(f"time < {hi}") for p in parts]
                inp = self._ticks_for(tuple(stage), labels)
                for p in parts:
                    inp = inp.unionAll(p)
                out = inp.repartition(n, "dest").mapInArrow(T.boundary_task(plan, info, tuple(stage)), T.SCHEMA)
                if plan.delays or any(b in plan.feeders.get(c, ()) for b in stage for c in plan.boundaries):
                    out = out.persist()
                    persisted.append(out)
                for b in stage:
                    waves[b] = out
                    alias[b] = item
                self._loop_stats["root_stages"] += 1
                rows += out.where(f"kind != {T.RECORDS}").collect()
            t_jobs = _time.perf_counter()
            # the driver's part: files, timers, counters, the output's references
            stats, fresh, held_cells = self._apply_rows(rows, writer)
            if sink_out:  # sink records of a held file from before output parts existed
                refs: list[Any] = []
                write_parts(plan, info, {(nd, t): r for nd, by_t in sink_out.items() for t, r in by_t.items()}, refs)
                fresh += [Part.from_builtins(msgpack.unpackb(r[5])) for r in refs]
            now, pending = self._settle_output(fresh, hi)
            index = self._output_index
            if now:
                index = write_index(self.store.fs, batch, writer.token, lo, hi, index, now)
            for b in plan.boundaries:
                spec = self._flow._nodes[b]
                if spec.kind == "stateful":
                    writer.put_operator_schema(spec.name, spec.options["schema"].to_builtins(), spec.options["bins"])
            held = None
            held_cells.extend(keep)
            if held_cells:
                held = f"held/{writer.id:06d}-{writer.token}.msgpack"
                # attached: verified with the checkpoint's files (a damaged one makes
                # recovery fall back to the previous checkpoint), deleted with its manifest
                writer.attach(_write_held(self.store.fs, held, held_cells))
            writer.put_meta(
                "spark",
                {
                    "batch": batch, "frontier": hi, "partitions": n, "newest": self._newest, "held": held,
                    "timers": {op: {str(b): t for b, t in tm.items()} for op, tm in self._timers.items()},
                    "output": index, "output_pending": [p.to_builtins() for p in pending],
                },
            )
            t_driver = _time.perf_counter()
            writer.commit()
            t_commit = _time.perf_counter()
        except BaseException:
            writer.abort()
            raise
        finally:
            for df in persisted:
                df.unpersist()
        # (the previous held file stays: its checkpoint is retained, and recovery may fall
        # back to it; garbage collection deletes it with that checkpoint's manifest)
        self._held = held
        self._fresh = False
        self._last_batch = batch
        self._frontier = hi  # type: ignore[assignment]
        self._output_index, self._pending = index, pending
        # the commit made the output visible: leftovers go, then the sinks get it
        clean(self.store.fs, self._sink_dirs(), batch, {p.path for p in fresh} | ({index} if now and index else set()))
        self._deliver(now, hi)
        t_out = _time.perf_counter()
        self.metrics.late = self._late.value if self._late is not None else 0
        m = BatchMetrics(
            batch, hi, _time.perf_counter() - start, n, stats["records"], stats["hits"], stats["misses"],
            stats["bytes"], moved, stats["catchups"], t_jobs - start, t_driver - t_jobs, t_commit - t_driver,
            self._loop_stats["rounds"], self._loop_stats["stages"], sum(p.records for p in now), t_out - t_commit,
            stages=self._loop_stats["root_stages"],
        )
        self.metrics.batches.append(m)
        self._progress.batch(m, self.store.head)

    def _apply_rows(self, rows: list[Any], writer: Any) -> tuple[dict[str, int], list[Any], list[Any]]:
        """The rows the driver got from the tasks: state files into the checkpoint being
        written, timers, counters; returns the counters, the output parts (references
        only: :mod:`tstate.spark.output`) and the held-back input cells."""
        import msgpack

        from tstate.checkpoint.manifest import FileRef
        from tstate.spark import task as T
        from tstate.spark.output import Part

        plan = self._plan
        stats = {"records": 0, "hits": 0, "catchups": 0, "misses": 0, "bytes": 0}
        fresh: list[Part] = []
        held_cells: list[Any] = []
        for r in rows:
            kind = r["kind"]
            if kind == T.FILE:
                path, size, checksum, fkind, first_timer = msgpack.unpackb(r["payload"])
                opname = plan.nodes[r["node"]].name
                timers = self._timers.setdefault(opname, {})
                if fkind == "drop":
                    writer.drop_bin(opname, r["bin"])
                    timers.pop(r["bin"], None)
                else:
                    writer.adopt(opname, r["bin"], [FileRef(path, size, checksum)], replace=fkind == "snap")
                    if first_timer is None:
                        timers.pop(r["bin"], None)
                    else:
                        timers[r["bin"]] = first_timer
            elif kind == T.STATS:
                s = msgpack.unpackb(r["payload"])
                for k in stats:
                    stats[k] += s.get(k, 0)
            elif kind == T.SINK:
                fresh.append(Part.from_builtins(msgpack.unpackb(r["payload"])))
            elif kind == T.HELD:
                held_cells.append(bytes(r["payload"]))
        return stats, fresh, held_cells

    def _settle_output(self, fresh: list[Any], hi: Optional[int]) -> tuple[list[Any], list[Any]]:
        """The batch's output (parts' times before ``hi``, of this batch's parts and of
        those waiting) and what still waits for a later batch."""
        now, later = [], []
        for p in [*self._pending, *fresh]:
            a, b = p.split(hi)
            if a is not None:
                now.append(a)
            if b is not None:
                later.append(b)
        return now, later

    def _sink_dirs(self) -> list[str]:
        from tstate.spark.output import sink_dir

        return [sink_dir(self._plan, node) for node in self._plan.sinks]

    def _deliver(self, parts: list[Any], hi: Optional[int]) -> None:
        """A committed batch's output to the sinks: epoch files by Spark tasks, driver
        sinks (in-memory, callbacks) on the driver; then the sinks' frontier."""
        from tstate.progress.frontier import Antichain
        from tstate.spark.output import finalise, records_of

        sinks = {spec.index: spec.options["sink"] for spec in self._flow._nodes if spec.kind == "sink"}
        files = {nd: s for nd, s in sinks.items() if hasattr(s, "commit_epoch") and not s.on_driver}
        finalise(self.spark, self.directory, files, parts, self._plan.records)
        front = Antichain([hi]) if hi is not None else Antichain()
        for nd, sink in sinks.items():
            if sink.on_driver:
                mine = [p for p in parts if p.sink == nd]
                for t, recs in sorted(records_of(self.store.fs, mine, self._plan.records).items()):
                    sink.write(0, t, recs)
            sink.frontier(0, front)

    # -- state ----------------------------------------------------------------------
    def state(self, op: "Stream") -> Any:
        """The state of stateful operator ``op`` at the last committed batch, as a Spark
        DataFrame (a ``key`` column, then one column per struct field or ``value``),
        read from the bins by the executors."""
        from tstate.spark.frame import state_frame

        if self._flow is None:
            raise SparkError("nothing has run on this backend yet")
        return state_frame(self, op)

    def output(self, op: Any, batch: Optional[int] = None, *, schema: Any = None) -> Any:
        """The committed output of ``op`` as a Spark DataFrame read from the
        micro-batches' output files by the executors (:mod:`tstate.spark.output`): columns
        ``batch``, ``time``, then the record's (a dict's keys, a named tuple's or attrs
        class's fields, ``_1, _2, ...`` for a tuple, else ``value``).

        ``op``: a stream with a sink (``stream.collect()``, ``ts.io.files(...)``, or
        ``stream.sink(ts.io.keep())`` to keep it only here), a sink, or a sink's name;
        ``batch``: one micro-batch's output (default: every committed batch's);
        ``schema``: the record columns as a Spark DDL string (default: inferred from a
        few records).  The output of every committed batch, also those of earlier runs
        on the same directory:

        >>> backend.output(departures).write.parquet("departures")  # doctest: +SKIP
        """
        from tstate.spark.output import frame, history

        if self._flow is None:
            raise SparkError("nothing has run on this backend yet")
        node = self._sink_of(op)
        head = self.store.latest()
        index = head.meta.get("spark", {}).get("output") if head is not None else None
        found = [
            (b, p) for b, parts in history(self.store.fs, index) if batch is None or b == batch
            for p in parts if p.sink == node
        ]  # fmt: skip
        found.reverse()
        return frame(self.spark, self.directory, self.store.fs, found, schema, self._plan.records)

    def _sink_of(self, op: Any) -> int:
        """The sink node of ``op`` (a stream feeding a sink, a sink or a sink's name)."""
        from tstate.io.sinks import Sink

        specs = [s for s in self._flow._nodes if s.kind == "sink"]
        if isinstance(op, str):
            found = [s.index for s in specs if s.name == op]
            what = f"sink {op!r}"
        elif isinstance(op, Sink):
            found = [s.index for s in specs if s.options.get("sink") is op]
            what = f"sink {op!r}"
        else:
            node, port = getattr(op, "node", None), getattr(op, "port", 0)
            found = [s.index for s in specs if node is not None and (node, port) in s.inputs]
            what = f"operator {self._flow._nodes[node].name!r}" if isinstance(node, int) else repr(op)
        if not found:
            raise SparkError(
                f"{what} has no sink in dataflow {self._flow.name!r}: its output is not kept; add one, e.g. "
                "stream.sink(ts.io.keep()) (sinks: " + ", ".join(repr(s.name) for s in specs) + ")"
            )
        return found[0]


def _cuts(
    counts: dict[int, int], lo: int, top: int, epochs: Optional[int], rows: int, starts: list[int]
) -> list[tuple[int, int]]:
    """The micro-batches ``[lo, hi)`` of a batch run over epochs ``lo..top``: ``epochs``
    epochs each, or (``epochs`` None) as many epochs as fit about ``rows`` input rows
    (``counts``: rows per epoch), a batch always starting at each time in ``starts``.

    >>> _cuts({0: 5, 1: 5, 2: 5, 7: 20}, 0, 7, None, 10, [])
    [(0, 2), (2, 7), (7, 8)]
    >>> _cuts({0: 5, 1: 5, 2: 5, 7: 20}, 0, 7, 3, 10, [])
    [(0, 3), (3, 6), (6, 9)]
    >>> _cuts({0: 5, 1: 5, 2: 5}, 0, 2, None, 100, [1])
    [(0, 1), (1, 3)]
    """
    out: list[tuple[int, int]] = []
    if epochs is not None:
        while lo <= top:
            out.append((lo, lo + epochs))
            lo += epochs
        return out
    edges = sorted({t for t in starts if lo < t <= top})
    start, acc = lo, 0
    for t in sorted(e for e in counts if lo <= e <= top):
        while edges and edges[0] <= t:  # a rescale starts a batch
            if edges[0] > start:
                out.append((start, edges[0]))
                start, acc = edges[0], 0
            edges.pop(0)
        if acc and acc + counts[t] > rows:
            out.append((start, t))
            start, acc = t, 0
        acc += counts[t]
    for e in edges:
        if e > start:
            out.append((start, e))
            start = e
    if start <= top:
        out.append((start, top + 1))
    return out


def _write_held(fs: Any, path: str, cells: list[Any]) -> Any:
    """The held-back records of a batch, durable before its manifest commits (one file
    per batch, written atomically by the store's filesystem, checksummed inside and
    referenced by the manifest with its size and xxh64 like every checkpoint file);
    returns its :class:`~tstate.checkpoint.manifest.FileRef`."""
    import msgpack
    import xxhash

    from tstate.checkpoint.manifest import FileRef

    body = msgpack.packb(cells, use_bin_type=True)
    data = msgpack.packb([xxhash.xxh64(body).hexdigest(), body], use_bin_type=True)
    fs.write_atomic(path, data, fsync=True)
    return FileRef(path, len(data), xxhash.xxh64_hexdigest(data))


_HELD = re.compile(r"^held/\d+-[0-9a-f]+\.msgpack$")


def _held_path(path: Any, checkpoint_id: int) -> Optional[str]:
    """The held file named in checkpoint ``checkpoint_id``'s metadata, checked to be a
    name the backend writes (in ``held/``, no other directory, no ``..``)."""
    from tstate.errors import CheckpointError

    if path is None:
        return None
    if type(path) is not str or not _HELD.match(path):
        raise CheckpointError(f"checkpoint {checkpoint_id}: held-back records path {path!r} is not a file of held/")
    return path


def _read_held(fs: Any, path: str) -> list[Any]:
    import msgpack
    import xxhash

    from tstate.errors import CheckpointError

    try:
        digest, body = msgpack.unpackb(fs.read_bytes(path), raw=False)
        if xxhash.xxh64(body).hexdigest() != digest:
            raise ValueError("checksum mismatch")
        return list(msgpack.unpackb(body, raw=False))
    except (OSError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CheckpointError(f"{fs.describe(path)}: held-back records unreadable ({exc})") from None


def _check_schema(name: str, src: Source) -> None:
    if src.record not in ("dict", "tuple", "value"):
        raise ConfigurationError(f"input {name!r}: record must be 'dict', 'tuple' or 'value', got {src.record!r}")
    try:
        fields = {f.name: f.dataType.simpleString() for f in src.df.schema.fields}
    except AttributeError:
        raise SparkError(f"input {name!r}: expected a Spark DataFrame, got {type(src.df).__name__}") from None
    want = dict(src.columns or {})
    for col, tp in want.items():
        if col not in fields:
            raise SparkError(
                f"input {name!r}: the DataFrame has no column {col!r} that the dataflow expects "
                f"(it has: {', '.join(f'{k} {v}' for k, v in fields.items())})"
            )
        if fields[col] != tp:
            raise SparkError(f"input {name!r}: column {col!r} is {fields[col]}, the dataflow expects {tp}")
    if not isinstance(src.lateness, int) or src.lateness < 0:
        raise ConfigurationError(f"input {name!r}: lateness must be an integer >= 0, got {src.lateness!r}")
    if src.lateness and src.time is None:
        raise ConfigurationError(f"input {name!r}: lateness needs a time column")
    if src.time is not None:
        if src.time not in fields:
            raise SparkError(f"input {name!r}: no time column {src.time!r} (columns: {', '.join(fields)})")
        if fields[src.time] not in _INT_TYPES:
            raise SparkError(
                f"input {name!r}: time column {src.time!r} is {fields[src.time]}; it must be an integer column "
                "(epochs), e.g. cast a timestamp to hours"
            )
