"""A driver sink's records of one time, decoded when first read (:class:`LazyRecords`).

After a micro-batch commits, the driver hands each driver sink (``Sink.on_driver``) the
records of every time its parts hold (:mod:`tstate.spark.delivery`).  Decoding them is
the driver's largest own cost in a run whose sinks only count (about 0.7 s per 400k
CEP flights), and the count is known without decoding: a part's index entry holds the
records per time (:attr:`tstate.spark.output.Part.times`).  So ``write`` gets a
read-only sequence whose ``len()`` is that count and whose records are decoded from
the part's cells (already read from the file: no file is needed later) the first time
any of them is read -- iterating, indexing, comparing, ``list(records)``.  A sink that
only counts decodes nothing; one that reads the records pays what it paid before.

>>> from tstate.spark.records import encode_records
>>> rs = LazyRecords([encode_records([1, 2], "op"), encode_records([3], "op")], 3)
>>> len(rs), rs.decoded
(3, False)
>>> list(rs), rs[-1], rs == [1, 2, 3], rs.decoded
([1, 2, 3], 3, True, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Iterator, Optional, Union, overload

from tstate.errors import SparkError

__all__ = ["LazyRecords"]


class LazyRecords(Sequence[Any]):
    """The records of ``cells`` (encoded cells, :func:`tstate.spark.records.encode_records`),
    ``count`` of them, decoded on first read with ``types`` (the dataflow's record
    classes; None: built-ins) and ``where`` naming the cells' file for errors.  A
    decoded count other than ``count`` raises :class:`~tstate.errors.SparkError`."""

    __slots__ = ("_cells", "_count", "_types", "_where", "_records")

    def __init__(
        self, cells: list[bytes], count: int, types: Any = None, where: "Union[str, Callable[[], str]]" = "sink output"
    ) -> None:
        self._cells, self._count, self._types, self._where = cells, count, types, where
        self._records: Optional[list[Any]] = None

    @property
    def decoded(self) -> bool:
        """Whether the records were decoded (read) already."""
        return self._records is not None

    def _all(self) -> list[Any]:
        if self._records is None:
            from tstate.spark.record_types import BUILTIN
            from tstate.spark.records import decode_records

            out: list[Any] = []
            for cell in self._cells:
                out.extend(decode_records(cell, self._types or BUILTIN, self._where))
            if len(out) != self._count:
                where = self._where() if callable(self._where) else self._where
                raise SparkError(f"{where}: {len(out)} records decoded, its index says {self._count}")
            self._records, self._cells = out, []
        return self._records

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...

    def __getitem__(self, i: Union[int, slice]) -> Any:
        return self._all()[i]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (LazyRecords, list, tuple)):
            return self._all() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # (like a list)

    def __repr__(self) -> str:
        return repr(self._records) if self._records is not None else f"LazyRecords({self._count} records, not read)"
