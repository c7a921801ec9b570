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
type (float, bool, timestamp...) is a :class:`EdgeFileError`.  A row is *invalid* --
skipped and counted per reason in :attr:`EdgeFile.invalid_by` (``on_invalid="skip"``,
the default), or an error naming the file, the row and the column (``"raise"``) --
when it has a missing id, time or delta (null; in a CSV, an empty cell), a control
character (NUL, ...) in an id, a time that is NaN, infinite or out of range (a number
beyond +-2**53, a timestamp beyond microseconds), or a delta that is not an integer
(``1.5``).  The same rules hold for CSV and parquet (:func:`tstate.io.table_files.time_problems`);
rows are numbered as a spreadsheet shows them (a CSV's header is row 1).  Numeric
times spanning more than :data:`MAX_EPOCHS` epochs are an error (the app visits every
epoch).  Self-loops are *not* removed here: the dataflow ignores them (and counts them,
see :class:`~apps.graph.edges.InputStats`).
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
from tstate.io.table_files import MAX_EXACT, TableFile, time_problems

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


def _read_table(path: Path) -> tuple[pa.Table, TableFile]:
    """The file as a table, and where its rows are (a CSV without a header: row 1 is data)."""
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".pq", ".csv", ".txt", ".tsv", ".gz"):
        raise EdgeFileError(f"{path}: unknown file type {suffix!r} (use .csv or .parquet)")
    f = TableFile(str(path), csv=suffix not in (".parquet", ".pq"), delimiter="\t" if ".tsv" in path.name.lower() else ",")
    try:
        table = f.read(empty_is_null=True)  # an empty cell is a missing value
        names = table.column_names
        if f.csv and (_find(names, _SRC) is None or _find(names, _DST) is None) and not _is_header(table):
            f = TableFile(f.path, csv=True, header=False, delimiter=f.delimiter)
            table = f.read(empty_is_null=True)
            if table.num_columns < 2 or table.num_columns > 4:
                raise EdgeFileError(
                    f"{path}: no src/dst columns in the header, and {table.num_columns} columns is not a "
                    "headerless src,dst[,time[,delta]] list"
                )
            table = table.rename_columns(["src", "dst", "time", "delta"][: table.num_columns])
    except SourceError as exc:
        if isinstance(exc, EdgeFileError):
            raise
        raise EdgeFileError(str(exc)) from exc.__cause__
    return table, f


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


def _mask(a: Any, n: int) -> np.ndarray:
    return np.asarray(pc.fill_null(a, False).to_numpy(zero_copy_only=False), dtype=bool) if n else np.zeros(0, bool)


#: a control character (C0, DEL, C1) in a vertex id
_CONTROL = r"[\x00-\x1f\x7f-\x9f]"
#: numeric time spans longer than this many epochs are refused (the app visits every epoch)
MAX_EPOCHS = 1_000_000


