"""A batch run that is one small micro-batch, in one Spark job: its cut folded into it.

:meth:`tstate.spark.backend.Backend.run` cuts its epochs into micro-batches from a count
Spark makes (:mod:`tstate.spark.cuts`: a job of its own), then runs each batch.  A run
whose input is small enough to run in one task (:mod:`tstate.spark.local_batch`) is most
often one micro-batch, and there the counting job is the larger half of the run's fixed
cost (planning it, running it, and the first batch waiting for it).  Such a run is
*folded* (:func:`tstate.spark.local_batch.foldable`: a rule on the run's shape and its input's size by Spark's
own estimate, never on what the dataflow computes): it runs at once as the closing batch,
and the batch's one task checks what the count would have shown (:meth:`Fold.first`): its
input's times (and rows) are one micro-batch's of the cut the run asked for
(``epochs_per_batch`` or ``rows_per_batch``: :func:`tstate.spark.cuts.batch_cuts` would
give one batch).  Then the task runs the batch from its input's first time (a fresh run:
the time the cut would have started at) and reports that time, which the driver uses as
the batch's ``lo`` (the checkpoint's time, the output index's); the batch commits exactly
what the cut path's one batch commits.  Otherwise the task does nothing and says so; the
driver aborts the batch (:class:`Unfolded`: nothing was written) and cuts the run as
before -- one small job lost.  The task decides on its input's Arrow columns as they
arrive (:meth:`Fold.screen`), before it builds a record: an input that turns out larger
than one micro-batch (Spark's size estimate can be far off, e.g. for a frame a Python
task produces) costs reading its rows, not turning each into a record.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from attrs import frozen

__all__ = ["FIRST", "FRESH_LO", "Fold", "Unfolded", "first_time"]

#: a fresh folded batch's ``lo`` until its task finds the input's first time: below any
#: time, so the task drops no row as late
FRESH_LO = -(1 << 62)


@frozen
class Fold:
    """How a folded batch's task checks its input (module docstring): ``epochs`` epochs
    per micro-batch (None: cut by rows), ``rows`` rows per micro-batch; ``fresh``: the
    batch starts at its input's first time (a fresh run), else at its ``lo``."""

    epochs: Optional[int]
    rows: int
    fresh: bool

    def first(self, lo: int, times: list[int], rows: int) -> Optional[int]:
        """The batch's first time when its input (``rows`` rows at ``times``, not late)
        is one micro-batch of the run's cut, else None (``lo``: the batch's frontier
        before it; no input: None, the cut path handles an empty run)."""
        if not times:
            return None
        first = min(times) if self.fresh else lo
        if self.epochs is not None:
            return first if max(times) - first < self.epochs else None
        return first if rows <= self.rows else None  # (batch_cuts cuts only past `rows`)

    def screen(self, lo: int, time_column: str, batches: Iterable[Any]) -> Optional[list[Any]]:
        """The task's input (Arrow batches, time in ``time_column``; rows without a time
        or before ``lo`` are late) as a list, or None as soon as its rows so far show it
        is more than one micro-batch -- when :meth:`first` would say None for the whole
        input: the rows not late only grow in number and their times in span.  The rest
        of the input is then read without being kept (the task consumes its input)."""
        import numpy as np
        import pyarrow.compute as pc

        kept: list[Any] = []
        rows, low, high = 0, None, None
        it = iter(batches)
        for batch in it:
            kept.append(batch)
            if not batch.num_rows:
                continue
            t = pc.fill_null(batch.column(time_column), np.iinfo(np.int64).min).to_numpy().astype(np.int64)
            t = t[t >= lo]
            if not len(t):
                continue
            rows += len(t)
            low = int(t.min()) if low is None else min(low, int(t.min()))
            high = int(t.max()) if high is None else max(high, int(t.max()))
            first = low if self.fresh else lo
            if (self.epochs is not None and high - first >= self.epochs) or (self.epochs is None and rows > self.rows):
                for _ in it:
                    pass
                return None
        return kept


class Unfolded(Exception):
    """A folded batch's input was more than one micro-batch: its task wrote nothing and
    the batch is aborted; the run is cut as usual (not an error a user sees)."""


def first_time(rows: list[Any], node: int) -> Optional[int]:
    """The first time a folded batch's task reported for input ``node`` in its rows
    (``STATS``), or None when it found its input more than one micro-batch."""
    from tstate.spark.wire import STATS, read_stats

    for r in rows:
        if r["kind"] == STATS and r["node"] == node:
            got = read_stats(r["payload"]).get(FIRST)
            return None if got is None else int(got)
    return None


#: the ``STATS`` key of a folded batch's first time
FIRST = "fold_first"
