"""How the backend drives its micro-batches (driver side): a batch run's, over the
epochs its static inputs were cut into (:func:`run_cuts`, for
:meth:`tstate.spark.backend.Backend.run`), and a streaming run's
(:class:`StreamingBatches`: the ``foreachBatch`` function of the ``StreamingQuery``
that :meth:`tstate.spark.backend.Backend.start` starts).

Without a time column, the rows of micro-batch ``b`` are records at time ``b`` and the
frontier moves to ``b + 1`` after it; with one, the frontier moves past the batch's
largest time (less the input's ``lateness``).  A batch Spark replays after a restart
whose manifest is already committed is skipped; a batch past the one tstate resumed
from (its newer checkpoints unusable) is refused: its input would be lost."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Protocol

from tstate.errors import CheckpointError

if TYPE_CHECKING:  # pragma: no cover
    from tstate.metrics import Metrics
    from tstate.spark.committed import Committed
    from tstate.spark.source import Source

__all__ = ["Driver", "StreamingBatches", "run_cuts"]


class Driver(Protocol):
    """What runs the micro-batches (:class:`tstate.spark.backend.Backend`): the
    checkpoint directory, the metrics, the last committed batch, one micro-batch, a
    rescale."""

    directory: str
    metrics: "Metrics"
    _last: "Committed"

    def _batch(
        self, dfs: dict[str, Any], bound: dict[str, "Source"], batch: int, lo: int, hi: Optional[int],
        const_time: Optional[int], *, newest: Optional[int] = None,
    ) -> None: ...

    def rescale(self, partitions: int, strategy: Any = ..., steps: int = ..., *, lead: int = ...) -> Any: ...


class StreamingBatches:
    """``foreachBatch(StreamingBatches(backend, bound, name))``: runs each micro-batch
    of input ``name`` (its binding ``bound[name]``) on ``backend``."""

    def __init__(self, backend: Driver, bound: dict[str, "Source"], name: str) -> None:
        self.backend, self.bound, self.name = backend, bound, name

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        backend, src = self.backend, self.bound[self.name]
        last = backend._last
        if batch_id <= last.batch:
            backend.metrics.skipped.append(batch_id)  # committed before a restart
            return
        if batch_id > last.batch + 1 and not last.fresh:
            # Spark committed batches tstate's state does not include (it resumed from
            # an older checkpoint, the newer ones being unusable): their rows will not
            # come again, so going on would lose them
            raise CheckpointError(
                f"{backend.directory}: Spark's streaming query is at micro-batch {batch_id}, but the tstate "
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
            const: Optional[int] = max(lo, batch_id)
        else:
            top = df.agg(F.max(src.time).alias("t")).collect()[0]["t"]
            if top is not None:
                newest = int(top) if newest is None else max(newest, int(top))
            hi = max(lo, newest + 1 - src.lateness) if newest is not None else lo
            const = None
        backend._batch({self.name: df}, self.bound, batch_id, lo, hi, const, newest=newest)


def run_cuts(
    driver: Driver, bound: dict[str, "Source"], cached: dict[str, Any], lo: int, cuts: list[tuple[int, int]], pending: list[Any]
) -> None:
    """A batch run's micro-batches ``cuts`` (``[lo, hi)`` each), rescaling at the
    ``pending`` ``(time, Rescale)`` pairs; the last one also closes the inputs (its
    ``hi`` is None: every pending timer fires, as in a batch of its own after it, one
    micro-batch fewer), or, without cuts, a batch of its own does."""
    from pyspark.sql import functions as F

    batch = driver._last.batch + 1
    for i, (lo, hi) in enumerate(cuts):
        while pending and pending[0][0] <= lo:
            cmd = pending.pop(0)[1]
            driver.rescale(cmd.workers, cmd.strategy)
        # pre-copy: the bins move at the next batch; the executors load them during this one
        nxt = cuts[i + 1][0] if i + 1 < len(cuts) else None
        while pending and nxt is not None and pending[0][1].strategy == "precopy" and pending[0][0] <= nxt:
            cmd = pending.pop(0)[1]
            driver.rescale(cmd.workers, "precopy")
        dfs = {}
        for name, src in bound.items():
            if src.time is None:
                dfs[name] = src.df if lo <= 0 < hi else src.df.limit(0)
            else:
                df = cached.get(name, src.df)
                dfs[name] = df.where((F.col(src.time) >= lo) & (F.col(src.time) < hi))
        closing = nxt is None  # the inputs close with it: remaining timers fire
        driver._batch(dfs, bound, batch, lo, None if closing else hi, None)
        batch += 1
    if not cuts:  # no input rows: a batch of its own closes the inputs (remaining timers fire)
        driver._batch({}, bound, batch, lo, None, None)
