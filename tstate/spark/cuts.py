"""Where a batch run cuts its epochs into micro-batches, computed in the JVM.

:meth:`tstate.spark.backend.Backend.run` cuts the epochs of its static inputs into
micro-batches of about ``rows_per_batch`` input rows (or ``epochs_per_batch`` epochs).
The rows per epoch are counted by Spark, in one job of two stages (the scan with its
partial counts, then one task merging them): an input of at most :data:`EXACT_EPOCHS`
epochs is cut from its exact rows per epoch (the driver collects one row per epoch:
14,052 hourly epochs of the flights are 14,052 small rows).  An input of more epochs
is counted again with their running total, and the driver collects only a few rows
per micro-batch -- the epochs grouped into *slices* of about ``rows / GRAIN`` rows
each (``[first epoch, last epoch, rows]``) -- and cuts the slices greedily
(:func:`batch_cuts` over the slices' first epochs), so the driver's share does not
grow with the number of epochs (8 x ``GRAIN`` rows collected for 8 micro-batches).
Such a batch may hold up to ``rows / GRAIN`` rows (one slice) more than ``rows``; any
cut gives the same output (a micro-batch only decides when state is committed).
(The sliced count alone took three stages -- a running total over the epochs needs
them in one ordered partition -- about twice the exact count's time on a small input.)

An input whose frame is a *local relation* (data the driver handed Spark: a pandas or
Arrow frame, held in the driver's JVM) of at most :data:`LOCAL_UNCACHED_BYTES` by Spark's
estimate (exact for one) is not cached: reading it is already reading memory, and
caching it cost the counting job the cache's building and every later plan the cache's
lookup (a small run's counting job is most of its fixed cost besides its one batch).
(Counting such a frame on the driver instead -- its rows are collected without a Spark
job -- costs as much as the job: the rows cross to Python one by one.)

An input read in many more partitions than the run uses (:func:`coalesced`: more than
:data:`MANY` times ``max(partitions, Spark's default parallelism)``) is first coalesced
into that many partitions, without a shuffle: a DataFrame Spark made from a large Arrow
table or pandas frame has one partition per 10,000-row Arrow batch (200 for 2M rows), and
each partition costs the counting job, the cache and every micro-batch's input stage a
Spark task and a Python task of its own (with its own shuffle cells per destination and
time).  Only where Spark's coalescing keeps the frame's order: when no partition prefers
a host, Spark groups *consecutive* partitions in order (partition ``j`` of the result
holds a contiguous run of the frame's partitions, in order), so the rows reach the
operators in the order the frame gives them, as the embedded engine reads them; a frame
whose partitions prefer hosts (file splits on a cluster, a cached frame's blocks) would be
grouped by host, out of order, and is left as it is.

>>> slice_of(0, 1000), slice_of(999, 1000), slice_of(1000, 1000)
(0, 0, 1)
"""

from __future__ import annotations

import time as _time
from typing import TYPE_CHECKING, Any, Mapping, Optional

from attrs import frozen

if TYPE_CHECKING:  # pragma: no cover
    from tstate.spark.committed import Committed
    from tstate.spark.source import Source

__all__ = [
    "EXACT_EPOCHS", "GRAIN", "LOCAL_UNCACHED_BYTES", "MANY", "Span", "span", "slice_of", "batch_cuts", "coalesced",
    "cut_run", "is_small_local",
]

#: slices per micro-batch's worth of rows
GRAIN = 8

#: inputs of at most this many epochs are cut from their exact rows per epoch (module
#: docstring)
EXACT_EPOCHS = 50_000

#: a local relation of at most this many bytes (Spark's estimate) is not cached (module
#: docstring)
LOCAL_UNCACHED_BYTES = 4 << 20


#: an input of more than this many times the run's parallelism in partitions is coalesced
#: before the cut (module docstring)
MANY = 2


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


def is_small_local(df: Any) -> bool:
    """Whether ``df`` is a local relation (``DataFrame.isLocal``: its rows are collected
    without a Spark job) of at most :data:`LOCAL_UNCACHED_BYTES` by Spark's estimate."""
    from tstate.spark.local_batch import input_bytes

    try:
        local = bool(df.isLocal())
    except Exception:  # noqa: BLE001  (Spark Connect, a frame Spark cannot plan locally)
        return False
    size = input_bytes(df) if local else None
    return size is not None and size <= LOCAL_UNCACHED_BYTES


def coalesced(spark: Any, bound: Mapping[str, "Source"], partitions: int) -> dict[str, "Source"]:
    """``bound`` with each input read in more than :data:`MANY` times ``max(partitions,
    Spark's default parallelism)`` partitions bound to its frame coalesced into that
    many, where coalescing keeps the frame's order (module docstring; a frame the user
    cached is read from its cache as it is); no Spark job."""
    from attrs import evolve

    try:
        target = max(partitions, int(spark.sparkContext.defaultParallelism))
    except Exception:  # noqa: BLE001  (no SparkContext: Spark Connect)
        return dict(bound)
    out = dict(bound)
    for name, src in bound.items():
        if not src.df.is_cached and _in_order_above(spark, src.df, MANY * target):
            out[name] = evolve(src, df=src.df.coalesce(target))
    return out


