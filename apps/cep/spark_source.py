"""The flight table as a Spark DataFrame, for ``python -m apps.cep --backend spark``.

>>> frame = flight_frame(spark, "flights.parquet", epoch="1h")      # doctest: +SKIP
>>> flights = flow.input("flights").map(flight_event)                # doctest: +SKIP
>>> Backend(spark, "ckpt").run(flow, {"flights": spark_source(frame)})  # doctest: +SKIP

:func:`flight_frame` reads a Parquet or CSV flight table with Spark and computes, in
Spark, what :mod:`apps.cep.source` computes in Python for the embedded engine:

* ``minute``: the departure time in whole minutes since 1970-01-01 (a naive timestamp
  as written; a timestamp with a time zone as its UTC instant; a date at midnight) --
  :attr:`~apps.cep.flights.FlightEvent.minute`;
* ``epoch``: the row's dataflow epoch, ``floor(minute / epoch_minutes)``, except that a
  row earlier than the epoch reached so far is stamped with that epoch (the running
  maximum in file order), as :class:`~apps.cep.source.FlightSource` stamps it: such a
  row arrives late and the CEP operator matches it only within ``lateness``.

The running maximum needs the rows in file order: the frame numbers the rows
(``monotonically_increasing_id``, which follows the file's splits) and computes it with
a window ordered by that number, in one Spark partition (in the JVM, once: the frame is
persisted, and the null check and the micro-batches read the persisted rows).  The frame
is then spread over ``partitions`` partitions **by origin** (the CEP key), each sorted by
row number: every input task of a micro-batch then works in parallel on its own
airports, and the records of an epoch still reach each CEP key in file order -- the order
in which the operator breaks ties between departures of the same minute -- so both
backends compute the same matches.

:data:`COLUMNS` are the frame's columns and Spark types (the
:class:`tstate.spark.Source` ``columns`` check); :func:`flight_event` turns a row (a
dict) into a :class:`~apps.cep.flights.FlightEvent`: the app's first operator on Spark.
Bad input raises :class:`tstate.errors.SourceError` with the messages of
:mod:`apps.cep.source` (a missing file or column, a column of the wrong type, a null
``date``/``delay``/``origin`` with its row number).
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

from tstate.errors import ConfigurationError, SourceError
from tstate.io.tables import parse_epoch

from apps.cep.flights import FlightEvent
from apps.cep.source import COLUMNS as FILE_COLUMNS
from apps.cep.source import REQUIRED, _is_csv

__all__ = ["COLUMNS", "flight_event", "flight_frame", "spark_source"]

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
) -> Any:
    """The flight table at ``path`` (Parquet, or CSV by its suffix) as a DataFrame of
    :data:`COLUMNS`, in file order within each origin, spread over ``partitions``
    partitions by origin; ``limit``: the first rows only (see the module docstring)."""
    from pyspark.sql import Window
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

    order = Window.orderBy("_id")
    running = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    df = df.withColumn("_id", F.monotonically_increasing_id()).select(
        (F.row_number().over(order) - 1).alias("_row"),
        minute.alias("minute"),
        column("delay", "bigint").alias("delay"),
        column("distance", "bigint").alias("distance"),
        column("origin", "string").alias("origin"),
        column("destination", "string").alias("destination"),
        F.max(_floor_div(minute, minutes)).over(running).alias("epoch"),
        *[F.col(c).isNull().alias(f"_null_{c}") for c in REQUIRED],
    )
    if limit is not None:
        df = df.where(F.col("_row") < limit)
    if partitions > 1:
        df = df.repartition(partitions, "origin").sortWithinPartitions("_row")
    # the window runs once: the null check reads the cached rows, and so do the batches
    df = df.persist()
    if limit != 0 and df.isEmpty():
        df.unpersist()
        raise SourceError(f"{p}: no rows (columns: {', '.join(types)})")
    bad = df.where(" or ".join(f"_null_{c}" for c in REQUIRED)).orderBy("_row").limit(1).collect()
    if bad:
        df.unpersist()
        r = bad[0]
        c = next(c for c in REQUIRED if r[f"_null_{c}"])
        raise SourceError(f"{p}: row {r['_row']}: column {c!r} is null")
    return df.select(*COLUMNS)


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