class EdgeFile:
    """An edge list read into memory, cut into epochs (see the module docstring).

    ``invalid_by``: the rows skipped as invalid, per reason (``"missing src"``,
    ``"control character in dst"``, ``"time not a number"``, ``"time infinite"``,
    ``"time out of range"``, ``"delta not an integer"``, ...); ``invalid``: their total."""

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
        table, self.file = _read_table(self.path)
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
        # reason -> (column, mask of the rows it applies to), in the order they are checked
        why: dict[str, tuple[str, np.ndarray]] = {}
        for label, name, col in (("src", src, s), ("dst", dst, d)):
            why[f"missing {label}"] = (name, _mask(pc.is_null(col), n))
            if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
                why[f"control character in {label}"] = (name, _mask(pc.match_substring_regex(col, _CONTROL), n))
        k = None
        if delta is not None:
            k, bad_k = self._delta_column(table.column(delta), delta)
            why["missing delta"] = (delta, _mask(pc.is_null(table.column(delta)), n))
            why["delta not an integer"] = (delta, bad_k)
        self.labels: dict[int, str] = {}
        self.time_kind = "rows"
        if time is not None:
            tc = table.column(time)
            for reason, m in self._time_problems(tc, time).items():
                why[f"time {reason}" if reason != "missing" else "missing time"] = (time, m)
        bad = np.zeros(n, dtype=bool)
        for _col, m in why.values():
            bad |= m
        self.invalid_by = {r: int(m.sum()) for r, (_c, m) in why.items() if m.any()}
        self.invalid = int(bad.sum())
        if self.invalid and on_invalid == "raise":
            row = int(np.flatnonzero(bad)[0])
            reasons = [r for r, (_c, m) in why.items() if m[row]]
            column = why[reasons[0]][0]
            raise EdgeFileError(str(self.file.error(row, column, ", ".join(reasons))))
        keep = pa.array(np.flatnonzero(~bad))
        self._src = s.take(keep)
        self._dst = d.take(keep)
        self._delta = k.take(keep) if k is not None else None
        if time is None:
            ep = np.arange(len(keep), dtype=np.int64) // max(1, rows_per_epoch)
        else:
            ep = self._epochs_of(table.column(time).take(keep), epoch, epoch_size, time)
        order = np.argsort(ep, kind="stable")
        if len(order) and not (order == np.arange(len(order))).all():
            self._src = self._src.take(pa.array(order))
            self._dst = self._dst.take(pa.array(order))
            if self._delta is not None:
                self._delta = self._delta.take(pa.array(order))
            ep = ep[order]
        self.epoch_of_row = ep
        self.rows = len(ep)

    def _delta_column(self, col: pa.ChunkedArray, name: str) -> tuple[pa.ChunkedArray, np.ndarray]:
        """The delta column as int64 (bad values null) and the mask of the rows whose
        delta is there but not an integer (``1.5``, ``abc``, ``inf``)."""
        n = len(col)
        t = col.type
        if pa.types.is_integer(t):
            return col.cast(pa.int64()), np.zeros(n, dtype=bool)
        if pa.types.is_floating(t):
            whole = pc.and_(pc.is_finite(col), pc.equal(col, pc.trunc(col)))
            small = pc.less_equal(pc.abs(col), float(MAX_EXACT))
            ok = pc.fill_null(pc.and_(whole, small), True)
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            ok = pc.fill_null(pc.match_substring_regex(col, r"^\s*[+-]?\d{1,18}\s*$"), True)
            col = pc.utf8_trim_whitespace(col)
        else:
            raise EdgeFileError(f"{self.path}: column {name!r} has type {t}: deltas must be integers")
        bad = ~_mask(ok, n)
        cleaned = pc.if_else(pc.invert(ok), pa.scalar(None, t), col)
        return pc.cast(cleaned, pa.int64()), bad

    def _time_problems(self, tc: pa.ChunkedArray, name: str) -> dict[str, np.ndarray]:
        """Per reason, the rows whose time is unusable (:func:`time_problems`; for a
        timestamp, out of range of microseconds); an unusable time column type raises."""
        t = tc.type
        if pa.types.is_timestamp(t):
            per_us = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": 1}[t.unit]
            ints = tc.cast(pa.int64())
            far = pc.greater(pc.abs_checked(ints), (2**63 - 1) // per_us) if per_us > 1 else pc.is_null(ints)
            return {"missing": _mask(pc.is_null(tc), len(tc)), "out of range": _mask(far, len(tc))}
        if pa.types.is_date(t) or pa.types.is_integer(t) or pa.types.is_floating(t):
            _bad, why = time_problems(tc)
            return {r: why.get(r, np.zeros(len(tc), dtype=bool)) for r in ("missing", *why)}
        raise EdgeFileError(f"{self.path}: time column {name!r} has type {t}: use a timestamp or a number")

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
            ep = (vals - base) // us
        else:
            self.time_kind = "number"
            vals = tc.to_numpy()
            if not len(vals):
                return np.zeros(0, dtype=np.int64)
            lo = vals.min()
            self._base_num = lo
            self._step_num = epoch_size
            # (times within +-2**53: the differences are exact, their epochs fit in int64)
            ep = np.floor((vals - lo) / epoch_size).astype(np.int64)
        if len(ep) and int(ep.max()) >= MAX_EPOCHS:
            raise EdgeFileError(
                f"{self.path}: the times in column {name!r} span {int(ep.max()) + 1:,} epochs (more than "
                f"{MAX_EPOCHS:,}); use a longer --epoch / --epoch-size"
            )
        return ep  # type: ignore[no-any-return]

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
