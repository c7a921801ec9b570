"""A batch run (driver side): :meth:`tstate.spark.backend.Backend.run` -- a dataflow
over static DataFrames, to completion -- and how it is planned: folded into one task
when its input is one small micro-batch (:mod:`tstate.spark.folded`, decided by
:func:`tstate.spark.local_batch.foldable`), else cut into micro-batches of its inputs'
epochs (:mod:`tstate.spark.cuts`, the colocated inputs placed once:
:mod:`tstate.spark.placed`) that :func:`tstate.spark.driving.run_cuts` runs; the last
one closes the inputs.

:class:`BatchRuns` is the part of :class:`~tstate.spark.backend.Backend` that does it
(a base class of it); the backend's streaming runs, micro-batches, rescaling and
queries are :mod:`tstate.spark.backend`'s."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from tstate.errors import ConfigurationError, SparkError
from tstate.spark.folded import FRESH_LO, Fold, Unfolded
from tstate.spark.local_batch import foldable
from tstate.spark.source import Source

if TYPE_CHECKING:  # pragma: no cover
    from tstate.metrics import Metrics
    from tstate.plan import Planned
    from tstate.spark.batch import Job, Shuffles
    from tstate.spark.committed import Committed
    from tstate.spark.progress import Progress
    from tstate.spark.rescaling import Rescaling

__all__ = ["BatchRuns", "ROWS_PER_PARTITION", "default_rows"]

#: input rows per partition of a micro-batch when ``rows_per_batch`` is not given
#: (:func:`default_rows`)
ROWS_PER_PARTITION = 1_000_000


def default_rows(partitions: int) -> int:
    """A batch run's ``rows_per_batch`` when none is given: :data:`ROWS_PER_PARTITION`
    per partition the run starts on, so that each partition's tasks hold about as many
    rows in a micro-batch on any number of partitions (its memory bounded per task, not
    per run), and a run that fits is one micro-batch (Spark's fixed cost per batch paid
    once).

    >>> default_rows(2)
    2000000
    """
    return ROWS_PER_PARTITION * max(1, partitions)


class BatchRuns:
    """:meth:`run` of :class:`~tstate.spark.backend.Backend` (a base class of it): a
    batch run, folded or cut into micro-batches (see the module docstring).  What it
    uses of the backend is declared here and set up by the backend."""

    if TYPE_CHECKING:  # pragma: no cover - the Backend's (tstate.spark.backend)
        spark: Any
        directory: str
        local_loops: int
        metrics: Metrics
        _job: Optional[Job]
        _last: Committed
        _rescaling: Rescaling
        _shuffles: Shuffles
        _progress: Progress
        _placed: dict[str, Any]

        @property
        def partitions(self) -> int: ...

        def _prepare(self, flow: "Planned", sources: dict[str, Any]) -> dict[str, Source]: ...

        def _batch(
            self, dfs: dict[str, Any], bound: dict[str, Source], batch: int, lo: int, hi: Optional[int],
            const_time: Optional[int], *, newest: Optional[int] = None, fold: Optional[Fold] = None,
        ) -> None: ...

        def rescale(self, partitions: int, strategy: Any = ..., steps: int = ..., *, lead: int = ...) -> Any: ...

    def run(
        self,
        flow: "Planned",
        sources: Optional[dict[str, Any]] = None,
        *,
        epochs_per_batch: Optional[int] = None,
        rows_per_batch: Optional[int] = None,
        reconfigure: Any = (),
    ) -> None:
        """Run ``flow`` over static DataFrames to completion (see the module docstring).

        ``epochs_per_batch``: how many epochs each micro-batch covers; by default (None)
        the epochs are cut into micro-batches of about ``rows_per_batch`` input rows
        each (from one count of the rows per epoch), so that Spark's fixed cost per
        micro-batch is paid a few times, not once per epoch.  The output is the same
        for any cut: a micro-batch only decides when state is committed.
        ``rows_per_batch`` by default (None) is :func:`default_rows` of the run's
        partitions: :data:`ROWS_PER_PARTITION` (1,000,000) input rows per partition.
        Its contract: each task of a micro-batch holds about that many of the batch's
        input rows in memory at once (its rows, their shuffle cells and records: a Python
        worker's peak 0.56 GB at 1M rows of three short columns, 0.26 GB at 250k, on the
        Python-key benchmark's rows), a batch commits its state once, and
        a restart after a failure redoes at most one batch; fewer, larger batches cost
        less (Spark's planning, scheduling and the driver's commit are paid per batch:
        on 2M rows on ``local[2]``, measured under load, one batch used about 1 CPU s
        less than four of 500k in a warm session and about 7 CPU s less (of 34-36) in a
        fresh one's first run, most of it the JVM's).
        Give a smaller value for less memory per task or more frequent commits.
        ``reconfigure``: ``(time, tstate.Rescale(partitions, strategy=...))`` pairs, like
        the embedded engine's: from the first micro-batch at or after ``time``, the
        bins move to the new partitions (per the strategy, over one or more batches;
        ``"precopy"``: the executors load them during the batch before, see
        :meth:`rescale`); with automatic cuts a micro-batch starts at each such time."""
        from tstate.spark.driving import run_cuts
        from tstate.spark.warm import fresh, used, warm_workers

        pending = _check_run(epochs_per_batch, rows_per_batch, reconfigure)
        rows_per_batch = default_rows(self.partitions) if rows_per_batch is None else rows_per_batch
        bound = self._prepare(flow, sources or {})
        done = self._last.batch + 1  # batches committed by earlier runs
        if self._last.frontier is None:  # a finished run was committed: nothing left to do
            self._progress.finished_already(self.directory, done)
            return
        _check_static(bound)
        workers = self.partitions
        assert self._job is not None
        fold = foldable(
            self._job.plan, bound, self._last, bool(pending or self._rescaling.steps), self.local_loops,
            epochs_per_batch, rows_per_batch,
        )  # fmt: skip
        if fold is None:
            warm_workers(self.spark, workers)  # (while the inputs are cut: tstate.spark.warm)
        delivery = self._job.delivery
        delivery.background = True  # each batch's output reaches the sinks while the next runs
        failed = True
        cached: dict[str, Any] = {}
        try:
            folded = fold is not None and self._folded(bound, fold, done)
            if not folded:
                if fold is not None:
                    warm_workers(self.spark, workers)
                bound, cached, lo, cuts = self._cut(bound, epochs_per_batch, rows_per_batch, [t for t, _ in pending])
                # (the last cut closes the inputs: tstate.spark.driving.run_cuts)
                self._started(done, done + max(1, len(cuts)))
                run_cuts(self, bound, cached, lo, cuts, pending)
            delivery.finish(self.metrics)  # (the last batch's output reached the sinks)
            failed = False
            if not folded:
                used(self.spark, workers)
            elif not fresh(self.spark, 1):  # (a folded run's one task: one worker; a larger record stays)
                used(self.spark, 1)
        finally:
            self._ended(failed, cached)
        for sink in self._job.sinks.values() if self._job is not None else ():
            sink.close(0)

    def _folded(self, bound: dict[str, Source], fold: Fold, done: int) -> bool:
        """A folded run (:mod:`tstate.spark.folded`): its one micro-batch, closing the
        inputs, without a cut; False (nothing committed) when its input is more than one
        micro-batch."""
        from pyspark.sql import functions as F

        ((name, src),) = bound.items()
        assert src.time is not None  # (foldable)
        t = F.col(src.time)  # (the rows the cut path's one batch reads)
        lo = FRESH_LO if fold.fresh else self._last.frontier
        assert lo is not None
        df = src.df.where(t.isNotNull() if fold.fresh else t >= lo)
        self._started(done, done + 1)
        self.metrics.cut_seconds = 0.0
        try:
            self._batch({name: df}, bound, self._last.batch + 1, lo, None, None, fold=fold)
        except Unfolded:
            return False
        return True

    def _started(self, done: int, total: int) -> None:
        """The progress bar started for batches ``done`` to ``total`` (``done``: those
        committed by earlier runs, said on stderr if any)."""
        if done:
            self._progress.resumed(self.directory, done, total)
        self._progress.start(total, done)

    def _ended(self, failed: bool, cached: dict[str, Any]) -> None:
        """After a batch run, ``failed`` or not: the output delivery back to the
        foreground (drained if ``failed``), the cut inputs (``cached``) unpersisted, the
        placed ones and the progress bar let go."""
        assert self._job is not None
        delivery = self._job.delivery
        if failed:
            delivery.drain()  # (the run's own error is raised; a restart redoes the delivery)
        delivery.background = False
        for df in cached.values():
            df.unpersist()
        self._placed = {}
        self._progress.close()

    def _cut(
        self, bound: dict[str, Source], epochs: Optional[int], rows: int, starts: list[int]
    ) -> tuple[dict[str, Source], dict[str, Any], int, list[tuple[int, int]]]:
        """A batch run's inputs (those read in many partitions coalesced,
        :func:`tstate.spark.cuts.coalesced`; those taking the colocated path partitioned
        for it once, :func:`tstate.spark.placed.place`), persisted, first epoch and
        micro-batches (:func:`tstate.spark.cuts.cut_run`)."""
        from tstate.spark.cuts import coalesced, cut_run
        from tstate.spark.placed import place

        assert self._job is not None
        n = self.partitions
        bound = coalesced(self.spark, bound, n)
        bound, self._placed = place(
            self._job.plan, bound, self._rescaling.owners, n, self._shuffles.labels(n), self._last.held is not None
        )
        cached, lo, cuts, self.metrics.cut_seconds = cut_run(bound, self._last, epochs, rows, starts)
        return bound, cached, lo, cuts


def _check_static(bound: dict[str, Source]) -> None:
    """A SparkError if an input of a batch run is a streaming DataFrame."""
    for name, src in bound.items():
        if getattr(src.df, "isStreaming", False):
            raise SparkError(f"input {name!r} is a streaming DataFrame: use Backend.run for streaming runs")


def _check_run(epochs_per_batch: Optional[int], rows_per_batch: Optional[int], reconfigure: Any) -> list[Any]:
    """:meth:`Backend.run`'s arguments checked; returns ``reconfigure`` sorted by time."""
    from tstate.migration.commands import Rescale

    pending = sorted(reconfigure, key=lambda p: p[0])
    for _, cmd in pending:
        if not isinstance(cmd, Rescale):
            raise ConfigurationError(f"the Spark backend rescales by partitions: use tstate.Rescale, not {cmd!r}")
    if epochs_per_batch is not None and (not isinstance(epochs_per_batch, int) or epochs_per_batch < 1):
        raise ConfigurationError(f"epochs_per_batch must be an integer >= 1, got {epochs_per_batch!r}")
    if rows_per_batch is not None and (not isinstance(rows_per_batch, int) or rows_per_batch < 1):
        raise ConfigurationError(f"rows_per_batch must be an integer >= 1, got {rows_per_batch!r}")
    return pending
