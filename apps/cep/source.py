"""The flight table as a tstate source of :class:`~apps.cep.flights.FlightEvent`.

    flow.source(flight_source("flights.parquet", epoch="1h"), name="flights")

Reads a Parquet or CSV file (``.csv``/``.csv.gz``/``.tsv``: CSV, anything else:
Parquet) with the columns ``date`` (a timestamp or a date), ``delay`` (integers),
``origin`` (strings) and optionally ``distance`` / ``destination``, in row order, like
``ts.io.parquet(path, time="date", epoch=...)``:

* each row's **dataflow time** (epoch) is ``floor(minute / epoch_minutes)``, where
  ``minute`` is its departure time in whole minutes since the Unix epoch (the event's
  ``minute`` field, its event time); consecutive rows of one epoch form a batch;
* a row whose epoch is earlier than the current one (an out-of-order file) is stamped
  with the current epoch; its ``minute`` is unchanged, so the CEP operator sees it late
  (and buffers it, or sends it to the ``late`` side output, see :mod:`apps.cep.dataflow`);
* the replay position (for checkpoints) is the row offset;
* it declares its event time (:meth:`FlightSource.event_time`: the ``minute`` field,
  in minutes, ``epoch_minutes`` per epoch) and record type (``FlightEvent``), so
  :func:`apps.cep.dataflow.cep` needs neither ``time=``, ``epoch=`` nor ``event_type=``.

Why not ``ts.io.parquet(..., record=FlightEvent, timestamps="int")``: that source builds
every record through a ``dict`` and ``record(**row)`` (about 4 us a row here, more than
the whole pattern matching of an event), and its records would carry the timestamp in
microseconds.  This one converts whole columns at once (``minute`` and the epochs with
numpy) and calls ``FlightEvent(*columns)`` per row -- 3-4x faster.

Bad input raises :class:`~tstate.errors.SourceError` naming the file and, for a bad
value, the row (as a spreadsheet shows it: a CSV's header is row 1) and the column
(:mod:`tstate.io.table_files`): a missing file or required column, a file without rows
(a header-only CSV: "no rows"), a column of a type that cannot hold the values (a
number for ``date``), a value that does not convert (``abc`` or ``1.5`` in ``delay``,
bytes that are not UTF-8 in ``origin``), a ragged or oversized CSV row, or a null in a
required column (``date``, ``delay``, ``origin``: the event time, what the pattern
conditions read, and the key).  :meth:`FlightSource.check` reads the whole file so,
without making events (what ``--backend spark`` does before it starts Spark).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Iterator
from typing import Any, Optional, Union

from tstate.errors import ConfigurationError, SourceError
from tstate.io.sources import EpochUnit, EventTime, Reader, Source
from tstate.io.table_files import TableFile, is_csv
from tstate.io.tables import parse_epoch

from apps.cep.flights import FlightEvent

__all__ = ["COLUMNS", "REQUIRED", "FlightSource", "flight_source", "count_rows"]

#: the columns read, in :class:`FlightEvent` field order (``date`` becomes ``minute``)
COLUMNS = ("date", "delay", "distance", "origin", "destination")
#: the columns that must be present and non-null
REQUIRED = ("date", "delay", "origin")

_PER_MINUTE = {"s": 60, "ms": 60_000, "us": 60_000_000, "ns": 60_000_000_000}


def _is_csv(path: str) -> bool:
    return is_csv(path)


def _value_type(tp: Any) -> Any:
    return tp.value_type if hasattr(tp, "value_type") and hasattr(tp, "index_type") else tp  # a dictionary's values


def _is_text(tp: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(tp) or pa.types.is_large_string(tp) or pa.types.is_binary(tp) or pa.types.is_null(tp))


def _is_number(tp: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(tp) or pa.types.is_floating(tp)) or _is_text(tp)


def _is_time(tp: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_timestamp(tp) or pa.types.is_date(tp)) or _is_text(tp)


#: per column: the types a file may hold it as (text: a CSV value pyarrow could not type,
#: checked value by value), and what it must be
_KINDS = {
    "date": (_is_time, "timestamps or dates"),
    "delay": (_is_number, "integers"),
    "distance": (_is_number, "integers"),
    "origin": (_is_text, "strings"),
    "destination": (_is_text, "strings"),
}


def _targets() -> dict[str, tuple[Any, str]]:
    import pyarrow as pa

    return {
        "date": (pa.timestamp("us"), "a timestamp or a date"), "delay": (pa.int64(), "an integer"),
        "distance": (pa.int64(), "an integer"), "origin": (pa.string(), "a string"),
        "destination": (pa.string(), "a string"),
    }  # fmt: skip


class FlightSource(Source):
    """A flight table as a source of :class:`FlightEvent` (see the module docstring).

    ``epoch``: the dataflow epoch, a whole number of minutes (``"1h"``, ``"15min"``,
    ``3600`` seconds); ``limit``: read at most this many rows; ``progress``: called with
    the number of rows of every batch handed to the dataflow (for a progress bar)."""

    def __init__(
        self,
        path: Union[str, os.PathLike[str]],
        epoch: Union[int, float, str] = "1h",
        limit: Optional[int] = None,
        batch_rows: int = 65536,
        progress: Optional[Callable[[int], Any]] = None,
    ) -> None:
        self.path = os.fspath(path)
        #: where the rows are (row numbers in errors)
        self.file = TableFile.at(self.path)
        seconds = parse_epoch(epoch)
        if seconds % 60:
            raise ConfigurationError(
                f"epoch {epoch!r}: flight events are timed in minutes, the epoch must be a whole number of minutes"
            )
        #: minutes per dataflow epoch (the ``epoch`` to give :func:`apps.cep.dataflow.cep`)
        self.epoch_minutes = int(seconds // 60)
        #: epochs are dates (recorded in checkpoints: ``python -m tstate checkpoints`` shows them)
        self.epoch_unit = EpochUnit(seconds, dates=True)
        if limit is not None and limit < 0:
            raise ConfigurationError(f"limit must be >= 0, got {limit}")
        self.limit = limit
        self.batch_rows = batch_rows
        self.progress = progress

    # -- reading ------------------------------------------------------------------
    def _check_schema(self, schema: Any, rows: int) -> list[str]:
        """The columns to read; a missing required column, a file without rows or a
        column of a type no value of which is usable raise :class:`SourceError`."""
        names = list(schema.names)
        for c in REQUIRED:
            if c not in names:
                raise SourceError(f"{self.path}: no column {c!r} (columns: {', '.join(names)})")
        if rows == 0:  # (a header-only CSV has no column types to check)
            raise SourceError(f"{self.path}: no rows (columns: {', '.join(names)})")
        for c in COLUMNS:
            if c in names:
                tp = schema.field(c).type
                if not _KINDS[c][0](_value_type(tp)):
                    raise SourceError(f"{self.path}: column {c!r} has type {tp}, expected {_KINDS[c][1]}")
        return [c for c in COLUMNS if c in names]

    def batches(self, skip: int = 0) -> Iterator[Any]:
        """The file's record batches (pyarrow), from row ``skip`` on."""
        import pyarrow as pa

        f = self.file
        if f.csv:
            table = f.read()
            cols = self._check_schema(table.schema, table.num_rows)
            it: Iterator[Any] = iter(table.select(cols).to_batches(max_chunksize=self.batch_rows))
        else:
            pf = f.parquet()
            cols = self._check_schema(pf.schema_arrow, pf.metadata.num_rows)
            it = pf.iter_batches(batch_size=self.batch_rows, columns=cols)
        seen = 0
        try:
            for batch in it:
                n = batch.num_rows
                if seen + n <= skip:
                    seen += n
                    continue
                if seen < skip:
                    batch = batch.slice(skip - seen)
                    seen = skip
                yield batch
                seen += batch.num_rows
        except (pa.ArrowInvalid, OSError) as exc:
            raise f.unreadable(exc) from exc

    def columns(self, batch: Any, offset: int) -> dict[str, Any]:
        """The columns of ``batch`` (rows from data index ``offset``) as the events need
        them: ``date`` a timestamp or a date, ``delay``/``distance`` int64,
        ``origin``/``destination`` strings; a value that does not convert, or a null in a
        required column, raises :class:`SourceError` naming its row and column."""
        import pyarrow as pa

        f = self.file
        names = batch.schema.names
        targets = _targets()
        out: dict[str, Any] = {}
        for c in names:
            col = batch.column(names.index(c))
            if pa.types.is_dictionary(col.type):
                col = col.cast(col.type.value_type)
            target, expected = targets[c]
            if c != "date" or not (pa.types.is_timestamp(col.type) or pa.types.is_date(col.type)):
                col = f.typed(col, c, target, expected, offset)
            if c in REQUIRED:
                f.not_null(col, c, offset)
            out[c] = col
        return out

    def check(self) -> int:
        """Read the whole file as :meth:`open` would, without making events: a missing
        file or column, a bad value (its row and column) raise :class:`SourceError`
        here, before anything else starts (``--backend spark`` checks the input so).
        Returns the number of rows."""
        offset = 0
        for batch in self.batches():
            if self.limit is not None and offset >= self.limit:
                break
            self.columns(batch, offset)
            offset += batch.num_rows
        return offset

    def open(self, position: Any = None, start: Any = None) -> Reader:
        return _FlightReader(self, int(position or 0), start)

    def event_time(self) -> EventTime:
        """``minute`` (whole minutes since 1970-01-01), ``epoch_minutes`` per epoch: what
        :func:`apps.cep.dataflow.cep` needs not be told again."""
        return EventTime("minute", self.epoch_minutes, dt.timedelta(minutes=1), 0)

    def record_type(self) -> Any:
        return FlightEvent