def _in_order_above(spark: Any, df: Any, limit: int) -> bool:
    """Whether ``df`` is read in more than ``limit`` partitions none of which prefers a
    host (Spark then coalesces consecutive partitions, in order); False when Spark
    cannot say without running a job (a plan Adaptive Query Execution drives: its
    shuffles run to plan it) or at all (Spark Connect)."""
    try:
        qe = df._jdf.queryExecution()
        aqe = spark._jvm.java.lang.Class.forName("org.apache.spark.sql.execution.adaptive.AdaptiveSparkPlanExec")
        if aqe.isInstance(qe.executedPlan()):
            return False
        rdd = qe.toRdd()
        parts = rdd.partitions()
        if len(parts) <= limit:
            return False
        return all(rdd.preferredLocations(p).isEmpty() for p in parts)
    except Exception:  # noqa: BLE001  (Spark Connect, a frame Spark cannot plan here)
        return False


def span(frames: list[tuple[Any, str]], lo: Optional[int], rows: Optional[int]) -> Span:
    """The epochs of ``frames`` (``(DataFrame, time column)``) from ``lo`` on (None:
    all), computed by Spark: with ``rows`` the rows of each epoch (one job; the driver
    collects one row per epoch) or, past :data:`EXACT_EPOCHS` epochs, of each slice of
    about ``rows / GRAIN`` rows (a second job; one row per slice), else only the first
    and last epoch (one aggregate row)."""
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
    counts = times.groupBy("t").agg(F.count(F.lit(1)).alias("n"))
    exact = counts.coalesce(1).limit(EXACT_EPOCHS + 1).collect()  # (one task reads the counts: one job)
    if len(exact) <= EXACT_EPOCHS:
        if not exact:
            return Span({}, None, None)
        loads = {int(r["t"]): int(r["n"]) for r in exact}
        return Span(loads, min(loads), max(loads))
    size = max(1, rows // GRAIN)
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


def batch_cuts(
    counts: dict[int, int], lo: int, top: int, epochs: Optional[int], rows: int, starts: list[int]
) -> list[tuple[int, int]]:
    """The micro-batches ``[lo, hi)`` of a batch run over epochs ``lo..top``: ``epochs``
    epochs each, or (``epochs`` None) as many epochs as fit about ``rows`` input rows
    (``counts``: rows per epoch), a batch always starting at each time in ``starts``.

    >>> batch_cuts({0: 5, 1: 5, 2: 5, 7: 20}, 0, 7, None, 10, [])
    [(0, 2), (2, 7), (7, 8)]
    >>> batch_cuts({0: 5, 1: 5, 2: 5, 7: 20}, 0, 7, 3, 10, [])
    [(0, 3), (3, 6), (6, 9)]
    >>> batch_cuts({0: 5, 1: 5, 2: 5}, 0, 2, None, 100, [1])
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


def cut_run(
    bound: Mapping[str, "Source"], last: "Committed", epochs: Optional[int], rows: int, starts: list[int]
) -> tuple[dict[str, Any], int, list[tuple[int, int]], float]:
    """A batch run's first epoch and micro-batches (:func:`batch_cuts` over the epochs
    Spark counted and sliced, :func:`span`; ``last``: what the run resumes from), the
    timed inputs it persisted, and the seconds the counting took: each micro-batch
    filters its epochs out of them, so they are read once, by the job that counts the
    epochs, into the cache (an input already cached, or a small local relation, is used
    as is: module docstring)."""
    cached = {
        name: src.df.persist()
        for name, src in bound.items()
        if src.time is not None and not src.df.is_cached and not is_small_local(src.df)
    }
    timed = [(cached.get(name, src.df), src.time) for name, src in bound.items() if src.time is not None]
    t = _time.perf_counter()
    try:
        found = span(timed, None if last.fresh else last.frontier, None if epochs else rows)
    except BaseException:
        for df in cached.values():
            df.unpersist()
        raise
    seconds = _time.perf_counter() - t
    counts = dict(found.loads)
    first, top = found.first, found.top if found.top is not None else -1
    if any(src.time is None for src in bound.values()):  # an untimed input is epoch 0
        counts.setdefault(0, 0)
        first, top = min(first if first is not None else 0, 0), max(top, 0)
    frontier = last.frontier
    lo = (first if first is not None else 0) if last.fresh or frontier is None else frontier
    return cached, lo, batch_cuts(counts, lo, top, epochs, rows, starts), seconds
