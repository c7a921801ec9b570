"""Reading edge lists: CSV or parquet files as per-epoch edge updates.

Columns are found by name (case-insensitive):

- source: ``src``, ``source``, ``origin``, ``from``, ``u``;
- destination: ``dst``, ``target``, ``destination``, ``to``, ``v``;
- time (optional): ``time``, ``date``, ``timestamp``, ``epoch``, ``t``;
- delta (optional): ``delta`` (``+k`` inserts, ``-k`` retracts; default ``+1``).

A CSV whose first row is not a header is read as headerless ``src,dst[,time[,delta]]``.
The first row is a header if it names any of these columns, or if a cell of it does not
parse as the values of its column (``src,weight`` over ``a,1``).  A file (CSV with a
header, or parquet) without a source or a destination column is a
:class:`EdgeFileError` naming the file, the missing column and the columns it has;
a file without rows (a header-only CSV) is one saying "no rows".

**Epochs.**  A timestamp column is cut into epochs of ``epoch`` (``"1h"``, ``"30m"``,
``"1d"``...), numbered from the first row's epoch; an integer / float time column is
``floor((t - min) / epoch_size)``; without a time column every ``rows_per_epoch`` rows
form an epoch.  Rows are delivered in epoch order (stable within an epoch).

**Bad rows.**  Vertex id columns must hold strings or integers; a column of another
type (float, bool, timestamp...) is a :class:`EdgeFileError`.  A row with a missing
id, time or delta (null; in a CSV, an empty cell) is *invalid*: skipped and counted
(``on_invalid="skip"``, the default) or an error naming the row (``"raise"``).  Self-loops are *not* removed here:
the dataflow ignores them (and counts them, see :class:`~apps.graph.edges.InputStats`).
"""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from apps.graph.edges import GraphInputError
from tstate.errors import SourceError

__all__ = ["EdgeFile", "EdgeFileError", "read_edges", "parse_duration"]


class EdgeFileError(GraphInputError, SourceError):
    """An edge file that cannot be read as edge updates: the message names the file
    and, for a bad row or column, the row and the column.  A :class:`GraphInputError`
    and a :class:`tstate.errors.SourceError`."""

_SRC = ("src", "source", "origin", "from", "u")
_DST = ("dst", "target", "destination", "to", "v")
_TIME = ("time", "date", "timestamp", "epoch", "t")
_DELTA = ("delta",)


