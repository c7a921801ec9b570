"""The Spark backend: run a dataflow on PySpark micro-batches (driver side).

>>> backend = Backend(spark, checkpoint="/data/ckpt", partitions=2)   # doctest: +SKIP
>>> backend.run(flow, {"events": Source(static_df, time="hour")})     # batch # doctest: +SKIP
>>> run = backend.start(flow, {"events": stream_df})                  # streaming # doctest: +SKIP
>>> run.wait()                                                        # doctest: +SKIP
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

from tstate.backend import DEFAULT_STRATEGY, Rescaled, Strategy
from tstate.checkpoint.settings import Checkpoints
from tstate.errors import ConfigurationError, SparkError
from tstate.metrics import Metrics
from tstate.plan import Planned, Stateful
from tstate.plan import Sink as SinkNode
from tstate.spark.batch import BatchMetrics, Committed, Job, MicroBatch, Shuffles
from tstate.spark.batch_run import BatchRuns
from tstate.spark.delivery import Delivery
from tstate.spark.folded import Fold
from tstate.spark.cuts import batch_cuts as _cuts  # noqa: F401  (its old place)
from tstate.spark.output import ROOT as OUTPUT_ROOT
from tstate.spark.rescaling import Rescaling, check_rescale
from tstate.spark.source import Source

if TYPE_CHECKING:  # pragma: no cover
    from tstate.dataflow import Stream
    from tstate.spark.frame import StateFrame
    from tstate.spark.streaming_run import StreamingRun

__all__ = ["Backend", "Source", "BatchMetrics"]

#: the store settings ``Backend`` takes as arguments and ``Checkpoints`` holds: their defaults
_STORE_DEFAULTS = {"compact_after": 8, "retain": 3, "resume": True, "fresh_if_unusable": False, "replica": None}


def check_state(state: Any) -> Any:
    """``state`` if it is None (the heap) or a :class:`~tstate.state.rocksdb.settings.RocksDB`
    setting, else a ConfigurationError."""
    from tstate.state.rocksdb.settings import RocksDB

    if state is not None and not isinstance(state, RocksDB):
        raise ConfigurationError(f"state={state!r}: give tstate.RocksDB(path, ...) or None (the heap)")
    return state


def _store_settings(checkpoint: "str | Checkpoints", given: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The checkpoint directory and store settings: ``given`` (the arguments), or those
    of ``checkpoint=Checkpoints(...)`` (the embedded engine's settings), but not both."""
    if not isinstance(checkpoint, Checkpoints):
        return checkpoint, given
    twice = sorted(k for k, v in given.items() if v != _STORE_DEFAULTS[k])
    if twice:
        raise ConfigurationError(
            f"Backend: {', '.join(twice)} given both as arguments and in checkpoint=Checkpoints(...): "
            "give them in Checkpoints only"
        )
    return checkpoint.directory, {k: getattr(checkpoint, k) for k in _STORE_DEFAULTS}


