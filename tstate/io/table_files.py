"""Parquet and CSV files read into Arrow, with errors that say where: the file, the
row and the column.  Shared by the table sources (:mod:`tstate.io.tables`) and the
sample apps' readers (``apps.cep.source``, ``apps.graph.io``).

**Rows** are numbered from 1, as a spreadsheet shows the file: in a CSV with a header
the header is row 1 and the first record row 2 (a record with a quoted line break is
one row); in a headerless CSV or a Parquet file the first record is row 1
(:meth:`TableFile.row`).

**Reading** (:meth:`TableFile.read`): pyarrow's readers, rows of up to
:data:`BLOCK_BYTES`.  What pyarrow's CSV reader cannot parse -- a ragged row, a field
larger than a block, a quoting error -- is found again by reading the file with
Python's ``csv`` module and reported as a :class:`~tstate.errors.SourceError` naming the
row (and the column), pyarrow's message kept as the error's ``__cause__``, never shown
alone.

**Values**: :meth:`TableFile.typed` casts a column to the type the reader needs, and a
value that does not convert (``abc`` where integers are expected, bytes that are not
UTF-8 where strings are, ``1.5`` where integers are) is an error naming its row and
column; :meth:`TableFile.not_null` the same for a missing value.
:func:`time_problems` says which time values are unusable (null, NaN, infinite, out of
range), for readers that skip such rows rather than stop.

>>> import pyarrow as pa
>>> f = TableFile("flights.csv", csv=True)
>>> f.row(0), TableFile("flights.parquet", csv=False).row(0)
(2, 1)
>>> try:
...     f.typed(pa.chunked_array([["1", "2", "abc"]]), "delay", pa.int64(), "an integer")
... except Exception as e:
...     print(e)
flights.csv: row 4, column 'delay': 'abc' is not an integer (the column has type string)
"""

from __future__ import annotations

import csv as _csv
import gzip
import os
import sys
from typing import TYPE_CHECKING, Any, Iterator, Optional

from attrs import frozen

from tstate.errors import SourceError

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

__all__ = ["BLOCK_BYTES", "MAX_EXACT", "TableFile", "first_unconvertible", "is_csv", "time_problems"]

#: pyarrow's CSV block size: a row much longer (a field spanning blocks) is an error naming it
BLOCK_BYTES = 16 << 20
#: numeric times beyond +-2**53 are out of range (not exact as doubles; their epochs overflow)
MAX_EXACT = 2**53

_CSV_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".tsv.gz", ".txt", ".gz")


def is_csv(path: str) -> bool:
    """Whether ``path`` names a CSV file (by its suffix: ``.csv``, ``.tsv``, ``.txt``,
    compressed ``.gz``); anything else is Parquet."""
    return path.lower().endswith(_CSV_SUFFIXES)