class _FlightReader(Reader):
    def __init__(self, src: FlightSource, offset: int, start: Any) -> None:
        self.src = src
        self.offset = offset  # rows handed out so far
        self._it = src.batches(offset)
        self._current: Optional[int] = start
        self._rows: list[FlightEvent] = []
        self._cuts: list[tuple[int, int, int]] = []  # (epoch, start, end) in _rows
        self._k = 0
        self._exhausted = False

    def _fill(self) -> bool:
        while self._k >= len(self._cuts):
            if self._exhausted:
                return False
            limit = self.src.limit
            if limit is not None and self.offset >= limit:
                self._exhausted = True
                return False
            try:
                batch = next(self._it)
            except StopIteration:
                self._exhausted = True
                return False
            if limit is not None:
                batch = batch.slice(0, max(0, limit - self.offset))
            if batch.num_rows:
                self._load(batch)
        return True

    def _load(self, batch: Any) -> None:
        import numpy as np
        import pyarrow as pa

        n = batch.num_rows
        cols = self.src.columns(batch, self.offset)
        date = cols["date"]
        if pa.types.is_timestamp(date.type):
            minutes = _ints(date.cast(pa.int64()), np.int64) // _PER_MINUTE[date.type.unit]
        else:  # a date: days since the epoch
            minutes = _ints(date.cast(pa.int32()), np.int32).astype(np.int64) * 1440
        epochs = minutes // self.src.epoch_minutes
        # a row earlier than the current epoch is stamped with the current epoch
        first = int(epochs[0])
        floor = first if self._current is None else max(first, self._current)
        stamped = np.maximum.accumulate(np.maximum(epochs, floor))
        starts = np.flatnonzero(np.diff(stamped)) + 1
        bounds = [0, *starts.tolist(), n]
        stamps = stamped[bounds[:-1]].tolist()

        def column(name: str) -> list[Any]:
            if name in cols:
                return cols[name].to_pylist()  # type: ignore[no-any-return]
            return [None] * n

        self._rows = list(
            map(FlightEvent, minutes.tolist(), column("delay"), column("distance"), column("origin"),
                column("destination"))
        )  # fmt: skip
        self._cuts = [(stamps[i], bounds[i], bounds[i + 1]) for i in range(len(stamps))]
        self._k = 0

    def start_time(self) -> Any:
        if self._current is None:
            self._current = self._cuts[self._k][0] if self._fill() else 0
        return self._current

    def next_batch(self) -> Optional[tuple[Any, list[Any]]]:
        if not self._fill():
            return None
        t, i, j = self._cuts[self._k]
        self._k += 1
        out = self._rows[i:j] if i or j != len(self._rows) else self._rows
        self.offset += j - i
        self._current = t
        if self.src.progress is not None:
            self.src.progress(j - i)
        return t, out

    def position(self) -> Any:
        return self.offset


def _ints(arr: Any, dtype: Any) -> Any:
    """A null-free pyarrow integer array as a numpy view of its data buffer
    (``Array.to_numpy()`` would import pandas: a third of a second at start-up)."""
    import numpy as np

    arr = arr.combine_chunks() if hasattr(arr, "combine_chunks") else arr
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * np.dtype(dtype).itemsize)


def flight_source(
    path: Union[str, os.PathLike[str]],
    epoch: Union[int, float, str] = "1h",
    limit: Optional[int] = None,
    progress: Optional[Callable[[int], Any]] = None,
) -> FlightSource:
    """A flight table (Parquet or CSV) as a source of :class:`FlightEvent` (see the
    module docstring)."""
    return FlightSource(path, epoch, limit, progress=progress)


def count_rows(path: Union[str, os.PathLike[str]]) -> Optional[int]:
    """The number of rows of a Parquet file from its metadata (None for CSV or an
    unreadable file): the total of a progress bar."""
    p = os.fspath(path)
    if _is_csv(p) or not os.path.exists(p):
        return None
    try:
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(p).metadata.num_rows)
    except Exception:
        return None