class Backend(BatchRuns):
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
    always read and decoded by the executors, in parallel, as batches need them.
    ``state``: where executors keep keyed state, as the embedded engine's ``state=``:
    the heap (None, the default) or ``tstate.RocksDB(path, cache_bytes=...)``, a local
    RocksDB per executor process under ``path`` (a local directory on every executor
    host) caching the bins its tasks own, each changed bin written to the store as an
    SST file per batch (:mod:`tstate.spark.rocks_bins`)."""

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
        state: Any = None,
    ) -> None:
        from tstate.checkpoint.location import resolve
        from tstate.checkpoint.store import CheckpointStore
        from tstate.spark.progress import Progress
        from tstate.spark.restore import check_verify
        from tstate.spark.session import require_pyspark

        require_pyspark()
        directory, settings = _store_settings(checkpoint, {
            "compact_after": compact_after, "retain": retain, "resume": resume,
            "fresh_if_unusable": fresh_if_unusable, "replica": replica,
        })  # fmt: skip
        self.spark = spark
        self.directory = resolve(directory)  # an absolute path, or a URL (s3://...)
        n = partitions if partitions is not None else spark.sparkContext.defaultParallelism
        if not isinstance(n, int) or n < 1:
            raise ConfigurationError(f"partitions must be an integer >= 1, got {partitions!r}")
        #: the bin→partition map and the rescale under way (tstate.spark.rescaling)
        self._rescaling = Rescaling(n)
        self.sources = dict(sources or {})
        self.compact_after = settings["compact_after"]
        self.resume = settings["resume"]
        self.fresh_if_unusable = settings["fresh_if_unusable"]
        self.local_loops = local_loops
        self.verify = check_verify(verify)
        #: where executors keep keyed state: None (the heap) or a RocksDB setting
        self.state_backend = check_state(state)
        # with a replica, the driver copies each committed checkpoint there and, when it
        # resumes, repairs either copy from the other before any executor reads a bin
        self.store = CheckpointStore(
            self.directory, retain=settings["retain"], compact_after=self.compact_after, background_gc=True,
            replica=settings["replica"], mirror_dirs=(f"{OUTPUT_ROOT}/",),
        )
        self.metrics = Metrics()
        #: the run's dataflow and what its batches share (None: nothing has run yet)
        self._flow: Any = None
        self._job: Optional[Job] = None
        self._shuffles = Shuffles(spark)
        #: what the last committed batch left for the next (tstate.spark.batch.Committed)
        self._last = Committed()
        self._progress = Progress(progress)
        #: a batch run's inputs partitioned for the colocated path (tstate.spark.placed)
        self._placed: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"Backend({self.directory!r}, partitions={self.partitions})"

    @property
    def partitions(self) -> int:
        """The Spark partitions (= tstate workers) the next micro-batch runs on."""
        return self._rescaling.partitions

    @partitions.setter
    def partitions(self, n: int) -> None:
        self._rescaling.partitions = n

    @property
    def checkpoints(self) -> Any:
        """The checkpoint store every micro-batch is committed to
        (:class:`~tstate.checkpoint.store.CheckpointStore`)."""
        return self.store

    # -- setting up (tstate.spark.opening) ----------------------------------------------
    def _prepare(self, flow: "Planned", sources: dict[str, Any]) -> dict[str, Source]:
        """Bind ``sources`` to ``flow``'s inputs, resume from the latest usable
        checkpoint (if ``resume``), open the sinks; returns the bindings."""
        from tstate.migration.planner import balanced_map
        from tstate.spark.opening import bind, check_resumed, recover_output, verifier
        from tstate.spark.plan import Plan

        plan = Plan.of(flow)
        bound = bind(plan, flow.name, {**self.sources, **sources})
        self._flow = flow
        sinks = {i: node.sink for i, node in flow.graph.of_type(SinkNode)}
        self._job = Job(
            self.spark, self._shuffles, self.store, self.directory, plan, sinks,
            self.spark.sparkContext.accumulator(0), self.compact_after, self.local_loops,
            Delivery(self.spark, self.directory, self.store.fs, plan.records), self.state_backend,
        )
        self._rescaling.owners = {b: balanced_map(plan.nodes[b].bins, self.partitions) for b in plan.boundaries}
        # (a CheckpointError if checkpoints exist but none is usable: never empty by surprise)
        verify = verifier(self.spark, self.store, self.directory, plan, self._rescaling.owners, self.partitions, self.verify, self.metrics)
        head = self.store.recover(fresh_if_unusable=self.fresh_if_unusable, verify=verify) if self.resume else None
        if head is not None:
            check_resumed(plan, head)
            self._last = Committed.of_checkpoint(head)
            if self._last.frontier is not None:  # (None: the run finished; its output is complete)
                for sink in sinks.values():
                    sink.restore(self._last.frontier)
        for sink in sinks.values():
            sink.open(0, 1)
        recover_output(self.store, self.spark, self.directory, self._job, self._last)
        return bound

    # -- rescaling (tstate.spark.rescaling) ---------------------------------------------
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
        check_rescale(partitions, strategy, steps, lead)
        if self._job is None:
            self.partitions = partitions
            return Rescaled(partitions, strategy, 0, {})
        return self._rescaling.plan(partitions, strategy, steps, lead, self._flow.graph if self._flow is not None else None)

    # -- running ----------------------------------------------------------------------
    def start(
        self,
        flow: "Planned",
        sources: Optional[dict[str, Any]] = None,
        *,
        trigger: Optional[dict[str, Any]] = None,
        query_name: Optional[str] = None,
    ) -> "StreamingRun":
        """Start ``flow`` as a Structured Streaming query over its one streaming input;
        returns the run (:class:`~tstate.spark.streaming_run.StreamingRun`: ``wait``,
        ``stop``, ``query``).  ``trigger``: ``DataStreamWriter.trigger`` arguments,
        e.g. ``{"availableNow": True}`` or ``{"processingTime": "5 seconds"}``."""
        from tstate.checkpoint.location import spark_uri
        from tstate.spark.driving import StreamingBatches
        from tstate.spark.streaming_run import StreamingRun

        bound = self._prepare(flow, sources or {})
        if self._last.batch >= 0:
            self._progress.resumed(self.directory, self._last.batch + 1, None)
        if len(bound) != 1:
            raise SparkError(f"a streaming run needs exactly one input; dataflow {flow.name!r} has {len(bound)}")
        (name, src), = bound.items()
        if not getattr(src.df, "isStreaming", False):
            raise SparkError(f"input {name!r} is not a streaming DataFrame: use Backend.run for static DataFrames")
        writer = src.df.writeStream.foreachBatch(StreamingBatches(self, bound, name)).option(
            "checkpointLocation", os.path.join(spark_uri(self.directory), "spark-query")
        )
        if trigger:
            writer = writer.trigger(**trigger)
        if query_name:
            writer = writer.queryName(query_name)
        return StreamingRun(flow.name, writer.start(), self)

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
        fold: Optional[Fold] = None,
    ) -> None:
        """One micro-batch (:class:`~tstate.spark.batch.MicroBatch`): run it, commit,
        then deliver the sinks' records; ``newest``: the newest event time seen;
        ``fold``: the batch is a folded run's (:mod:`tstate.spark.folded`)."""
        start = _time.perf_counter()
        rescaling = self._rescaling.next_step()
        assert self._job is not None
        last = self._last
        plan = self._job.plan
        prefetch = rescaling.prefetched(
            {b for b in plan.boundaries if isinstance(plan.nodes[b].op, Stateful) and plan.nodes[b].loop is None}
        )
        step = MicroBatch(
            self._job, last, self._rescaling.owners, self.partitions, dfs, bound, batch, lo, hi, const_time,
            moved=len(rescaling.moves), newest=newest if newest is not None else last.newest, start=start,
            moved_bins=rescaling.moved_bins(), prefetch=prefetch,
            handover=batch + rescaling.ahead if prefetch else (batch if rescaling.precopy else -1),
            precopy=rescaling.precopy, placed=self._placed, fold=fold,
        )
        self._last = step.run()
        m = step.finish()
        self.metrics.late = self._job.late.value
        self.metrics.batches.append(m)
        self._progress.batch(m, self.store.head)

    # -- state and output (tstate.spark.queries) ----------------------------------------
    def state(self, op: "Stream") -> "StateFrame":
        """The state of stateful operator ``op`` at the last committed batch
        (:class:`~tstate.spark.frame.StateFrame`; its ``frame``: a DataFrame with a
        ``key`` column, then one per struct field or ``value``, read by the executors)."""
        from tstate.spark.queries import state_of

        return state_of(self.spark, self.store, self.directory, self.partitions, self._flow, op)

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
        from tstate.spark.queries import output_of

        return output_of(self.spark, self.store, self.directory, self._flow, self._job, op, batch, schema)


if TYPE_CHECKING:  # pragma: no cover - mypy checks that this backend implements tstate.backend.Backend
    import tstate.backend

    def _is_a_backend(backend: Backend) -> tstate.backend.Backend:
        return backend