def first_unconvertible(column: Any, target: Any) -> Optional[int]:
    """The index of the first value of ``column`` (a pyarrow array) that does not cast
    to ``target`` (nulls do), or ``None``; by bisection: a few casts, not one per value.
    Raises ``pyarrow.ArrowNotImplementedError`` when no value of the type casts."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def ok(a: Any) -> bool:
        try:
            pc.cast(a, target, safe=True)
        except pa.ArrowInvalid:
            return False
        return True

    if ok(column):
        return None
    lo, hi = 0, len(column)  # the first bad value is in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(column.slice(lo, mid - lo)):
            lo = mid
        else:
            hi = mid
    return lo


def _shown(value: Any) -> str:
    s = repr(value)
    return s if len(s) <= 60 else s[:57] + "..."


@frozen
class TableFile:
    """A Parquet file or a CSV file (``csv``; ``header``: its first record names the
    columns; ``delimiter``), and where its rows are (see the module docstring)."""

    path: str
    csv: bool
    header: bool = True
    delimiter: str = ","

    @classmethod
    def at(cls, path: Any, *, header: bool = True, delimiter: Optional[str] = None) -> "TableFile":
        """The file at ``path``, CSV or Parquet by its suffix (``.tsv``: tab-delimited)."""
        p = os.fspath(path)
        tab = ".tsv" in os.path.basename(p).lower()
        return cls(p, is_csv(p), header, delimiter if delimiter is not None else ("\t" if tab else ","))

    # -- where ---------------------------------------------------------------------------
    def row(self, index: int) -> int:
        """The row number of record ``index`` (0-based, of the data) as a spreadsheet
        shows it."""
        return index + (2 if self.csv and self.header else 1)

    def error(self, index: int, column: Optional[str], problem: str) -> SourceError:
        """A :class:`SourceError` naming the file, the row of record ``index`` and
        ``column``."""
        col = f", column {column!r}" if column is not None else ""
        return SourceError(f"{self.path}: row {self.row(index)}{col}: {problem}")

    # -- reading -------------------------------------------------------------------------
    def exists(self) -> None:
        """Raise ``SourceError`` unless the file exists."""
        if not os.path.exists(self.path):
            raise SourceError(f"{self.path}: no such file")

    def read(self, *, empty_is_null: bool = False, names: Optional[list[str]] = None) -> Any:
        """The whole file as a ``pyarrow.Table`` (CSV: types inferred; ``empty_is_null``:
        an empty cell is a missing value, not an empty string; ``names``: the column names
        of a headerless file, default ``f0``, ``f1``, ...)."""
        import pyarrow as pa

        self.exists()
        try:
            if not self.csv:
                import pyarrow.parquet as pq

                return pq.read_table(self.path)
            import pyarrow.csv as pcsv

            if self.header:
                read = pcsv.ReadOptions(block_size=BLOCK_BYTES)
            elif names:
                read = pcsv.ReadOptions(block_size=BLOCK_BYTES, column_names=names)
            else:
                read = pcsv.ReadOptions(block_size=BLOCK_BYTES, autogenerate_column_names=True)
            parse = pcsv.ParseOptions(delimiter=self.delimiter)
            convert = pcsv.ConvertOptions(strings_can_be_null=empty_is_null)
            return pcsv.read_csv(self.path, read_options=read, parse_options=parse, convert_options=convert)
        except (pa.ArrowInvalid, OSError) as exc:
            raise self.unreadable(exc) from exc

    def parquet(self) -> Any:
        """The file as a ``pyarrow.parquet.ParquetFile`` (its schema, metadata, batches)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.exists()
        try:
            return pq.ParquetFile(self.path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise self.unreadable(exc) from exc

    def unreadable(self, exc: BaseException) -> SourceError:
        """The error for a file pyarrow failed to read: the row and column at fault when
        a CSV scan finds them, else what pyarrow said, wrapped (``exc`` is the cause)."""
        if self.csv and not isinstance(exc, FileNotFoundError):
            found = self._locate()
            if found is not None:
                return found
        what = "CSV" if self.csv else "Parquet"
        return SourceError(f"{self.path}: cannot read as {what}: {exc}")

    def _records(self) -> Iterator[list[str]]:
        opener: Any = gzip.open if self.path.lower().endswith(".gz") else open
        limit = _csv.field_size_limit()
        _csv.field_size_limit(sys.maxsize)
        try:
            with opener(self.path, "rt", newline="", encoding="utf-8", errors="surrogateescape") as f:
                yield from _csv.reader(f, delimiter=self.delimiter)
        finally:
            _csv.field_size_limit(limit)

    def _locate(self) -> Optional[SourceError]:
        """Scan the CSV for the first record pyarrow cannot read: more or fewer fields
        than the first record, a field larger than a block."""
        width: Optional[int] = None
        names: list[str] = []
        index = -1 if self.header else 0  # the data index of the record being read
        try:
            for number, rec in enumerate(r for r in self._records() if r):  # (blank lines: skipped, as pyarrow does)
                index = number - 1 if self.header else number
                if width is None:
                    width = len(rec)
                    names = rec if self.header else [f"#{i + 1}" for i in range(width)]
                elif len(rec) != width:
                    first = "the header has" if self.header else "the first row has"
                    return self.error(index, None, f"{len(rec)} fields, where {first} {width}")
                for i, field in enumerate(rec):
                    if len(field) > BLOCK_BYTES:
                        col = names[i] if i < len(names) else f"#{i + 1}"
                        return self.error(
                            index, col, f"a field of {len(field):,} characters, larger than the CSV reader's blocks "
                            f"({BLOCK_BYTES:,} bytes)",
                        )  # fmt: skip
        except _csv.Error as exc:
            return self.error(index + 1, None, f"cannot read as CSV: {exc}")
        except (OSError, EOFError):
            return None
        return None

    # -- values --------------------------------------------------------------------------
    def typed(self, column: Any, name: str, target: Any, expected: str, offset: int = 0) -> Any:
        """``column`` (pyarrow, of the rows from data index ``offset``) cast to ``target``;
        a value that does not convert is a :class:`SourceError` naming its row, the
        column and what was ``expected`` (``"an integer"``); a column of a type that
        never converts, one naming the column and its type."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if column.type == target:
            return column
        try:
            return pc.cast(column, target, safe=True)
        except pa.ArrowNotImplementedError:
            raise SourceError(
                f"{self.path}: column {name!r} has type {column.type}, where {expected} is expected"
            ) from None
        except pa.ArrowInvalid as exc:
            i = first_unconvertible(column, target)
            if i is None:  # pragma: no cover - the cast failed as a whole but not in parts
                raise SourceError(f"{self.path}: column {name!r}: cannot convert to {expected}: {exc}") from exc
            value = column[i].as_py()
            what = "not valid UTF-8" if isinstance(value, bytes) and pa.types.is_string(target) else f"not {expected}"
            raise self.error(offset + i, name, f"{_shown(value)} is {what} (the column has type {column.type})") from exc

    def not_null(self, column: Any, name: str, offset: int = 0) -> None:
        """Raise a :class:`SourceError` naming the row of the first null of ``column``."""
        if column.null_count:
            i = column.is_null().to_pylist().index(True)
            raise self.error(offset + i, name, "is null")


def time_problems(column: Any) -> tuple["np.ndarray", dict[str, "np.ndarray"]]:
    """Which values of a time column (pyarrow; numbers, timestamps or dates) cannot be
    a row's time: ``(bad, why)``, a boolean mask of them and, per reason (``"missing"``,
    ``"not a number"``, ``"infinite"``, ``"out of range"``: a number beyond +-2**53),
    the mask of the rows it applies to."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(column)
    why: dict[str, np.ndarray] = {}

    def mask(a: Any) -> np.ndarray:
        return np.asarray(a.to_numpy(zero_copy_only=False), dtype=bool) if n else np.zeros(0, dtype=bool)

    missing = mask(pc.is_null(column))
    why["missing"] = missing
    t = column.type
    if pa.types.is_floating(t):
        why["not a number"] = mask(pc.fill_null(pc.is_nan(column), False))
        why["infinite"] = mask(pc.fill_null(pc.is_inf(column), False))
        finite = pc.fill_null(pc.is_finite(column), False)
        far = pc.and_(finite, pc.greater(pc.abs(column), float(MAX_EXACT)))
        why["out of range"] = mask(pc.fill_null(far, False))
    elif pa.types.is_integer(t):
        big = pc.or_(pc.greater(column, MAX_EXACT), pc.less(column, -MAX_EXACT))
        why["out of range"] = mask(pc.fill_null(big, False))
    bad = np.zeros(n, dtype=bool)
    for m in why.values():
        bad |= m
    return bad, {k: v for k, v in why.items() if v.any()}