def parse_duration(text: str) -> _dt.timedelta:
    """``"1h"``, ``"90s"``, ``"15m"``, ``"1d"``, ``"2w"`` as a timedelta."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if not m:
        raise ValueError(f"bad duration {text!r}: use a number and s, m, h, d or w (e.g. 1h)")
    n = float(m.group(1))
    unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[m.group(2)]
    d = _dt.timedelta(**{unit: n})
    if d <= _dt.timedelta(0):
        raise ValueError(f"duration {text!r} must be positive")
    return d


def _find(names: list[str], candidates: tuple[str, ...]) -> Optional[str]:
    lower = {n.lower(): n for n in names}
    for c in candidates:
        if c in lower:
            return lower[c]
    return None


def _is_header(table: pa.Table) -> bool:
    """Whether the first row of a CSV, read as its header (``table``), is one: it names a
    column this reader knows, or one of its cells does not parse as a value of the
    column under it (pyarrow inferred the column's type from the rows below)."""
    known = {n for group in (_SRC, _DST, _TIME, _DELTA) for n in group}
    for name, col in zip(table.column_names, table.columns):
        if name.strip().lower() in known:
            return True
        t = col.type
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t):
            continue  # any cell parses as a string
        try:
            pa.array([name]).cast(t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return True
    return False


def _missing(path: Path, names: list[str], what: str, candidates: tuple[str, ...]) -> EdgeFileError:
    return EdgeFileError(
        f"{path}: no {what} column (one of {', '.join(candidates)}); the file has: {', '.join(names) or 'none'}"
    )


def _read_table(path: Path) -> pa.Table:
    try:
        return _read_table_unchecked(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise EdgeFileError(f"{path}: cannot read: {exc}") from None


def _read_table_unchecked(path: Path) -> pa.Table:
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        return pq.read_table(path)
    if suffix in (".csv", ".txt", ".tsv", ".gz"):
        import pyarrow.csv as pcsv

        delimiter = "\t" if ".tsv" in path.name.lower() else ","
        parse = pcsv.ParseOptions(delimiter=delimiter)
        convert = pcsv.ConvertOptions(strings_can_be_null=True)  # an empty cell is a missing value
        table = pcsv.read_csv(path, parse_options=parse, convert_options=convert)
        names = table.column_names
        if (_find(names, _SRC) is None or _find(names, _DST) is None) and not _is_header(table):
            table = pcsv.read_csv(
                path,
                parse_options=parse,
                convert_options=convert,
                read_options=pcsv.ReadOptions(autogenerate_column_names=True),
            )
            if table.num_columns < 2 or table.num_columns > 4:
                raise EdgeFileError(
                    f"{path}: no src/dst columns in the header, and {table.num_columns} columns is not a "
                    "headerless src,dst[,time[,delta]] list"
                )
            table = table.rename_columns(["src", "dst", "time", "delta"][: table.num_columns])
        return table
    raise EdgeFileError(f"{path}: unknown file type {suffix!r} (use .csv or .parquet)")


def _vertex_column(table: pa.Table, name: str, path: Path) -> pa.ChunkedArray:
    col = table.column(name)
    t = col.type
    if pa.types.is_dictionary(t):
        col = col.cast(t.value_type)
        t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return col
    if pa.types.is_integer(t):
        return col
    raise EdgeFileError(f"{path}: column {name!r} has type {t}: vertex ids must be strings or integers")


class EdgeFile:
    """An edge list read into memory, cut into epochs (see the module docstring)."""

    def __init__(
        self,
        path: str | Path,
        epoch: str = "1h",
        epoch_size: float = 1,
        rows_per_epoch: int = 1000,
        on_invalid: str = "skip",
    ) -> None:
        if on_invalid not in ("skip", "raise"):
            raise ValueError(f"on_invalid must be 'skip' or 'raise', got {on_invalid!r}")
        self.path = Path(path)
        if not self.path.exists():
            raise EdgeFileError(f"{self.path}: no such file")
        table = _read_table(self.path)
        names = table.column_names
        src = _find(names, _SRC)
        dst = _find(names, _DST)
        if src is None:
            raise _missing(self.path, names, "source", _SRC)
        if dst is None:
            raise _missing(self.path, names, "destination", _DST)
        if table.num_rows == 0:
            raise EdgeFileError(f"{self.path}: no rows (columns: {', '.join(names)})")
        time = _find(names, _TIME)
        delta = _find(names, _DELTA)
        n = table.num_rows
        s = _vertex_column(table, src, self.path)
        d = _vertex_column(table, dst, self.path)
        valid = pc.and_(pc.is_valid(s), pc.is_valid(d))
        why = {"src": pc.is_null(s), "dst": pc.is_null(d)}
        if delta is not None:
            k = table.column(delta)
            if not pa.types.is_integer(k.type):
                raise EdgeFileError(f"{self.path}: column {delta!r} has type {k.type}: deltas must be integers")
            valid = pc.and_(valid, pc.is_valid(k))
            why["delta"] = pc.is_null(k)
        else:
            k = None
        self.labels: dict[int, str] = {}
        self.time_kind = "rows"
        if time is not None:
            tc = table.column(time)
            valid = pc.and_(valid, pc.is_valid(tc))
            why["time"] = pc.is_null(tc)
        mask = np.asarray(valid.to_numpy(zero_copy_only=False), dtype=bool) if n else np.zeros(0, dtype=bool)
        self.invalid = int(n - mask.sum())
        if self.invalid and on_invalid == "raise":
            row = int(np.flatnonzero(~mask)[0])
            bad = [c for c, m in why.items() if m[row].as_py()]
            raise EdgeFileError(f"{self.path}: row {row + 1}: missing {', '.join(bad)}")
        keep = np.flatnonzero(mask)
        self._src = s.take(pa.array(keep))
        self._dst = d.take(pa.array(keep))
        self._delta = k.take(pa.array(keep)) if k is not None else None
        if time is None:
            ep = np.arange(len(keep), dtype=np.int64) // max(1, rows_per_epoch)
        else:
            tc = table.column(time).take(pa.array(keep))
            ep = self._epochs_of(tc, epoch, epoch_size, time)
        order = np.argsort(ep, kind="stable")
        if len(order) and not (order == np.arange(len(order))).all():
            self._src = self._src.take(pa.array(order))
            self._dst = self._dst.take(pa.array(order))
            if self._delta is not None:
                self._delta = self._delta.take(pa.array(order))
            ep = ep[order]
        self.epoch_of_row = ep
        self.rows = len(ep)

    def _epochs_of(self, tc: pa.ChunkedArray, epoch: str, epoch_size: float, name: str) -> np.ndarray:
        t = tc.type
        if pa.types.is_timestamp(t) or pa.types.is_date(t):
            self.time_kind = "timestamp"
            step = parse_duration(epoch)
            vals = tc.cast(pa.timestamp("us")).to_numpy().astype("datetime64[us]").astype(np.int64)
            if not len(vals):
                return np.zeros(0, dtype=np.int64)
            us = int(step / _dt.timedelta(microseconds=1))
            base = (int(vals.min()) // us) * us
            self._base = base
            self._step_us = us
            return (vals - base) // us
        if pa.types.is_integer(t) or pa.types.is_floating(t):
            self.time_kind = "number"
            vals = tc.to_numpy()
            if not len(vals):
                return np.zeros(0, dtype=np.int64)
            lo = vals.min()
            self._base_num = lo
            self._step_num = epoch_size
            return np.floor((vals - lo) / epoch_size).astype(np.int64)
        raise EdgeFileError(f"{self.path}: time column {name!r} has type {t}: use a timestamp or a number")

    # -- reading ------------------------------------------------------------------------
    @property
    def epochs(self) -> int:
        """The number of epochs (the last epoch + 1)."""
        return int(self.epoch_of_row[-1]) + 1 if self.rows else 0

    def label(self, epoch: int) -> str:
        """A human-readable name of ``epoch`` (its start time, for timestamps)."""
        if self.time_kind == "timestamp":
            start = np.datetime64(self._base + epoch * self._step_us, "us").astype(_dt.datetime)
            return start.strftime("%Y-%m-%d %H:%M")
        if self.time_kind == "number":
            return f"t={self._base_num + epoch * self._step_num:g}"
        return f"epoch {epoch}"

    def batches(self, limit: Optional[int] = None) -> Iterator[tuple[int, list[tuple[Any, Any, int]]]]:
        """``(epoch, [(src, dst, delta), ...])`` for every epoch ``< limit`` that has rows
        (vertex ids as Python ``str`` / ``int``)."""
        ep = self.epoch_of_row
        end = len(ep) if limit is None else int(np.searchsorted(ep, limit, side="left"))
        if end == 0:
            return
        bounds = np.flatnonzero(np.diff(ep[:end])) + 1
        starts = np.concatenate(([0], bounds))
        stops = np.concatenate((bounds, [end]))
        for a, b in zip(starts.tolist(), stops.tolist()):
            src = self._src.slice(a, b - a).to_pylist()
            dst = self._dst.slice(a, b - a).to_pylist()
            if self._delta is None:
                recs = [(x, y, 1) for x, y in zip(src, dst)]
            else:
                recs = list(zip(src, dst, self._delta.slice(a, b - a).to_pylist()))
            yield int(ep[a]), recs


def read_edges(path: str | Path, **options: Any) -> EdgeFile:
    """:class:`EdgeFile` (``epoch``, ``epoch_size``, ``rows_per_epoch``, ``on_invalid``)."""
    return EdgeFile(path, **options)
