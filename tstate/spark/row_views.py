"""Read-only row views over an Arrow batch's columns, for computing Python keys.

An input task that only routes rows (:func:`tstate.spark.task.input_task`'s fast path:
the rows themselves go on, as Arrow, to the stateful task that builds each record) needs
a record only to call the key function on it.  Building a dict per row for that costs
about as much as the stateful task's own dict (pyarrow's ``to_pylist``).  :class:`Rows`
instead converts the batch's columns to Python once and passes the key function one
:class:`RowView` per pass, moved from row to row: ``view["user"]`` is
``columns["user"][row]``.  The view is a read-only :class:`~collections.abc.Mapping`
that answers as the row's dict would -- ``[]``, ``get``, ``in``, ``len``, iteration,
``keys`` / ``values`` / ``items``, ``==`` with a dict, ``repr`` / ``str`` -- and is
unhashable, like the dict.  What a dict has and a mapping has not
(``isinstance(r, dict)``, ``r.copy()``, ``r | other``, item assignment,
``json.dumps(r)``) is not there: a key function relying on it raises, or answers the
batch's first row, keyed both ways first, otherwise than its dict (``isinstance(r,
dict)``), and the caller then keys the rows as dicts (:func:`views_or_dicts`).  A key function computes a key from its record; one that
keeps the record itself beyond the call would see it move on to the next row.

>>> import pyarrow as pa
>>> rows = Rows(pa.record_batch({"user": ["a", "b"], "n": [1, 2]}), [0, 1])
>>> [r["user"] for r in rows], [r.get("x", 0) for r in rows], [dict(r) for r in rows][1]
(['a', 'b'], [0, 0], {'user': 'b', 'n': 2})
>>> [(r == {"user": "a", "n": 1}, repr(r), "n" in r) for r in rows][0]
(True, "{'user': 'a', 'n': 1}", True)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Iterator

__all__ = ["RowView", "Rows", "views_or_dicts"]


class RowView(Mapping[str, Any]):
    """Row ``row`` of ``columns`` (column name -> its values as a Python list, in the
    batch's column order), read-only (module docstring)."""

    __slots__ = ("_columns", "_row")
    __hash__ = None  # type: ignore[assignment]  # (a dict is unhashable: so is its view)

    def __init__(self, columns: dict[str, list[Any]], row: int) -> None:
        self._columns = columns
        self._row = row

    def __getitem__(self, name: str) -> Any:
        return self._columns[name][self._row]

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __len__(self) -> int:
        return len(self._columns)

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


class Rows:
    """The rows ``rows`` (their numbers in ``batch``, an Arrow RecordBatch or Table) as
    one :class:`RowView` per iteration, moved from row to row (module docstring); the
    batch's columns are converted to Python once (of a repeated name, the later column,
    as in ``to_pylist``'s dicts).  Iterable any number of times."""

    __slots__ = ("_columns", "_rows")

    def __init__(self, batch: Any, rows: Any) -> None:
        self._columns = {name: col.to_pylist() for name, col in zip(batch.schema.names, batch.columns)}
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[RowView]:
        view = RowView(self._columns, 0)
        for i in self._rows:
            view._row = i
            yield view


def views_or_dicts(batch: Any, rows: Any, fn: Callable[[Any], Any], views: bool) -> tuple[Any, bool]:
    """``fn`` over the records of ``batch``'s rows ``rows`` (their numbers, a sequence
    of ints): as :class:`Rows` when ``views``, and -- if it raises with views -- again
    as the rows' dicts (``to_pylist``, a list).  Returns ``fn``'s result and whether
    views served (False: the caller passes dicts from then on).  An error with dicts
    propagates.

    Before views serve a batch, its first row is keyed both ways: a function that
    answers a view differently from the row's dict (one that tests
    ``isinstance(r, dict)``, say) is given dicts from then on instead of computing
    other keys than the embedded engine would."""
    if views and (not len(rows) or _same_on_first(batch, int(rows[0]), fn)):
        try:
            return fn(Rows(batch, rows.tolist() if hasattr(rows, "tolist") else rows)), True
        except Exception:  # (the function needs a dict: keyed again below, as dicts)
            pass
    recs = batch.to_pylist()
    return fn([recs[i] for i in rows] if len(rows) != len(recs) else recs), False


def _same_on_first(batch: Any, row: int, fn: Callable[[Any], Any]) -> bool:
    """Whether ``fn`` gives row ``row`` of ``batch`` the same result as a view and as
    its dict (False also when either raises: the dicts' error is reported then)."""
    one = batch.slice(row, 1)
    try:
        return bool(fn(one.to_pylist()) == fn(Rows(one, [0])))
    except Exception:
        return False
