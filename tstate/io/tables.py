"""Table sources: Parquet and CSV files read as a timed stream.

``ts.io.parquet(path, time="date", epoch=3600)`` reads the file in row order; each
row's epoch is ``floor(time / epoch)`` where ``time`` is the column's value in seconds
since the Unix epoch (timestamps) or as a number (numeric columns); consecutive rows of
one epoch form batches of at most ``batch_rows``.  A row whose epoch is earlier than the
current one (the file is not perfectly sorted) is stamped with the current epoch: its
own time field is unchanged, so event-time logic downstream still sees it.  ``epoch``
also accepts ``"1h"``, ``"15min"``, ``"30s"``, ``"1d"``.

Records are dicts (column → value), or ``record(**row)`` when ``record`` is given (an
attrs class, say).  Timestamp columns become ``datetime`` values, or integers (in the
column's unit, e.g. microseconds since the epoch) with ``timestamps="int"``, which is
several times faster to read.  The position (for checkpoints) is the row offset.

A missing file or column, a time that is null, NaN, infinite or beyond +-2**53, a
ragged or oversized CSV row raise :class:`~tstate.errors.SourceError` naming the file,
the row (as a spreadsheet shows it: a CSV's header is row 1) and the column
(:mod:`tstate.io.table_files`).

:meth:`TableSource.event_time` tells operators downstream (e.g. ``apps.cep``'s
``cep``) the time column and the epoch, so they need not be given again: for a
timestamp column, datetimes with a ``timedelta`` epoch (integers in the column's unit
with ``timestamps="int"``); for a numeric column, numbers with ``epoch`` in the
column's unit.  :meth:`TableSource.record_type` gives the records' type (a ``TypedDict``
of the columns, for dict records).  Both read the file's schema (Parquet metadata, or a
CSV's first block).
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
from typing import Any, Callable, Iterator, Optional, Sequence, Union

from tstate.errors import SourceError
from tstate.io.sources import UNIX_EPOCH, EpochUnit, EventTime, Reader, Source
from tstate.io.table_files import BLOCK_BYTES, TableFile, time_problems

__all__ = ["parquet", "csv", "TableSource", "parse_epoch", "column_values", "dict_rows"]

_TIME_PROBLEMS = {"missing": "null", "not a number": "NaN", "infinite": "infinite", "out of range": "out of range (beyond +-2**53)"}

_UNITS = {"s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600, "d": 86400}


#: the range of ``datetime`` in microseconds since the Unix epoch
_DATETIME_US = (
    (_dt.datetime.min - _dt.datetime(1970, 1, 1)) // _dt.timedelta(microseconds=1),
    (_dt.datetime.max - _dt.datetime(1970, 1, 1)) // _dt.timedelta(microseconds=1),
)
_PER_US = {"s": 1_000_000, "ms": 1_000, "us": 1}


def column_values(col: Any, int_timestamps: bool = False) -> list[Any]:
    """The values of an Arrow column as Python objects, what ``col.to_pylist()`` gives
    (``None`` for nulls) -- but a timezone-naive timestamp column (seconds to
    microseconds) is converted by numpy, ten times faster than pyarrow's per-value
    ``datetime`` objects; ``int_timestamps``: a timestamp column's integers in its unit.

    >>> import pyarrow as pa, datetime as dt
    >>> column_values(pa.array([dt.datetime(2001, 1, 1, 10, 30), None], pa.timestamp("ms")))
    [datetime.datetime(2001, 1, 1, 10, 30), None]
    """
    import pyarrow as pa

    tp = col.type
    if not pa.types.is_timestamp(tp):
        return col.to_pylist()  # type: ignore[no-any-return]
    if int_timestamps:
        return col.cast(pa.int64()).to_pylist()  # type: ignore[no-any-return]
    per_us = _PER_US.get(tp.unit)
    if tp.tz is not None or per_us is None or len(col) == 0:
        return col.to_pylist()  # type: ignore[no-any-return]
    import pyarrow.compute as pc

    bounds = pc.min_max(col.cast(pa.int64())).as_py()
    lo, hi = bounds["min"], bounds["max"]
    if lo is None or lo * per_us < _DATETIME_US[0] or hi * per_us > _DATETIME_US[1]:
        return col.to_pylist()  # all null, or beyond datetime: pyarrow says what it says
    values: list[Any] = col.to_numpy(zero_copy_only=False).astype("datetime64[us]").astype(object).tolist()
    return values


@functools.lru_cache(maxsize=64)
def dict_rows(names: tuple[str, ...]) -> Callable[[Sequence[list[Any]]], list[dict[str, Any]]]:
    """A function of the columns' value lists -> one dict per row, keyed by ``names``;
    twice as fast as ``dict(zip(names, row))`` per row: a dict display with the names
    as constants (each written as ``repr`` of a ``str``: a string literal, nothing
    else).  Many columns: the plain loop.

    >>> dict_rows(("a", "b"))([[1, 2], ["x", "y"]])
    [{'a': 1, 'b': 'x'}, {'a': 2, 'b': 'y'}]
    """
    if len(names) > 64 or len(set(names)) != len(names) or not all(type(n) is str for n in names):
        return lambda cols: [dict(zip(names, vals)) for vals in zip(*cols)]
    if not names:
        return lambda cols: []
    args = ", ".join(f"v{i}" for i in range(len(names)))
    display = ", ".join(f"{n!r}: v{i}" for i, n in enumerate(names))
    code = f"lambda cols: [{{{display}}} for {args}{',' if len(names) == 1 else ''} in zip(*cols)]"
    fn: Callable[[Sequence[list[Any]]], list[dict[str, Any]]] = eval(code, {"__builtins__": {"zip": zip}})
    return fn


def parse_epoch(epoch: Union[int, float, str]) -> float:
    """Seconds per epoch from ``3600``, ``"1h"``, ``"15min"``, ``"30s"``, ``"1d"``."""
    if isinstance(epoch, (int, float)) and epoch > 0:
        return float(epoch)
    if isinstance(epoch, str):
        num = epoch.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = epoch[len(num) :] or "s"
        try:
            value = float(num or 1)
        except ValueError:
            value = -1
        if unit in _UNITS and value > 0:
            return value * _UNITS[unit]
    from tstate.errors import ConfigurationError

    raise ConfigurationError(f"epoch {epoch!r}: use seconds (> 0) or a string like '1h', '15min', '30s', '1d'")


class TableSource(Source):
    """A Parquet or CSV file as a source (see the module docstring)."""

    def __init__(
        self,
        path: Union[str, os.PathLike[str]],
        time: str,
        epoch: Union[int, float, str] = 1,
        columns: Optional[Sequence[str]] = None,
        record: Optional[Callable[..., Any]] = None,
        batch_rows: int = 65536,
        limit: Optional[int] = None,
        kind: str = "parquet",
        timestamps: str = "datetime",
    ) -> None:
        self.path = os.fspath(path)
        self.time = time
        self.seconds = parse_epoch(epoch)
        self.columns = list(columns) if columns is not None else None
        self.record = record
        self.batch_rows = batch_rows
        self.limit = limit
        self.kind = kind
        #: where the rows are (row numbers in errors)
        self.file = TableFile(self.path, csv=kind == "csv")
        if timestamps not in ("datetime", "int"):
            from tstate.errors import ConfigurationError

            raise ConfigurationError(f"timestamps must be 'datetime' or 'int', got {timestamps!r}")
        self.timestamps = timestamps

    def _batches(self, skip: int) -> Iterator[Any]:
        import pyarrow as pa

        f = self.file
        if self.kind == "parquet":
            pf = f.parquet()
            self._check_columns(pf.schema_arrow.names)
            it: Iterator[Any] = pf.iter_batches(batch_size=self.batch_rows, columns=self.columns)
        else:
            table = f.read()
            self._check_columns(table.column_names)
            if self.columns is not None:
                table = table.select(self.columns)
            it = iter(table.to_batches(max_chunksize=self.batch_rows))
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

    def _check_columns(self, names: Sequence[str]) -> None:
        need = [self.time] + [c for c in (self.columns or []) if c != self.time]
        for c in need:
            if c not in names:
                raise SourceError(f"{self.path}: no column {c!r} (columns: {', '.join(names)})")
        if self.columns is not None and self.time not in self.columns:
            self.columns = [*self.columns, self.time]

    def open(self, position: Any = None, start: Any = None) -> Reader:
        return _TableReader(self, int(position or 0), start)

    def arrow_schema(self) -> Any:
        """The file's Arrow schema (the columns read, when ``columns`` is given)."""
        import pyarrow as pa

        f = self.file
        f.exists()
        try:
            if self.kind == "parquet":
                import pyarrow.parquet as pq

                schema = pq.read_schema(self.path)
            else:
                import pyarrow.csv as pcsv

                read = pcsv.ReadOptions(block_size=BLOCK_BYTES)
                with pcsv.open_csv(self.path, read_options=read) as reader:
                    schema = reader.schema
        except (pa.ArrowInvalid, OSError) as exc:
            raise f.unreadable(exc) from exc
        self._check_columns(schema.names)
        if self.columns is not None:
            schema = pa.schema([schema.field(c) for c in self.columns])
        return schema

    def record_type(self) -> Any:
        """The type of the records: ``record`` if it is a class, else the ``TypedDict``
        of the rows (:func:`tstate.types.arrow.record_type` of the file's columns;
        ``None`` if a column has no Python state type, or ``record`` is a function)."""
        if self.record is not None:
            return self.record if isinstance(self.record, type) else None
        from tstate.types.arrow import record_type

        return record_type(self.arrow_schema(), "Row", timestamps=self.timestamps)

    def event_time(self) -> Optional[EventTime]:
        """The time column as event time (see the module docstring); None for a date
        column or nanosecond integers (no ``timedelta`` unit)."""
        import pyarrow as pa

        tp = self.arrow_schema().field(self.time).type
        if pa.types.is_timestamp(tp):
            if self.timestamps == "datetime":
                origin = UNIX_EPOCH if tp.tz is None else UNIX_EPOCH.replace(tzinfo=_dt.timezone.utc)
                return EventTime(self.time, _dt.timedelta(seconds=self.seconds), None, origin)
            per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[tp.unit]
            if per_second > 1_000_000:
                return None
            epoch = self.seconds * per_second
            return EventTime(
                self.time, int(epoch) if epoch == int(epoch) else epoch,
                _dt.timedelta(microseconds=1_000_000 // per_second), 0,
            )  # fmt: skip
        if pa.types.is_integer(tp) or pa.types.is_floating(tp):
            return EventTime(self.time, int(self.seconds) if self.seconds == int(self.seconds) else self.seconds)
        return None


class _TableReader(Reader):
    def __init__(self, src: TableSource, offset: int, start: Any) -> None:
        self.src = src
        self.offset = offset  # rows consumed so far
        self._rows: list[dict[str, Any]] = []
        self._epochs: list[int] = []
        self._i = 0
        self._it = src._batches(offset)
        self._current: Optional[int] = start
        self._exhausted = False

    def _fill(self) -> bool:
        while self._i >= len(self._rows):
            if self._exhausted:
                return False
            if self.src.limit is not None and self.offset >= self.src.limit:
                self._exhausted = True
                return False
            try:
                batch = next(self._it)
            except StopIteration:
                self._exhausted = True
                return False
            if self.src.limit is not None:
                batch = batch.slice(0, max(0, self.src.limit - self.offset))
            self._rows = self._records(batch)
            self._epochs = self._epochs_of(batch)
            self._i = 0
        return True

    def _records(self, batch: Any) -> list[Any]:
        names = batch.schema.names
        cols = [column_values(batch.column(i), self.src.timestamps == "int") for i in range(len(names))]
        rec = self.src.record
        try:
            if rec is None:
                return dict_rows(tuple(names))(cols)
            return [rec(**dict(zip(names, vals))) for vals in zip(*cols)]
        except Exception as exc:
            raise self.src.file.error(self.offset, None, f"cannot build a record of the rows from here: {exc}") from exc

    def _epochs_of(self, batch: Any) -> list[int]:
        import pyarrow as pa

        col = batch.column(self.src.time)
        bad, why = time_problems(col)
        if bad.any():
            i = int(bad.argmax())
            reason = next(r for r, m in why.items() if m[i])
            raise self.src.file.error(self.offset + i, self.src.time, f"the time is {_TIME_PROBLEMS[reason]}")
        secs = self.src.seconds
        if self.src.epoch_unit is None:  # dates, or the column's numbers (see tstate.io.sources)
            dated = pa.types.is_timestamp(col.type) or pa.types.is_date(col.type)
            self.src.epoch_unit = EpochUnit(secs, dated)
        if pa.types.is_timestamp(col.type):
            import numpy as np

            unit = {"s": 1, "ms": 1e3, "us": 1e6, "ns": 1e9}[col.type.unit]
            ints = col.cast(pa.int64()).to_numpy(zero_copy_only=False)
            # (elementwise what int((v / unit) // secs) computes, vectorised: no nulls here)
            epochs: list[int] = np.floor_divide(ints / unit, secs).astype(np.int64).tolist()
            return epochs
        if pa.types.is_date(col.type):
            return [int(((v - _dt.date(1970, 1, 1)).days * 86400) // secs) for v in col.to_pylist()]
        if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
            return [int(v // secs) for v in col.to_pylist()]
        raise SourceError(
            f"{self.src.path}: column {self.src.time!r} has type {col.type}, expected a timestamp, date or number"
        )

    def start_time(self) -> Any:
        if self._current is None:
            self._current = self._epochs[self._i] if self._fill() else 0
        return self._current

    def next_batch(self) -> Optional[tuple[Any, list[Any]]]:
        if not self._fill():
            return None
        t = self._epochs[self._i]
        if self._current is not None and t < self._current:
            t = self._current  # a late row: stamped with the current epoch
        epochs = self._epochs
        i = j = self._i
        n = len(epochs)
        while j < n and epochs[j] <= t:
            j += 1
        out = self._rows[i:j]
        self._i = j
        self.offset += j - i
        self._current = t
        return t, out

    def position(self) -> Any:
        return self.offset


def parquet(
    path: Union[str, os.PathLike[str]],
    time: str,
    epoch: Union[int, float, str] = 1,
    columns: Optional[Sequence[str]] = None,
    record: Optional[Callable[..., Any]] = None,
    batch_rows: int = 65536,
    limit: Optional[int] = None,
    timestamps: str = "datetime",
) -> TableSource:
    """A Parquet file as a source (see the module docstring)."""
    return TableSource(path, time, epoch, columns, record, batch_rows, limit, "parquet", timestamps)


def csv(
    path: Union[str, os.PathLike[str]],
    time: str,
    epoch: Union[int, float, str] = 1,
    columns: Optional[Sequence[str]] = None,
    record: Optional[Callable[..., Any]] = None,
    batch_rows: int = 65536,
    limit: Optional[int] = None,
    timestamps: str = "datetime",
) -> TableSource:
    """A CSV file (with a header) as a source (see the module docstring)."""
    return TableSource(path, time, epoch, columns, record, batch_rows, limit, "csv", timestamps)
