"""What :func:`apps.cep.spark_source.flight_frame` needs of a Parquet flight file, read
from its footer alone (:func:`read_footer`): no Spark job, no pass over the rows.

* the Spark schema of the flight columns (:attr:`Footer.types`, what Spark's own
  schema inference would give, which is one Spark job reading the footer again), and
* per row group, in file order: its rows, the largest epoch of its rows (from the
  ``date`` column's statistics) and the byte midpoint by which Spark's Parquet reader
  assigns a row group to a read split (:meth:`Footer.split`: the row groups whose
  midpoint lies in the split's byte range, as parquet-mr's range filter does).

A read split then knows, from its byte range, its first row's number in the file and
the largest epoch of the rows before it: what the frame's stamping needs, without the
full pass that used to count the rows of each read partition.  A footer that cannot
give these exactly (a column type not mapped here, missing statistics, a null in a
required column, which must be found with its row number) gives None, and the frame
takes the full pass as before.

>>> f = Footer({}, rows=(2, 3), tops=(4, None), midpoints=(10, 30))
>>> f.split(0, 20), f.split(20, 20), f.split(40, 5)
((0, None, 2), (2, 4, 3), (5, 4, 0))
"""

from __future__ import annotations

import bisect
import os
from typing import Any, Optional

from attrs import frozen

__all__ = ["Footer", "read_footer"]

#: Arrow integer types -> the Spark type Spark reads them as
_INTS = {"int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint"}
_UNIT_PER_MINUTE = {"s": 60, "ms": 60_000, "us": 60_000_000, "ns": 60_000_000_000}


@frozen
class Footer:
    """A Parquet file's flight columns and row groups (see the module docstring):
    ``types``: column -> Spark type, every column of the file (in file order);
    per row group in file order: ``rows``, ``tops`` (the largest
    ``floor(minute / epoch minutes)``; None: no dated row) and ``midpoints``."""

    types: dict[str, str]
    rows: tuple[int, ...]
    tops: tuple[Optional[int], ...]
    midpoints: tuple[int, ...]

    def split(self, start: int, length: int) -> tuple[int, Optional[int], int]:
        """The read split of bytes ``[start, start + length)``: the file's rows before
        it, the largest epoch before it (None: none) and its rows."""
        lo = bisect.bisect_left(self.midpoints, start)
        hi = bisect.bisect_left(self.midpoints, start + length)
        before = [t for t in self.tops[:lo] if t is not None]
        return sum(self.rows[:lo]), (max(before) if before else None), sum(self.rows[lo:hi])

    @property
    def total(self) -> int:
        """The file's rows."""
        return sum(self.rows)


def read_footer(path: str, columns: tuple[str, ...], required: tuple[str, ...], minutes: int) -> Optional[Footer]:
    """The :class:`Footer` of the Parquet file ``path`` for the flight ``columns``
    (``date`` the time column), with epochs of ``minutes``; None when the footer cannot
    stand in for a pass over the rows: not a single readable file, a column of a type
    not mapped here (Spark reports it), ``date`` without min/max statistics, a null (or
    no null count) in a ``required`` column."""
    import pyarrow.parquet as pq

    if not os.path.isfile(path):
        return None
    try:
        meta = pq.ParquetFile(path).metadata
        schema = meta.schema.to_arrow_schema()
    except Exception:  # not Parquet, damaged: Spark's reader says so
        return None
    types = {f.name: _spark_type(f.type) for f in schema}
    if any(c in types and types[c] is None for c in columns) or "date" not in types:
        return None  # (Spark's own inference, and the frame's checks, report it)
    index = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    date_type = schema.field("date").type
    per_minute = 1 if str(date_type) == "date32[day]" else _UNIT_PER_MINUTE.get(getattr(date_type, "unit", ""), 0)
    rows, tops, mids = [], [], []
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        for c in required:
            stats = rg.column(index[c]).statistics if c in index else None
            if stats is None or not stats.has_null_count or stats.null_count:
                return None
        stats = rg.column(index["date"]).statistics
        if rg.num_rows and (stats is None or not stats.has_min_max or not per_minute):
            return None
        top = None
        if rg.num_rows:
            raw = int(stats.max_raw)
            minute = raw * 1440 if per_minute == 1 else raw // per_minute  # days, or a timestamp unit
            top = minute // minutes
        first = rg.column(0)
        start = first.data_page_offset
        if first.dictionary_page_offset is not None and 0 < first.dictionary_page_offset < start:
            start = first.dictionary_page_offset
        size = sum(rg.column(i).total_compressed_size for i in range(rg.num_columns))
        rows.append(rg.num_rows)
        tops.append(top)
        mids.append(start + size // 2)
    if mids != sorted(mids):
        return None
    return Footer({n: t or "?" for n, t in types.items()}, tuple(rows), tuple(tops), tuple(mids))


def _spark_type(tp: Any) -> Optional[str]:
    """The Spark type Spark reads an Arrow (Parquet) type as, for the types a flight
    file may hold; None: another type."""
    import pyarrow as pa

    if pa.types.is_dictionary(tp):
        tp = tp.value_type
    if str(tp) in _INTS:
        return _INTS[str(tp)]
    if pa.types.is_string(tp) or pa.types.is_large_string(tp):
        return "string"
    if pa.types.is_date32(tp):
        return "date"
    if pa.types.is_timestamp(tp):
        return "timestamp" if tp.tz is not None else "timestamp_ntz"
    return None
