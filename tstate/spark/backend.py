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

**One batch** (:mod:`tstate.spark.batch`, stage by stage): the inputs' rows go through the fused stateless
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
(all at once, fluid: a few bins per batch, or pre-copy: the executors load the moving
bins in the background during the batch before they move, :mod:`tstate.spark.binstore`),
or a restart with another ``partitions``.  The state store is the embedded engine's checkpoint format, so either
engine resumes from the other's checkpoints.  A moved bin is read by its new owner from the store (with
pre-copy: only the files committed since its prefetch); a bin whose
owner did not change usually comes from the executor's cache
(:mod:`tstate.spark.binstore`; ``metrics.cache_hit_rate``).
"""

from __future__ import annotations

import os
import time as _time
from typing import TYPE_CHECKING, Any, Optional

from attrs import define, field

from tstate.backend import DEFAULT_STRATEGY, Rescaled, Strategy, check_strategy
from tstate.checkpoint.settings import Checkpoints
from tstate.errors import CheckpointError, ConfigurationError, SparkError
from tstate.metrics import Metrics
from tstate.plan import Sink as SinkNode
from tstate.plan import Planned, Stateful
from tstate.spark.batch import BatchMetrics, Committed, Job, MicroBatch, Shuffles
from tstate.spark.delivery import Delivery
from tstate.spark.output import ROOT as OUTPUT_ROOT

if TYPE_CHECKING:  # pragma: no cover
    from tstate.dataflow import Stream

__all__ = ["Backend", "Source", "BatchMetrics"]

_INT_TYPES = ("tinyint", "smallint", "int", "bigint")
#: a rescale step's bin code is ``boundary << 20 | bin``
_BIN_MASK = (1 << 20) - 1


@define
class _Step:
    """One batch of a rescale: ``moves`` (bin code -> partition) change owner at it;
    ``prefetch`` (bin code -> next owner): pre-copy, loaded by the executors during it
    for the hand-over ``ahead`` batches later; ``precopy``: its moves were prefetched."""

    moves: dict[int, int]
    prefetch: dict[int, int] = field(factory=dict)
    ahead: int = 0
    precopy: bool = False


@define
class Source:
    """A DataFrame bound to a dataflow input.

    ``time``: an integer column of event times (None: each micro-batch is one epoch,
    numbered by its batch id; a static DataFrame without it is epoch 0);
    ``lateness``: with ``time`` in a streaming run, how far (in epochs) the frontier
    stays behind the largest time seen: a row up to ``lateness`` epochs older than the
    newest one is still on time (rows ahead of the frontier are held back, durably,
    until it reaches them);
    ``record``: what a row becomes — ``"dict"`` (column → value), ``"tuple"``,
    ``"value"`` (the first column), or an attrs class or named tuple built from the
    columns its fields name, column by column (``record=Event``: no dict per row; a
    class whose records cross a shuffle must be registered, as any record class);
    ``columns``: the columns and Spark types the
    dataflow expects (``{"key": "string", "hour": "bigint"}``), checked before the
    first batch."""

    df: Any
    time: Optional[str] = None
    record: Any = "dict"
    columns: Optional[dict[str, str]] = None
    lateness: int = 0


class Backend:
    """Runs dataflows on a SparkSession (see the module docstring).

    ``checkpoint``: the state store's location (also holds the streaming query's own
    checkpoint under ``spark-query/``), or a
    :class:`~tstate.checkpoint.settings.Checkpoints` -- the embedded engine's
    ``checkpoint=`` -- whose directory and store settings (``retain``,
    ``compact_after``, ``resume``, ``fresh_if_unusable``, ``replica``) are used (every
    micro-batch is a checkpoint: its cadence and mode do not apply).  The location is an object-store URL (``s3://bucket/prefix``,
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
    partition), ``"driver"``, or ``"auto"`` (the executors on an object store or for a
    very large checkpoint; see :mod:`tstate.spark.restore`); the bins themselves are
    always read and decoded by the executors, in parallel, as batches need them."""

    def __init__(
        self,
        spark: Any,
        checkpoint: "str | Checkpoints",
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

        if isinstance(checkpoint, Checkpoints):  # the embedded engine's settings: the store's are used
            given = {
                "compact_after": (compact_after, 8), "retain": (retain, 3), "resume": (resume, True),
                "fresh_if_unusable": (fresh_if_unusable, False), "replica": (replica, None),
            }
            twice = sorted(k for k, (v, default) in given.items() if v != default)
            if twice:
                raise ConfigurationError(
                    f"Backend: {', '.join(twice)} given both as arguments and in checkpoint=Checkpoints(...): "
                    "give them in Checkpoints only"
                )
            compact_after, retain, resume = checkpoint.compact_after, checkpoint.retain, checkpoint.resume
            fresh_if_unusable, replica = checkpoint.fresh_if_unusable, checkpoint.replica
            checkpoint = checkpoint.directory
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
            self.directory, retain=retain, compact_after=compact_after, background_gc=True, replica=replica,
            mirror_dirs=(f"{OUTPUT_ROOT}/",),
        )
        self.metrics = Metrics()
        #: the run's dataflow and what its batches share (None: nothing has run yet)
        self._flow: Any = None
        self._job: Optional[Job] = None
        self._shuffles = Shuffles(spark)
        self._owners: dict[int, list[int]] = {}
        self._steps: list[_Step] = []  # pending rescale steps
        self._target_partitions: Optional[int] = None
        #: what the last committed batch left for the next (tstate.spark.batch.Committed)
        self._last = Committed()
        self._progress = Progress(progress)

    def __repr__(self) -> str:
        return f"Backend({self.directory!r}, partitions={self.partitions})"

    @property
    def checkpoints(self) -> Any:
        """The checkpoint store every micro-batch is committed to
        (:class:`~tstate.checkpoint.store.CheckpointStore`)."""
        return self.store

    # -- setting up -------------------------------------------------------------------
    def _prepare(self, flow: "Planned", sources: dict[str, Any]) -> dict[str, Source]:
        from tstate.checkpoint.schema_check import check_compatible
        from tstate.hash_kind import check_hash_kind, hash_kind_of
        from tstate.migration.planner import balanced_map
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
        self._flow = flow
        sinks = {i: node.sink for i, node in flow.graph.of_type(SinkNode)}
        self._job = Job(
            self.spark, self._shuffles, self.store, self.directory, plan, sinks,
            self.spark.sparkContext.accumulator(0), self.compact_after, self.local_loops,
            Delivery(self.spark, self.directory, self.store.fs, plan.records),
        )
        self._owners = {b: balanced_map(plan.nodes[b].bins, self.partitions) for b in plan.boundaries}
        # (a CheckpointError if checkpoints exist but none is usable: never empty by surprise)
        head = self.store.recover(fresh_if_unusable=self.fresh_if_unusable, verify=self._verifier(plan)) if self.resume else None
        if head is not None:
            for b in plan.boundaries:
                pn = plan.nodes[b]
                entry = head.operators.get(pn.name)
                if pn.kind != "stateful" or entry is None:
                    continue
                check_compatible(pn.name, entry.schema, pn.stateful.schema)
                if entry.bins != pn.bins:
                    raise ConfigurationError(
                        f"operator {pn.name!r}: checkpoint {head.id} has {entry.bins} bins, the dataflow {pn.bins}"
                    )
                check_hash_kind(pn.name, head.id, entry.hash, hash_kind_of(pn.stateful.key))
            self._last = Committed.of_checkpoint(head)
            if self._last.frontier is not None:  # (None: the run finished; its output is complete)
                for sink in sinks.values():
                    sink.restore(self._last.frontier)
        for sink in sinks.values():
            sink.open(0, 1)
        self._recover_output()
        return bound

    def _verifier(self, plan: Any) -> Any:
        """How recovery checks a candidate checkpoint's files: by the executors when
        ``verify`` says so (:mod:`tstate.spark.restore`), else on the driver."""
        from tstate.checkpoint.fs import LocalFS
        from tstate.checkpoint.schema_check import fingerprint_check, stored_fingerprints
        from tstate.spark.restore import use_executors, verify_on_executors

        owners = {plan.nodes[b].name: list(o) for b, o in self._owners.items()}
        local = isinstance(self.store.fs, LocalFS)

        stateful = [plan.nodes[b].name for b in plan.boundaries if plan.nodes[b].kind == "stateful"]

        def verify(m: Any) -> list[str]:
            # a stored schema that does not parse, or that its files were not written
            # with (altered), makes the checkpoint unusable like a damaged file
            fingerprints, bad = stored_fingerprints(m, stateful)
            if bad:
                return bad
            check = fingerprint_check(m, fingerprints)
            if not use_executors(self.verify, m, local=local):
                self.metrics.verified_by = "driver"
                return self.store.verify(m, check=check)
            self.metrics.verified_by = "executors"
            bad = verify_on_executors(self.spark, self.directory, m, owners, self.partitions, check)
            if bad and self.store.replica is not None:
                return self.store.verify(m, check=check)  # the driver reads the bad files from the replica and repairs them
            return bad

        return verify

    def _recover_output(self) -> None:
        """At a (re)start: delete the output an uncommitted batch left, and write the last
        committed batch's epoch files again (the driver may have died between its commit
        and them; the same bytes again otherwise)."""
        from tstate.spark.output import clean, finalise, read_index, sink_dir

        assert self._job is not None
        fs, plan, committed = self.store.fs, self._job.plan, self._last
        keep = {p.path for p in committed.pending}
        last: list[Any] = []
        if committed.output is not None:
            b, _prev, parts = read_index(fs, committed.output)
            if b == committed.batch:
                keep |= {p.path for p in parts} | {committed.output}
                last = parts
        clean(fs, [sink_dir(plan, node) for node in plan.sinks], max(committed.batch, 0), keep)
        files = {
            node: sink for node, sink in self._job.sinks.items() if not sink.on_driver and hasattr(sink, "commit_epoch")
        }
        finalise(self.spark, self.directory, files, last, plan.records)

    # -- rescaling --------------------------------------------------------------------
    def rescale(
        self, partitions: int, strategy: Strategy = DEFAULT_STRATEGY, steps: int = 4, *, lead: int = 1
    ) -> Rescaled:
        """Spread the bins over ``partitions`` partitions from the next micro-batch on,
        moving as few bins as possible: ``"all-at-once"`` in one batch, ``"fluid"``
        spread evenly over ``steps`` batches (a moved bin costs its new owner one read
        from the store, so fluid spreads that cost).  ``"batched"`` is accepted as
        ``"fluid"`` (every step here is already a batch boundary).  ``"precopy"``: during
        the next ``lead`` batches the executors load the moving bins' committed chains in
        the background (:func:`tstate.spark.binstore.prefetch`) while the old owners keep
        processing, then all bins move at once and each new owner reads only the files
        committed since it loaded (``BatchMetrics.prefetched_bins``,
        ``handover_bytes``).  Returns what it set under way: the number of batches the
        move takes (``steps``) and per operator the batches its bins move at, counted
        from the next one (``schedule``).  (The default was ``"all-at-once"`` before both
        engines shared :data:`~tstate.backend.DEFAULT_STRATEGY`.)"""
        from tstate.migration.planner import rescale_map

        if not isinstance(partitions, int) or partitions < 1:
            raise ConfigurationError(f"partitions must be an integer >= 1, got {partitions!r}")
        check_strategy(strategy)
        if not isinstance(steps, int) or steps < 1:
            raise ConfigurationError(f"steps must be an integer >= 1, got {steps!r}")
        if not isinstance(lead, int) or lead < 1:
            raise ConfigurationError(f"lead must be an integer >= 1, got {lead!r}")
        if self._job is None:
            self.partitions = partitions
            return Rescaled(partitions, strategy, 0, {})
        moves = [
            ((b << 20) | bin_, p)
            for b, owners in sorted(self._owners.items())
            for bin_, p in enumerate(rescale_map(owners, partitions))
            if owners[bin_] != p
        ]
        if strategy == "precopy":
            self._steps = [_Step({}, dict(moves), lead - i) for i in range(lead)] + [_Step(dict(moves), precopy=True)] if moves else []
        else:
            k = 1 if strategy == "all-at-once" else min(steps, max(1, len(moves)))
            self._steps = [_Step(dict(moves[i::k])) for i in range(k)] if moves else []
        if strategy != "precopy":  # (precopy: the lead batches run on the old partitions)
            self.partitions = max(partitions, max((max(o) + 1 for o in self._owners.values()), default=1))
        self._target_partitions = partitions
        return Rescaled(partitions, strategy, len(self._steps), self._schedule())

    def _schedule(self) -> dict[str, tuple[int, ...]]:
        """Per operator whose bins move: the pending steps (batches from the next one) moving them."""
        graph = self._flow.graph if self._flow is not None else None
        at: dict[str, list[int]] = {}
        for i, step in enumerate(self._steps):
            for node in sorted({code >> 20 for code in step.moves}):
                at.setdefault(graph[node].name if graph is not None else str(node), []).append(i)
        return {name: tuple(batches) for name, batches in at.items()}

    def _next_owners(self) -> "_Step":
        """Apply the next rescale step; returns it (an empty step: no rescale under way)."""
        if not self._steps:
            target = self._target_partitions
            if target is not None:
                self.partitions = target
                self._target_partitions = None
            return _Step({})
        step = self._steps.pop(0)
        if step.moves and self._target_partitions is not None:
            self.partitions = max(self.partitions, self._target_partitions)
        for code, p in step.moves.items():
            self._owners[code >> 20][code & _BIN_MASK] = p
        if not self._steps and self._target_partitions is not None:
            self.partitions = self._target_partitions
            self._target_partitions = None
        return step

    # -- running ----------------------------------------------------------------------
    def run(
        self,
        flow: "Planned",
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
        bins move to the new partitions (per the strategy, over one or more batches;
        ``"precopy"``: the executors load them during the batch before, see
        :meth:`rescale`); with automatic cuts a micro-batch starts at each such time."""
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
        done = self._last.batch + 1  # batches committed by earlier runs
        if self._last.frontier is None:  # a finished run was committed: nothing left to do
            self._progress.finished_already(self.directory, done)
            return
        for name, src in bound.items():
            if getattr(src.df, "isStreaming", False):
                raise SparkError(f"input {name!r} is a streaming DataFrame: use Backend.run for streaming runs")
        cached, lo, cuts = self._cut(bound, epochs_per_batch, rows_per_batch, [t for t, _ in pending])
        batch = self._last.batch + 1
        total = done + len(cuts) + 1  # (+1: the batch closing the inputs)
        if done:
            self._progress.resumed(self.directory, done, total)
        self._progress.start(total, done)
        assert self._job is not None
        delivery = self._job.delivery
        delivery.background = True  # each batch's output reaches the sinks while the next runs
        failed = True
        try:
            for i, (lo, hi) in enumerate(cuts):
                while pending and pending[0][0] <= lo:
                    cmd = pending.pop(0)[1]
                    self.rescale(cmd.workers, cmd.strategy)
                # pre-copy: the bins move at the next batch; the executors load them during this one
                nxt = cuts[i + 1][0] if i + 1 < len(cuts) else None
                while pending and nxt is not None and pending[0][1].strategy == "precopy" and pending[0][0] <= nxt:
                    cmd = pending.pop(0)[1]
                    self.rescale(cmd.workers, "precopy")
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
            self._finish_delivery()
            failed = False
        finally:
            if failed:
                delivery.drain()  # (the run's own error is raised; a restart redoes the delivery)
            delivery.background = False
            for df in cached.values():
                df.unpersist()
            self._progress.close()
        for sink in self._job.sinks.values() if self._job is not None else ():
            sink.close(0)

    def _finish_delivery(self) -> None:
        """Wait for the last batch's output to reach the sinks; its seconds count as the
        last batch's output hand-over (``BatchMetrics.output_seconds``)."""
        import attrs

        assert self._job is not None
        waited = self._job.delivery.wait()
        if self.metrics.batches:
            m = self.metrics.batches[-1]
            self.metrics.batches[-1] = attrs.evolve(m, seconds=m.seconds + waited, output_seconds=m.output_seconds + waited)

    def _cut(
        self, bound: dict[str, Source], epochs: Optional[int], rows: int, starts: list[int]
    ) -> tuple[dict[str, Any], int, list[tuple[int, int]]]:
        """A batch run's first epoch and micro-batches (:func:`_cuts` over the epochs Spark counted and
        sliced, :mod:`tstate.spark.cuts`), and the timed inputs it persisted: each
        micro-batch filters its epochs out of them, so they are read once, by the job
        that counts the epochs, into the cache (an input already cached is used as is)."""
        from tstate.spark.cuts import span

        cached = {
            name: src.df.persist() for name, src in bound.items() if src.time is not None and not src.df.is_cached
        }
        timed = [(cached.get(name, src.df), src.time) for name, src in bound.items() if src.time is not None]
        t = _time.perf_counter()
        try:
            found = span(timed, None if self._last.fresh else self._last.frontier, None if epochs else rows)
        except BaseException:
            for df in cached.values():
                df.unpersist()
            raise
        self.metrics.cut_seconds = _time.perf_counter() - t
        counts = dict(found.loads)
        first, top = found.first, found.top if found.top is not None else -1
        if any(src.time is None for src in bound.values()):  # an untimed input is epoch 0
            counts.setdefault(0, 0)
            first, top = min(first if first is not None else 0, 0), max(top, 0)
        frontier = self._last.frontier
        lo = (first if first is not None else 0) if self._last.fresh or frontier is None else frontier
        return cached, lo, _cuts(counts, lo, top, epochs, rows, starts)

    def start(
        self,
        flow: "Planned",
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
        if self._last.batch >= 0:
            self._progress.resumed(self.directory, self._last.batch + 1, None)
        if len(bound) != 1:
            raise SparkError(f"a streaming run needs exactly one input; dataflow {flow.name!r} has {len(bound)}")
        (name, src), = bound.items()
        if not getattr(src.df, "isStreaming", False):
            raise SparkError(f"input {name!r} is not a streaming DataFrame: use Backend.run for static DataFrames")

        def on_batch(df: Any, batch_id: int) -> None:
            last = self._last
            if batch_id <= last.batch:
                self.metrics.skipped.append(batch_id)  # committed before a restart
                return
            if batch_id > last.batch + 1 and not last.fresh:
                # Spark committed batches tstate's state does not include (it resumed from
                # an older checkpoint, the newer ones being unusable): their rows will not
                # come again, so going on would lose them
                raise CheckpointError(
                    f"{self.directory}: Spark's streaming query is at micro-batch {batch_id}, but the tstate "
                    f"checkpoint it resumed from holds batches up to {last.batch}; the input of batches "
                    f"{last.batch + 1}..{batch_id - 1} is committed in Spark's query checkpoint "
                    f"(spark-query/) and will not be replayed, so resuming would lose it (exactly-once). "
                    "Repair the newer tstate checkpoints (python -m tstate checkpoints DIR --verify) or "
                    "start the query afresh"
                )
            lo = last.frontier
            assert lo is not None  # (a finished run gets no more batches)
            newest = last.newest
            if src.time is None:
                hi: Optional[int] = max(lo, batch_id) + 1
                const = max(lo, batch_id)
            else:
                top = df.agg(F.max(src.time).alias("t")).collect()[0]["t"]
                if top is not None:
                    newest = int(top) if newest is None else max(newest, int(top))
                hi = max(lo, newest + 1 - src.lateness) if newest is not None else lo
                const = None
            self._batch({name: df}, bound, batch_id, lo, hi, const, newest=newest)

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
        *,
        newest: Optional[int] = None,
    ) -> None:
        """One micro-batch (:class:`~tstate.spark.batch.MicroBatch`): run it, commit,
        then deliver the sinks' records; ``newest``: the newest event time seen."""
        start = _time.perf_counter()
        rescaling = self._next_owners()
        assert self._job is not None
        last = self._last
        plan = self._job.plan
        moved: dict[int, set[int]] = {}
        for code in rescaling.moves:
            moved.setdefault(code >> 20, set()).add(code & _BIN_MASK)
        prefetch: dict[int, list[tuple[int, int]]] = {}
        for code, p in rescaling.prefetch.items():  # (loop operators' bins are not prefetched)
            node = plan.nodes[code >> 20]
            if node.kind == "stateful" and node.loop is None:
                prefetch.setdefault(code >> 20, []).append((code & _BIN_MASK, p))
        step = MicroBatch(
            self._job, last, self._owners, self.partitions, dfs, bound, batch, lo, hi, const_time,
            moved=len(rescaling.moves), newest=newest if newest is not None else last.newest, start=start,
            moved_bins={b: frozenset(s) for b, s in moved.items()},
            prefetch={b: tuple(s) for b, s in prefetch.items()},
            handover=batch + rescaling.ahead if prefetch else (batch if rescaling.precopy else -1),
            precopy=rescaling.precopy,
        )
        self._last = step.run()
        m = step.finish()
        self.metrics.late = self._job.late.value
        self.metrics.batches.append(m)
        self._progress.batch(m, self.store.head)

    # -- state ----------------------------------------------------------------------
    def state(self, op: "Stream") -> Any:
        """The state of stateful operator ``op`` at the last committed batch, as a Spark
        DataFrame (a ``key`` column, then one column per struct field or ``value``),
        read from the bins by the executors."""
        from tstate.spark.frame import state_frame

        if self._flow is None:
            raise SparkError("nothing has run on this backend yet")
        node = self._flow.graph[op.node]
        if not isinstance(node, Stateful):
            raise SparkError(f"operator {node.name!r} is not a stateful operator")
        return state_frame(self.spark, self.store, self.directory, self.partitions, node.name, node.state)

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

        if self._flow is None or self._job is None:
            raise SparkError("nothing has run on this backend yet")
        node = self._sink_of(op)
        head = self.store.latest()
        index = head.meta.get("spark", {}).get("output") if head is not None else None
        found = [
            (b, p) for b, parts in history(self.store.fs, index) if batch is None or b == batch
            for p in parts if p.sink == node
        ]  # fmt: skip
        found.reverse()
        return frame(self.spark, self.directory, self.store.fs, found, schema, self._job.plan.records)

    def _sink_of(self, op: Any) -> int:
        """The sink node of ``op`` (a stream feeding a sink, a sink or a sink's name)."""
        from tstate.io.sinks import Sink

        graph = self._flow.graph
        specs = graph.of_type(SinkNode)
        if isinstance(op, str):
            found = [i for i, s in specs if s.name == op]
            what = f"sink {op!r}"
        elif isinstance(op, Sink):
            found = [i for i, s in specs if s.sink is op]
            what = f"sink {op!r}"
        else:
            node, port = getattr(op, "node", None), getattr(op, "port", 0)
            found = [i for i, _s in specs if node is not None and (node, port) in graph.sources(i)]
            what = f"operator {graph[node].name!r}" if isinstance(node, int) else repr(op)
        if not found:
            raise SparkError(
                f"{what} has no sink in dataflow {self._flow.name!r}: its output is not kept; add one, e.g. "
                "stream.sink(ts.io.keep()) (sinks: " + ", ".join(repr(s.name) for _i, s in specs) + ")"
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


def _check_schema(name: str, src: Source) -> None:
    from tstate.spark.record_types import is_record_class
    from tstate.spark.records import record_fields

    typed = isinstance(src.record, type) and is_record_class(src.record)
    if not typed and src.record not in ("dict", "tuple", "value"):
        raise ConfigurationError(
            f"input {name!r}: record must be 'dict', 'tuple', 'value' or an attrs class or named tuple, got {src.record!r}"
        )
    try:
        fields = {f.name: f.dataType.simpleString() for f in src.df.schema.fields}
    except AttributeError:
        raise SparkError(f"input {name!r}: expected a Spark DataFrame, got {type(src.df).__name__}") from None
    missing = [f for f in record_fields(src.record) if f not in fields] if typed else []
    if missing:
        raise ConfigurationError(
            f"input {name!r}: record class {src.record.__qualname__} has field(s) {', '.join(map(repr, missing))} "
            f"that are not columns of the DataFrame (it has: {', '.join(fields)})"
        )
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


if TYPE_CHECKING:  # pragma: no cover - mypy checks that this backend implements tstate.backend.Backend
    import tstate.backend

    def _is_a_backend(backend: Backend) -> tstate.backend.Backend:
        return backend
