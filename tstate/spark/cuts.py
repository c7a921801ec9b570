"""Where a batch run cuts its epochs into micro-batches, computed in the JVM.

:meth:`tstate.spark.backend.Backend.run` cuts the epochs of its static inputs into
micro-batches of about ``rows_per_batch`` input rows (or ``epochs_per_batch`` epochs).
The rows per epoch are counted by Spark, and so is their running total: the driver
collects only a few rows per micro-batch -- the epochs grouped into *slices* of about
``rows / GRAIN`` rows each (``[first epoch, last epoch, rows]``) -- and cuts the slices
greedily (:func:`tstate.spark.backend._cuts` over the slices' first epochs).  So the
driver's share does not grow with the number of epochs (14,052 hourly epochs of the
flights: 8 micro-batches, 8 x ``GRAIN`` rows collected, not 14,052).  A batch may
hold up to ``rows / GRAIN`` rows (one slice) more than ``rows``; any cut gives the
same output (a micro-batch only decides when state is committed).

>>> slice_of(0, 1000), slice_of(999, 1000), slice_of(1000, 1000)
(0, 0, 1)
"""

from __future__ import annotations

from typing import Any, Optional

from attrs import frozen

__all__ = ["GRAIN", "Span", "span", "slice_of"]

#: slices per micro-batch's worth of rows
GRAIN = 8


def slice_of(rows_before: int, size: int) -> int:
    """The slice of an epoch with ``rows_before`` rows in earlier epochs (``size``
    rows a slice): what the JVM computes as ``floor(before / size)``."""
    return rows_before // size


@frozen
class Span:
    """The epochs of a batch run's timed inputs at or after ``lo``: ``loads`` (first
    epoch of a slice -> its rows; empty when the cut is by epochs), ``first`` and
    ``top`` (None: no rows)."""

    loads: dict[int, int]
    first: Optional[int]
    top: Optional[int]


def span(frames: list[tuple[Any, str]], lo: Optional[int], rows: Optional[int]) -> Span:
    """The epochs of ``frames`` (``(DataFrame, time column)``) from ``lo`` on (None:
    all), computed by Spark: with ``rows`` the slices of about ``rows / GRAIN`` rows
    (one job; the driver collects one row per slice), else only the first and last
    epoch (one aggregate row)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    times = None
    for df, col in frames:
        t = df.select(F.col(col).cast("bigint").alias("t")).where(F.col("t").isNotNull())
        if lo is not None:
            t = t.where(F.col("t") >= lo)
        times = t if times is None else times.unionAll(t)
    if times is None:
        return Span({}, None, None)
    if rows is None:
        r = times.agg(F.min("t").alias("a"), F.max("t").alias("b")).collect()[0]
        return Span({}, r["a"], r["b"])
    size = max(1, rows // GRAIN)
    counts = times.groupBy("t").agg(F.count(F.lit(1)).alias("n"))
    before = F.coalesce(F.sum("n").over(Window.orderBy("t").rowsBetween(Window.unboundedPreceding, -1)), F.lit(0))
    slices = (
        counts.withColumn("s", F.floor(before / F.lit(size)).cast("bigint"))
        .groupBy("s")
        .agg(F.min("t").alias("a"), F.max("t").alias("b"), F.sum("n").alias("n"))
        .collect()
    )
    if not slices:
        return Span({}, None, None)
    loads = {int(r["a"]): int(r["n"]) for r in slices}
    return Span(loads, min(loads), max(int(r["b"]) for r in slices))
