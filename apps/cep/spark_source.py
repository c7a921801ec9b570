"""The flight table as a Spark DataFrame, for ``python -m apps.cep --backend spark``.

>>> frame = flight_frame(spark, "flights.parquet", epoch="1h")      # doctest: +SKIP
>>> flights = flow.input("flights")                                   # doctest: +SKIP
>>> Backend(spark, "ckpt").run(flow, {"flights": spark_events(frame)})  # doctest: +SKIP

:func:`flight_frame` reads a Parquet or CSV flight table with Spark and computes, in
Spark, what :mod:`apps.cep.source` computes in Python for the embedded engine:

* ``minute``: the departure time in whole minutes since 1970-01-01 (a naive timestamp
  as written; a timestamp with a time zone as its UTC instant; a date at midnight) --
  :attr:`~apps.cep.flights.FlightEvent.minute`;
* ``epoch``: the row's dataflow epoch, ``floor(minute / epoch_minutes)``, except that a
  row earlier than the epoch reached so far is stamped with that epoch (the running
  maximum in file order), as :class:`~apps.cep.source.FlightSource` stamps it: such a
  row arrives late and the CEP operator matches it only within ``lateness``.

The running maximum needs the rows in file order, and the file is read in parallel:
each part must know the number of its first row in the file and the largest epoch of
the rows before it.  For a single Parquet file the footer gives both with no Spark job
(:mod:`apps.cep.footer`: per row group its rows and the ``date`` statistics' maximum),
and the schema too: the file is then read by Python tasks with pyarrow, not by
Spark's reader (:func:`_read_in_tasks`: the row groups cut into ``partitions`` runs in
file order, each task converting and checking its columns as the embedded source does
and stamping its rows), so the JVM neither decodes the file nor hands its rows to a
Python stamping task and back.  Otherwise (CSV, a
directory, no statistics, a null in a required column, which is reported with its row
number) one Spark job reads the table once and gives, per read partition (Spark
numbers a file's splits in file order), its rows, its largest epoch and its first null
in a required column, which the driver turns into each partition's first row number
and the epoch reached before it (a prefix over a few numbers).  The frame stamps
every row within its split in one vectorised pass (``mapInArrow``, numpy's running
maximum) -- no window over the whole table in one partition, nothing persisted here
(a batch run persists its input while it cuts it into micro-batches,
:meth:`tstate.spark.Backend.run`).  The frame stays in its read partitions (one with
``partitions=1``), in file order: the run spreads it over the partitions of the CEP
key's bins once (:mod:`tstate.spark.placed`), keeping each partition's rows in the
frame's order, so the records of an epoch reach each CEP key in file order -- the
order in which the operator breaks ties between departures of the same minute -- and
both backends compute the same matches.

:data:`COLUMNS` are the frame's columns and Spark types (the
:class:`tstate.spark.Source` ``columns`` check); :func:`spark_events` binds the frame
with its rows built as :class:`~apps.cep.flights.FlightEvent` records column by column
(what ``python -m apps.cep --backend spark`` runs), :func:`spark_source` as dicts, which
:func:`flight_event` turns into events.
Bad input raises :class:`tstate.errors.SourceError` with the messages of
:mod:`apps.cep.source` (a missing file or column, a column of the wrong type, a null
``date``/``delay``/``origin`` with its row number).
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

from attrs import frozen

from tstate.errors import ConfigurationError, SourceError
from tstate.io.tables import parse_epoch

from apps.cep.flights import FlightEvent
from apps.cep.footer import Footer, read_footer
from apps.cep.source import COLUMNS as FILE_COLUMNS
from apps.cep.source import REQUIRED, _is_csv

__all__ = ["COLUMNS", "SPARK_SETTINGS", "flight_event", "flight_frame", "spark_events", "spark_source"]

#: the frame's columns (in :class:`FlightEvent` field order) and their Spark types;
#: ``epoch`` is the time column
COLUMNS = {
    "minute": "bigint",
    "delay": "bigint",
    "distance": "bigint",
    "origin": "string",
    "destination": "string",
    "epoch": "bigint",
}

#: the Spark settings of the session ``python -m apps.cep --backend spark`` starts (beside
#: :func:`tstate.spark.local_session`'s), measured on the CEP run (1M flights,
#: ``local[2]``, JVM CPU seconds of the run by thread from ``/proc``, under load; one run
#: each: ``python -m benchmarks.spark_cep_profile --conf ...``):
#:
#: * ``maxBytesPerBatch`` at ``Int.MaxValue``: Spark then skips its per-row size check of
#:   the Arrow batch it builds for a Python task (``ArrowWriter.sizeInBytes`` on every
#:   row: ~15% of the executor threads' samples in a JFR profile); the batches stay
#:   bounded by ``maxRecordsPerBatch`` (10,000 rows), and the app's rows are small flight
#:   rows, so no batch grows large (a dataflow shipping large binary cells keeps the
#:   byte cap). Executor threads 8.2 -> 7.0 CPU s, the JVM 31.0 -> 26.4.
#: * the optimising JIT compiler (C2) only for the hottest methods (its invocation and
#:   loop thresholds 10x the defaults; the quick compiler, C1, still compiles the rest):
#:   the JVM lives for one run, and C2 compiling the long tail of Spark's lukewarm
#:   methods was its largest single CPU consumer beside the two Python workers on two
#:   cores. C2 threads 11.8 -> 6.2 CPU s, executor threads 8.2 -> 8.6, the JVM
#:   31.0 -> 27.1 (C1 only, ``-XX:TieredStopAtLevel=1``: the JVM 23.8, but the executor
#:   threads 14.2 CPU s: it loses on the full file, whose rows the JVM handles three
#:   times).
#: The JVM options take effect only when the app starts the session's JVM.
SPARK_SETTINGS: dict[str, Any] = {  # (Any: passed as local_session's **conf)
    "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
    "spark.driver.extraJavaOptions": (
        "-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
        "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000"
    ),
}

_INTEGERS = ("tinyint", "smallint", "int", "bigint", "void")
_STRINGS = ("string", "void")
_KINDS = {
    "date": (("timestamp", "timestamp_ntz", "date"), "timestamps or dates"),
    "delay": (_INTEGERS, "integers"),
    "distance": (_INTEGERS, "integers"),
    "origin": (_STRINGS, "strings"),
    "destination": (_STRINGS, "strings"),
}
_MICROS_PER_MINUTE = 60_000_000


def epoch_minutes(epoch: Union[int, float, str]) -> int:
    """The dataflow epoch in whole minutes (``"1h"`` -> 60), as :class:`FlightSource`
    requires it."""
    seconds = parse_epoch(epoch)
    if seconds % 60:
        raise ConfigurationError(
            f"epoch {epoch!r}: flight events are timed in minutes, the epoch must be a whole number of minutes"
        )
    return int(seconds // 60)


def flight_frame(
    spark: Any,
    path: Union[str, os.PathLike[str]],
    epoch: Union[int, float, str] = "1h",
    limit: Optional[int] = None,
    partitions: int = 1,
    by_origin: bool = False,
) -> Any:
    """The flight table at ``path`` (Parquet, or CSV by its suffix) as a DataFrame of
    :data:`COLUMNS` in file order, in its read partitions (``partitions=1``: one; more:
    as Spark reads the file -- the run spreads the rows by key); ``limit``: the first
    rows only (see the module docstring).  ``by_origin``: in ``partitions`` partitions
    by origin, each in file order -- for a run whose input is not placed by key (allowed
    lateness holds records back): its shuffle keeps a key's order only when the key's
    rows come from one partition."""
    from pyspark.sql import functions as F

    p = os.fspath(path)
    minutes = epoch_minutes(epoch)
    if limit is not None and limit < 0:
        raise ConfigurationError(f"limit must be >= 0, got {limit}")
    if not isinstance(partitions, int) or partitions < 1:
        raise ConfigurationError(f"partitions must be an integer >= 1, got {partitions!r}")
    if not os.path.exists(p):
        raise SourceError(f"{p}: no such file")
    csv = _is_csv(p)
    footer = None if csv else read_footer(p, FILE_COLUMNS, REQUIRED, minutes)
    if footer is not None:
        return _read_in_tasks(spark, p, footer, minutes, limit, partitions, by_origin)
    try:
        if csv:
            sep = "\t" if p.lower().endswith(".tsv") else ","
            df = spark.read.csv(p, header=True, inferSchema=True, sep=sep)
        else:
            df = spark.read.parquet(p)
        types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    except Exception as exc:  # AnalysisException, Py4JJavaError: unreadable
        raise SourceError(f"{p}: cannot read: {str(exc).splitlines()[0]}") from None
    for c in REQUIRED:
        if c not in types:
            raise SourceError(f"{p}: no column {c!r} (columns: {', '.join(types)})")
    for c in FILE_COLUMNS:
        if c in types and types[c] not in _KINDS[c][0]:
            if df.isEmpty():  # a header-only CSV: every column a string
                raise SourceError(f"{p}: no rows (columns: {', '.join(types)})")
            raise SourceError(f"{p}: column {c!r} has type {types[c]}, expected {_KINDS[c][1]}")

    date = F.col("date")
    if types["date"] == "date":
        minute = F.unix_date(date).cast("bigint") * 1440
    elif types["date"] == "timestamp" and not csv:
        # an instant (Parquet isAdjustedToUTC): its minutes since the epoch, floored
        minute = _floor_div(F.unix_micros(date), _MICROS_PER_MINUTE)
    else:
        # a naive date-time (Parquet without a time zone; CSV, which Spark parses in the
        # session's time zone: back to the wall clock as written)
        local = date.cast("timestamp_ntz")
        minute = (
            F.unix_date(local.cast("date")).cast("bigint") * 1440
            + F.hour(local).cast("bigint") * 60
            + F.minute(local).cast("bigint")
        )

    def column(name: str, tp: str) -> Any:
        return F.col(name).cast(tp) if name in types else F.lit(None).cast(tp)

    values = [
        minute.alias("minute"),
        column("delay", "bigint").alias("delay"),
        column("distance", "bigint").alias("distance"),
        column("origin", "string").alias("origin"),
        column("destination", "string").alias("destination"),
    ]
    # each row with its read partition (Spark numbers a file's splits in file order)
    # and its place in it; one job over the rows gives each partition's figures
    base = df.select(
        F.spark_partition_id().alias("_part"),
        F.lit(0).cast("bigint").alias("_length"),
        F.monotonically_increasing_id().alias("_id"),
        *values,
        *[F.col(c).isNull().alias(f"_null_{c}") for c in REQUIRED],
    )
    parts = _partition_figures(base, minutes)
    total = sum(n for n, _top, _bad in parts.values())
    offset, carry, first_bad = _prefix(parts)
    if first_bad is not None and first_bad[0] < (total if limit is None else min(total, limit)):
        raise SourceError(f"{p}: row {first_bad[0]}: column {first_bad[1]!r} is null")
    base = base.drop("_id", *[f"_null_{c}" for c in REQUIRED])
    locate: Any = _PartitionFigures(offset, carry)
    rows = total if limit is None else min(total, limit)
    if rows == 0 and limit != 0:
        raise SourceError(f"{p}: no rows (columns: {', '.join(types)})")
    frame = base.mapInArrow(
        _stamp(locate, minutes, p), "_row bigint, " + ", ".join(f"{c} {t}" for c, t in COLUMNS.items())
    )
    if limit is not None:
        frame = frame.where(F.col("_row") < limit)
    if partitions == 1:
        frame = frame.coalesce(1)  # the read partitions in file order, one task
    elif by_origin:
        frame = frame.repartition(partitions, "origin").sortWithinPartitions("_row")
    return frame.select(*COLUMNS)


def _read_in_tasks(
    spark: Any, path: str, footer: Footer, minutes: int, limit: Optional[int], partitions: int, by_origin: bool
) -> Any:
    """:func:`flight_frame` of a single Parquet file whose footer gives each row
    group's rows and the epoch reached before it (:mod:`apps.cep.footer`): read by
    Python tasks with pyarrow, not by Spark's reader.  The row groups (up to ``limit``)
    are cut into ``partitions`` runs of about equal rows, in file order (:func:`_runs`);
    partition ``i`` of a ``mapInArrow`` over ``spark.range`` reads run ``i``, converts
    and checks the columns as the embedded source does (:meth:`FlightSource.columns
    <apps.cep.source.FlightSource.columns>`) and stamps row numbers and running epochs
    from the footer's carry-over (:func:`_read_runs`).  Spark's own reader would decode
    the file in the JVM into rows, hand them to a Python stamping task as Arrow and
    take the stamped rows back: the JVM's decode and its rows-to-Arrow hand-over per row
    are gone."""
    for c in REQUIRED:
        if c not in footer.types:
            raise SourceError(f"{path}: no column {c!r} (columns: {', '.join(footer.types)})")
    for c in FILE_COLUMNS:
        if c in footer.types and footer.types[c] not in _KINDS[c][0]:
            raise SourceError(f"{path}: column {c!r} has type {footer.types[c]}, expected {_KINDS[c][1]}")
    runs = _runs(footer, partitions, limit)
    if not runs and limit != 0:
        raise SourceError(f"{path}: no rows (columns: {', '.join(footer.types)})")
    schema = "_row bigint, " + ", ".join(f"{c} {t}" for c, t in COLUMNS.items())
    frame = spark.range(0, max(1, len(runs)), 1, max(1, len(runs))).mapInArrow(
        _read_runs(path, runs, minutes, limit), schema
    )
    if by_origin and partitions > 1:
        frame = frame.repartition(partitions, "origin").sortWithinPartitions("_row")
    return frame.select(*COLUMNS)


#: a run of row groups read by one task: the groups, its first row number, the
#: largest epoch of the rows before it (None: none)
Run = tuple[tuple[int, ...], int, Optional[int]]


def _runs(footer: Footer, parts: int, limit: Optional[int]) -> list[Run]:
    """The row groups holding the first ``limit`` rows (None: all) in at most ``parts``
    runs of consecutive groups of about equal rows, in file order.

    >>> _runs(Footer({}, rows=(2, 3, 3, 2), tops=(1, 4, 2, 6), midpoints=(1, 2, 3, 4)), 2, None)
    [((0, 1), 0, None), ((2, 3), 5, 4)]
    >>> _runs(Footer({}, rows=(2, 3, 3, 2), tops=(1, 4, 2, 6), midpoints=(1, 2, 3, 4)), 3, 4)
    [((0,), 0, None), ((1,), 2, 1)]
    """
    total = footer.total if limit is None else min(footer.total, limit)
    groups = []
    at = 0
    for g, n in enumerate(footer.rows):
        if at >= total:
            break
        if n:
            groups.append((g, at))
        at += n
    k = max(1, min(parts, len(groups)))
    runs: list[Run] = []
    top: Optional[int] = None
    current: list[int] = []
    first = 0
    for g, start in groups:
        if current and start >= total * len(runs + [None]) / k:  # (run i ends at about (i+1)/k of the rows)
            runs.append((tuple(current), first, top))
            current = []
        if not current:
            first = start
            before = [t for t in footer.tops[: g] if t is not None]
            top = max(before) if before else None
        current.append(g)
    if current:
        runs.append((tuple(current), first, top))
    return runs


def _read_runs(path: str, runs: list[Run], minutes: int, limit: Optional[int]) -> Any:
    """The ``mapInArrow`` function of :func:`_read_in_tasks`: for each run number in
    its input, the run's rows (up to ``limit``) as the frame's rows (``_row`` first),
    epochs stamped with the running maximum from the run's carry-over."""

    def run(batches: Any) -> Any:
        import numpy as np
        import pyarrow as pa

        from apps.cep.source import _PER_MINUTE, FlightSource, _ints

        src = FlightSource(path)
        pf = src.file.parquet()
        cols = [c for c in FILE_COLUMNS if c in pf.schema_arrow.names]
        low = np.iinfo(np.int64).min
        for rb in batches:
            for i in rb.column(0).to_pylist():
                if i >= len(runs):
                    continue
                groups, at, carry = runs[i]
                running = low if carry is None else carry
                for batch in pf.iter_batches(batch_size=src.batch_rows, row_groups=list(groups), columns=cols):
                    if limit is not None:
                        batch = batch.slice(0, max(0, limit - at))
                    n = batch.num_rows
                    if n == 0:
                        break
                    got = src.columns(batch, at)
                    date = got["date"]
                    if pa.types.is_timestamp(date.type):
                        minute = _ints(date.cast(pa.int64()), np.int64) // _PER_MINUTE[date.type.unit]
                    else:  # a date: days since the epoch
                        minute = _ints(date.cast(pa.int32()), np.int32).astype(np.int64) * 1440
                    acc = np.maximum(np.maximum.accumulate(minute // minutes), running)
                    running = int(acc[-1])

                    def column(name: str, tp: Any) -> Any:
                        return got[name] if name in got else pa.nulls(n, tp)

                    yield pa.RecordBatch.from_arrays(
                        [pa.array(np.arange(at, at + n, dtype=np.int64)), pa.array(minute),
                         column("delay", pa.int64()), column("distance", pa.int64()),
                         column("origin", pa.string()), column("destination", pa.string()), pa.array(acc)],
                        names=["_row", *COLUMNS],
                    )  # fmt: skip
                    at += n

    return run


def _partition_figures(base: Any, minutes: int) -> dict[int, tuple[int, Optional[int], dict[str, int]]]:
    """One Spark job over the rows as read: per read partition, its rows, its largest
    ``floor(minute / minutes)`` (None: no dated row) and, per required column, the
    first row (within the partition) where it is null."""
    from pyspark.sql import functions as F

    idx = F.col("_id") - F.shiftleft(F.col("_part").cast("bigint"), 33)  # the row within its partition
    got = (
        base.groupBy("_part")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.max(_floor_div(F.col("minute"), minutes)).alias("top"),
            *[F.min(F.when(F.col(f"_null_{c}"), idx)).alias(f"bad_{c}") for c in REQUIRED],
        )
        .collect()
    )
    return {
        int(r["_part"]): (
            int(r["n"]), None if r["top"] is None else int(r["top"]),
            {c: int(r[f"bad_{c}"]) for c in REQUIRED if r[f"bad_{c}"] is not None},
        )
        for r in got
    }  # fmt: skip


def _prefix(
    parts: dict[int, tuple[int, Optional[int], dict[str, int]]],
) -> tuple[dict[int, int], dict[int, Optional[int]], Optional[tuple[int, str]]]:
    """Per read partition, in file order: the rows before it, the largest epoch before
    it (None: none), and the file's first null in a required column ``(row, column)``.

    >>> _prefix({0: (3, 5, {}), 1: (2, 4, {"delay": 1}), 2: (1, None, {"date": 0})})
    ({0: 0, 1: 3, 2: 5}, {0: None, 1: 5, 2: 5}, (4, 'delay'))
    """
    offset: dict[int, int] = {}
    carry: dict[int, Optional[int]] = {}
    at, top = 0, None
    bad: Optional[tuple[int, str]] = None
    for pid in sorted(parts):
        n, t, nulls = parts[pid]
        offset[pid], carry[pid] = at, top
        for c in REQUIRED:
            if c in nulls and (bad is None or at + nulls[c] < bad[0]):
                bad = (at + nulls[c], c)
        at += n
        if t is not None:
            top = t if top is None else max(top, t)
    return offset, carry, bad


@frozen
class _PartitionFigures:
    """Where a read partition starts (:func:`_stamp`'s ``locate``), from the pass over
    the rows (:func:`_partition_figures`): by partition id, its first row number and
    the epoch reached before it; its rows are not checked (None)."""

    offset: dict[int, int]
    carry: dict[int, Optional[int]]

    def __call__(self, part: int, _length: int) -> tuple[int, Optional[int], Optional[int]]:
        return self.offset.get(part, 0), self.carry.get(part), None


def _stamp(locate: Any, minutes: int, path: str) -> Any:
    """The ``mapInArrow`` function numbering the rows of each read partition or split
    (``_part``; ``locate(part, length)`` gives its first row number, the largest epoch
    before it and, if known, its rows, checked at its end) and stamping their epochs:
    the running maximum of ``floor(minute / minutes)`` in file order, from the largest
    epoch before the part (vectorised: numpy)."""

    def run(batches: Any) -> Any:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        low = np.iinfo(np.int64).min
        part: Optional[int] = None
        at = seen = 0
        running = low
        expect: Optional[int] = None

        def close() -> None:
            if part is not None and expect is not None and seen != expect:
                raise SourceError(
                    f"{path}: the read split at byte {part} gave {seen} rows, its row groups in the footer {expect}"
                )

        for rb in batches:
            if rb.num_rows == 0:
                continue
            parts = rb.column("_part").to_numpy()
            cuts = [0, *(np.flatnonzero(parts[1:] != parts[:-1]) + 1).tolist(), rb.num_rows]
            for lo, hi in zip(cuts, cuts[1:]):
                piece = rb.slice(lo, hi - lo)
                if int(parts[lo]) != part:
                    close()
                    part = int(parts[lo])
                    at, carry, expect = locate(part, int(rb.column("_length")[lo].as_py()))
                    seen, running = 0, low if carry is None else carry
                minute = piece.column("minute")
                e = np.floor_divide(pc.fill_null(minute, low).to_numpy(zero_copy_only=False), minutes)
                e[np.asarray(pc.is_null(minute))] = low
                acc = np.maximum(np.maximum.accumulate(e), running)
                running = int(acc[-1])
                rows = np.arange(at + seen, at + seen + piece.num_rows, dtype=np.int64)
                seen += piece.num_rows
                yield pa.RecordBatch.from_arrays(
                    [pa.array(rows), minute, *(piece.column(c) for c in ("delay", "distance", "origin", "destination")),
                     pa.array(acc)],
                    names=["_row", *COLUMNS],
                )  # fmt: skip
        close()

    return run


def _floor_div(x: Any, d: int) -> Any:
    """``floor(x / d)`` of a bigint column, exactly (no rounding through a double)."""
    from pyspark.sql import functions as F

    return ((x - F.pmod(x, F.lit(d))) / F.lit(d)).cast("bigint")


def flight_event(row: dict[str, Any]) -> FlightEvent:
    """A row of :func:`flight_frame` (a dict) as a :class:`FlightEvent`."""
    return FlightEvent(row["minute"], row["delay"], row["distance"], row["origin"], row["destination"])


def spark_source(frame: Any) -> Any:
    """``frame`` (from :func:`flight_frame`) bound as the app's input: rows are dicts,
    at their ``epoch``."""
    from tstate.spark import Source

    return Source(frame, time="epoch", columns=dict(COLUMNS))


def spark_events(frame: Any) -> Any:
    """``frame`` (from :func:`flight_frame`) bound as the app's input: rows are
    :class:`FlightEvent` records built column by column (no dict per row, no event
    map: the same records the embedded source gives), at their ``epoch``."""
    from tstate.spark import Source

    return Source(frame, time="epoch", record=FlightEvent, columns=dict(COLUMNS))
